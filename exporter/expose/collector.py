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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import __version__, version
from exporter.metrics import METRICS, MetricSpec, spec
from exporter.model import ClusterSnapshot, OpenTransaction, PartitionVerification
from exporter.snapshots import POLL_DURATION_BUCKETS_SECONDS, ClusterState, SnapshotStore

# --------------------------------------------------------------------------- metric families


def build_info_labels() -> dict[str, str]:
    """`kafka_txn_exporter_build_info`'s labels for this process."""
    return {"version": __version__, "revision": version.revision(),
            "python_version": version.python_version()}


def new_family(metric: MetricSpec, extra_labels: Sequence[str] = ()) -> Metric:
    """An empty family of `metric`, declared with its label names (plus `extra_labels`)."""
    labels = [*metric.labels, *extra_labels]
    if metric.type == "histogram":
        return HistogramMetricFamily(metric.name, metric.help, labels=labels)
    if metric.type == "counter":
        return CounterMetricFamily(metric.name, metric.help, labels=labels)
    return GaugeMetricFamily(metric.name, metric.help, labels=labels)


class _Families:
    """The families of one scrape, filled by label values in declared order.

    Per-cluster families are declared with the union of every cluster's static label names
    after their own; a cluster without one of them has that label left out of its series
    (`add_cluster_metric`), as if its family had been declared without it.
    """

    def __init__(self, states: Mapping[str, ClusterState]) -> None:
        static: dict[str, None] = {}
        for state in states.values():
            static.update(dict.fromkeys(state.labels))
        self.static_names = tuple(static)
        self.families = {
            m.name: new_family(m, self.static_names if m.per_cluster else ())
            for m in METRICS if m.name in _SNAPSHOT_METRICS
        }

    def add(self, name: str, state: ClusterState, value: float, *label_values: str) -> None:
        """One sample of a per-cluster family: the cluster, `label_values`, static labels."""
        family = self.families[name]
        assert isinstance(family, GaugeMetricFamily), f"{name}: not a gauge"
        self.add_cluster_metric(family, state, lambda values: family.add_metric(values, value),
                                *label_values)

    def add_cluster_metric(
        self, family: Metric, state: ClusterState, add: Callable[[list[str]], None],
        *label_values: str,
    ) -> None:
        """Call `add` (the family's `add_metric`) with the series' label values in declared
        order, then drop the static labels this cluster does not have."""
        first = len(family.samples)
        add(self.cluster_values(state, *label_values))
        missing = [n for n in self.static_names if n not in state.labels]
        for sample in family.samples[first:] if missing else ():
            for label in missing:
                del sample.labels[label]

    def cluster_values(self, state: ClusterState, *label_values: str) -> list[str]:
        """Label values of a per-cluster series, in declared order."""
        return [state.name, *label_values, *(state.labels.get(n, "") for n in self.static_names)]


NOT_FROM_SNAPSHOTS = frozenset({
    "kafka_txn_exporter_http_connections_refused_total",
    "kafka_txn_exporter_http_auth_failures_total",
    # exporter.app.ProcessHealthCollector:
    "kafka_txn_exporter_config_reload_total",
    "kafka_txn_exporter_config_last_reload_successful",
    "kafka_txn_exporter_config_last_reload_success_timestamp_seconds",
    "kafka_txn_exporter_log_messages_dropped_total",
})
"""Rows of the spec that other collectors fill (rendered fresh on every scrape)."""
_SNAPSHOT_METRICS = frozenset(m.name for m in METRICS) - NOT_FROM_SNAPSHOTS


class SnapshotCollector(Collector):
    """Builds every metric family from one `SnapshotStore.states()` read per scrape.

    `collect()` is a pure function of `published_states()` (no clock, no other input), which is
    what lets exporter.expose.render_cache reuse its rendered bytes until the next publish.
    """

    def __init__(self, store: SnapshotStore, build_info: Mapping[str, str] | None = None) -> None:
        self._store = store
        self._build_info = dict(build_info_labels() if build_info is None else build_info)

    def published_states(self) -> Mapping[str, ClusterState]:
        """What `collect()` would render now: a new object after every publish or failure."""
        return self._store.states()

    def published_state(self, cluster: str) -> ClusterState | None:
        """One cluster's part of `published_states()`, without reading the others."""
        return self._store.state(cluster)

    def describe(self) -> Iterable[Metric]:
        """Declared so registering never triggers a collect."""
        return list(_Families(self._store.states()).families.values())

    def collect(self) -> Iterator[Metric]:
        yield from self.collect_states(self._store.states())

    def collect_states(self, states: Mapping[str, ClusterState]) -> Iterator[Metric]:
        """The families of `states` (one read of the store)."""
        fam = _Families(states)
        self._add_build_info(fam)
        for state in states.values():
            _collect_cluster(state, fam)
        yield from fam.families.values()

    # The render cache formats each cluster apart and joins the parts family by family: the
    # families of `collect()` are, sample for sample, those of `global_families()` followed by
    # `cluster_families(state)` for each state in order.

    def global_families(self) -> list[Metric]:
        """Every family, holding only the samples that belong to no cluster (build_info)."""
        fam = _Families({})
        self._add_build_info(fam)
        return list(fam.families.values())

    def cluster_families(self, state: ClusterState) -> list[Metric]:
        """Every family, holding only the samples of one cluster."""
        fam = _Families({state.name: state})
        _collect_cluster(state, fam)
        return list(fam.families.values())

    def _add_build_info(self, fam: _Families) -> None:
        info = spec("kafka_txn_exporter_build_info")
        family = fam.families[info.name]
        assert isinstance(family, GaugeMetricFamily)
        family.add_metric([self._build_info.get(label, "") for label in info.labels], 1.0)


