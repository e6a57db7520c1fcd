"""Every metric the exporter exposes, declared once: name, type, help and label names.

A pure table (no I/O, no prometheus_client): the collectors build their families from it, the
config refuses static cluster labels that would collide with its label names, and the tests
check the README's metric table, the dashboards and the alert rules against it.

`labels` are the label names a family is declared with. Families whose labels start with
`cluster` are per-cluster: each of their series also carries that cluster's static `labels`
from the configuration. A counter's `name` is the name of its sample, `_total` included.

To add a metric: add a row here, fill it in the collector that knows its value, and add a row
to the README's metric table (tests/test_metric_spec.py checks both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]

    @property
    def family_name(self) -> str:
        """The family's name in the exposition (`# TYPE` line of a counter has no `_total`)."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The names a query can use: `_bucket`/`_count`/`_sum` of a histogram."""
        if self.type == "histogram":
            return tuple(f"{self.name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        return (self.name,)

    @property
    def per_cluster(self) -> bool:
        return self.labels[:1] == ("cluster",)


_PARTITION = ("cluster", "topic", "partition")
_BROKER = ("cluster", "broker")

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "kafka_partition_max_active_transaction_duration_seconds", "gauge",
        "Age of the oldest open transaction on the partition "
        "(KIP-664 MaxActiveTransactionDuration).",
        _PARTITION,
    ),
    MetricSpec(
        "kafka_cluster_max_active_transaction_duration_seconds", "gauge",
        "Age of the oldest open transaction in the cluster.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_partitions_with_late_transactions", "gauge",
        "Partitions led by the broker whose oldest open transaction is older than "
        "transaction.max.timeout.ms plus the late buffer (like the broker's "
        "PartitionsWithLateTransactionsCount).",
        _BROKER,
    ),
    MetricSpec(
        "kafka_partitions_with_hanging_transactions", "gauge",
        "Partitions led by the broker with a late transaction its coordinator no longer tracks.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_partitions_with_orphaned_transactions", "gauge",
        "Partitions led by the broker with an open transaction, late or not, that its "
        "coordinator did not track on two consecutive polls (same producer id, epoch and "
        "start offset): hanging, caught before it is late.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_partitions_with_open_transactions", "gauge",
        "Partitions led by the broker with at least one open transaction.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_late_transaction_age_seconds", "gauge",
        "Age of each late open transaction, with its identity, classification and the "
        "application its transactional id names.",
        (*_PARTITION, "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
         "transactional_id", "classification", "application"),
    ),
    MetricSpec(
        "kafka_orphaned_transaction_age_seconds", "gauge",
        "Age of each orphaned open transaction (late or not), with its identity and the "
        "application its transactional id names.",
        (*_PARTITION, "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
         "transactional_id", "application"),
    ),
    MetricSpec(
        "kafka_two_phase_transaction_age_seconds", "gauge",
        "Age of each open two-phase-commit transaction (KIP-939: the coordinator tracks it "
        "with timeout 2147483647 and never aborts it; an external coordinator decides it), "
        "with its identity; label stuck=true once older than the cluster's "
        "two_phase_late_seconds. Never counted as late or hanging.",
        (*_PARTITION, "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
         "transactional_id", "stuck", "application"),
    ),
    MetricSpec(
        "kafka_consumer_group_blocked_seconds", "gauge",
        "Consumer group stopped behind an open transaction (late, orphaned, or older than "
        "blocked_groups_min_age_seconds; committed offset = last stable offset < high "
        "watermark): seconds since the exporter first saw its committed offset there (a lower "
        "bound of the wait), with the blocking transaction's id, classification and "
        "application.",
        ("cluster", "group", "topic", "partition", "transactional_id", "classification",
         "application"),
    ),
    MetricSpec(
        "kafka_blocking_transaction_age_seconds", "gauge",
        "Age of each open transaction that stops at least one consumer group (late, orphaned, "
        "or older than blocked_groups_min_age_seconds), with its identity, classification "
        "(coordinator_tracked when not late: a lingering transaction its "
        "transaction.timeout.ms ends) and application.",
        (*_PARTITION, "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
         "transactional_id", "classification", "application"),
    ),
    MetricSpec(
        "kafka_transaction_blocked_consumer_groups", "gauge",
        "Consumer groups stopped behind the transaction (late, orphaned, or older than "
        "blocked_groups_min_age_seconds); absent when unknown.",
        (*_PARTITION, "producer_id", "producer_epoch", "start_offset", "transactional_id",
         "classification", "application"),
    ),
    MetricSpec(
        "kafka_transactions", "gauge",
        "Transactional ids per coordinator state (ListTransactions).",
        ("cluster", "state"),
    ),
    MetricSpec(
        "kafka_transaction_max_timeout_seconds", "gauge",
        "The broker's transaction.max.timeout.ms, in seconds.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_transaction_partition_verification_enabled", "gauge",
        "1 when the broker's transaction.partition.verification.enable is true, 0 when false "
        "(KIP-890 part 1: with it off, a transactional Produce the coordinator never saw "
        "can hang); absent when unknown or the broker predates it.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_finalized_transaction_version", "gauge",
        "The cluster's finalized transaction.version feature level (ApiVersions; 0 when not "
        "finalized); below 2 (KIP-890 part 2) producers still add partitions themselves.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_topic_compacted", "gauge",
        "1 when the topic's cleanup.policy includes compact, else 0; only for topics with a "
        "late or orphaned transaction (the cleaner stops at its last stable offset).",
        ("cluster", "topic"),
    ),
    MetricSpec(
        "kafka_partition_last_stable_offset_lag", "gauge",
        "High watermark minus last stable offset (like the broker's LastStableOffsetLag).",
        _PARTITION,
    ),
    MetricSpec(
        "kafka_txn_exporter_up", "gauge",
        "1 when the last poll of the cluster succeeded, else 0.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_orphan_detection_warm", "gauge",
        "1 when the last poll's orphaned verdicts are complete (coordinators were asked on "
        "enough polls that an orphaned transaction is reported), 0 while they are not yet "
        "(after a start) or the last poll failed.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_broker_up", "gauge",
        "1 when the broker answered in the last poll, else 0.",
        _BROKER,
    ),
    MetricSpec(
        "kafka_txn_exporter_poll_duration_seconds", "histogram",
        "Duration of polls of the cluster (collect and analyze).",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_poll_phase_duration_seconds", "gauge",
        "Seconds the last poll of the cluster spent in each phase (named by its Kafka "
        "requests; phases that run concurrently each count their own wall time). A phase the "
        "poll did not reach has no series.",
        ("cluster", "phase"),
    ),
    MetricSpec(
        "kafka_txn_exporter_poll_overruns_total", "counter",
        "Polls of the cluster still running when the next one was due (the scheduler skipped "
        "runs): the poll interval is too short for the cluster or a broker answers slowly.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_last_successful_poll_timestamp_seconds", "gauge",
        "Unix time of the last successful poll of the cluster.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_request_errors_total", "counter",
        "Failed requests and per-item errors, by broker, API and Kafka error name.",
        ("cluster", "broker", "api", "error"),
    ),
    MetricSpec(
        "kafka_txn_exporter_metadata_refreshes_total", "counter",
        "Full Metadata answers the polls of the cluster asked for, by why (start, max_age, "
        "leader_changed, unknown_partition, broker_failed, session_ended, coordinator_moved, "
        "broker_missing, leaderless, request_error); a poll with none reused the previous "
        "poll's answer.",
        ("cluster", "reason"),
    ),
    MetricSpec(
        "kafka_txn_exporter_unobserved_partitions", "gauge",
        "Partitions whose producer state could not be read in the last poll.",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_unobserved_partitions_by_reason", "gauge",
        "Unobserved partitions in the last poll by reason (broker_down, unsupported_api, "
        "unauthorized, not_leader, no_leader, error); only reasons with a count.",
        ("cluster", "reason"),
    ),
    MetricSpec(
        "kafka_txn_exporter_blocked_consumer_groups_unknown", "gauge",
        "Transactions (late, orphaned, or older than blocked_groups_min_age_seconds) whose "
        "blocked consumer groups are unknown, by reason "
        "(unauthorized, unsupported_api, broker_down, ...); only reasons with a count.",
        ("cluster", "reason"),
    ),
    MetricSpec(
        "kafka_txn_exporter_applications_overflowed", "gauge",
        "Distinct applications of the reported transactions past max_applications in the "
        "last poll (their application label is _overflow).",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_unclassified_transactions", "gauge",
        "Late transactions whose classification (hanging or coordinator-tracked) is unknown, "
        "by reason (unsupported_api: Kafka before 3.0 has no ListTransactions/"
        "DescribeTransactions; error); the hanging and orphaned counts are then absent.",
        ("cluster", "reason"),
    ),
    MetricSpec(
        "kafka_txn_exporter_open_transactions_by_start_time_source", "gauge",
        "Open transactions by where their start time came from (batch_timestamp, "
        "last_timestamp, first_seen: the producer's timestamps were missing or impossible); "
        "only sources with a count.",
        ("cluster", "source"),
    ),
    MetricSpec(
        "kafka_txn_exporter_poll_interval_seconds", "gauge",
        "The cluster's configured poll interval (poll_interval_seconds).",
        ("cluster",),
    ),
    MetricSpec(
        "kafka_txn_exporter_http_connections_refused_total", "counter",
        "HTTP connections closed unserved because the connection cap was reached.",
        (),
    ),
    MetricSpec(
        "kafka_txn_exporter_http_auth_failures_total", "counter",
        "HTTP requests refused by basic auth, by reason: missing (no usable credentials), "
        "wrong (refused by bcrypt), not_checked (too many checks waiting, answered 503). "
        "Only when basic_auth_users is set.",
        ("reason",),
    ),
    MetricSpec(
        "kafka_txn_exporter_config_reload_total", "counter",
        "Configuration reloads (SIGHUP) by result; a failed one keeps the old configuration.",
        ("result",),
    ),
    MetricSpec(
        "kafka_txn_exporter_config_last_reload_successful", "gauge",
        "1 when the last configuration reload succeeded (or none was tried), else 0.",
        (),
    ),
    MetricSpec(
        "kafka_txn_exporter_config_last_reload_success_timestamp_seconds", "gauge",
        "Unix time of the last successful configuration load (start-up or reload).",
        (),
    ),
    MetricSpec(
        "kafka_txn_exporter_log_messages_dropped_total", "counter",
        "Log lines that could not be written (stderr closed or full); they never fail a poll.",
        (),
    ),
    MetricSpec(
        "kafka_txn_exporter_build_info", "gauge",
        "Build information; the value is always 1.",
        ("version", "revision", "python_version"),
    ),
)

METRICS_BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}

PROMETHEUS_TARGET_LABELS = ("job", "instance")
"""Set by Prometheus on every scraped series; a static label of that name would be renamed."""

RESERVED_LABELS: frozenset[str] = frozenset(
    {label for m in METRICS for label in m.labels}
    | {"le"}  # the histogram's bucket label
    | set(PROMETHEUS_TARGET_LABELS)
)
"""Label names a cluster's static `labels` may not use."""


def spec(name: str) -> MetricSpec:
    """The row for `name` (a KeyError names a metric missing from the table)."""
    return METRICS_BY_NAME[name]
