"""Two-phase-commit transactions (KIP-939): their own kind, never late or hanging.

Facts: docs/kafka-semantics.md#two-phase-commit (the coordinator gives a 2PC producer the
timeout 2147483647 and its reaper skips it)."""

from __future__ import annotations

import io
import json
from dataclasses import replace

from prometheus_client import CollectorRegistry, generate_latest

from exporter.analyze import analyze, is_two_phase
from exporter.expose.collector import SnapshotCollector
from exporter.expose.status import render_status_page
from exporter.model import (
    BrokerStatus,
    Classification,
    ClusterObservation,
    OpenTransaction,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
)
from exporter.rules import TWO_PHASE_TRANSACTION_TIMEOUT_MS
from exporter.scan import EXIT_OK, run_scan
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000
SETTINGS = ClusterSettings(name="c1", bootstrap_servers=("localhost:9092",))
TP = TopicPartition("orders", 0)


def _txn(age_ms: int, producer_id: int = 7) -> OpenTransaction:
    return OpenTransaction(
        topic=TP.topic, partition=TP.partition, leader_id=1, producer_id=producer_id,
        producer_epoch=3, coordinator_epoch=0, current_txn_start_offset=42,
        last_timestamp_ms=NOW_MS - age_ms, start_time_ms=NOW_MS - age_ms,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    )


def _described(timeout_ms: int, *tps: TopicPartition) -> TransactionDescription:
    return TransactionDescription(
        transactional_id="flink-sink-0", state="Ongoing", transaction_timeout_ms=timeout_ms,
        transaction_start_time_ms=NOW_MS - HOUR_MS, producer_id=7, producer_epoch=3,
        topic_partitions=frozenset(tps),
    )


def _observation(txn: OpenTransaction, timeout_ms: int, *tps: TopicPartition,
                 untracked_polls: int = 0) -> ClusterObservation:
    return ClusterObservation(
        cluster="c1", observed_at_ms=NOW_MS, brokers=(BrokerStatus(1, True, None, 900_000),),
        leaders={TP: 1}, open_transactions=(txn,),
        transactional_ids={7: "flink-sink-0"},
        descriptions={"flink-sink-0": _described(timeout_ms, *tps)},
        untracked_polls={txn.key: untracked_polls} if untracked_polls else {},
    )


def test_two_phase_is_the_coordinators_own_test_on_the_timeout() -> None:
    txn = _txn(age_ms=0)
    ids = {7: "flink-sink-0"}
    two_phase = TWO_PHASE_TRANSACTION_TIMEOUT_MS
    assert is_two_phase(txn, ids, {"flink-sink-0": _described(two_phase, TP)})
    assert not is_two_phase(txn, ids, {"flink-sink-0": _described(60_000, TP)})
    # Not tracked on this partition: find-hanging's "not tracked" wins, whatever the timeout.
    other = TopicPartition("orders", 1)
    assert not is_two_phase(txn, ids, {"flink-sink-0": _described(two_phase, other)})
    assert not is_two_phase(txn, ids, {"flink-sink-0": None})
    assert not is_two_phase(txn, {}, {})


def test_an_old_two_phase_transaction_is_neither_late_nor_hanging_but_stuck() -> None:
    txn = _txn(age_ms=3 * HOUR_MS)  # far past transaction.max.timeout.ms + buffer
    snap = analyze(_observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP), SETTINGS)
    assert snap.late_transactions == ()
    assert snap.orphaned_transactions == ()
    assert [b.partitions_with_late_transactions for b in snap.brokers] == [0]
    assert [b.partitions_with_hanging_transactions for b in snap.brokers] == [0]
    assert [b.partitions_with_open_transactions for b in snap.brokers] == [1]
    (two_phase,) = snap.two_phase_transactions
    assert two_phase.classification is Classification.TWO_PHASE
    assert two_phase.stuck and two_phase.transactional_id == "flink-sink-0"
    assert two_phase.age_seconds == 3 * 3600
    # The partition's oldest open transaction is still reported: it does hold the LSO.
    assert snap.max_active_transaction_duration_seconds[TP] == 3 * 3600


