"""Generate the Grafana dashboards and the Prometheus alert rules from one place.

Run from the repository root:

    python -m dashboards.generate            # rewrite the checked-in files
    python -m dashboards.generate --check    # exit 1 when the checked-in files are stale

The dashboards are built with Grafana's own SDK (`grafana-foundation-sdk`, Grafana 11.x flavour) so
their JSON follows Grafana's schema instead of hand-edited drift. The alert rules are a plain
Prometheus rules file (`groups:`) so the Helm chart can embed the very same file in a
PrometheusRule. Alert timings can be changed with the flags below (`--help`); write such a custom
build to another directory with `--out-dir` and keep the checked-in defaults untouched.

Every query is written to be correct with several exporter replicas scraping the same cluster:
per-broker and per-partition numbers are de-duplicated with `max` across replicas, never summed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import statetimeline as statetimeline_b
from grafana_foundation_sdk.builders import table as table_b
from grafana_foundation_sdk.builders import timeseries as timeseries_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

DASHBOARDS_DIR = Path(__file__).resolve().parent
OVERVIEW_FILE = "kafka-transactions-overview.json"
HEALTH_FILE = "kafka-txn-exporter-health.json"
RULES_FILE = "alerts/rules.yaml"

RUNBOOK_URL = "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbook.md"
"""Where docs/runbook.md is published; each alert links to its own anchor there."""

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster"'

# Grafana unit ids.
SECONDS = "s"
COUNT = "short"
OFFSETS = "short"
TIMESTAMP = "dateTimeAsIso"

GREEN = "green"
RED = "red"
ORANGE = "orange"
BLUE = "blue"


# --------------------------------------------------------------------------------------------
# Alert rules
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AlertTimings:
    """Knobs of the alert rules; the defaults are what the checked-in rules.yaml holds."""

    late_for: str = "5m"
    """How long a cluster must have late partitions before KafkaLateTransactions pages."""
    hanging_for: str = "1m"
    """How long a transaction must stay classified as hanging before KafkaHangingTransaction pages.
    The exporter only classifies transactions that are already late (older than
    transaction.max.timeout.ms + the late buffer), so this only rides out a flapping poll."""
    exporter_down_for: str = "5m"
    poll_interval_seconds: float = 30.0
    """The exporter's `poll_interval_seconds`; keep in step with its configuration."""
    stale_polls: int = 3
    """KafkaTxnExporterPollsStale fires when no poll succeeded for this many poll intervals."""
    broker_unreachable_for: str = "5m"
    unobserved_for: str = "15m"
    runbook_url: str = RUNBOOK_URL


def _runbook(timings: AlertTimings, alert: str) -> str:
    # GitHub's heading anchor: the heading text lower-cased (our headings are the alert names).
    return f"{timings.runbook_url}#{alert.lower()}"


def _rule(
    timings: AlertTimings,
    alert: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert, "expr": expr}
    if for_ not in ("", "0", "0s", "0m"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": _runbook(timings, alert),
    }
    return rule


HANGING_LABELS = (
    "cluster, topic, partition, producer_id, producer_epoch, coordinator_epoch, start_offset, "
    "transactional_id"
)


