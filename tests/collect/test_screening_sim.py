"""Every partition is screened once DescribeProducers has answered for it, whatever producer
states it keeps: it is read with the two ListOffsets once, then through a fetch session, and
asked DescribeProducers again only when its last stable offset is below its high watermark
(and moved since it was last asked) or its offsets cannot be read; what the poll reports stays
what the full poll reports."""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import open_transaction
from kafka_sim.seed import seed_producer_states
from screening_probes import describe_producers_asked, list_offsets_asked
from simhelpers import CAPTURE_BROKER_CONFIG, cluster_settings

from exporter.collect.apis import fetch
from exporter.collect.producers import TOO_LARGE_RETRY_MAX_POLLS
from exporter.model import TopicPartition
from exporter.observe import ClusterObserver

LIST_OFFSETS = 2
DESCRIBE_PRODUCERS = 61
HOT, COLD = "hot", "cold"
PARTITIONS = 8
STATES = 40


@contextmanager
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[tuple[str, int]]]:
    yield describe_producers_asked(monkeypatch)


def crowd(sim: SimCluster, topic: str, states: int, rng_seed: int = 0) -> None:
    rng = random.Random(rng_seed)
    now = sim.clock.now_ms()
    for p in range(PARTITIONS):
        sim.call(seed_producer_states, sim.state, topic, p, states, now_ms=now,
                 max_age_ms=600_000, rng=rng)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, topics={HOT: PARTITIONS, COLD: PARTITIONS},
                    broker_config=CAPTURE_BROKER_CONFIG) as cluster:
        crowd(cluster, HOT, STATES)
        yield cluster


@contextmanager
def poller(sim: SimCluster, screening: bool = True) -> Iterator[ClusterObserver]:
    p = ClusterObserver(cluster_settings(sim, "screen"), clock_ms=sim.clock.now_ms,
                      screen_partitions=screening)
    try:
        yield p
    finally:
        p.close()


def open_keys(obs: Any) -> set[tuple[str, int, int]]:
    return {(t.topic, t.partition, t.producer_id) for t in obs.open_transactions}


def test_every_answered_partition_screened_and_an_open_transaction_found(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with asked(monkeypatch) as counts, poller(sim) as p:
        first = p.poll()  # a small cluster: every partition is in its leader's sample
        assert set(counts) == {(t, i) for t in (HOT, COLD) for i in range(PARTITIONS)}
        assert not first.unobserved and not first.open_transactions
        counts.clear()
        second = p.poll()
        assert not second.unobserved and not second.open_transactions
        assert not counts  # the crowded ones and those without a state alike screened
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [3],
                               now_ms=sim.clock.now_ms)
        try:
            counts.clear()
            third = p.poll()
            assert {(t, i) for t, i in counts if t == HOT} == {(HOT, 3)}  # LSO < HW there
            assert {(t.topic, t.partition) for t in third.open_transactions} == {(HOT, 3)}
            assert not third.unobserved
        finally:
            txn.abort()


@contextmanager
def session_answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[set[tuple[str, int]]]]:
    """The partitions each screening Fetch answer carried, one set per answer."""
    answers: list[set[tuple[str, int]]] = []
    decode = fetch._DECODE_FETCH

    def counting(payload: bytes, version: int) -> Any:
        response = decode(payload, version)
        answers.append({(t.topic, p.partition_index) for t in response.responses
                        for p in t.partitions})
        return response

    monkeypatch.setattr(fetch, "_DECODE_FETCH", counting)
    yield answers


