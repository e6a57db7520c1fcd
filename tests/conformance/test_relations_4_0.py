"""Relations the real Kafka 4.0 capture shows (tests/data/real-kafka-4.0/README.md,
"Observations"), checked on the simulator with transactions made through the protocol."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.producer import committed_transaction, hanging_transaction, open_transaction

from .probes import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    control_batches,
    describe_producers,
    describe_transaction,
    fetch_batches,
    latest_offset,
    list_transactions,
    producer,
    wait_until,
)
from .replay import BROKER_CONFIG

TOPIC = "t"


@pytest.fixture
def cluster() -> Iterator[Any]:
    from kafka_sim.cluster import SimCluster

    with SimCluster(brokers=1, node_ids=[1], topics={TOPIC: 3}, broker_config=BROKER_CONFIG) as sim:
        yield sim


def test_last_timestamp_while_open_is_max_timestamp_of_the_producers_last_data_batch(
    cluster: Any,
) -> None:
    """README: last_timestamp = max_timestamp of the producer's LAST data batch (not the
    transaction's first batch, not the highest timestamp ever written)."""
    now = cluster.clock.now_ms()
    txn = open_transaction(cluster.bootstrap_servers, "rel-open", now_ms=cluster.clock.now_ms)
    first = txn.send(
        TOPIC, 0, [(b"a", b"1", now + 500), (b"b", b"2", now + 100)], one_batch_per_record=False
    )
    last = txn.send(
        TOPIC, 0, [(b"c", b"3", now + 300), (b"d", b"4", now + 200)], one_batch_per_record=False
    )
    txn.close_quietly()
    assert first[0].max_timestamp_ms == now + 500 and last[0].max_timestamp_ms == now + 300
    p = producer(cluster, TOPIC, 0, txn.producer_id)
    assert p.last_timestamp == now + 300
    assert p.current_txn_start_offset == first[0].base_offset == 0
    assert p.last_sequence == 3
    assert p.coordinator_epoch == -1  # no marker yet on this partition (capture 14)


def test_last_timestamp_after_a_marker_is_the_markers_timestamp(cluster: Any) -> None:
    """README (23, 26): after COMMIT, coordinator_epoch 0, current_txn_start_offset -1,
    last_sequence kept, last_timestamp = the COMMIT control batch's timestamp."""
    old = cluster.clock.now_ms() - 5000
    result = committed_transaction(
        cluster.bootstrap_servers,
        "rel-commit",
        TOPIC,
        {1: [(b"k", b"v", old), (b"k2", b"v2", old)]},
        now_ms=cluster.clock.now_ms,
    )
    markers = wait_until(lambda: control_batches(cluster, TOPIC, 1), lambda m: len(m) == 1)
    assert len(markers) == 1, markers
    marker = markers[0]
    assert marker["records"][0]["control"]["type"] == "COMMIT"
    assert marker["producer_id"] == result.producer_id
    p = producer(cluster, TOPIC, 1, result.producer_id)
    assert p.last_timestamp == marker["max_timestamp"] != old
    assert (p.coordinator_epoch, p.current_txn_start_offset, p.last_sequence) == (0, -1, 1)


def test_timeout_abort_under_transaction_version_2_raises_the_epoch_by_two(cluster: Any) -> None:
    """README (47-49): a timed-out transaction is aborted with epoch 0 -> 2; the ABORT batch
    carries epoch 2; DescribeProducers: last_sequence -1, coordinator_epoch 0; the coordinator
    says CompleteAbort with no topics."""
    txn = open_transaction(
        cluster.bootstrap_servers,
        "rel-timeout",
        TOPIC,
        [2],
        transaction_timeout_ms=10000,
        now_ms=cluster.clock.now_ms,
    )
    assert txn.producer_epoch == 0
    txn.abandon()
    cluster.clock.advance(25000)
    state = wait_until(
        lambda: describe_transaction(cluster, "rel-timeout"),
        lambda s: s.transaction_state == "CompleteAbort",
    )
    assert (state.transaction_state, state.producer_epoch, list(state.topics)) == (
        "CompleteAbort",
        2,
        [],
    )
    markers = control_batches(cluster, TOPIC, 2)
    assert [(m["records"][0]["control"]["type"], m["producer_epoch"]) for m in markers] == [
        ("ABORT", 2)
    ]
    p = producer(cluster, TOPIC, 2, txn.producer_id)
    assert (p.producer_epoch, p.last_sequence, p.coordinator_epoch) == (2, -1, 0)
    assert p.current_txn_start_offset == -1
    assert p.last_timestamp == markers[0]["max_timestamp"]


