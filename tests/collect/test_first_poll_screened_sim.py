"""The first poll after a start is screened: each leader is asked DescribeProducers for a
sample of its partitions, and where the sample holds a crowded partition the leader's other
partitions are read by their offsets first (ListOffsets, then the fetch session at once) and
asked DescribeProducers only where LSO < HW; elsewhere (few states, or the sample failed) all
of them are asked, and join the screening a bounded number per poll. What it reports is what
the full poll reports.

Also what the screening cannot skip: a partition whose LSO stands still while its high
watermark moves may hold a second producer's new transaction above the first one
(docs/kafka-semantics.md#lso-equals-hw), so it is asked DescribeProducers again."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from kafka_sim.seed import seed_producer_states
from screening_probes import describe_producers_asked
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, cluster_settings

from exporter.analyze import analyze
from exporter.collect import producers
from exporter.model import Classification, TopicPartition
from exporter.observe import ClusterObserver

HOT = "hot"
PARTITIONS = 24
STATES = 40
SAMPLE = 2
"""Partitions per leader in the first poll's sample (patched down from 100: a small cluster
whose leaders each lead more than the sample)."""


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, topics={HOT: PARTITIONS},
                    broker_config=CAPTURE_BROKER_CONFIG) as cluster:
        rng = random.Random(0)
        now = cluster.clock.now_ms()
        for p in range(PARTITIONS):
            cluster.call(seed_producer_states, cluster.state, HOT, p, STATES, now_ms=now,
                         max_age_ms=600_000, rng=rng)
        yield cluster


@contextmanager
def poller(sim: SimCluster, screening: bool = True) -> Iterator[ClusterObserver]:
    p = ClusterObserver(
        cluster_settings(sim, "first", transaction_max_timeout_ms=60_000,
                         late_buffer_seconds=10.0),
        clock_ms=sim.clock.now_ms, screen_partitions=screening,
    )
    try:
        yield p
    finally:
        p.close()


def open_keys(obs: Any) -> set[tuple[str, int, int]]:
    return {(t.topic, t.partition, t.producer_id) for t in obs.open_transactions}


def test_first_poll_asks_describe_producers_only_where_lso_is_below_hw(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(producers, "FIRST_POLL_SAMPLE_PARTITIONS", SAMPLE)
    hanging_transaction(sim.bootstrap_servers, "hang-first", HOT, 17,
                        backdate_ms=30 * MINUTE_MS, now_ms=sim.clock.now_ms)
    txn = open_transaction(sim.bootstrap_servers, "open-first", HOT, [9],
                           now_ms=sim.clock.now_ms)
    try:
        with poller(sim, screening=False) as full:
            reference = full.poll()
        counts: Counter[tuple[str, int]] = describe_producers_asked(monkeypatch)
        with poller(sim) as p:
            first = p.poll()
            assert open_keys(first) == open_keys(reference)
            assert {(t.topic, t.partition) for t in first.open_transactions} == {
                (HOT, 17), (HOT, 9)}
            assert first.unobserved == {} == reference.unobserved
            asked = set(counts)
            assert {(HOT, 17), (HOT, 9)} <= asked
            clear_asked = asked - {(HOT, 17), (HOT, 9)}
            assert len(clear_asked) <= SAMPLE * 3  # the samples, not every partition
            assert len(asked) < PARTITIONS
            snap = analyze(first, p.settings)
            (late,) = snap.late_transactions
            assert (late.transaction.partition, late.classification) == (
                17, Classification.HANGING)
            counts.clear()
            second = p.poll()
            # The partitions found clear stay screened: none asked, nor the two whose
            # offsets stood still since they were asked.
            assert {k for k in counts if k[0] == HOT} <= {(HOT, 17), (HOT, 9)}
            assert open_keys(second) == open_keys(first)
    finally:
        txn.abort()


def asked_per_poll_without_states(monkeypatch: pytest.MonkeyPatch, polls: int) -> list[int]:
    """Partitions asked DescribeProducers in each of `polls` polls of 12 partitions without
    producer states on 2 brokers; every poll must report the same, complete truth."""
    monkeypatch.setattr(producers, "FIRST_POLL_SAMPLE_PARTITIONS", SAMPLE)
    with SimCluster(brokers=2, topics={"few": 12}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        counts = describe_producers_asked(monkeypatch)
        with poller(sim) as p:
            asked = []
            for _ in range(polls):
                counts.clear()
                obs = p.poll()
                assert obs.unobserved == {} and obs.open_transactions == ()
                asked.append(len(counts))
    return asked


def test_partitions_with_few_states_join_the_screening_a_bounded_number_per_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No producer state anywhere: the first poll asks every partition directly (as cheap as
    reading its offsets would be); from the second on, at most NEW_SCREENED_PER_POLL of them
    join the screening per poll, the others still asked, until none is asked at all."""
    monkeypatch.setattr(producers, "NEW_SCREENED_PER_POLL", 5)
    assert asked_per_poll_without_states(monkeypatch, 5) == [12, 7, 2, 0, 0]


