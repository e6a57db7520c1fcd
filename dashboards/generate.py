"""Generate the Grafana dashboards and the Prometheus alert rules from one place.

Run from the repository root:

    python -m dashboards.generate            # rewrite the checked-in files
    python -m dashboards.generate --check    # exit 1 when the checked-in files are stale

The dashboards are built with Grafana's own SDK (`grafana-foundation-sdk`, Grafana 11.x flavour) so
their JSON follows Grafana's schema instead of hand-edited drift. The alert rules are a plain
Prometheus rules file (`groups:`); the Helm chart gets the same rules as a template whose
tunables (the `--set` keys below, the runbook URL, the exporter selector) it fills from its
values. Tune a custom build with `--set ALERT.KEY=VALUE` (`--help`) and write it
to another directory with `--out-dir`, keeping the checked-in defaults untouched.

Every query is written to be correct with several exporter replicas scraping the same cluster:
per-broker and per-partition numbers are de-duplicated with `max` across replicas, never summed.
Alert rules aggregate only the replica labels away (`without (instance, pod)`), so the cluster's
static labels reach Alertmanager.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

try:
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.builders import dashboard as dash_b
    from grafana_foundation_sdk.builders import prometheus as prom_b
    from grafana_foundation_sdk.builders import stat as stat_b
    from grafana_foundation_sdk.builders import statetimeline as statetimeline_b
    from grafana_foundation_sdk.builders import table as table_b
    from grafana_foundation_sdk.builders import timeseries as timeseries_b
    from grafana_foundation_sdk.cog.builder import Builder
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common as common_m
    from grafana_foundation_sdk.models import dashboard as dash_m
    from grafana_foundation_sdk.models import prometheus as prom_m
except ImportError as exc:  # the demo's environment: one line saying what to install
    if not (exc.name or "").startswith("grafana_foundation_sdk"):
        raise
    print(
        "python -m dashboards.generate needs the grafana-foundation-sdk package, which builds "
        "the dashboards (the alert rules are written by the same run): from the repository "
        "root, pip install -e '.[dashboards]' (in the demo's environment: .venv/bin/pip "
        "install -e '.[dashboards]')",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

DASHBOARDS_DIR = Path(__file__).resolve().parent
OVERVIEW_FILE = "kafka-transactions-overview.json"
HEALTH_FILE = "kafka-txn-exporter-health.json"
RULES_FILE = "alerts/rules.yaml"

RUNBOOK_URL = "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbook.md"
"""Where docs/runbook.md is published; each alert links to its own anchor there."""

CHART_FILES_DIR = DASHBOARDS_DIR.parent / "deploy" / "helm" / "kafka-txn-exporter" / "files"
CHART_RULES_TEMPLATE = "alerts/rules-template.yaml"
"""The same rules with every tunable left as a placeholder that the chart fills from its values
(templates/prometheusrule.yaml): the chart's rules and dashboards/alerts/ are one generation."""

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster"'

# Grafana unit ids.
SECONDS = "s"
COUNT = "short"
OFFSETS = "short"
TIMESTAMP = "dateTimeAsIso"
FLAG = "none"

GREEN = "green"
RED = "red"
ORANGE = "orange"
BLUE = "blue"


# --------------------------------------------------------------------------------------------
# Alert rules
# --------------------------------------------------------------------------------------------

RULE_DEFAULTS: dict[str, dict[str, str]] = {
    "KafkaLateTransactions": {
        "for": "5m",
        "severity": "critical",
        "threshold": "0",
    },
    "KafkaHangingTransaction": {"for": "1m", "severity": "critical"},
    "KafkaOrphanedTransaction": {"for": "1m", "severity": "critical"},
    "KafkaTwoPhaseTransactionStuck": {"for": "5m", "severity": "warning"},
    "KafkaConsumersBlockedByTransaction": {
        "for": "1m",
        "severity": "warning",
        "threshold": "600",
    },
    "KafkaTxnExporterAbsent": {"for": "1m", "window": "1m", "severity": "critical"},
    "KafkaTxnExporterTargetDown": {"for": "2m", "severity": "warning"},
    "KafkaTxnExporterDown": {"for": "5m", "severity": "warning"},
    "KafkaTxnExporterPollsStale": {"for": "0s", "severity": "warning", "threshold": "3"},
    "KafkaTxnExporterBrokerUnreachable": {"for": "5m", "severity": "warning"},
    "KafkaTxnExporterUnobservedPartitions": {
        "for": "15m",
        "severity": "warning",
        "threshold": "0",
    },
    "KafkaTxnExporterConfigReloadFailed": {"for": "10m", "severity": "warning"},
}
"""Every rule's tunables and their defaults (the chart's `prometheusRule.rules` mirrors this).

`for` delays firing; `threshold` is
the number the rule compares against (for KafkaTxnExporterPollsStale: how many poll intervals
without a successful poll);
`window` is how long the exporter's series must be missing before the absence alert."""

EXPORTER_SELECTOR = 'job="kafka-txn-exporter"'
"""PromQL label matchers that select the exporter's scrape targets (its `up` series). The
chart fills in its ServiceMonitor's job and namespace. A wrong selector is loud, not silent:
KafkaTxnExporterAbsent fires because nothing matches."""

REPLICA_LABELS = ("instance", "pod")
"""Target labels that differ between exporter replicas. Rules aggregate them away with
`without (...)`, so every other label -- the cluster's static `labels` (env, region, ...),
job, namespace -- stays on the alert for Alertmanager to route on."""