def _collect_cluster(state: ClusterState, fam: _Families) -> None:
    _collect_exporter_own(state, fam)
    snap = state.snapshot
    if snap is not None and state.up and snap.up:
        _collect_data(state, snap, fam)


def _collect_exporter_own(state: ClusterState, fam: _Families) -> None:
    fam.add("kafka_txn_exporter_up", state, 1.0 if state.up else 0.0)
    warm = state.up and state.snapshot is not None and state.snapshot.orphan_detection_warm
    fam.add("kafka_txn_exporter_orphan_detection_warm", state, 1.0 if warm else 0.0)
    if state.poll_interval_seconds is not None:
        fam.add("kafka_txn_exporter_poll_interval_seconds", state, state.poll_interval_seconds)
    hist = fam.families["kafka_txn_exporter_poll_duration_seconds"]
    assert isinstance(hist, HistogramMetricFamily)
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, count in zip(
        (*POLL_DURATION_BUCKETS_SECONDS, float("inf")), state.poll_bucket_counts, strict=True
    ):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
    total = state.poll_duration_sum_seconds
    fam.add_cluster_metric(hist, state, lambda values: hist.add_metric(values, buckets, total))
    for phase, seconds in sorted(state.poll_phase_seconds.items()):
        fam.add("kafka_txn_exporter_poll_phase_duration_seconds", state, seconds, phase)
    overruns = fam.families["kafka_txn_exporter_poll_overruns_total"]
    assert isinstance(overruns, CounterMetricFamily)
    fam.add_cluster_metric(overruns, state, lambda values: overruns.add_metric(
        values, float(state.poll_overruns)))
    if state.last_successful_poll_timestamp_seconds is not None:
        fam.add("kafka_txn_exporter_last_successful_poll_timestamp_seconds", state,
                state.last_successful_poll_timestamp_seconds)
    errors = fam.families["kafka_txn_exporter_request_errors_total"]
    assert isinstance(errors, CounterMetricFamily)
    for (broker, api, error), count in sorted(state.request_errors_total.items()):
        def add(values: list[str], n: float = float(count)) -> None:
            errors.add_metric(values, n)

        fam.add_cluster_metric(errors, state, add, broker, api, error)
    refreshes = fam.families["kafka_txn_exporter_metadata_refreshes_total"]
    assert isinstance(refreshes, CounterMetricFamily)
    for reason, count in sorted(state.metadata_refreshes_total.items()):
        def add_refreshes(values: list[str], n: float = float(count)) -> None:
            refreshes.add_metric(values, n)

        fam.add_cluster_metric(refreshes, state, add_refreshes, reason)
    snap = state.snapshot
    if snap is None:
        return
    for broker_summary in snap.brokers:
        fam.add("kafka_txn_exporter_broker_up", state, 1.0 if broker_summary.up else 0.0,
                str(broker_summary.broker_id))
    if snap.up:
        fam.add("kafka_txn_exporter_unobserved_partitions", state,
                float(snap.unobserved_partitions))
        for reason, count in sorted(snap.unobserved_by_reason.items()):
            fam.add("kafka_txn_exporter_unobserved_partitions_by_reason", state, float(count),
                    reason)


_VERIFICATION_VALUES: dict[PartitionVerification | None, float] = {
    PartitionVerification.ENABLED: 1.0,
    PartitionVerification.DISABLED: 0.0,
}