def test_a_crowded_partition_is_screened_whatever_the_budget(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crowded partitions (dear to ask) are screened from their first answer, outside the
    per-poll budget of partitions with few states."""
    monkeypatch.setattr(producers, "NEW_SCREENED_PER_POLL", 0)
    counts = describe_producers_asked(monkeypatch)
    with poller(sim) as p:
        p.poll()
        counts.clear()
        obs = p.poll()
        assert not {k for k in counts if k[0] == HOT}
        assert obs.unobserved == {}


def test_first_poll_of_a_leader_whose_sample_failed_asks_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leader whose sample's answer is garbage gives its partitions DescribeProducers'
    own verdicts: the sampled ones unobserved with the error, the others asked as before (and
    their open transactions found); the other leader's partitions past its crowded sample
    screened."""
    monkeypatch.setattr(producers, "FIRST_POLL_SAMPLE_PARTITIONS", SAMPLE)
    with SimCluster(brokers=2, topics={"few": 12}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        leaders = sim.call(lambda: {p: sim.state.partition("few", p).leader_id
                                    for p in range(12)})
        bad = leaders[0]
        led = {("few", p) for p, b in leaders.items() if b == bad}
        rng, now = random.Random(0), sim.clock.now_ms()
        for p in (p for p, b in leaders.items() if b != bad):
            sim.call(seed_producer_states, sim.state, "few", p, STATES, now_ms=now,
                     max_age_ms=600_000, rng=rng)
        txn = open_transaction(sim.bootstrap_servers, "behind-bad", "few",
                               sorted(p for _, p in led), now_ms=sim.clock.now_ms)
        try:
            sim.fail_next_responses("malformed", broker_id=bad, api_key=61, count=1)
            counts = describe_producers_asked(monkeypatch)
            with poller(sim) as p:
                obs = p.poll()
            asked_bad = {(t, i) for t, i in counts if t == "few" and leaders[i] == bad}
            asked_good = {(t, i) for t, i in counts if t == "few" and leaders[i] != bad}
            assert asked_bad == led
            assert 1 <= len(asked_good) <= SAMPLE  # its sample (which may take another topic)
            assert obs.unobserved  # the sampled ones: the garbage answer's
            assert {obs.leaders[tp] for tp in obs.unobserved} == {bad}
            assert len(obs.unobserved) <= SAMPLE
            unobserved = {(tp.topic, tp.partition) for tp in obs.unobserved}
            found = {(t.topic, t.partition) for t in obs.open_transactions}
            assert found == led - unobserved and found
        finally:
            sim.clear_faults()
            txn.abort()


def test_moved_partition_whose_lso_stood_still_is_asked_again(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second producer's transaction begins above the first one's: the HW moves, the LSO
    (the first one's start) does not. Only DescribeProducers shows the second one."""
    first_txn = open_transaction(sim.bootstrap_servers, "first-of-two", HOT, [5],
                                 now_ms=sim.clock.now_ms)
    second_txn = None
    try:
        counts = describe_producers_asked(monkeypatch)
        with poller(sim) as p:
            p.poll()
            p.poll()
            before = p.poll()
            assert {t.partition for t in before.open_transactions} == {5}
            lso = before.last_stable_offsets[TopicPartition(HOT, 5)]
            second_txn = open_transaction(sim.bootstrap_servers, "second-of-two", HOT, [5],
                                          now_ms=sim.clock.now_ms)
            counts.clear()
            after = p.poll()
            assert (HOT, 5) in counts
            assert after.last_stable_offsets[TopicPartition(HOT, 5)] == lso  # stood still
            assert len({t.producer_id for t in after.open_transactions
                        if t.partition == 5}) == 2
    finally:
        first_txn.abort()
        if second_txn is not None:
            second_txn.abort()


def test_sample_takes_each_topics_first_partitions_in_turn() -> None:
    per_topic = {"a": [4, 1, 2], "b": [7], "c": [0, 3]}
    assert producers._sample(per_topic, 2) == {"a": 1, "b": 1}
    assert producers._sample(per_topic, 4) == {"a": 2, "b": 1, "c": 1}
    assert producers._sample(per_topic, 100) == {"a": 3, "b": 1, "c": 2}
    assert producers._sample(per_topic, 0) == {}
