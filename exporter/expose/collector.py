"""Prometheus custom collector over the latest analyzed snapshot of each cluster.

Polls publish into a `SnapshotStore` (exporter.snapshots); a scrape reads one consistent state
from it without taking a lock and never waits for a poll. Metric families are built fresh on
every scrape (the prometheus_client custom-collector model), so a series vanishes as soon as
the snapshot that produced it is replaced: a finished transaction's series disappears on the
next poll. /metrics formats them once per published state (exporter.expose.render_cache).

Data series come only from a snapshot whose `up` is true; a broker with `up=False` has its
per-broker data series left out (missing data is never reported as zero).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.model import ClusterSnapshot
from exporter.snapshots import POLL_DURATION_BUCKETS_SECONDS, ClusterState, SnapshotStore

# --------------------------------------------------------------------------- metric families

_HELP = {
    "kafka_partition_max_active_transaction_duration_seconds":
        "Age of the oldest open transaction on the partition "
        "(KIP-664 MaxActiveTransactionDuration).",
    "kafka_cluster_max_active_transaction_duration_seconds":
        "Age of the oldest open transaction in the cluster.",
    "kafka_partitions_with_late_transactions":
        "Partitions led by the broker whose oldest open transaction is older than "
        "transaction.max.timeout.ms plus the late buffer (like the broker's "
        "PartitionsWithLateTransactionsCount).",
    "kafka_partitions_with_hanging_transactions":
        "Partitions led by the broker with a late transaction its coordinator no longer tracks.",
    "kafka_partitions_with_open_transactions":
        "Partitions led by the broker with at least one open transaction.",
    "kafka_late_transaction_age_seconds":
        "Age of each late open transaction, with its identity and classification.",
    "kafka_transactions":
        "Transactional ids per coordinator state (ListTransactions).",
    "kafka_transaction_max_timeout_seconds":
        "The broker's transaction.max.timeout.ms, in seconds.",
    "kafka_partition_last_stable_offset_lag":
        "High watermark minus last stable offset (like the broker's LastStableOffsetLag).",
    "kafka_txn_exporter_up":
        "1 when the last poll of the cluster succeeded, else 0.",
    "kafka_txn_exporter_broker_up":
        "1 when the broker answered in the last poll, else 0.",
    "kafka_txn_exporter_poll_duration_seconds":
        "Duration of polls of the cluster (collect and analyze).",
    "kafka_txn_exporter_last_successful_poll_timestamp_seconds":
        "Unix time of the last successful poll of the cluster.",
    "kafka_txn_exporter_request_errors":
        "Failed requests and per-item errors, by broker, API and Kafka error name.",
    "kafka_txn_exporter_unobserved_partitions":
        "Partitions whose producer state could not be read in the last poll.",
    "kafka_txn_exporter_unobserved_partitions_by_reason":
        "Unobserved partitions in the last poll by reason (broker_down, unsupported_api, "
        "unauthorized, not_leader, no_leader, error); only reasons with a count.",
    "kafka_txn_exporter_build_info":
        "Build information; the value is always 1.",
}


def _labels(cluster_state: ClusterState, /, **extra: str) -> dict[str, str]:
    return {"cluster": cluster_state.name, **extra, **cluster_state.labels}


class SnapshotCollector(Collector):
    """Builds every metric family from one `SnapshotStore.states()` read per scrape.

    `collect()` is a pure function of `published_states()` (no clock, no other input), which is
    what lets exporter.expose.render_cache reuse its rendered bytes until the next publish.
    """

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

    def published_states(self) -> Mapping[str, ClusterState]:
        """What `collect()` would render now: a new object after every publish or failure."""
        return self._store.states()

    def describe(self) -> Iterable[Metric]:
        """Declared so registering never triggers a collect."""
        return list(self._families().values())

    def _families(self) -> dict[str, Metric]:
        families: dict[str, Metric] = {}
        for name, doc in _HELP.items():
            if name == "kafka_txn_exporter_poll_duration_seconds":
                families[name] = HistogramMetricFamily(name, doc)
            elif name == "kafka_txn_exporter_request_errors":
                families[name] = CounterMetricFamily(name, doc)
            else:
                families[name] = GaugeMetricFamily(name, doc)
        return families

    def collect(self) -> Iterator[Metric]:
        states = self._store.states()
        fam = self._families()
        fam["kafka_txn_exporter_build_info"].add_sample(
            "kafka_txn_exporter_build_info", {"version": __version__}, 1.0
        )
        for state in states.values():
            self._collect_exporter_own(state, fam)
            snap = state.snapshot
            if snap is not None and state.up and snap.up:
                self._collect_data(state, snap, fam)
        yield from fam.values()

    @staticmethod
    def _collect_exporter_own(state: ClusterState, fam: Mapping[str, Metric]) -> None:
        fam["kafka_txn_exporter_up"].add_sample(
            "kafka_txn_exporter_up", _labels(state), 1.0 if state.up else 0.0
        )
        hist = "kafka_txn_exporter_poll_duration_seconds"
        cumulative = 0
        for bound, count in zip(
            (*POLL_DURATION_BUCKETS_SECONDS, float("inf")), state.poll_bucket_counts, strict=True
        ):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            fam[hist].add_sample(f"{hist}_bucket", _labels(state, le=le), float(cumulative))
        fam[hist].add_sample(f"{hist}_count", _labels(state), float(state.poll_count))
        fam[hist].add_sample(f"{hist}_sum", _labels(state), state.poll_duration_sum_seconds)
        if state.last_successful_poll_timestamp_seconds is not None:
            name = "kafka_txn_exporter_last_successful_poll_timestamp_seconds"
            fam[name].add_sample(
                name, _labels(state), state.last_successful_poll_timestamp_seconds
            )
        for (broker, api, error), count in sorted(state.request_errors_total.items()):
            fam["kafka_txn_exporter_request_errors"].add_sample(
                "kafka_txn_exporter_request_errors_total",
                _labels(state, broker=broker, api=api, error=error),
                float(count),
            )
        snap = state.snapshot
        if snap is None:
            return
        for broker_summary in snap.brokers:
            fam["kafka_txn_exporter_broker_up"].add_sample(
                "kafka_txn_exporter_broker_up",
                _labels(state, broker=str(broker_summary.broker_id)),
                1.0 if broker_summary.up else 0.0,
            )
        if snap.up:
            fam["kafka_txn_exporter_unobserved_partitions"].add_sample(
                "kafka_txn_exporter_unobserved_partitions",
                _labels(state),
                float(snap.unobserved_partitions),
            )
            for reason, count in sorted(snap.unobserved_by_reason.items()):
                name = "kafka_txn_exporter_unobserved_partitions_by_reason"
                fam[name].add_sample(name, _labels(state, reason=reason), float(count))

    @staticmethod
    def _collect_data(
        state: ClusterState, snap: ClusterSnapshot, fam: Mapping[str, Metric]
    ) -> None:
        def gauge(name: str, value: float, /, **labels: str) -> None:
            fam[name].add_sample(name, _labels(state, **labels), float(value))

        for tp, seconds in sorted(snap.max_active_transaction_duration_seconds.items()):
            gauge(
                "kafka_partition_max_active_transaction_duration_seconds",
                seconds,
                topic=tp.topic,
                partition=str(tp.partition),
            )
        gauge(
            "kafka_cluster_max_active_transaction_duration_seconds",
            snap.cluster_max_active_transaction_duration_seconds,
        )
        for b in snap.brokers:
            broker = str(b.broker_id)
            if b.up and b.observable:  # unknown counts are absent, never 0
                gauge("kafka_partitions_with_late_transactions",
                      b.partitions_with_late_transactions, broker=broker)
                gauge("kafka_partitions_with_hanging_transactions",
                      b.partitions_with_hanging_transactions, broker=broker)
                gauge("kafka_partitions_with_open_transactions",
                      b.partitions_with_open_transactions, broker=broker)
            if b.transaction_max_timeout_ms is not None:
                gauge("kafka_transaction_max_timeout_seconds",
                      b.transaction_max_timeout_ms / 1000.0, broker=broker)
        for late in snap.late_transactions:
            txn = late.transaction
            gauge(
                "kafka_late_transaction_age_seconds",
                late.age_seconds,
                topic=txn.topic,
                partition=str(txn.partition),
                producer_id=str(txn.producer_id),
                producer_epoch=str(txn.producer_epoch),
                coordinator_epoch=str(txn.coordinator_epoch),
                start_offset=str(txn.current_txn_start_offset),
                transactional_id=late.transactional_id,
                classification=str(late.classification),
            )
        if snap.transaction_states is not None:
            for txn_state, count in sorted(snap.transaction_states.items()):
                gauge("kafka_transactions", count, state=txn_state)
        for tp, lag in sorted(snap.last_stable_offset_lag.items()):
            gauge(
                "kafka_partition_last_stable_offset_lag",
                lag,
                topic=tp.topic,
                partition=str(tp.partition),
            )