@dataclasses.dataclass(frozen=True)
class AlertSettings:
    """What a build of the rules is tuned with; the defaults are the checked-in rules.yaml."""

    rules: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=lambda: {name: dict(keys) for name, keys in RULE_DEFAULTS.items()}
    )
    exporter_selector: str = EXPORTER_SELECTOR
    replica_labels: tuple[str, ...] = REPLICA_LABELS
    runbook_url: str = RUNBOOK_URL

    def placeholders(self) -> dict[str, str]:
        """Placeholder -> value, for filling the rules template."""
        values = {
            _placeholder(alert, key): value
            for alert, keys in self.rules.items()
            for key, value in keys.items()
        }
        values[SELECTOR] = self.exporter_selector
        values[REPLICAS] = ", ".join(self.replica_labels)
        values[RUNBOOK] = self.runbook_url
        return values


def _placeholder(alert: str, key: str) -> str:
    return f"__KTE_{alert}_{key}__"


SELECTOR = "__KTE_exporterSelector__"
REPLICAS = "__KTE_replicaLabels__"
RUNBOOK = "__KTE_runbookBaseUrl__"
PLACEHOLDER = re.compile(r"__KTE_[A-Za-z0-9_]+?__")


def _rule(alert: str, expr: str, summary: str, description: str) -> dict[str, Any]:
    """One alerting rule, its tunables as placeholders."""
    rule: dict[str, Any] = {"alert": alert, "expr": expr, "for": _placeholder(alert, "for")}
    rule["labels"] = {"severity": _placeholder(alert, "severity")}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        # GitHub's heading anchor: the heading text lower-cased (our headings are alert names).
        "runbook_url": f"{RUNBOOK}#{alert.lower()}",
    }
    return rule


BLOCKED_GROUPS_NOTE = (
    '{{ with query (printf "max(kafka_transaction_blocked_consumer_groups{cluster=%q,'
    'topic=%q,partition=%q,producer_id=%q,producer_epoch=%q,start_offset=%q})" '
    "$labels.cluster $labels.topic $labels.partition $labels.producer_id "
    "$labels.producer_epoch $labels.start_offset) }}"
    "{{ . | first | value | humanize }} consumer group(s) are blocked there "
    "(kafka_consumer_group_blocked_seconds names them)."
    "{{ else }}how many consumer groups are blocked there is unknown "
    "(kafka_txn_exporter_blocked_consumer_groups_unknown says why).{{ end }}"
)
"""The hanging alert's count of blocked groups, read when the alert is sent (the count is a
separate series: absent when unknown, so the text says unknown rather than 0)."""

HOLD_NOTE = (
    " If the exporter stops or restarts, or no replica can poll the cluster, this alert keeps "
    "firing on the last complete verdict instead of resolving: the state is then unknown, not "
    "resolved, until an exporter polls the cluster again (only what the last poll still "
    "reported is held: a transaction that ended while the exporter polled never pages again); "
    "KafkaTxnExporterAbsent or KafkaTxnExporterDown says why."
)

VERDICTS_UP = "kafka_txn_exporter_up"
"""1 in a scrape whose poll succeeded: it reports every late and hanging transaction."""
VERDICTS_ORPHANED = "kafka_txn_exporter_orphan_detection_warm"
"""1 in a scrape whose poll's orphaned verdicts are complete (the third poll after a start)."""


def _held(
    record: str, shape: str, series: str, own_labels: tuple[str, ...], verdicts: str
) -> dict[str, Any]:
    """A recording rule: `shape` over the live `series`, or, while no replica of the cluster
    has a complete verdict, the rule's own previous value.

    A page must not resolve because the exporter died, restarted or lost Kafka (its series
    vanish then), and must resolve as soon as an exporter reports the problem gone (after an
    abort) -- and stay resolved when that exporter stops later. keep_firing_for cannot tell
    these apart, and a hold over a time window ends with a "resolved" although nothing was
    seen to end.

    So the rule latches: its series is carried from evaluation to evaluation (Prometheus
    reads the rule's own last sample) for as long as no replica's `verdicts` gauge is 1 for
    that cluster, and is replaced by the live series at the first complete verdict -- dropped
    when that verdict no longer reports it. Each evaluation reads instant vectors only, so the
    cost does not grow with how long the hold lasts. `own_labels` are the series' labels the
    verdict gauge lacks."""
    live = shape.format(series=series)
    fresh = f"max without ({REPLICAS}) ({verdicts} == 1)"
    carried = f"{record} unless ignoring ({', '.join(own_labels)}) {fresh}"
    return {"record": record, "expr": f"{live} or ({carried})"}


_TRANSACTION_LABELS = ("topic", "partition", "producer_id", "producer_epoch",
                       "coordinator_epoch", "start_offset", "transactional_id")


HELD_LATE = "cluster:kafka_partitions_with_late_transactions:held"
HELD_HANGING = "transaction:kafka_hanging_transaction_age_seconds:held"
HELD_ORPHANED = "transaction:kafka_orphaned_transaction_age_seconds:held"
HELD_TWO_PHASE_STUCK = "transaction:kafka_two_phase_transaction_stuck_age_seconds:held"
HELD_BLOCKING = "transaction:kafka_blocking_transaction_age_seconds:held"