def alert_rules(timings: AlertTimings) -> dict[str, Any]:
    """The Prometheus rules file, as a mapping ready for YAML."""
    stale_after_seconds = timings.poll_interval_seconds * timings.stale_polls
    stale_after = f"{stale_after_seconds:g}"
    transactions = [
        _rule(
            timings,
            "KafkaLateTransactions",
            # Sum over brokers within one replica (instance), then max across replicas: two
            # replicas that see the same late partition must not double it.
            "max by (cluster) "
            "(sum by (cluster, instance) (kafka_partitions_with_late_transactions)) > 0",
            timings.late_for,
            "page",
            "{{ $value }} partition(s) of Kafka cluster {{ $labels.cluster }} have a late "
            "transaction",
            "Partitions of cluster {{ $labels.cluster }} have an open transaction older than "
            "transaction.max.timeout.ms plus the late buffer (the broker's "
            "PartitionsWithLateTransactionsCount rule). Consumers with "
            "isolation.level=read_committed cannot read past such a transaction, and the log "
            "cannot be compacted or deleted beyond it. Find the partitions in the 'Late "
            "transactions' table of the Kafka transactions dashboard; a KafkaHangingTransaction "
            "alert names each one the coordinator no longer tracks.",
        ),
        _rule(
            timings,
            "KafkaHangingTransaction",
            f"max by ({HANGING_LABELS}) "
            '(kafka_late_transaction_age_seconds{classification="hanging"})',
            timings.hanging_for,
            "page",
            "Hanging transaction on {{ $labels.topic }}-{{ $labels.partition }} in Kafka cluster "
            "{{ $labels.cluster }}",
            "Producer {{ $labels.producer_id }} (epoch {{ $labels.producer_epoch }}, "
            "{{ if $labels.transactional_id }}transactional id "
            '"{{ $labels.transactional_id }}"{{ else }}no transactional id maps to it{{ end }}) '
            "has kept a transaction open on "
            "{{ $labels.topic }}-{{ $labels.partition }} since offset {{ $labels.start_offset }} "
            "for {{ $value | humanizeDuration }}, and its transaction coordinator no longer "
            "tracks it: nothing will ever commit or abort it. read_committed consumers of this "
            "partition are stuck at offset {{ $labels.start_offset }}. After the checks in the "
            "runbook, abort it with: kafka-transactions.sh --bootstrap-server <broker> abort "
            "--topic {{ $labels.topic }} --partition {{ $labels.partition }} --start-offset "
            "{{ $labels.start_offset }}",
        ),
    ]
    exporter = [
        _rule(
            timings,
            "KafkaTxnExporterDown",
            "max by (cluster) (kafka_txn_exporter_up) == 0",
            timings.exporter_down_for,
            "warning",
            "kafka-txn-exporter cannot poll Kafka cluster {{ $labels.cluster }}",
            "No kafka-txn-exporter replica completed a poll of cluster {{ $labels.cluster }}: "
            "late and hanging transactions there go unseen and KafkaLateTransactions cannot "
            "fire. Check the exporter's logs and kafka_txn_exporter_request_errors_total for "
            "connection, TLS, SASL or authorisation errors.",
        ),
        _rule(
            timings,
            "KafkaTxnExporterPollsStale",
            "time() - max by (cluster) (kafka_txn_exporter_last_successful_poll_timestamp_seconds)"
            f" > {stale_after}",
            "0s",
            "warning",
            "kafka-txn-exporter has not completed a poll of {{ $labels.cluster }} for "
            "{{ $value | humanizeDuration }}",
            f"The last successful poll of cluster {{{{ $labels.cluster }}}} is older than "
            f"{timings.stale_polls} poll intervals ({stale_after} s): the transaction metrics "
            "are stale. Polls may be hanging on an unresponsive broker, or the exporter is "
            "overloaded (see the poll duration panel of the exporter health dashboard).",
        ),
        _rule(
            timings,
            "KafkaTxnExporterBrokerUnreachable",
            "max by (cluster, broker) (kafka_txn_exporter_broker_up) == 0",
            timings.broker_unreachable_for,
            "warning",
            "kafka-txn-exporter cannot read broker {{ $labels.broker }} of Kafka cluster "
            "{{ $labels.cluster }}",
            "No replica of the exporter got answers from broker {{ $labels.broker }} of "
            "cluster {{ $labels.cluster }}. Its per-broker transaction counts are absent (never "
            "reported as 0), so late transactions on the partitions it leads are not counted "
            "and KafkaLateTransactions may stay silent for them.",
        ),
        _rule(
            timings,
            "KafkaTxnExporterUnobservedPartitions",
            "min by (cluster) (kafka_txn_exporter_unobserved_partitions) > 0",
            timings.unobserved_for,
            "warning",
            "{{ $value }} partition(s) of Kafka cluster {{ $labels.cluster }} are not observed",
            "The exporter could not ask DescribeProducers about some partitions of cluster "
            "{{ $labels.cluster }} (leader unavailable, missing READ permission on the topic, "
            "or per-partition errors), so transactions on them are not seen. See "
            "kafka_txn_exporter_request_errors_total by api and error.",
        ),
    ]
    return {
        "groups": [
            {"name": "kafka-transactions", "rules": transactions},
            {"name": "kafka-txn-exporter", "rules": exporter},
        ]
    }


class _RulesDumper(yaml.SafeDumper):
    """One line per string: folding would split `{{ $labels.x }}` templates across lines."""