def _collect_data(state: ClusterState, snap: ClusterSnapshot, fam: _Families) -> None:
    for tp, seconds in sorted(snap.max_active_transaction_duration_seconds.items()):
        fam.add("kafka_partition_max_active_transaction_duration_seconds", state, seconds,
                tp.topic, str(tp.partition))
    if snap.cluster_max_active_transaction_duration_seconds is not None:  # None: unknown
        fam.add("kafka_cluster_max_active_transaction_duration_seconds", state,
                snap.cluster_max_active_transaction_duration_seconds)
    for source, count in sorted(snap.open_transactions_by_start_time_source.items()):
        fam.add("kafka_txn_exporter_open_transactions_by_start_time_source", state,
                float(count), source)
    for b in snap.brokers:
        broker = str(b.broker_id)
        # Unknown counts (None) are absent, never 0.
        counts: tuple[tuple[str, int | None], ...] = (
            ("kafka_partitions_with_late_transactions", b.partitions_with_late_transactions),
            ("kafka_partitions_with_hanging_transactions",
             b.partitions_with_hanging_transactions),
            ("kafka_partitions_with_orphaned_transactions",
             b.partitions_with_orphaned_transactions),
            ("kafka_partitions_with_open_transactions", b.partitions_with_open_transactions),
        )
        for name, value in counts:
            if b.up and b.observable and value is not None:
                fam.add(name, state, value, broker)
        if b.transaction_max_timeout_ms is not None:
            fam.add("kafka_transaction_max_timeout_seconds", state,
                    b.transaction_max_timeout_ms / 1000.0, broker)
        verification = _VERIFICATION_VALUES.get(b.partition_verification)
        if b.up and verification is not None:  # unknown or not offered: absent
            fam.add("kafka_transaction_partition_verification_enabled", state, verification,
                    broker)
    if snap.finalized_transaction_version is not None:
        fam.add("kafka_finalized_transaction_version", state,
                snap.finalized_transaction_version)
    for topic, compacted in sorted(snap.compacted_topics.items()):
        fam.add("kafka_topic_compacted", state, 1.0 if compacted else 0.0, topic)
    for late in snap.late_transactions:
        fam.add("kafka_late_transaction_age_seconds", state, late.age_seconds,
                *_transaction_identity(late.transaction), late.transactional_id,
                str(late.classification), late.application)
    _collect_blocked_groups(state, snap, fam)
    for orphan in snap.orphaned_transactions:
        fam.add("kafka_orphaned_transaction_age_seconds", state, orphan.age_seconds,
                *_transaction_identity(orphan.transaction), orphan.transactional_id,
                orphan.application)
    for two_phase in snap.two_phase_transactions:
        fam.add("kafka_two_phase_transaction_age_seconds", state, two_phase.age_seconds,
                *_transaction_identity(two_phase.transaction), two_phase.transactional_id,
                "true" if two_phase.stuck else "false", two_phase.application)
    if snap.transaction_states is not None:
        for txn_state, count in sorted(snap.transaction_states.items()):
            fam.add("kafka_transactions", state, count, txn_state)
    for tp, lag in sorted(snap.last_stable_offset_lag.items()):
        fam.add("kafka_partition_last_stable_offset_lag", state, lag, tp.topic,
                str(tp.partition))


def _transaction_identity(txn: OpenTransaction) -> tuple[str, ...]:
    """The label values naming one open transaction: topic, partition and start offset are an
    abort's arguments; producer id, epoch and coordinator epoch say whose it is."""
    return (txn.topic, str(txn.partition), str(txn.producer_id), str(txn.producer_epoch),
            str(txn.coordinator_epoch), str(txn.current_txn_start_offset))


def _collect_blocked_groups(state: ClusterState, snap: ClusterSnapshot, fam: _Families) -> None:
    """Per transaction whose groups were read the groups it stops, and each blocked (group,
    partition) once (only the transaction holding the partition's LSO stops groups there)."""
    blocked: dict[tuple[str, str, int], tuple[float, str, str, str]] = {}
    for b in snap.blocking_transactions:
        txn = b.transaction
        classification = str(b.classification)
        for g in b.blocked_groups:
            blocked[(g.group_id, g.topic, g.partition)] = (
                g.blocked_seconds, b.transactional_id, classification, b.application
            )
        if b.blocked_groups:
            fam.add("kafka_blocking_transaction_age_seconds", state, b.age_seconds,
                    *_transaction_identity(txn), b.transactional_id, classification,
                    b.application)
        if b.blocked_groups_unknown is None:  # unknown: absent, never 0
            fam.add("kafka_transaction_blocked_consumer_groups", state,
                    float(len(b.blocked_groups)), txn.topic, str(txn.partition),
                    str(txn.producer_id), str(txn.producer_epoch),
                    str(txn.current_txn_start_offset), b.transactional_id, classification,
                    b.application)
    for (group, topic, partition), (seconds, tid, classification, application) in sorted(
        blocked.items()
    ):
        fam.add("kafka_consumer_group_blocked_seconds", state, seconds, group, topic,
                str(partition), tid, classification, application)
    for reason, count in sorted(snap.blocked_groups_unknown_by_reason.items()):
        fam.add("kafka_txn_exporter_blocked_consumer_groups_unknown", state, float(count),
                reason)
    fam.add("kafka_txn_exporter_applications_overflowed", state,
            float(snap.applications_overflowed))
    for reason, count in sorted(snap.unclassified_by_reason.items()):
        fam.add("kafka_txn_exporter_unclassified_transactions", state, float(count), reason)