def _held_records() -> list[dict[str, Any]]:
    """The latched series the transaction alerts fire on (`_held`), evaluated before them in
    the same group so that an alert reads the value of the same evaluation."""
    return [
        # Sum over brokers within one replica, then max across replicas: two replicas that
        # see the same late partition must not double it. `without` keeps the cluster's
        # static labels for routing.
        _held(HELD_LATE, f"max without ({REPLICAS}) (sum without (broker) ({{series}}))",
              "kafka_partitions_with_late_transactions", ("broker",), VERDICTS_UP),
        _held(HELD_HANGING, f"max without ({REPLICAS}, classification) ({{series}})",
              'kafka_late_transaction_age_seconds{classification="hanging"}',
              (*_TRANSACTION_LABELS, "classification"), VERDICTS_UP),
        _held(HELD_ORPHANED, f"max without ({REPLICAS}) ({{series}})",
              "kafka_orphaned_transaction_age_seconds", _TRANSACTION_LABELS, VERDICTS_ORPHANED),
        # Told apart by the coordinator's answer, which comes with orphan detection.
        _held(HELD_TWO_PHASE_STUCK, f"max without ({REPLICAS}, stuck) ({{series}})",
              'kafka_two_phase_transaction_age_seconds{stuck="true"}',
              (*_TRANSACTION_LABELS, "stuck"), VERDICTS_ORPHANED),
    ]


def _two_phase_rule() -> dict[str, Any]:
    """A two-phase-commit (KIP-939) transaction older than the cluster's two_phase_late_seconds
    (the exporter sets stuck="true"): its external coordinator, not Kafka, must end it."""
    stuck = "KafkaTwoPhaseTransactionStuck"
    return _rule(
        stuck,
        HELD_TWO_PHASE_STUCK,
        "Two-phase-commit transaction stuck on {{ $labels.topic }}-{{ $labels.partition }} in "
        "Kafka cluster {{ $labels.cluster }}",
        "The two-phase-commit (KIP-939) transaction of transactional id "
        '"{{ $labels.transactional_id }}" (producer {{ $labels.producer_id }}, epoch '
        "{{ $labels.producer_epoch }}) has been open on "
        "{{ $labels.topic }}-{{ $labels.partition }} since offset {{ $labels.start_offset }} "
        "for {{ $value | humanizeDuration }}, longer "
        "than two_phase_late_seconds. Kafka never times such a transaction out: only its "
        "external coordinator (e.g. the Flink job owning that transactional id) commits or "
        "aborts it, and until then read_committed consumers of this partition are stuck at "
        "offset {{ $labels.start_offset }}. Bring the external coordinator back; aborting "
        "it (abort --force-two-phase) is the last resort, see the runbook."
        + HOLD_NOTE,
    )


def _blocked_rule() -> dict[str, Any]:
    """An open transaction older than the threshold that stops consumer groups, whatever it
    is: a lingering one (tracked, not late: a cancelled Flink job's, ended only by its
    transaction.timeout.ms) warns here long before anything is late."""
    blocked = "KafkaConsumersBlockedByTransaction"
    return _rule(
        blocked,
            f"{HELD_BLOCKING} > " + _placeholder(blocked, "threshold"),
        "Consumer groups blocked behind a transaction on "
        "{{ $labels.topic }}-{{ $labels.partition }} in Kafka cluster {{ $labels.cluster }}",
        "read_committed consumers of {{ $labels.topic }}-{{ $labels.partition }} are stopped "
        "at offset {{ $labels.start_offset }} behind the transaction of transactional id "
        '"{{ $labels.transactional_id }}" (application "{{ $labels.application }}", producer '
        "{{ $labels.producer_id }}, epoch {{ $labels.producer_epoch }}), open for "
        "{{ $value | humanizeDuration }}; kafka_consumer_group_blocked_seconds names the "
        "groups. "
        '{{ if eq $labels.classification "coordinator_tracked" }}Its coordinator tracks it: '
        "a lingering transaction (e.g. of a cancelled or crashed Flink job) that ends at its "
        "transaction.timeout.ms, or when its producer resumes; restart the job from its "
        "checkpoint, or wait, or lower the timeout. Do not abort it."
        '{{ else if eq $labels.classification "two_phase" }}A two-phase-commit transaction: '
        "only its external coordinator ends it (see KafkaTwoPhaseTransactionStuck)."
        "{{ else if or (eq $labels.classification \"hanging\") "
        "(eq $labels.classification \"orphaned\") }}Nothing tracks it: it never ends by "
        "itself; abort it (KafkaHangingTransaction / KafkaOrphanedTransaction)."
        "{{ else }}Whether its coordinator tracks it is not known yet; see the status page."
        "{{ end }} See the runbook."
        + HOLD_NOTE,
    )