def test_idle_partitions_cost_nothing_once_the_session_holds_them(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first reads, an idle partition (crowded or without a state) is in no answer
    at all; one that was written is in its leader's answer once; one with an open transaction
    is asked DescribeProducers when it moved, and its answer reused while it stands still."""
    every = {(t, i) for t in (HOT, COLD) for i in range(PARTITIONS)}
    with asked(monkeypatch) as counts, session_answers(monkeypatch) as answers, \
            poller(sim) as p:
        p.poll()  # learns the counts
        p.poll()  # every partition read with ListOffsets
        answers.clear()
        p.poll()  # the sessions start: full answers
        assert set().union(*answers) == every
        for _ in range(3):
            answers.clear()
            counts.clear()
            obs = p.poll()
            assert answers and not set().union(*answers)  # every session answer empty
            assert not counts
            assert not obs.unobserved and not obs.open_transactions
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [3],
                               now_ms=sim.clock.now_ms)
        try:
            answers.clear()
            counts.clear()
            obs = p.poll()
            assert set().union(*answers) == {(HOT, 3)}
            assert set(counts) == {(HOT, 3)}
            assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 3)}
            lso_read = list_offsets_asked(monkeypatch)
            log = sim.call(lambda: sim.state.partition(HOT, 3).log)
            lag = sim.call(lambda: log.high_watermark - log.last_stable_offset)
            assert lag > 0 and obs.last_stable_offset_lag == {TopicPartition(HOT, 3): lag}
            for _ in range(2):  # it stands still: not asked, still reported
                answers.clear()
                counts.clear()
                again = p.poll()
                assert not set().union(*answers)
                assert not counts
                assert open_keys(again) == open_keys(obs)
                # Its LSO lag is its leader's session answer: no ListOffsets.
                assert again.last_stable_offset_lag == {TopicPartition(HOT, 3): lag}
                assert not lso_read
        finally:
            txn.abort()
        answers.clear()
        counts.clear()
        obs = p.poll()  # the abort marker moved it: read, clear, nothing open
        assert set().union(*answers) == {(HOT, 3)}
        assert not obs.open_transactions and not obs.unobserved


@pytest.mark.parametrize("fault", ["error", "reset", "omitted"])
def test_failed_list_offsets_falls_back_to_describe_producers(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Offsets that cannot be read are never "no transaction": the partitions are asked
    DescribeProducers in the same poll, and the open transaction is found."""
    with asked(monkeypatch) as counts, poller(sim) as p:
        p.poll()
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [5],
                               now_ms=sim.clock.now_ms)
        leader = sim.call(lambda: sim.state.partition(HOT, 5).leader_id)
        if fault == "error":  # NOT_LEADER_OR_FOLLOWER on the partition's ListOffsets
            sim.inject_error(LIST_OFFSETS, 6, broker_id=leader, topic=HOT, partition=5,
                             count=2)
        elif fault == "reset":
            sim.fail_next_responses("reset", broker_id=leader, api_key=LIST_OFFSETS, count=1)
        else:
            sim.omit_from_responses(7, probability=1.0, broker_id=leader,
                                    api_key=LIST_OFFSETS, count=2)
        try:
            counts.clear()
            obs = p.poll()
            assert any(e.api == "ListOffsets" for e in obs.request_errors)
            seen_open = {(t.topic, t.partition) for t in obs.open_transactions}
            if fault == "reset":
                # The connection is lost: the broker fails fast for the rest of the poll, so
                # its partitions are unobserved with the reason, never "no transaction".
                assert obs.unobserved.get(TopicPartition(HOT, 5)) == "BROKER_UNREACHABLE"
                assert (HOT, 5) not in seen_open
            else:
                assert (HOT, 5) in {(t, i) for t, i in counts if t == HOT}
                assert (HOT, 5) in seen_open
                assert not obs.unobserved
        finally:
            sim.clear_faults()
            sim.call(sim.state.clear_errors)
            txn.abort()


