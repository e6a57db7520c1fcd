"""A partition whose DescribeProducers answer alone crosses `max_response_bytes`, on a real
broker: it is asked again alone on a connection of its own with back-off (its leader's other
partitions keep their answers in every poll, the probe's lost connection costs them nothing),
and it is observed again within a few polls once its answer fits."""

from __future__ import annotations

import dataclasses

import pytest
from kafka_sim.producer import idempotent_producer_write_all, open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from kafka_sim.routing import RawCluster
from realhelpers import cluster_settings, create_topic, unique

from exporter.collect.producers import TOO_LARGE_RETRY_MAX_POLLS
from exporter.model import TopicPartition
from exporter.observe import ClusterObserver

LIMIT = 64 * 1024
STATES = 2_000
"""~37 bytes per producer state: ~74 KB of answer for the crowded partition, above LIMIT."""


def test_a_partition_too_large_is_retried_alone_and_observed_when_its_answer_fits(
    real_kafka: RealKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(real_kafka, unique("too-large"), partitions=2)
    raw = RawCluster(real_kafka.bootstrap, "too-large-seed", 60.0)
    try:
        for _ in range(STATES):
            idempotent_producer_write_all(raw, topic, [0], timeout_s=60.0)
    finally:
        raw.close()
    big, small = TopicPartition(topic, 0), TopicPartition(topic, 1)
    settings = cluster_settings(real_kafka, request_timeout_seconds=30.0,
                                max_response_bytes=LIMIT)
    poller = ClusterObserver(settings)
    txn = None
    try:
        for _ in range(3):  # learns: the batch too large, then the partition alone
            poller.poll()
        txn = open_transaction(real_kafka.bootstrap, unique("too-large-txn"), topic, [0, 1])
        reasons = []
        for _ in range(2 * TOO_LARGE_RETRY_MAX_POLLS):
            obs = poller.poll()
            mine = {tp for tp in obs.unobserved if tp.topic == topic}
            assert mine == {big}, obs.unobserved
            reasons.append(obs.unobserved[big])
            # The same leader's other partition is answered in every poll, probes included.
            assert {(t.topic, t.partition) for t in obs.open_transactions
                    if t.topic == topic} == {(topic, 1)}
        assert set(reasons) == {"ANSWER_TOO_LARGE"}
        # The answer fits again (here: a larger limit; in production the states expire).
        pool = poller.poller._client.pool
        monkeypatch.setattr(pool, "_options",
                            dataclasses.replace(pool._options, max_response_bytes=2 * LIMIT))
        for _ in range(TOO_LARGE_RETRY_MAX_POLLS):
            obs = poller.poll()
            if big not in obs.unobserved:
                break
        assert not [tp for tp in obs.unobserved if tp.topic == topic]
        assert {(t.topic, t.partition) for t in obs.open_transactions
                if t.topic == topic} == {(topic, 0), (topic, 1)}
        assert small not in obs.unobserved
    finally:
        if txn is not None:
            txn.abort()
        poller.close()