def rules_template() -> dict[str, Any]:
    """The Prometheus rules file with placeholders for every tunable."""
    late = "KafkaLateTransactions"
    hanging = "KafkaHangingTransaction"
    orphaned = "KafkaOrphanedTransaction"
    stale = "KafkaTxnExporterPollsStale"
    transactions = [
        *_held_records(),
        _rule(
            late,
            f"{HELD_LATE} > " + _placeholder(late, "threshold"),
            "{{ $value }} partition(s) of Kafka cluster {{ $labels.cluster }} have a late "
            "transaction",
            "Partitions of cluster {{ $labels.cluster }} have an open transaction older than "
            "transaction.max.timeout.ms plus the late buffer (the broker's "
            "PartitionsWithLateTransactionsCount rule). Consumers with "
            "isolation.level=read_committed cannot read past such a transaction, and the log "
            "cannot be compacted or deleted beyond it. Find the partitions in the 'Late "
            "transactions' table of the Kafka transactions dashboard; a KafkaHangingTransaction "
            "alert names each one the coordinator no longer tracks."
            + HOLD_NOTE,
        ),
        _rule(
            hanging,
            HELD_HANGING,
            "Hanging transaction on {{ $labels.topic }}-{{ $labels.partition }} in Kafka cluster "
            "{{ $labels.cluster }}",
            "Producer {{ $labels.producer_id }} (epoch {{ $labels.producer_epoch }}, "
            "{{ if $labels.transactional_id }}transactional id "
            '"{{ $labels.transactional_id }}"{{ else }}no transactional id maps to it{{ end }}) '
            "has kept a transaction open on "
            "{{ $labels.topic }}-{{ $labels.partition }} since offset {{ $labels.start_offset }} "
            "for {{ $value | humanizeDuration }}, and its transaction coordinator no longer "
            "tracks it: nothing will ever commit or abort it. read_committed consumers of this "
            "partition are stuck at offset {{ $labels.start_offset }}: "
            + BLOCKED_GROUPS_NOTE
            + " After the checks in the runbook, abort it with: kafka-transactions.sh "
            "--bootstrap-server <broker> abort "
            "--topic {{ $labels.topic }} --partition {{ $labels.partition }} --start-offset "
            "{{ $labels.start_offset }}." + HOLD_NOTE,
        ),
        _rule(
            orphaned,
            HELD_ORPHANED,
            "Orphaned transaction on {{ $labels.topic }}-{{ $labels.partition }} in Kafka "
            "cluster {{ $labels.cluster }}",
            "Producer {{ $labels.producer_id }} (epoch {{ $labels.producer_epoch }}, "
            "{{ if $labels.transactional_id }}transactional id "
            '"{{ $labels.transactional_id }}"{{ else }}no transactional id maps to it{{ end }}) '
            "has a transaction open on {{ $labels.topic }}-{{ $labels.partition }} since offset "
            "{{ $labels.start_offset }} ({{ $value | humanizeDuration }}) that its transaction "
            "coordinator did not track on two consecutive polls: it is hanging, caught before "
            "it is late, and nothing will ever commit or abort it. read_committed consumers of "
            "this partition are stuck at offset {{ $labels.start_offset }}: "
            + BLOCKED_GROUPS_NOTE
            + " Once it is late, KafkaHangingTransaction fires for it too. Confirm and abort it "
            "as the runbook says."
            + HOLD_NOTE,
        ),
        _two_phase_rule(),
    ]
    absent = "KafkaTxnExporterAbsent"
    exporter = [
        _rule(
            absent,
            f"absent_over_time(kafka_txn_exporter_build_info{{{SELECTOR}}}"
            f"[{_placeholder(absent, 'window')}])",
            "kafka-txn-exporter is gone: no exporter matching {" + SELECTOR + "} was scraped",
            "Prometheus has scraped no kafka-txn-exporter series matching {"
            + SELECTOR
            + "} for "
            + _placeholder(absent, "window")
            + ": the exporter is stopped, crashing, or not scraped. Nothing watches Kafka "
            "transactions now; late, hanging and orphaned transaction alerts that were "
            "firing keep firing on the last verdict (state unknown) until an exporter polls "
            "again. "
            "Check the exporter's pods or process, its logs, and Prometheus' targets page.",
        ),
        _rule(
            "KafkaTxnExporterTargetDown",
            f"up{{{SELECTOR}}} == 0",
            "kafka-txn-exporter target {{ $labels.instance }} is down",
            "Prometheus cannot scrape the kafka-txn-exporter at {{ $labels.instance }} (job "
            "{{ $labels.job }}): the process is stopped or hanging, the port is unreachable, "
            "or the scrape is refused (TLS or basic auth mismatch). Other replicas, if any, "
            "still watch Kafka; when none is left, KafkaTxnExporterAbsent pages.",
        ),
        _rule(
            "KafkaTxnExporterDown",
            f"max without ({REPLICAS}) (kafka_txn_exporter_up) == 0",
            "kafka-txn-exporter cannot poll Kafka cluster {{ $labels.cluster }}",
            "No kafka-txn-exporter replica completed a poll of cluster {{ $labels.cluster }}: "
            "late and hanging transactions there go unseen and KafkaLateTransactions cannot "
            "fire. Check the exporter's logs and kafka_txn_exporter_request_errors_total for "
            "connection, TLS, SASL or authorisation errors.",
        ),
        _rule(
            stale,
            "time() - max without ("
            + REPLICAS
            + ") (kafka_txn_exporter_last_successful_poll_timestamp_seconds)"
            + f" > {_placeholder(stale, 'threshold')} * max without ({REPLICAS}) "
            "(kafka_txn_exporter_poll_interval_seconds)",
            "kafka-txn-exporter has not completed a poll of {{ $labels.cluster }} for "
            "{{ $value | humanizeDuration }}",
            "The last successful poll of cluster {{ $labels.cluster }} is older than "
            + _placeholder(stale, "threshold")
            + " poll intervals (the cluster's poll_interval_seconds): the transaction metrics "
            "are stale. Polls may be hanging on an unresponsive broker, or the exporter is "
            "overloaded (see the poll duration panel of the exporter health dashboard).",
        ),
        _rule(
            "KafkaTxnExporterBrokerUnreachable",
            f"max without ({REPLICAS}) (kafka_txn_exporter_broker_up) == 0",
            "kafka-txn-exporter cannot read broker {{ $labels.broker }} of Kafka cluster "
            "{{ $labels.cluster }}",
            "No replica of the exporter got answers from broker {{ $labels.broker }} of "
            "cluster {{ $labels.cluster }}. Its per-broker transaction counts are absent (never "
            "reported as 0), so late transactions on the partitions it leads are not counted "
            "and KafkaLateTransactions may stay silent for them.",
        ),
        _rule(
            "KafkaTxnExporterUnobservedPartitions",
            f"min without ({REPLICAS}) (kafka_txn_exporter_unobserved_partitions) > "
            + _placeholder("KafkaTxnExporterUnobservedPartitions", "threshold"),
            "{{ $value }} partition(s) of Kafka cluster {{ $labels.cluster }} are not observed",
            "The exporter could not ask DescribeProducers about some partitions of cluster "
            "{{ $labels.cluster }} (leader unavailable, missing READ permission on the topic, "
            "or per-partition errors), so transactions on them are not seen. See "
            "kafka_txn_exporter_request_errors_total by api and error.",
        ),
        _rule(
            "KafkaTxnExporterConfigReloadFailed",
            f"kafka_txn_exporter_config_last_reload_successful{{{SELECTOR}}} == 0",
            "kafka-txn-exporter {{ $labels.instance }} rejected its new configuration",
            "The last configuration reload (SIGHUP) of the exporter at {{ $labels.instance }} "
            "failed: it keeps polling with the configuration it had, not the one on disk. The "
            "exporter's log names the field at fault (event config_reload_failed); a restart "
            "now would fail to start.",
        ),
    ]
    return {
        "groups": [
            {"name": "kafka-transactions", "rules": transactions},
            {"name": "kafka-txn-exporter", "rules": exporter},
            {
                "name": "kafka-consumers-blocked",
                "rules": [
                    _held(HELD_BLOCKING, f"max without ({REPLICAS}) ({{series}})",
                          "kafka_blocking_transaction_age_seconds",
                          (*_TRANSACTION_LABELS, "classification", "application"), VERDICTS_UP),
                    _blocked_rule(),
                ],
            },
        ]
    }