def test_a_partition_whose_states_expired_stays_screened(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Producer states expire (producer.id.expiration.ms): a screened partition asked again
    with one state left stays screened; its open transaction is found, and its answer
    reused while it stands still."""
    with asked(monkeypatch) as counts, poller(sim) as p:
        p.poll()
        assert p.poller._producers.screened_partitions() == 2 * PARTITIONS
        sim.call(lambda: sim.state.log_of(sim.state.partition(HOT, 2)).producers.clear())
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [2],
                               now_ms=sim.clock.now_ms)
        try:
            seen = []
            for _ in range(4):  # ListOffsets, then the session: asked while it is news
                counts.clear()
                obs = p.poll()
                seen.append((HOT, 2) in counts)
                assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 2)}
                assert not obs.unobserved
                assert p.poller._producers.screened_partitions() == 2 * PARTITIONS
            assert seen[0] and not seen[-1], seen
            assert not {(t, i) for t, i in counts if (t, i) != (HOT, 2)}
        finally:
            txn.abort()


def test_a_partition_answered_with_an_error_is_asked_directly_until_it_answers(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A screened partition whose DescribeProducers answer is an error (here READ revoked for
    one answer) is unobserved with that error, then asked directly, not screened, until it
    answers: its errors are DescribeProducers' own, never a clear read of its offsets."""
    with asked(monkeypatch) as counts, poller(sim) as p:
        for _ in range(3):  # learn, ListOffsets, the sessions start
            p.poll()
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [5],
                               now_ms=sim.clock.now_ms)
        leader = sim.call(lambda: sim.state.partition(HOT, 5).leader_id)
        sim.inject_error(DESCRIBE_PRODUCERS, 29, broker_id=leader, topic=HOT, partition=5,
                         count=1)
        try:
            counts.clear()
            obs = p.poll()  # LSO < HW: asked, TOPIC_AUTHORIZATION_FAILED
            assert (HOT, 5) in counts
            assert obs.unobserved == {TopicPartition(HOT, 5): "TOPIC_AUTHORIZATION_FAILED"}
            assert p.poller._producers.screened_partitions() == 2 * PARTITIONS - 1
            counts.clear()
            obs = p.poll()  # asked directly: it answers, and is screened again
            assert set(counts) == {(HOT, 5)}
            assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 5)}
            assert not obs.unobserved
            assert p.poller._producers.screened_partitions() == 2 * PARTITIONS
            for _ in range(4):
                counts.clear()
                obs = p.poll()
                assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 5)}
                assert not obs.unobserved
                if not counts:
                    break
            assert not counts  # standing still: its answer reused
        finally:
            sim.call(sim.state.clear_errors)
            txn.abort()


def test_batches_fit_the_response_limit_and_a_partition_too_large_alone_is_unobserved() -> None:
    """No answer too big: a batch whose answer crossed `max_response_bytes`
    is asked one partition per request next time, then batched by the learnt states so no
    answer crosses the limit again; a partition whose answer alone crosses it is screened
    with ListOffsets and, when it must be asked (LSO < HW), unobserved as ANSWER_TOO_LARGE,
    never "no transaction"."""
    limit = 64 * 1024
    with SimCluster(brokers=3, topics={HOT: PARTITIONS, COLD: PARTITIONS},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        now = sim.clock.now_ms()
        rng = random.Random(3)
        sim.call(seed_producer_states, sim.state, HOT, 0, 3000, now_ms=now, rng=rng)
        for p in range(1, PARTITIONS):
            sim.call(seed_producer_states, sim.state, HOT, p, 400, now_ms=now, rng=rng)
        settings = cluster_settings(sim, "limit", max_response_bytes=limit)
        p = ClusterObserver(settings, clock_ms=sim.clock.now_ms)
        try:
            first = p.poll()  # nothing learnt yet: an answer crosses the limit
            assert any(e.api == "DescribeProducers" and e.error == "DECODE_ERROR"
                       for e in first.request_errors)
            assert TopicPartition(HOT, 0) in first.unobserved
            # Asked alone: hot-0 alone is too large (its leader's connection is lost again,
            # with what else that leader was asked), the other leaders' partitions answer.
            second = p.poll()
            assert second.unobserved.get(TopicPartition(HOT, 0)) == "DECODE_ERROR"
            big_leader = second.leaders[TopicPartition(HOT, 0)]
            assert {second.leaders[tp] for tp in second.unobserved} == {big_leader}
            for _ in range(3):  # learnt: no answer crosses the limit, hot-0 screened clear
                obs = p.poll()
                assert not obs.unobserved
                assert not [e for e in obs.request_errors if e.api == "DescribeProducers"]
            txn = open_transaction(sim.bootstrap_servers, "in-big", HOT, [0, 1],
                                   now_ms=sim.clock.now_ms)
            try:
                obs = p.poll()
                assert obs.unobserved == {TopicPartition(HOT, 0): "ANSWER_TOO_LARGE"}
                assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 1)}
            finally:
                txn.abort()
        finally:
            p.close()


def expire_idle_producer_states(sim: SimCluster, topic: str, partition: int) -> None:
    """The producer states without an open transaction go, as producer.id.expiration.ms
    makes them go (run on the simulator's thread)."""
    producers = sim.state.log_of(sim.state.partition(topic, partition)).producers
    for pid in [pid for pid, e in producers.items() if e.current_txn_first_offset < 0]:
        del producers[pid]


