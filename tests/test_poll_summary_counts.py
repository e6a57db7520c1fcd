"""The `poll_completed` log line carries every count the metrics do: each count in the
summary equals what the collector exposes for the same snapshot (a count of series, or the
sum of a per-broker family), and a count the metrics leave absent is None. A cluster-wide
count over partitions some of which were not observed is not known: None, with the reason
and what was seen (`<count>_observed`), never a 0 that means "not looked at"."""

from __future__ import annotations

import io
import json

import pytest
from exporter_factories import broker, in_thread, late, observation, open_txn, orphaned, snapshot
from prometheus_client.registry import CollectorRegistry

from exporter.expose.collector import SnapshotCollector
from exporter.logs import configure_logging
from exporter.model import Classification, ClusterSnapshot
from exporter.scheduler import ClusterJob, PollScheduler, summarize
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

pytestmark = pytest.mark.usefixtures("reset_logging")  # tests/conftest.py


def _incident() -> ClusterSnapshot:
    hanging = open_txn("orders", 3, leader_id=1, producer_id=7, start_offset=42, age_ms=400_000)
    tracked = open_txn("payments", 0, leader_id=2, producer_id=8, start_offset=17,
                       age_ms=250_000)
    early = open_txn("orders", 5, leader_id=1, producer_id=9, start_offset=3, age_ms=95_000)
    return snapshot(
        "c1",
        brokers=[broker(1, open_=2, late_=1, hanging=1, orphaned_=2),
                 broker(2, open_=1, late_=1, orphaned_=None),  # orphan answer unknown
                 broker(3, up=False)],
        late_transactions=[late(hanging, Classification.HANGING, "",
                                blocked=[("billing", 360.0), ("audit", 30.0)]),
                           late(tracked, Classification.COORDINATOR_TRACKED, "pay-1",
                                blocked_unknown="unauthorized")],
        orphaned_transactions=[orphaned(hanging, late=True,
                                        blocked=[("billing", 360.0), ("audit", 30.0)]),
                               orphaned(early, "etl-7", blocked=[("etl-readers", 12.0)])],
        blocked_groups_unknown_by_reason={"unauthorized": 1},
        unobserved=4,
        unobserved_by_reason={"broker_down": 3, "unauthorized": 1},
    )


def _exposed(snap: ClusterSnapshot) -> dict[str, list[tuple[dict[str, str], float]]]:
    store = SnapshotStore([ClusterSettings(name=snap.cluster, bootstrap_servers=("h:1",))])
    store.publish(snap, now_seconds=1_800_000_000.0)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store, build_info={}))
    return {family.name: [(s.labels, s.value) for s in family.samples]
            for family in registry.collect()}


def _sum(samples: list[tuple[dict[str, str], float]]) -> int | None:
    return int(sum(v for _, v in samples)) if samples else None


def test_every_count_of_the_metrics_is_in_the_summary() -> None:
    snap = _incident()
    summary = summarize(snap)
    metrics = _exposed(snap)
    # 4 partitions unobserved: the cluster-wide counts are what was seen, not the whole.
    for key in ("orphaned_transactions", "late_transactions", "hanging_transactions",
                "blocked_consumer_groups"):
        assert summary[key] is None, key
        assert summary["unknown_counts"][key] == "unobserved_partitions"
        summary[key] = summary.pop(f"{key}_observed")
    assert summary["orphaned_transactions"] == len(
        metrics["kafka_orphaned_transaction_age_seconds"]) == 2
    assert summary["late_transactions"] == len(metrics["kafka_late_transaction_age_seconds"])
    assert summary["hanging_transactions"] == len(
        [s for s, _ in metrics["kafka_late_transaction_age_seconds"]
         if s["classification"] == "hanging"])
    for kind in ("open", "late", "hanging", "orphaned"):
        name = f"partitions_with_{kind}_transactions"
        assert summary[name] == _sum(metrics[f"kafka_{name}"]), name
    assert summary["partitions_with_orphaned_transactions"] == 2  # broker 2's is unknown
    assert summary["blocked_consumer_groups"] == len(
        metrics["kafka_consumer_group_blocked_seconds"]) == 3
    unknown = metrics["kafka_txn_exporter_blocked_consumer_groups_unknown"]
    assert summary["blocked_consumer_groups_unknown"] == {
        s["reason"]: int(v) for s, v in unknown} == {"unauthorized": 1}
    assert summary["unobserved_partitions_by_reason"] == {
        s["reason"]: int(v)
        for s, v in metrics["kafka_txn_exporter_unobserved_partitions_by_reason"]
    }
    assert summary["brokers_up"] == int(_sum(metrics["kafka_txn_exporter_broker_up"]) or 0)