def _fill(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {key: _fill(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill(item, values) for item in node]
    if isinstance(node, str):
        return PLACEHOLDER.sub(lambda match: values[match.group(0)], node)
    return node


def alert_rules(settings: AlertSettings) -> dict[str, Any]:
    """The Prometheus rules file, as a mapping ready for YAML."""
    filled: dict[str, Any] = _fill(rules_template(), settings.placeholders())
    return filled


class _RulesDumper(yaml.SafeDumper):
    """One line per string: folding would split `{{ $labels.x }}` templates across lines."""


def _dump(doc: dict[str, Any]) -> str:
    return yaml.dump(
        doc, Dumper=_RulesDumper, sort_keys=False, width=1_000_000, allow_unicode=True
    )


def render_rules(settings: AlertSettings) -> str:
    header = (
        "# Prometheus alert rules for kafka-txn-exporter.\n"
        "# GENERATED by `python -m dashboards.generate` from dashboards/generate.py: edit that,\n"
        "# not this file. The Helm chart renders the same rules from its values\n"
        "# (files/alerts/rules-template.yaml). Tune with the generator's --set; see\n"
        "# docs/runbook.md.\n"
    )
    return header + _dump(alert_rules(settings))


def render_rules_template() -> str:
    header = (
        "# kafka-txn-exporter alert rules with placeholders (__KTE_<alert>_<key>__) that\n"
        "# templates/prometheusrule.yaml fills from .Values.prometheusRule.\n"
        "# GENERATED by `python -m dashboards.generate` from dashboards/generate.py.\n"
    )
    return header + _dump(rules_template())


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
    no_value: str = "",
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
    if no_value:
        panel = panel.no_value(no_value)
    return panel


# A 0 per cluster, only where 0 is known to be true, for panels whose series exist only when
# something is wrong: "No data" on a healthy cluster reads like a broken dashboard.
_ZERO_WHILE_SCRAPED = f"max by (cluster) (kafka_txn_exporter_up{{{CLUSTER}}}) * 0"
"""The exporter reports on the cluster (any up value): a counter it has not created is 0."""
_ZERO_WHILE_ALL_OBSERVED = (
    f"(max by (cluster) (kafka_txn_exporter_up{{{CLUSTER}}}) == 1) * 0 unless on (cluster) "
    f"(min by (cluster) (kafka_txn_exporter_unobserved_partitions{{{CLUSTER}}}) > 0)"
)
"""A replica polled the cluster and observed every partition: a partition without an open
transaction has no per-partition series, and its true value is 0."""


def _label_columns(labels: Sequence[str], value_name: str) -> dash_m.DataTransformerConfig:
    """A table's columns: the labels in this order, then the value under `value_name`."""
    return dash_m.DataTransformerConfig(
        id_val="organize",
        options={
            "excludeByName": {"Time": True},
            "indexByName": {name: i for i, name in enumerate((*labels, "Value"))},
            "renameByName": {"Value": value_name},
        },
    )


def _instant_table(
    ids: Callable[[], int], title: str, description: str, expr: str
) -> table_b.Panel:
    """A table panel of one instant query's current values, one row per series."""
    return (
        table_b.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, instant=True, table_format=True))
    )