def test_a_partition_too_large_alone_is_asked_again_with_back_off_and_observed_when_it_shrinks(
) -> None:
    """What an oversized answer taught does not outlive it: a partition whose answer alone
    crossed `max_response_bytes` is asked again alone (on a connection of its own, so its
    leader's other partitions keep their answers) after 1, 2, 4, then every 4 polls; when its
    producer states have expired it is observed again, its open transaction found."""
    limit = 64 * 1024
    with SimCluster(brokers=3, topics={HOT: PARTITIONS},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        sim.call(seed_producer_states, sim.state, HOT, 0, 3000, now_ms=sim.clock.now_ms(),
                 rng=random.Random(5))
        p = ClusterObserver(cluster_settings(sim, "shrink", max_response_bytes=limit),
                          clock_ms=sim.clock.now_ms)
        hot0 = TopicPartition(HOT, 0)
        try:
            for _ in range(3):  # learnt: too large alone, screened clear
                p.poll()
            txn = open_transaction(sim.bootstrap_servers, "in-big", HOT, [0, 1],
                                   now_ms=sim.clock.now_ms)
            try:
                reasons = []
                for _ in range(6):  # LSO < HW: must be asked; still too large
                    obs = p.poll()
                    reasons.append(obs.unobserved.get(hot0))
                    assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 1)}
                    assert set(obs.unobserved) == {hot0}
                assert set(reasons) == {"ANSWER_TOO_LARGE"}
                sim.call(expire_idle_producer_states, sim, HOT, 0)
                for _ in range(TOO_LARGE_RETRY_MAX_POLLS):  # the next retry is due by then
                    obs = p.poll()
                    if hot0 not in obs.unobserved:
                        break
                    assert obs.unobserved[hot0] == "ANSWER_TOO_LARGE"
                assert not obs.unobserved
                assert {(t.topic, t.partition) for t in obs.open_transactions} == {
                    (HOT, 0), (HOT, 1)}
            finally:
                txn.abort()
        finally:
            p.close()


FETCH = 1


def listed_twice(topic: str, partition: int) -> Any:
    """A Fetch answer rewritten as a buggy broker may send it: the partition listed a second
    time, that copy saying LSO = HW (no open transaction below the HW)."""
    def rewrite(response: Any) -> None:
        for t in response.responses:
            if t.topic != topic:
                continue
            for part in list(t.partitions):
                if part.partition_index == partition:
                    twin = copy.copy(part)
                    twin.last_stable_offset = part.high_watermark
                    twin.aborted_transactions = []
                    t.partitions.append(twin)
    return rewrite


def another_session(response: Any) -> None:
    """An incremental answer that is not the session's: another session id, no partitions."""
    response.session_id = response.session_id + 1_000
    response.responses = []


@pytest.mark.parametrize("fault", ["listed_twice", "another_session"])
def test_a_fetch_answer_that_contradicts_the_request_proves_nothing(
    sim: SimCluster, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """A session answer that contradicts the request (a partition listed twice, the second
    copy saying LSO = HW; an incremental answer of another session, with no partitions) is
    not believed: the session is started again in full in the same poll, the partition is
    asked DescribeProducers, and its open transaction is found in that poll and after."""
    with asked(monkeypatch) as counts, poller(sim) as p:
        for _ in range(3):  # learn, ListOffsets, the full fetch that starts the session
            p.poll()
        txn = open_transaction(sim.bootstrap_servers, "in-hot", HOT, [5],
                               now_ms=sim.clock.now_ms)
        leader = sim.call(lambda: sim.state.partition(HOT, 5).leader_id)
        rewrite = listed_twice(HOT, 5) if fault == "listed_twice" else another_session
        sim.rewrite_responses(rewrite, broker_id=leader, api_key=FETCH, count=1)
        try:
            counts.clear()
            obs = p.poll()
            assert any(e.api == "Fetch" and e.broker_id == leader
                       and e.error == "INCONSISTENT_ANSWER" for e in obs.request_errors)
            assert (HOT, 5) in counts  # asked DescribeProducers, never "no transaction"
            assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 5)}
            assert not obs.unobserved
            for _ in range(2):  # the broker honest again: still found
                obs = p.poll()
                assert {(t.topic, t.partition) for t in obs.open_transactions} == {(HOT, 5)}
                assert not obs.unobserved
        finally:
            sim.clear_faults()
            txn.abort()
