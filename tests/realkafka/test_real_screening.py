"""Screening of crowded partitions on a real broker (issue 28): Kafka's last stable offset
equals the high watermark on a partition with idempotent producer states only, and falls below
it when a transaction is open there (docs/kafka-semantics.md#lso-equals-hw), so the screened
poll asks DescribeProducers only for that partition and finds what the full poll finds. The
offsets come from an incremental fetch session whose answers leave out the partitions that
did not move (docs/kafka-semantics.md#fetch-sessions)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka_sim.producer import open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import cluster_settings, create_topic, idempotent_write, unique
from screening_probes import describe_producers_asked
from waits import wait_for

from exporter.collect import screening
from exporter.collect.poll import ClusterPoller
from exporter.collect.producers import SCREEN_FROM_STATES

PARTITIONS = 3


def test_screened_poll_asks_only_where_lso_is_below_hw_and_finds_the_transaction(
    real_kafka: RealKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(real_kafka, unique("crowded"), partitions=PARTITIONS)
    for p in range(PARTITIONS):
        for _ in range(SCREEN_FROM_STATES + 1):  # short-lived idempotent producers
            idempotent_write(real_kafka.bootstrap, topic, p)
    asked = describe_producers_asked(monkeypatch)
    answers: list[tuple[int, set[int]]] = []  # (session id, partitions of the topic)
    decode = screening._DECODE_FETCH

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

    monkeypatch.setattr(screening, "_DECODE_FETCH", recording)
    settings = cluster_settings(real_kafka, request_timeout_seconds=30.0)
    screened = ClusterPoller(settings)
    full = ClusterPoller(settings, screen_crowded_partitions=False)
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