def _seconds_table(
    ids: Callable[[], int],
    title: str,
    description: str,
    metric: str,
    labels: Sequence[str],
    value_name: str,
    no_value: str,
    height: int,
) -> table_b.Panel:
    """A full-width table of one seconds-valued series per label set, the oldest first: the
    labels are the columns an operator acts on (e.g. the arguments of an abort)."""
    return (
        _instant_table(ids, title, description,
                       f"max by ({', '.join(labels)}) ({metric}{{{CLUSTER}}})")
        .with_transformation(_label_columns(labels, value_name))
        .sort_by([common_b.TableSortByFieldState().display_name(value_name).desc(True)])
        .filterable(True)
        .override_by_name(value_name, [dash_m.DynamicConfigValue(id_val="unit", value=SECONDS)])
        .no_value(no_value)
        .span(24)
        .height(height)
    )


INTERVAL_ONLY_VARIABLE_FIELDS = ("auto", "auto_count", "auto_min")
"""Fields the SDK's VariableModel always fills in but @grafana/schema's dashboard VariableModel
has no place for: they belong to interval variables only (v2's IntervalVariableSpec)."""


def _schema_variable(variable: Builder[dash_m.VariableModel]) -> Builder[dash_m.VariableModel]:
    """A variable builder whose JSON carries only what @grafana/schema allows for its kind."""
    model = variable.build()
    if model.type_val != "interval":
        for name in INTERVAL_ONLY_VARIABLE_FIELDS:
            setattr(model, name, None)
    return _Built(model)


class _Built(Builder[dash_m.VariableModel]):
    """A variable already built, for `with_variable` (which calls `.build()` on it)."""

    def __init__(self, model: dash_m.VariableModel) -> None:
        self._model = model

    def build(self) -> dash_m.VariableModel:
        return self._model


def _variables(board: dash_b.Dashboard) -> dash_b.Dashboard:
    return board.with_variable(
        _schema_variable(
            dash_b.DatasourceVariable("datasource")
            .label("Data source")
            .description("The Prometheus that scrapes kafka-txn-exporter.")
            .type("prometheus")
        )
    ).with_variable(
        _schema_variable(
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


ORPHANED_TABLE_LABELS = LATE_TABLE_LABELS[:-1]  # no classification: all are orphaned


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
            width=5,
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
            width=5,
        )
    )
    board = board.with_panel(
        _stat(
            ids,
            "Partitions with orphaned transactions",
            "Partitions with an open transaction, late or not, that its coordinator did not "
            "track on two consecutive polls (same producer id, epoch and start offset): "
            "hanging, found minutes after it began instead of after transaction.max.timeout.ms "
            "plus 5 minutes. Above 0 pages (KafkaOrphanedTransaction); the orphaned "
            "transactions table below names them.",
            _per_cluster_broker_count("kafka_partitions_with_orphaned_transactions"),
            "{{cluster}}",
            COUNT,
            _thresholds((None, GREEN), (1, RED)),
            width=5,
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
            width=4,
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
            width=5,
        )
    )
    board = board.with_panel(
        _seconds_table(
            ids,
            "Late transactions",
            "Every late open transaction, with all the labels needed to abort it: topic, "
            "partition and start_offset are the arguments of `kafka-transactions.sh abort`; "
            "producer_id, producer_epoch and coordinator_epoch identify the producer (compare "
            "with `kafka-transactions.sh describe-producers`). classification: hanging = the "
            "coordinator no longer tracks it, abort it after the runbook's checks; "
            "coordinator_tracked = the coordinator will still end it, find the stuck producer "
            "or coordinator instead; unknown = the exporter could not ask the coordinator, "
            "check it by hand. Age counts from the transaction's first batch.",
            "kafka_late_transaction_age_seconds",
            LATE_TABLE_LABELS,
            "age",
            "No late transactions",
            height=8,
        )
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
    )
    board = board.with_panel(
        _seconds_table(
            ids,
            "Orphaned transactions",
            "Every orphaned open transaction: its coordinator did not track its partition on "
            "two consecutive polls, so nothing will ever commit or abort it. Same labels as the "
            "late table (topic, partition and start_offset are the arguments of "
            "`kafka-transactions.sh abort`). Late ones also appear above, classified hanging. "
            "Follow the runbook's KafkaOrphanedTransaction entry.",
            "kafka_orphaned_transaction_age_seconds",
            ORPHANED_TABLE_LABELS,
            "age",
            "No orphaned transactions",
            height=6,
        )
    )
    board = board.with_panel(
        _seconds_table(
            ids,
            "Two-phase-commit transactions",
            "Every open two-phase-commit (KIP-939) transaction: its coordinator tracks it with "
            "the timeout 2147483647 and never aborts it; an external coordinator (e.g. Flink) "
            "decides it. Never counted as late or hanging. stuck=true once older than "
            "two_phase_late_seconds (KafkaTwoPhaseTransactionStuck); follow the runbook's "
            "entry before any abort.",
            "kafka_two_phase_transaction_age_seconds",
            (*ORPHANED_TABLE_LABELS, "stuck"),
            "age",
            "No two-phase-commit transactions",
            height=6,
        )
    )
    board = board.with_panel(
        _seconds_table(
            ids,
            "Consumer groups blocked by open transactions",
            "Consumer groups whose committed offset on a partition equals its last stable "
            "offset while the high watermark is beyond it: read_committed consumers stopped by "
            "the open transaction whose start offset that is: a late or orphaned one (find it "
            "in the tables above), or any other older than blocked_groups_min_age_seconds; "
            "classification coordinator_tracked on one not late is a lingering transaction "
            "(e.g. a stopped Flink job's) that its transaction.timeout.ms ends "
            "(KafkaConsumersBlockedByTransaction). application: the one its transactional id "
            "names. blocked: how long the exporter has seen the "
            "group there, a lower bound (Kafka does not report when an offset was committed). "
            "Groups the exporter may not Describe are not listed: "
            "kafka_txn_exporter_blocked_consumer_groups_unknown counts the transactions whose "
            "groups are unknown (exporter health dashboard).",
            "kafka_consumer_group_blocked_seconds",
            ("cluster", "group", "topic", "partition", "transactional_id", "classification",
             "application"),
            "blocked",
            "No blocked consumer group seen (unreadable ones: exporter health board)",
            height=6,
        )
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
                    "A",
                ),
                _query(
                    "max by (cluster) "
                    f"(kafka_cluster_max_active_transaction_duration_seconds{{{CLUSTER}}})",
                    "{{cluster}} oldest in the cluster",
                    "B",
                ),
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
                    "A",
                ),
                _query(
                    f"max by (cluster) (kafka_partition_last_stable_offset_lag{{{CLUSTER}}}) "
                    f"or {_ZERO_WHILE_ALL_OBSERVED}",
                    "{{cluster}} largest",
                    "B",
                ),
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
            # No series: no transactional id listed, or ListTransactions was not answered
            # (see request errors); the panel cannot tell which, so it does not claim 0.
            no_value="No transactional ids listed",
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
    board = _exposure_row(board, ids)
    return board.build()