def test_a_count_the_metrics_leave_absent_is_none_in_the_summary() -> None:
    snap = snapshot("c1", brokers=[broker(1, orphaned_=None)])
    summary = summarize(snap)
    assert "kafka_partitions_with_orphaned_transactions" not in {
        name for name, samples in _exposed(snap).items() if samples}
    assert summary["partitions_with_orphaned_transactions"] is None
    assert summary["orphaned_transactions"] == 0 and summary["blocked_consumer_groups"] == 0


def test_the_logged_line_carries_the_orphaned_and_blocked_group_counts() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    settings = ClusterSettings(name="c1", bootstrap_servers=("h:1",), poll_interval_seconds=3600)
    job = ClusterJob(settings, poll=in_thread(lambda: observation("c1")),
                     analyze=lambda obs: _incident())
    PollScheduler([job], SnapshotStore([settings])).run_once(job)
    (line,) = [json.loads(raw) for raw in stream.getvalue().splitlines()
               if '"poll_completed"' in raw]
    assert line["orphaned_transactions"] is None  # 4 partitions unobserved
    assert line["orphaned_transactions_observed"] == 2
    assert line["partitions_with_orphaned_transactions"] == 2
    assert line["blocked_consumer_groups_observed"] == 3
    assert line["blocked_consumer_groups_unknown"] == {"unauthorized": 1}


def test_a_count_over_unobserved_partitions_is_never_logged_as_zero() -> None:
    """A poll that saw no late transaction but could not observe a partition: the logged
    late count is unknown (null, with the reason), not 0; once every partition is observed
    it is 0 again."""
    partial = snapshot("c1", brokers=[broker(1, late_=None)], unobserved=1,
                       unobserved_by_reason={"error": 1})
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    settings = ClusterSettings(name="c1", bootstrap_servers=("h:1",), poll_interval_seconds=3600)
    job = ClusterJob(settings, poll=in_thread(lambda: observation("c1")),
                     analyze=lambda obs: partial)
    PollScheduler([job], SnapshotStore([settings])).run_once(job)
    (line,) = [json.loads(raw) for raw in stream.getvalue().splitlines()
               if '"poll_completed"' in raw]
    for key in ("late_transactions", "hanging_transactions", "orphaned_transactions",
                "blocked_consumer_groups", "open_transactions"):
        assert line[key] is None, key
        assert line[f"{key}_observed"] == 0, key
        assert line["unknown_counts"][key] == "unobserved_partitions", key
    assert line["unobserved_partitions"] == 1
    assert line["unobserved_partitions_by_reason"] == {"error": 1}

    unreachable = summarize(snapshot("c1", up=False))
    assert unreachable["late_transactions"] is None
    assert unreachable["unknown_counts"]["late_transactions"] == "cluster_unreachable"

    unclassified = summarize(snapshot("c1", brokers=[broker(1, open_=1, late_=1)],
                                      late_transactions=[late(open_txn(
                                          "orders", 3, leader_id=1, producer_id=7,
                                          start_offset=42, age_ms=400_000),
                                          Classification.UNKNOWN, "")]))
    assert unclassified["late_transactions"] == 1
    assert unclassified["hanging_transactions"] is None
    assert unclassified["unknown_counts"] == {
        "hanging_transactions": "unclassified_late_transactions"}

    whole = summarize(snapshot("c1", brokers=[broker(1, open_=0, late_=0)]))
    assert whole["late_transactions"] == 0 and whole["unknown_counts"] == {}
