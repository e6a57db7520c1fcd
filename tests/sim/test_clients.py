"""kafka-python 3.0.12's own clients against the simulator: what they write is what the
transaction APIs (and kafka-python's admin helpers) report back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka_sim.client import RawKafkaClient
from simhelpers import CAPTURE_BROKER_CONFIG, latest_offsets_request

TOPIC = "clients"
CLIENT_TIMEOUTS: dict[str, Any] = {"request_timeout_ms": 5000}


@pytest.fixture
def cluster() -> Iterator[Any]:
    from kafka_sim.cluster import SimCluster

    with SimCluster(
        brokers=1, node_ids=[1], topics={TOPIC: 2}, broker_config=CAPTURE_BROKER_CONFIG
    ) as sim:
        yield sim


@pytest.fixture
def admin(cluster: Any) -> Iterator[Any]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, **CLIENT_TIMEOUTS)
    try:
        yield client
    finally:
        client.close()


def _producer(cluster: Any, **config: Any) -> Any:
    return KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        max_block_ms=10000,
        **CLIENT_TIMEOUTS,
        **config,
    )


def _producer_ids(admin: Any, partition: int) -> list[Any]:
    tp = TopicPartition(TOPIC, partition)
    return list(admin.describe_producers([tp])[tp].active_producers)


def _latest(cluster: Any, partition: int, isolation_level: int) -> int:
    req = latest_offsets_request(TOPIC, partition, isolation_level, timeout_ms=5000)
    host, port = cluster.endpoints[1]
    with RawKafkaClient(host, port) as client:
        return int(client.request(req).topics[0].partitions[0].offset)


def test_transactional_commit_with_kafka_python(cluster: Any, admin: Any) -> None:
    producer = _producer(cluster, transactional_id="kp-commit", transaction_timeout_ms=30000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        meta = [producer.send(TOPIC, b"v%d" % i, partition=0).get(10) for i in range(2)]
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    assert [m.offset for m in meta] == [0, 1]
    desc = admin.describe_transactions(["kp-commit"])["kp-commit"]
    assert (desc.state.value, desc.producer_epoch, desc.transaction_timeout_ms) == (
        "CompleteCommit",
        0,
        30000,
    )
    assert desc.topic_partitions == set()
    (state,) = _producer_ids(admin, 0)
    assert state.producer_id == desc.producer_id
    assert (state.current_transaction_start_offset, state.coordinator_epoch) == (-1, 0)
    assert state.last_sequence == 1
    # data 0-1 + COMMIT marker at 2: everything is stable
    assert _latest(cluster, 0, 1) == _latest(cluster, 0, 0) == 3
    listed = admin.list_transactions()
    assert [(t.transactional_id, t.state.value) for rows in listed.values() for t in rows] == [
        ("kp-commit", "CompleteCommit")
    ]


def test_transactional_abort_with_kafka_python(cluster: Any, admin: Any) -> None:
    producer = _producer(cluster, transactional_id="kp-abort")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"doomed", partition=1).get(10)
        producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    desc = admin.describe_transactions(["kp-abort"])["kp-abort"]
    assert desc.state.value == "CompleteAbort"
    (state,) = _producer_ids(admin, 1)
    assert (state.producer_id, state.current_transaction_start_offset) == (desc.producer_id, -1)
    assert _latest(cluster, 1, 1) == _latest(cluster, 1, 0) == 2  # data + ABORT marker


def test_idempotent_producer_state_with_kafka_python(cluster: Any, admin: Any) -> None:
    producer = _producer(cluster, enable_idempotence=True)
    try:
        meta = [producer.send(TOPIC, b"i%d" % i, partition=0).get(10) for i in range(3)]
    finally:
        producer.close(timeout=5)
    (state,) = _producer_ids(admin, 0)
    assert state.last_sequence == 2
    assert (state.coordinator_epoch, state.current_transaction_start_offset) == (-1, -1)
    assert state.last_timestamp == max(m.timestamp for m in meta)
    assert admin.list_transactions() == {1: []}


def test_open_transaction_seen_by_admin_and_pins_read_committed_offsets(
    cluster: Any, admin: Any
) -> None:
    producer = _producer(cluster, transactional_id="kp-open", transaction_timeout_ms=60000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        before = producer.send(TOPIC, b"committed-before", partition=1)
        before.get(10)
        producer.commit_transaction()
        producer.begin_transaction()
        meta = [producer.send(TOPIC, b"open-%d" % i, partition=1).get(10) for i in range(2)]
        desc = admin.describe_transactions(["kp-open"])["kp-open"]
        assert desc.state.value == "Ongoing"
        assert desc.topic_partitions == {TopicPartition(TOPIC, 1)}
        assert desc.transaction_start_time_ms > 0
        listed = admin.list_transactions(state_filters=["Ongoing"])
        assert [(t.transactional_id, t.producer_id) for t in listed[1]] == [
            ("kp-open", desc.producer_id)
        ]
        (state,) = _producer_ids(admin, 1)
        assert state.current_transaction_start_offset == meta[0].offset == 2
        assert state.last_timestamp == meta[-1].timestamp
        # READ_COMMITTED stops at the open transaction (LSO), READ_UNCOMMITTED at the HW.
        assert _latest(cluster, 1, 1) == 2
        assert _latest(cluster, 1, 0) == 4
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    assert _latest(cluster, 1, 1) == _latest(cluster, 1, 0) == 5