def _flag_table(
    ids: _Ids,
    title: str,
    description: str,
    expr: str,
    labels: Sequence[str],
    value_name: str,
    texts: tuple[tuple[str, str, str], ...],
    no_value: str,
) -> table_b.Panel:
    """A table of 0/1 flags per `labels`, each value shown as a coloured word."""
    return (
        _instant_table(ids, title, description, expr)
        .unit(FLAG)
        .with_transformation(_label_columns(labels, value_name))
        .filterable(True)
        .override_by_name(
            value_name,
            [
                dash_m.DynamicConfigValue(
                    id_val="custom.cellOptions", value={"type": "color-text"}
                ),
                dash_m.DynamicConfigValue(
                    id_val="mappings",
                    value=[
                        dash_m.ValueMap(
                            options={
                                value: dash_m.ValueMappingResult(text=text, color=color,
                                                                 index=i)
                                for i, (value, text, color) in enumerate(texts)
                            }
                        )
                    ],
                ),
            ],
        )
        .no_value(no_value)
        .span(8)
        .height(7)
    )


def _exposure_row(board: dash_b.Dashboard, ids: _Ids) -> dash_b.Dashboard:
    """Where hanging transactions can still be created, and where a late one also stops
    compaction (docs/kafka-semantics.md#exposure). Informational: no alert pages on it."""
    board = board.with_row(dash_b.Row("Which clusters are exposed?").id(ids()))
    board = board.with_panel(
        _stat(
            ids,
            "Finalized transaction.version",
            "The cluster's finalized transaction.version feature level (ApiVersions). 2 "
            "(KIP-890 part 2, Kafka 4.0) lets brokers add partitions to a transaction "
            "themselves; below 2 (orange) producers still do it and a partition never added "
            "can hang wherever partition verification is off. 0 means not finalized. Empty: "
            "no broker reports finalized features (e.g. Kafka before 2.7). Level "
            "2 does not protect producers that use the old protocol: check the verification "
            "panel too.",
            f"max by (cluster) (kafka_finalized_transaction_version{{{CLUSTER}}})",
            "{{cluster}}",
            COUNT,
            _thresholds((None, ORANGE), (2, GREEN)),
            width=8,
            height=7,
            no_value="Unknown",
        )
    )
    board = board.with_panel(
        _flag_table(
            ids,
            "Partition verification by broker",
            "Each broker's transaction.partition.verification.enable (KIP-890 part 1, Kafka "
            "3.6+, default true). disabled (orange): the broker appends a transactional "
            "Produce to a partition the coordinator never added, which is how hanging "
            "transactions are made. A broker missing here is unknown: down, DescribeConfigs "
            "refused (see request errors), or older than 3.6 (no verification at all; the "
            "exporter's status page says which).",
            "max by (cluster, broker) "
            f"(kafka_transaction_partition_verification_enabled{{{CLUSTER}}})",
            ("cluster", "broker"),
            "verification",
            (("1", "enabled", GREEN), ("0", "disabled", ORANGE)),
            "No broker reported it",
        )
    )
    board = board.with_panel(
        _flag_table(
            ids,
            "Compacted topics with late or orphaned transactions",
            "For each topic holding a late or orphaned transaction, whether its "
            "cleanup.policy includes compact. The log cleaner stops at the last stable "
            "offset, so on a compacted topic a hanging transaction also stops compaction and "
            "the log grows until it is aborted. A topic missing here while it has a late "
            "transaction is unknown (DescribeConfigs on the topic refused).",
            f"max by (cluster, topic) (kafka_topic_compacted{{{CLUSTER}}})",
            ("cluster", "topic"),
            "cleanup.policy",
            (("1", "compacted", RED), ("0", "not compacted", BLUE)),
            "No late or orphaned transactions",
        )
    )
    return board


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
            "Transactions with unknown blocked groups",
            "Transactions (late, orphaned, or older than blocked_groups_min_age_seconds) whose "
            "blocked consumer groups could not be read, by "
            "reason: unauthorized (grant Describe on the groups), unsupported_api (brokers "
            "before Kafka 3.0), broker_down, error. Their count of blocked groups is absent, "
            "not 0. 0 while every such transaction's groups were read (or none is late).",
            f"max by (cluster, reason) "
            f"(kafka_txn_exporter_blocked_consumer_groups_unknown{{{CLUSTER}}}) "
            f"or on (cluster) ((max by (cluster) (kafka_txn_exporter_up{{{CLUSTER}}}) == 1) * 0)",
            "{{cluster}} {{reason}}",
            COUNT,
            _thresholds((None, GREEN), (1, ORANGE)),
            width=6,
            no_value="no exporter",
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
            "Poll phases",
            "Where the last poll spent its time, by phase (named by its Kafka requests: "
            "metadata, describe_producers, list_transactions, broker_configs, start_times, "
            "list_offsets, describe_transactions, topic_configs, consumer_groups, analyze); "
            "the slowest replica's. Phases that run at the same time each count their own "
            "wall time. A slow describe_producers points at the partition leaders, a slow "
            "describe_transactions or list_transactions at the transaction coordinators.",
            [
                _query(
                    "max by (cluster, phase) "
                    f"(kafka_txn_exporter_poll_phase_duration_seconds{{{CLUSTER}}})",
                    "{{cluster}} {{phase}}",
                    "A",
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
                    "A",
                ),
                _query(
                    "sum by (cluster) "
                    f"(rate(kafka_txn_exporter_request_errors_total{{{CLUSTER}}}"
                    f"[$__rate_interval])) or {_ZERO_WHILE_SCRAPED}",
                    "{{cluster}} all errors",
                    "B",
                ),
            ],
            "reqps",
        )
    )
    board = board.with_panel(
        _instant_table(
            ids,
            "Exporter versions",
            "Version and source revision of each exporter replica "
            "(kafka_txn_exporter_build_info). Replicas should run the same version; upgrade "
            "stragglers.",
            "count by (version, revision, instance) (kafka_txn_exporter_build_info)",
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


def render_all(settings: AlertSettings | None = None) -> dict[str, str]:
    """Path relative to dashboards/ -> content, for everything this module generates there."""
    settings = settings or AlertSettings()
    return {
        OVERVIEW_FILE: render_dashboard(overview_dashboard()),
        HEALTH_FILE: render_dashboard(health_dashboard()),
        RULES_FILE: render_rules(settings),
    }


def render_chart_files() -> dict[str, str]:
    """Path relative to the chart's files/ -> content: the dashboards and the rules template."""
    return {
        OVERVIEW_FILE: render_dashboard(overview_dashboard()),
        HEALTH_FILE: render_dashboard(health_dashboard()),
        CHART_RULES_TEMPLATE: render_rules_template(),
    }


def _setting(text: str) -> tuple[str, str, str]:
    alert_key, sep, value = text.partition("=")
    alert, dot, key = alert_key.partition(".")
    if not sep or not dot or alert not in RULE_DEFAULTS or key not in RULE_DEFAULTS[alert]:
        known = ", ".join(f"{a}.{k}" for a, keys in RULE_DEFAULTS.items() for k in keys)
        raise argparse.ArgumentTypeError(f"expected ALERT.KEY=VALUE with one of: {known}")
    return alert, key, value


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dashboards.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if a generated file differs"
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="write dashboards and rules here instead of dashboards/ (and skip the chart's "
        "files/): for a custom build of the rules. Not the chart's files/ directory: a plain "
        "run already writes the chart's dashboards and its rules template there",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=_setting,
        default=[],
        metavar="ALERT.KEY=VALUE",
        help="tune one rule, e.g. KafkaHangingTransaction.for=5m (repeatable); keys: "
        + "; ".join(f"{a}: {', '.join(k)}" for a, k in RULE_DEFAULTS.items()),
    )
    parser.add_argument(
        "--exporter-selector",
        default=EXPORTER_SELECTOR,
        help="PromQL label matchers of the exporter's scrape targets (default %(default)s)",
    )
    parser.add_argument(
        "--replica-labels",
        default=",".join(REPLICA_LABELS),
        help="comma-separated target labels that differ between replicas (default %(default)s)",
    )
    parser.add_argument("--runbook-url", default=RUNBOOK_URL)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    settings = AlertSettings(
        exporter_selector=args.exporter_selector,
        replica_labels=tuple(x.strip() for x in args.replica_labels.split(",") if x.strip()),
        runbook_url=args.runbook_url,
    )
    for alert, key, value in args.settings:
        settings.rules[alert][key] = value
    outputs: list[tuple[Path, dict[str, str]]] = []
    if args.out_dir is not None and args.out_dir.resolve() == CHART_FILES_DIR:
        # The chart takes a rules template, not rendered rules: rules.yaml there would be an
        # untracked file that the chart never reads.
        print("--out-dir: the chart's files/ are written by a plain `python -m "
              "dashboards.generate` (its rules as a template); give another directory",
              file=sys.stderr)
        return 2
    if args.out_dir is not None:
        outputs.append((args.out_dir, render_all(settings)))
    else:
        outputs.append((DASHBOARDS_DIR, render_all(settings)))
        outputs.append((CHART_FILES_DIR, render_chart_files()))
    stale: list[str] = []
    for out_dir, files in outputs:
        for relative, content in files.items():
            path = out_dir / relative
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == content:
                continue
            if args.check:
                stale.append(str(path))
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