def test_hanging_transaction_is_listed_as_empty_with_no_partitions(cluster: Any) -> None:
    """README (27-30): hang-1 is Empty at the coordinator (start -1, topics []) while its
    partition holds an open transaction at the batch's offset with the backdated timestamp."""
    now = cluster.clock.now_ms()
    pid, epoch, start = hanging_transaction(
        cluster.bootstrap_servers,
        "rel-hang",
        TOPIC,
        0,
        backdate_ms=400000,
        now_ms=lambda: now,
    )
    assert (epoch, start) == (0, 0)
    assert ("rel-hang", pid, "Empty") in list_transactions(cluster)
    assert list_transactions(cluster, states=["Ongoing"]) == []
    desc = describe_transaction(cluster, "rel-hang")
    assert (desc.error_code, desc.transaction_state, desc.transaction_start_time_ms) == (
        0,
        "Empty",
        -1,
    )
    assert list(desc.topics) == []
    p = producer(cluster, TOPIC, 0, pid)
    assert (p.current_txn_start_offset, p.last_timestamp) == (0, now - 400000)
    assert [b["max_timestamp"] for b in fetch_batches(cluster, TOPIC, 0)] == [now - 400000]


def test_read_committed_list_offsets_returns_the_last_stable_offset(cluster: Any) -> None:
    """README (31, 32, 53): latest READ_UNCOMMITTED = high watermark, READ_COMMITTED = LSO =
    first offset of the earliest open transaction."""
    committed_transaction(
        cluster.bootstrap_servers, "rel-c", TOPIC, {0: 2}
    )  # offsets 0-1, marker 2
    txn = open_transaction(cluster.bootstrap_servers, "rel-o", TOPIC, {0: 3})  # offsets 3-5
    txn.close_quietly()
    assert latest_offset(cluster, TOPIC, 0, READ_UNCOMMITTED) == 6
    assert latest_offset(cluster, TOPIC, 0, READ_COMMITTED) == 3


def test_hanging_transaction_survives_the_timeout_sweep_that_aborts_an_open_one(
    cluster: Any,
) -> None:
    """README (50, 53): after the sweep, the ordinary transaction is aborted (partition open
    state cleared, LSO = HW) while the hanging one stays open with LSO pinned at its offset."""
    pid_hang, _, start = hanging_transaction(
        cluster.bootstrap_servers, "rel-hang2", TOPIC, 0, now_ms=cluster.clock.now_ms
    )
    txn = open_transaction(
        cluster.bootstrap_servers,
        "rel-open2",
        TOPIC,
        [1],
        transaction_timeout_ms=10000,
        now_ms=cluster.clock.now_ms,
    )
    txn.abandon()
    cluster.clock.advance(120000)
    wait_until(
        lambda: describe_transaction(cluster, "rel-open2").transaction_state,
        lambda s: s == "CompleteAbort",
    )
    assert describe_transaction(cluster, "rel-open2").transaction_state == "CompleteAbort"
    open_part = describe_producers(cluster, TOPIC, 1)
    assert [p.current_txn_start_offset for p in open_part.active_producers] == [-1]
    assert latest_offset(cluster, TOPIC, 1, READ_COMMITTED) == latest_offset(
        cluster, TOPIC, 1, READ_UNCOMMITTED
    )
    hang = producer(cluster, TOPIC, 0, pid_hang)
    assert (hang.current_txn_start_offset, hang.producer_epoch) == (start, 0)
    assert describe_transaction(cluster, "rel-hang2").transaction_state == "Empty"
    assert latest_offset(cluster, TOPIC, 0, READ_COMMITTED) == start == 0
    assert latest_offset(cluster, TOPIC, 0, READ_UNCOMMITTED) == 1