def render_rules(timings: AlertTimings) -> str:
    header = (
        "# Prometheus alert rules for kafka-txn-exporter.\n"
        "# GENERATED by `python -m dashboards.generate` from dashboards/generate.py: edit that,\n"
        "# not this file. The Helm chart embeds this file unchanged in a PrometheusRule.\n"
        "# Timings (for:, stale threshold) are flags of the generator; see docs/runbook.md.\n"
    )
    body = yaml.dump(
        alert_rules(timings),
        Dumper=_RulesDumper,
        sort_keys=False,
        width=1_000_000,
        allow_unicode=True,
    )
    return header + body


# --------------------------------------------------------------------------------------------
# Dashboard helpers
# --------------------------------------------------------------------------------------------


def _query(
    expr: str,
    legend: str = "",
    ref_id: str = "A",
    *,
    instant: bool = False,
    table_format: bool = False,
) -> prom_b.Dataquery:
    query = prom_b.Dataquery().expr(expr).ref_id(ref_id).datasource(DATASOURCE)
    if legend:
        query = query.legend_format(legend)
    query = query.instant() if instant else query.range()
    if table_format:
        query = query.format(prom_m.PromQueryFormat.TABLE)
    return query


def _thresholds(*steps: tuple[float | None, str]) -> dash_b.ThresholdsConfig:
    return (
        dash_b.ThresholdsConfig()
        .mode(dash_m.ThresholdsMode.ABSOLUTE)
        .steps([dash_m.Threshold(value=value, color=color) for value, color in steps])
    )