def test_the_stuck_threshold_is_the_clusters_setting() -> None:
    txn = _txn(age_ms=30 * 60_000)
    obs = _observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP)
    assert not analyze(obs, SETTINGS).two_phase_transactions[0].stuck  # default 1 h
    tight = replace(SETTINGS, two_phase_late_seconds=600.0)
    assert analyze(obs, tight).two_phase_transactions[0].stuck


def test_the_same_age_with_an_ordinary_timeout_is_late_as_before() -> None:
    txn = _txn(age_ms=3 * HOUR_MS)
    snap = analyze(_observation(txn, 60_000, TP), SETTINGS)
    assert snap.two_phase_transactions == ()
    (late,) = snap.late_transactions
    assert late.classification is Classification.COORDINATOR_TRACKED


def test_an_untracked_transaction_of_a_two_phase_producer_is_still_orphaned() -> None:
    txn = _txn(age_ms=10 * 60_000)
    obs = _observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TopicPartition("orders", 9),
                       untracked_polls=2)
    snap = analyze(obs, SETTINGS)
    assert snap.two_phase_transactions == ()
    assert len(snap.orphaned_transactions) == 1


def test_metrics_show_two_phase_apart_with_the_stuck_label() -> None:
    txn = _txn(age_ms=3 * HOUR_MS)
    snap = analyze(_observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP), SETTINGS)
    store = SnapshotStore([SETTINGS])
    store.publish(snap)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    text = generate_latest(registry).decode()
    line = next(x for x in text.splitlines()
                if x.startswith("kafka_two_phase_transaction_age_seconds{"))
    assert 'transactional_id="flink-sink-0"' in line and 'stuck="true"' in line
    assert line.endswith(" 10800.0")
    assert "kafka_late_transaction_age_seconds{" not in text


def test_the_status_page_shows_two_phase_transactions_apart() -> None:
    txn = _txn(age_ms=3 * HOUR_MS)
    snap = analyze(_observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP), SETTINGS)
    page = render_status_page({"c1": snap}).decode()
    assert "0 late, 0 hanging, 0 orphaned, 1 two-phase" in page
    assert "Two-phase-commit transactions (1, 1 stuck)" in page
    row = page.split('data-classification="two_phase"', 1)[1].split("</tr>", 1)[0]
    assert 'data-stuck="true"' in row and "flink-sink-0" in row and ">42<" in row
    assert "#kafkatwophasetransactionstuck" in page


def test_scan_notes_two_phase_transactions_and_does_not_call_them_hanging() -> None:
    txn = _txn(age_ms=3 * HOUR_MS)
    snap = analyze(_observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP), SETTINGS)
    out, err = io.StringIO(), io.StringIO()
    code = run_scan([SETTINGS], "json", out, err, scan_fn=lambda _: snap)
    assert code == EXIT_OK
    result = json.loads(out.getvalue())
    assert result["transactions"] == [] and result["hanging"] is False
    (entry,) = result["two_phase"]
    assert (entry["transactional_id"], entry["start_offset"], entry["stuck"]) == (
        "flink-sink-0", 42, True)
    assert entry["classification"] == "two_phase"
    assert "two-phase-commit transaction of 'flink-sink-0' on orders-0 from offset 42" in (
        err.getvalue())


def test_history_rows_classify_two_phase_transactions() -> None:
    from exporter.history import open_transaction_rows

    txn = _txn(age_ms=3 * HOUR_MS)
    obs = _observation(txn, TWO_PHASE_TRANSACTION_TIMEOUT_MS, TP)
    rows = open_transaction_rows(obs, analyze(obs, SETTINGS))
    assert (rows["late"], rows["classification"]) == ([False], ["two_phase"])
    assert rows["transactional_id"] == ["flink-sink-0"]
