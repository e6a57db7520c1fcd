"""Screening on a real broker: Kafka's last stable offset
equals the high watermark on a partition with idempotent producer states only, and falls below
it when a transaction is open there (docs/kafka-semantics.md#lso-equals-hw), so the screened
poll asks DescribeProducers only for that partition and finds what the full poll finds. The
offsets come from an incremental fetch session whose answers leave out the partitions that
did not move (docs/kafka-semantics.md#fetch-sessions)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from kafka_sim.producer import hanging_transaction, open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    LATE_BACKDATE_MS,
    cluster_settings,
    create_topic,
    idempotent_write,
    poll_env,
    unique,
)
from screening_probes import describe_producers_asked
from waits import wait_for

from exporter.collect import producers
from exporter.collect.apis import fetch
from exporter.model import Classification
from exporter.observe import ClusterObserver

PARTITIONS = 3
STATES = 4
"""Producer states seeded per partition (short-lived idempotent producers): a crowded topic,
though every partition is screened whatever its states."""


def test_screened_poll_asks_only_where_lso_is_below_hw_and_finds_the_transaction(
    real_kafka: RealKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(real_kafka, unique("crowded"), partitions=PARTITIONS)
    for p in range(PARTITIONS):
        for _ in range(STATES):  # short-lived idempotent producers
            idempotent_write(real_kafka.bootstrap, topic, p)
    asked = describe_producers_asked(monkeypatch)
    answers: list[tuple[int, set[int]]] = []  # (session id, partitions of the topic)
    decode = fetch._DECODE_FETCH

    def recording(payload: bytes, version: int) -> Any:
        response = decode(payload, version)
        answers.append(
            (
                response.session_id,
                {
                    p.partition_index
                    for t in response.responses
                    if t.topic == topic
                    for p in t.partitions
                },
            )
        )
        return response

    monkeypatch.setattr(fetch, "_DECODE_FETCH", recording)
    settings = cluster_settings(real_kafka, request_timeout_seconds=30.0)
    screened = ClusterObserver(settings)
    full = ClusterObserver(settings, screen_partitions=False)
    txn = None
    try:
        screened.poll()  # learns the counts
        asked.clear()
        clear = screened.poll()
        assert not [k for k in asked if k[0] == topic]  # LSO == HW on every partition
        assert not [t for t in clear.open_transactions if t.topic == topic]
        assert not [tp for tp in clear.unobserved if tp.topic == topic]
        txn = open_transaction(real_kafka.bootstrap, unique("crowded-txn"), topic, [2])
        asked.clear()
        seen = screened.poll()
        assert {k for k in asked if k[0] == topic} == {(topic, 2)}
        reference = full.poll()

        def mine(obs: Any) -> set[tuple[int, int, int]]:
            return {
                (t.partition, t.producer_id, t.current_txn_start_offset)
                for t in obs.open_transactions
                if t.topic == topic
            }

        assert mine(seen) == mine(reference) and len(mine(seen)) == 1
        assert not [tp for tp in seen.unobserved if tp.topic == topic]
        # The sessions hold the partitions now: idle ones are in no answer, the open
        # transaction's answer is reused, a write is reported once.
        for _ in range(2):
            answers.clear()
            asked.clear()
            still = screened.poll()
            assert answers and all(session_id != 0 for session_id, _ in answers)
            assert not set().union(*(parts for _, parts in answers))
            assert not [k for k in asked if k[0] == topic]
            assert mine(still) == mine(seen)
        idempotent_write(real_kafka.bootstrap, topic, 0)
        answers.clear()
        asked.clear()
        moved = screened.poll()
        assert set().union(*(parts for _, parts in answers)) == {0}
        assert not [k for k in asked if k[0] == topic]  # LSO == HW there
        assert mine(moved) == mine(seen)
        txn.abort()
        txn = None
        wait_for("the abort marker", lambda: not mine(full.poll()), 30.0)
        answers.clear()
        done = screened.poll()
        assert 2 in set().union(*(parts for _, parts in answers))
        assert not mine(done) and not [tp for tp in done.unobserved if tp.topic == topic]
    finally:
        if txn is not None:
            txn.abort()
        screened.close()
        full.close()


@pytest.mark.parametrize("fault", ["listed_twice", "another_session"])
def test_a_contradicting_session_answer_starts_a_new_session_in_the_same_poll(
    real_kafka: RealKafkaCluster, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """One incremental answer is spoiled on its way (a partition listed twice, the copy
    saying LSO = HW; or another session's id and no partitions): the exporter drops the
    session and the broker opens a new one on the full Fetch sent in the same poll (epoch 0
    naming the old session closes it: docs/kafka-semantics.md#fetch-sessions); the open
    transaction is found in that poll, and the new session serves the next one."""
    topic = create_topic(real_kafka, unique("contra"), partitions=PARTITIONS)
    for p in range(PARTITIONS):
        for _ in range(STATES):
            idempotent_write(real_kafka.bootstrap, topic, p)
    asked = describe_producers_asked(monkeypatch)
    answers: list[tuple[int, int, set[int]]] = []  # (session id, error, topic's partitions)
    spoil: list[bool] = [False]
    decode = fetch._DECODE_FETCH

    def spoiling(payload: bytes, version: int) -> Any:
        response = decode(payload, version)
        if spoil[0]:
            spoil[0] = False
            if fault == "another_session":
                response.session_id += 1_000
                response.responses = []
            else:
                for t in response.responses:
                    for part in list(t.partitions):
                        if t.topic == topic and part.partition_index == 2:
                            t.partitions.append(dataclasses.replace(
                                part, last_stable_offset=part.high_watermark))
        answers.append((response.session_id, response.error_code, {
            p.partition_index for t in response.responses if t.topic == topic
            for p in t.partitions}))
        return response

    monkeypatch.setattr(fetch, "_DECODE_FETCH", spoiling)
    poller = ClusterObserver(cluster_settings(real_kafka, request_timeout_seconds=30.0))
    txn = None
    try:
        for _ in range(3):  # learn, ListOffsets, the full Fetch that opens the session
            poller.poll()
        assert answers and answers[-1][0] != 0
        txn = open_transaction(real_kafka.bootstrap, unique("contra-txn"), topic, [2])
        answers.clear()
        asked.clear()
        spoil[0] = True
        seen = poller.poll()
        fetch_errors = [e.error for e in seen.request_errors if e.api == "Fetch"]
        assert fetch_errors == ["INCONSISTENT_ANSWER"]
        assert (topic, 2) in asked
        assert {(t.topic, t.partition) for t in seen.open_transactions
                if t.topic == topic} == {(topic, 2)}
        assert not [tp for tp in seen.unobserved if tp.topic == topic]
        _, (new_session, error, listed) = answers  # the spoiled one, then the full one
        assert error == 0 and new_session != 0 and listed == set(range(PARTITIONS))
        answers.clear()
        after = poller.poll()  # an incremental Fetch on the new session
        assert not [e for e in after.request_errors if e.api == "Fetch"]
        assert [(s, e) for s, e, _ in answers] == [(new_session, 0)]
        assert {(t.topic, t.partition) for t in after.open_transactions
                if t.topic == topic} == {(topic, 2)}
    finally:
        if txn is not None:
            txn.abort()
        poller.close()


def test_first_poll_screened_still_finds_a_hanging_and_a_late_transaction(
    real_kafka: RealKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first poll after a start asks DescribeProducers for a sample of each leader's
    partitions; where the sample answered it reads the others' offsets first and asks only
    where LSO < HW. A hanging transaction and a late one (its coordinator still holds it)
    on such partitions are found by that first poll, as the full poll finds them."""
    partitions = 6
    topic = create_topic(real_kafka, unique("first-poll"), partitions=partitions)
    for p in range(partitions):
        for _ in range(STATES):  # short-lived idempotent producers
            idempotent_write(real_kafka.bootstrap, topic, p)
    producer_id, _, _ = hanging_transaction(
        real_kafka.bootstrap, unique("first-hang"), topic, 3, backdate_ms=LATE_BACKDATE_MS
    )
    late_txn = open_transaction(
        real_kafka.bootstrap, unique("first-late"), topic, [4],
        now_ms=lambda: int(time.time() * 1000) - LATE_BACKDATE_MS,
        transaction_timeout_ms=300_000,
    )
    try:
        settings = cluster_settings(real_kafka, request_timeout_seconds=30.0)
        full = ClusterObserver(settings, screen_partitions=False)
        try:
            reference = full.poll()
        finally:
            full.close()
        # One partition of every topic in the leader's sample.
        topics = {tp.topic for tp in reference.leaders}
        monkeypatch.setattr(producers, "FIRST_POLL_SAMPLE_PARTITIONS", len(topics))
        asked = describe_producers_asked(monkeypatch)
        with poll_env(real_kafka, request_timeout_seconds=30.0) as env:
            first, snapshot = env.poll()
        mine_asked = {p for t, p in asked if t == topic}
        # The two with LSO < HW, and the topic's one sampled partition (the first in the
        # Metadata answer's order, which is the broker's own).
        assert {3, 4} <= mine_asked and len(mine_asked - {3, 4}) <= 1

        def mine(obs: Any) -> set[tuple[int, int, int]]:
            return {
                (t.partition, t.producer_id, t.current_txn_start_offset)
                for t in obs.open_transactions
                if t.topic == topic
            }

        assert mine(first) == mine(reference) and {p for p, _, _ in mine(first)} == {3, 4}
        assert not [tp for tp in first.unobserved if tp.topic == topic]
        late = {
            t.transaction.partition: t.classification
            for t in snapshot.late_transactions
            if t.transaction.topic == topic
        }
        assert late[3] is Classification.HANGING
        assert 4 in late and late[4] is not Classification.HANGING
        assert producer_id in {t.producer_id for t in first.open_transactions}
    finally:
        late_txn.abort()