class _Ids:
    """Stable panel ids in building order, so regenerating gives the same JSON."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _stat(
    ids: _Ids,
    title: str,
    description: str,
    expr: str,
    legend: str,
    unit: str,
    thresholds: dash_b.ThresholdsConfig,
    *,
    width: int = 6,
    height: int = 5,
    no_value: str = "",
    mappings: list[dash_m.ValueMapping] | None = None,
) -> stat_b.Panel:
    panel = (
        stat_b.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, legend, instant=True))
        .unit(unit)
        .thresholds(thresholds)
        .color_mode(common_m.BigValueColorMode.BACKGROUND)
        .graph_mode(common_m.BigValueGraphMode.NONE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .span(width)
        .height(height)
    )
    if no_value:
        panel = panel.no_value(no_value)
    if mappings:
        panel = panel.mappings(mappings)
    return panel


def _timeseries(
    ids: _Ids,
    title: str,
    description: str,
    queries: Sequence[prom_b.Dataquery],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    thresholds: dash_b.ThresholdsConfig | None = None,
    stacked: bool = False,
) -> timeseries_b.Panel:
    panel = (
        timeseries_b.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(queries))
        .unit(unit)
        .min(0)
        .fill_opacity(10)
        .legend(
            common_b.VizLegendOptions()
            .display_mode(common_m.LegendDisplayMode.TABLE)
            .placement(common_m.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_b.VizTooltipOptions()
            .mode(common_m.TooltipDisplayMode.MULTI)
            .sort(common_m.SortOrder.DESCENDING)
        )
        .span(width)
        .height(height)
    )
    if thresholds is not None:
        panel = panel.thresholds(thresholds).thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphThresholdsStyleMode.DASHED)
        )
    if stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
    return panel


def _variables(board: dash_b.Dashboard) -> dash_b.Dashboard:
    return board.with_variable(
        dash_b.DatasourceVariable("datasource")
        .label("Data source")
        .description("The Prometheus that scrapes kafka-txn-exporter.")
        .type("prometheus")
    ).with_variable(
        dash_b.QueryVariable("cluster")
        .label("Kafka cluster")
        .description("Kafka clusters (the exporter's `cluster` label) to show.")
        .datasource(DATASOURCE)
        .query("label_values(kafka_txn_exporter_up, cluster)")
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _board(uid: str, title: str, description: str, tags: list[str]) -> dash_b.Dashboard:
    board = (
        dash_b.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(tags)
        .editable()
        .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
        .link(
            dash_b.DashboardLink("kafka-txn-exporter")
            .type(dash_m.DashboardLinkType.DASHBOARDS)
            .tags(["kafka-txn-exporter"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .link(
            dash_b.DashboardLink("Runbook")
            .type(dash_m.DashboardLinkType.LINK)
            .url(RUNBOOK_URL)
            .icon("doc")
            .target_blank(True)
        )
    )
    return _variables(board)


# --------------------------------------------------------------------------------------------
# Kafka transactions overview
# --------------------------------------------------------------------------------------------


# Per-replica sum over brokers, then max across replicas (same shape as the KafkaLateTransactions
# alert), so the dashboard and the page agree.
def _per_cluster_broker_count(metric: str) -> str:
    return f"max by (cluster) (sum by (cluster, instance) ({metric}{{{CLUSTER}}}))"


LATE_TABLE_LABELS = (
    "cluster",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "coordinator_epoch",
    "start_offset",
    "transactional_id",
    "classification",
)


def overview_dashboard() -> dash_m.Dashboard:
    ids = _Ids()
    board = _board(
        "kafka-txn-overview",
        "Kafka transactions",
        "Late, hanging and open Kafka transactions (KIP-664) found by kafka-txn-exporter.",
        ["kafka", "transactions", "kafka-txn-exporter"],
    )
    board = board.with_row(dash_b.Row("Is anything stuck?").id(ids()))
    board = board.with_panel(
        _stat(
            ids,
            "Partitions with late transactions",
            "Partitions whose oldest open transaction has outlived transaction.max.timeout.ms "
            "plus the late buffer (the broker's PartitionsWithLateTransactionsCount rule), per "
            "cluster. Anything above 0 is red and pages (KafkaLateTransactions): "
            "read_committed consumers cannot pass such a partition. Look at the late "
            "transactions table below and follow the runbook. Brokers the exporter cannot "
            "read are left out, so check the exporter health dashboard when this is empty.",
            _per_cluster_broker_count("kafka_partitions_with_late_transactions"),
            "{{cluster}}",
            COUNT,
            _thresholds((None, GREEN), (1, RED)),
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Partitions with hanging transactions",
            "Late partitions whose transaction the coordinator no longer tracks (the "
            "kafka-transactions.sh find-hanging rule): nothing will ever end it, only an "
            "explicit abort. Above 0 pages (KafkaHangingTransaction); follow the runbook to "
            "confirm and abort.",
            _per_cluster_broker_count("kafka_partitions_with_hanging_transactions"),
            "{{cluster}}",
            COUNT,
            _thresholds((None, GREEN), (1, RED)),
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Partitions with open transactions",
            "Partitions that have at least one open (not yet committed or aborted) "
            "transaction right now. Normal for transactional workloads; it is only a problem "
            "when the transactions get old (see the late and hanging panels).",
            _per_cluster_broker_count("kafka_partitions_with_open_transactions"),
            "{{cluster}}",
            COUNT,
            _thresholds((None, BLUE)),
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Oldest open transaction",
            "Age of the oldest open transaction in the cluster "
            "(KIP-664 MaxActiveTransactionDuration). Orange from 15 minutes (Kafka's default "
            "transaction.max.timeout.ms): a healthy producer's transaction ends long before "
            "that; red from 20 minutes (timeout plus the 5 minute late buffer): the "
            "transaction is late. Compare with the brokers' transaction.max.timeout.ms below.",
            "max by (cluster) "
            f"(kafka_cluster_max_active_transaction_duration_seconds{{{CLUSTER}}})",
            "{{cluster}}",
            SECONDS,
            _thresholds((None, GREEN), (900, ORANGE), (1200, RED)),
        )
    )
    board = board.with_panel(
        table_b.Panel()
        .id(ids())
        .title("Late transactions")
        .description(
            "Every late open transaction, with all the labels needed to abort it: topic, "
            "partition and start_offset are the arguments of `kafka-transactions.sh abort`; "
            "producer_id, producer_epoch and coordinator_epoch identify the producer (compare "
            "with `kafka-transactions.sh describe-producers`). classification: hanging = the "
            "coordinator no longer tracks it, abort it after the runbook's checks; "
            "coordinator_tracked = the coordinator will still end it, find the stuck producer "
            "or coordinator instead; unknown = the exporter could not ask the coordinator, "
            "check it by hand. Age counts from the transaction's first batch."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by ({', '.join(LATE_TABLE_LABELS)}) "
                f"(kafka_late_transaction_age_seconds{{{CLUSTER}}})",
                instant=True,
                table_format=True,
            )
        )
        .with_transformation(
            dash_m.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "indexByName": {
                        name: i for i, name in enumerate((*LATE_TABLE_LABELS, "Value"))
                    },
                    "renameByName": {"Value": "age"},
                },
            )
        )
        .sort_by([common_b.TableSortByFieldState().display_name("age").desc(True)])
        .filterable(True)
        .override_by_name("age", [dash_m.DynamicConfigValue(id_val="unit", value=SECONDS)])
        .override_by_name(
            "classification",
            [
                dash_m.DynamicConfigValue(
                    id_val="custom.cellOptions",
                    value={"type": "color-text"},
                ),
                dash_m.DynamicConfigValue(
                    id_val="mappings",
                    value=[
                        dash_m.ValueMap(
                            options={
                                "hanging": dash_m.ValueMappingResult(color=RED, index=0),
                                "coordinator_tracked": dash_m.ValueMappingResult(
                                    color=ORANGE, index=1
                                ),
                                "unknown": dash_m.ValueMappingResult(color=BLUE, index=2),
                            }
                        )
                    ],
                ),
            ],
        )
        .no_value("No late transactions")
        .span(24)
        .height(8)
    )
    board = board.with_row(dash_b.Row("How old are transactions?").id(ids()))
    board = board.with_panel(
        _timeseries(
            ids,
            "Top partitions by max active transaction duration",
            "The 10 partitions with the oldest open transaction (KIP-664 "
            "MaxActiveTransactionDuration per partition; partitions below the exporter's "
            "min_reported_duration_seconds are not reported). A line that keeps climbing past "
            "the dashed thresholds (15 min default timeout, 20 min late) is a transaction that "
            "is not ending: find it in the late transactions table.",
            [
                _query(
                    "topk(10, max by (cluster, topic, partition) "
                    f"(kafka_partition_max_active_transaction_duration_seconds{{{CLUSTER}}}))",
                    "{{cluster}} {{topic}}-{{partition}}",
                )
            ],
            SECONDS,
            thresholds=_thresholds((None, GREEN), (900, ORANGE), (1200, RED)),
        )
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Last stable offset lag",
            "High watermark minus last stable offset, in offsets, for the 10 partitions with "
            "the largest lag: how far read_committed consumers are held back by open "
            "transactions. A lag that only grows means a transaction that never ends pins the "
            "LSO; find it in the late transactions table.",
            [
                _query(
                    "topk(10, max by (cluster, topic, partition) "
                    f"(kafka_partition_last_stable_offset_lag{{{CLUSTER}}}))",
                    "{{cluster}} {{topic}}-{{partition}}",
                )
            ],
            OFFSETS,
        )
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Late, hanging and open partitions by broker",
            "Per broker (partition leader): partitions with open, late and hanging "
            "transactions. A broker missing from the graph is one the exporter could not "
            "read (its counts are absent, not 0): see the exporter health dashboard.",
            [
                _query(
                    "max by (cluster, broker) "
                    f"(kafka_partitions_with_late_transactions{{{CLUSTER}}})",
                    "{{cluster}} broker {{broker}} late",
                    "A",
                ),
                _query(
                    "max by (cluster, broker) "
                    f"(kafka_partitions_with_hanging_transactions{{{CLUSTER}}})",
                    "{{cluster}} broker {{broker}} hanging",
                    "B",
                ),
                _query(
                    "max by (cluster, broker) "
                    f"(kafka_partitions_with_open_transactions{{{CLUSTER}}})",
                    "{{cluster}} broker {{broker}} open",
                    "C",
                ),
            ],
            COUNT,
        )
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Transactions by state",
            "Transactional ids per coordinator state (ListTransactions). Ongoing and Prepare* "
            "are in flight; a growing PrepareCommit/PrepareAbort count means markers are not "
            "being written (check broker health); Empty and Complete* are idle ids.",
            [
                _query(
                    f"max by (cluster, state) (kafka_transactions{{{CLUSTER}}})",
                    "{{cluster}} {{state}}",
                )
            ],
            COUNT,
        )
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Broker transaction.max.timeout.ms",
            "Each broker's transaction.max.timeout.ms, in seconds: the longest transaction a "
            "producer may ask for. A transaction is late once it is older than this plus the "
            "late buffer (5 minutes by default). Brokers should agree; if one differs, check "
            "its server.properties.",
            [
                _query(
                    "max by (cluster, broker) "
                    f"(kafka_transaction_max_timeout_seconds{{{CLUSTER}}})",
                    "{{cluster}} broker {{broker}}",
                )
            ],
            SECONDS,
            width=12,
            height=6,
        )
    )
    return board.build()


# --------------------------------------------------------------------------------------------
# Exporter health
# --------------------------------------------------------------------------------------------

UP_MAPPINGS: list[dash_m.ValueMapping] = [
    dash_m.ValueMap(
        options={
            "0": dash_m.ValueMappingResult(text="DOWN", color=RED, index=0),
            "1": dash_m.ValueMappingResult(text="UP", color=GREEN, index=1),
        }
    )
]


def health_dashboard() -> dash_m.Dashboard:
    ids = _Ids()
    board = _board(
        "kafka-txn-exporter-health",
        "kafka-txn-exporter health",
        "Is kafka-txn-exporter able to see every broker and partition? If not, the "
        "transaction dashboard and alerts are blind there.",
        ["kafka", "kafka-txn-exporter"],
    )
    board = board.with_panel(
        _stat(
            ids,
            "Exporter up",
            "1 (UP) when at least one exporter replica's last poll of the cluster succeeded. "
            "DOWN means no transaction data for the cluster at all (KafkaTxnExporterDown): "
            "check the exporter's logs and the request errors below.",
            f"max by (cluster) (kafka_txn_exporter_up{{{CLUSTER}}})",
            "{{cluster}}",
            COUNT,
            _thresholds((None, RED), (1, GREEN)),
            width=6,
            mappings=UP_MAPPINGS,
            no_value="no exporter",
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Time since last successful poll",
            "Seconds since the newest successful poll of the cluster by any replica. It "
            "should stay below the poll interval (30 s by default) plus the poll duration; "
            "above 3 intervals the metrics are stale (KafkaTxnExporterPollsStale): look for a "
            "slow broker in the poll duration and request errors panels.",
            "time() - max by (cluster) "
            f"(kafka_txn_exporter_last_successful_poll_timestamp_seconds{{{CLUSTER}}})",
            "{{cluster}}",
            SECONDS,
            _thresholds((None, GREEN), (60, ORANGE), (90, RED)),
            width=6,
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Unobserved partitions",
            "Partitions the exporter could not ask about open transactions in the last poll "
            "(leader unavailable, missing READ permission, per-partition errors). Their "
            "transactions are not counted anywhere. Above 0 for long raises "
            "KafkaTxnExporterUnobservedPartitions; see request errors by API and error.",
            f"min by (cluster) (kafka_txn_exporter_unobserved_partitions{{{CLUSTER}}})",
            "{{cluster}}",
            COUNT,
            _thresholds((None, GREEN), (1, ORANGE)),
            width=6,
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Exporter replicas",
            "How many exporter instances (replicas) report on the cluster. Dashboards and "
            "alerts take the max across replicas, so more than one is safe; 0 or missing means "
            "Prometheus scrapes no exporter for it.",
            f"count by (cluster) (kafka_txn_exporter_up{{{CLUSTER}}})",
            "{{cluster}}",
            COUNT,
            _thresholds((None, RED), (1, GREEN)),
            width=6,
        )
    )
    board = board.with_panel(
        statetimeline_b.Panel()
        .id(ids())
        .title("Brokers up")
        .description(
            "Per broker: UP when at least one replica got answers from it in its last poll. "
            "DOWN (KafkaTxnExporterBrokerUnreachable after a while) means the partitions it "
            "leads are not counted: late-transaction counts for it are absent, not 0. Check "
            "the broker and the network path from the exporter."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"max by (cluster, broker) (kafka_txn_exporter_broker_up{{{CLUSTER}}})",
                "{{cluster}} broker {{broker}}",
            )
        )
        .mappings(UP_MAPPINGS)
        .thresholds(_thresholds((None, RED), (1, GREEN)))
        .unit(COUNT)
        .span(24)
        .height(6)
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Poll duration",
            "How long one poll of the cluster takes (all brokers, all API calls), as the 50th "
            "and 99th percentiles over all replicas. It must stay well under the poll "
            "interval; when it grows, find the slow broker or API in the request errors panel "
            "or raise request_timeout_seconds / poll_interval_seconds.",
            [
                _query(
                    "histogram_quantile(0.5, sum by (cluster, le) "
                    "(rate(kafka_txn_exporter_poll_duration_seconds_bucket"
                    f"{{{CLUSTER}}}[$__rate_interval])))",
                    "{{cluster}} p50",
                    "A",
                ),
                _query(
                    "histogram_quantile(0.99, sum by (cluster, le) "
                    "(rate(kafka_txn_exporter_poll_duration_seconds_bucket"
                    f"{{{CLUSTER}}}[$__rate_interval])))",
                    "{{cluster}} p99",
                    "B",
                ),
            ],
            SECONDS,
        )
    )
    board = board.with_panel(
        _timeseries(
            ids,
            "Request errors by API and error",
            "Failed Kafka requests and per-item errors per second, by broker, API and Kafka "
            "error name (summed over replicas). TOPIC_AUTHORIZATION_FAILED on "
            "DescribeProducers means the exporter's principal lacks READ on the topic; "
            "NOT_LEADER_OR_FOLLOWER and NOT_COORDINATOR are retried and only matter when "
            "they persist; connection errors point at the broker or network.",
            [
                _query(
                    "sum by (cluster, broker, api, error) "
                    f"(rate(kafka_txn_exporter_request_errors_total{{{CLUSTER}}}"
                    "[$__rate_interval]))",
                    "{{cluster}} broker {{broker}} {{api}} {{error}}",
                )
            ],
            "reqps",
        )
    )
    board = board.with_panel(
        table_b.Panel()
        .id(ids())
        .title("Exporter versions")
        .description(
            "Version of each exporter replica (kafka_txn_exporter_build_info). Replicas "
            "should run the same version; upgrade stragglers."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                "count by (version, instance) (kafka_txn_exporter_build_info)",
                instant=True,
                table_format=True,
            )
        )
        .with_transformation(
            dash_m.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True, "Value": True}},
            )
        )
        .unit(COUNT)
        .span(24)
        .height(5)
    )
    return board.build()


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def render_dashboard(board: dash_m.Dashboard) -> str:
    return json.dumps(board, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def render_all(timings: AlertTimings | None = None) -> dict[str, str]:
    """Relative path -> file content for everything this module generates."""
    timings = timings or AlertTimings()
    return {
        OVERVIEW_FILE: render_dashboard(overview_dashboard()),
        HEALTH_FILE: render_dashboard(health_dashboard()),
        RULES_FILE: render_rules(timings),
    }


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = AlertTimings()
    parser = argparse.ArgumentParser(
        prog="python -m dashboards.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if the files in --out-dir differ"
    )
    parser.add_argument("--out-dir", type=Path, default=DASHBOARDS_DIR)
    parser.add_argument(
        "--late-for",
        default=defaults.late_for,
        help="KafkaLateTransactions for: (default %(default)s)",
    )
    parser.add_argument(
        "--hanging-for",
        default=defaults.hanging_for,
        help="KafkaHangingTransaction for: (default %(default)s)",
    )
    parser.add_argument("--exporter-down-for", default=defaults.exporter_down_for)
    parser.add_argument("--broker-unreachable-for", default=defaults.broker_unreachable_for)
    parser.add_argument("--unobserved-for", default=defaults.unobserved_for)
    parser.add_argument(
        "--poll-interval-seconds",
        type=float,
        default=defaults.poll_interval_seconds,
        help="the exporter's poll_interval_seconds (default %(default)s)",
    )
    parser.add_argument(
        "--stale-polls",
        type=int,
        default=defaults.stale_polls,
        help="missed poll intervals before KafkaTxnExporterPollsStale",
    )
    parser.add_argument("--runbook-url", default=defaults.runbook_url)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    timings = AlertTimings(
        late_for=args.late_for,
        hanging_for=args.hanging_for,
        exporter_down_for=args.exporter_down_for,
        poll_interval_seconds=args.poll_interval_seconds,
        stale_polls=args.stale_polls,
        broker_unreachable_for=args.broker_unreachable_for,
        unobserved_for=args.unobserved_for,
        runbook_url=args.runbook_url,
    )
    out_dir: Path = args.out_dir
    stale: list[str] = []
    for relative, content in render_all(timings).items():
        path = out_dir / relative
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        if args.check:
            stale.append(relative)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print(
            "stale generated files (run `python -m dashboards.generate`): " + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
