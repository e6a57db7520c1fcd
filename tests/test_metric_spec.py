"""The metric spec (exporter.metrics) against everything that names a metric: the collector's
exposition (golden file, promtool), the README's metric table, the dashboards and the rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from exporter_factories import blocking, broker, late, open_txn, orphaned, snapshot
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as om_generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from exporter.config import RESERVED_LABELS
from exporter.expose.collector import NOT_FROM_SNAPSHOTS, SnapshotCollector
from exporter.expose.registry import ExporterRegistry, build_registry
from exporter.expose.render_cache import SnapshotRenderCache, render_registry
from exporter.metrics import METRICS, METRICS_BY_NAME, MetricSpec
from exporter.model import Classification, PartitionVerification, RequestError, TopicPartition
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "data" / "golden-metrics.txt"
BUILD_INFO = {"version": "1.2.3", "revision": "0123456789ab", "python_version": "3.11.9"}


def golden_store() -> SnapshotStore:
    """Two clusters (one with static labels, one whose poll failed), every family filled."""
    store = SnapshotStore([
        ClusterSettings(name="prod", bootstrap_servers=("h:1",), poll_interval_seconds=30.0,
                        labels={"env": "production", "region": "eu-west-1"}),
        ClusterSettings(name="staging", bootstrap_servers=("h:2",), poll_interval_seconds=10.0,
                        labels={"env": "staging"}),
    ])
    hanging = open_txn("orders", 3, leader_id=1, producer_id=7, start_offset=42, age_ms=400_000)
    tracked = open_txn("payments", 0, leader_id=2, producer_id=8, producer_epoch=2,
                       coordinator_epoch=5, start_offset=17, age_ms=250_500)
    early = open_txn("orders", 5, leader_id=1, producer_id=9, start_offset=3, age_ms=95_000)
    lingering = open_txn("clicks", 1, leader_id=2, producer_id=11, start_offset=70,
                         age_ms=180_000)
    store.publish(snapshot(
        "prod",
        brokers=[broker(1, open_=2, late_=1, hanging=1, orphaned_=2,
                        partition_verification=PartitionVerification.DISABLED),
                 broker(2, open_=1, late_=1, max_timeout_ms=900_000, orphaned_=None,
                        partition_verification=PartitionVerification.ENABLED),
                 broker(3, up=False, max_timeout_ms=None)],
        durations={TopicPartition("orders", 3): 400.0, TopicPartition("payments", 0): 250.5},
        late_transactions=[late(hanging, Classification.HANGING, "", topic_compacted=True,
                                blocked=[("billing", 360.0), ("audit", 30.0)]),
                           late(tracked, Classification.COORDINATOR_TRACKED, 'pay"ments\\1',
                                topic_compacted=False, blocked_unknown="unauthorized")],
        orphaned_transactions=[orphaned(hanging, late=True,
                                        blocked=[("billing", 360.0), ("audit", 30.0)]),
                               orphaned(early, "etl-7", application="etl")],
        blocking_transactions=[blocking(lingering, Classification.COORDINATOR_TRACKED,
                                        "clicks-sink-3-118", blocked=[("dashboard", 120.0)],
                                        application="clicks-sink")],
        applications_overflowed=0,
        blocked_groups_unknown_by_reason={"unauthorized": 1},
        transaction_states={"Ongoing": 1, "Empty": 2},
        lso_lag={TopicPartition("orders", 3): 12},
        unobserved=4,
        unobserved_by_reason={"broker_down": 3, "unauthorized": 1},
        request_errors=[RequestError(broker_id=3, api="DescribeProducers", error="timeout")],
        poll_duration_seconds=0.3,
        poll_phase_seconds={"metadata": 0.012, "list_transactions": 0.03,
                            "describe_producers": 0.125, "broker_configs": 0.0005,
                            "start_times": 0.04, "list_offsets": 0.02,
                            "describe_transactions": 0.05, "topic_configs": 0.01,
                            "consumer_groups": 0.0625},
        by_start_time_source={"batch_timestamp": 2, "first_seen": 1},
        finalized_transaction_version=2,
        compacted_topics={"orders": True, "payments": False},
    ), now_seconds=1_795_217_202.5, analyze_seconds=0.004)
    store.record_failure("staging", "cluster not reachable", 12.0)
    return store


def golden_exposition() -> str:
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(golden_store(), build_info=BUILD_INFO))
    return generate_latest(registry).decode()


def test_fixed_snapshot_gives_the_checked_in_exposition() -> None:
    text = golden_exposition()
    if os.environ.get("KTE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "the /metrics exposition changed; if intended, rerun with KTE_UPDATE_GOLDEN=1 and "
        "review the diff of tests/data/golden-metrics.txt"
    )


def _promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found (scripts/install-test-deps installs it)"
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.system_tools  # promtool
def test_promtool_accepts_the_golden_exposition() -> None:
    result = _promtool_check(golden_exposition())
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.system_tools  # promtool
@pytest.mark.parametrize(("accept", "content_type"), [
    (None, "text/plain; version=0.0.4"),
    ("application/openmetrics-text; version=1.0.0", "application/openmetrics-text"),
], ids=["text-0.0.4", "openmetrics"])
def test_promtool_accepts_the_served_exposition_in_both_formats(
    accept: str | None, content_type: str
) -> None:
    """Both formats /metrics negotiates, process metrics included.

    promtool reads either body with the text format's parser, which allows only backslash
    and newline escapes in HELP (OpenMetrics also escapes `"`: a help text with one was a
    parse error, exit 1). The text body must pass outright. In the OpenMetrics body a
    counter's family is named without `_total` and its sample with it, which promtool's
    linter (text rules) reports as `<name>_total no help text`: that, for a family the body
    declares a counter, is the only problem allowed there."""
    store = golden_store()
    body, served_type = render_registry(build_registry(store), SnapshotRenderCache(), accept)
    assert served_type.startswith(content_type)
    result = _promtool_check(body.decode())
    if accept is None:
        assert result.returncode == 0, result.stdout + result.stderr
        return
    assert "error while linting" not in result.stderr, result.stderr
    counters = set(re.findall(r"^# TYPE (\S+) counter$", body.decode(), re.MULTILINE))
    assert counters, "the OpenMetrics body declares no counter"
    problems = [line for line in result.stderr.splitlines() if line.strip()]
    assert all(line.endswith("_total no help text")
               and line.removesuffix("_total no help text") in counters
               for line in problems), problems
    assert result.returncode in (0, 3), result.stdout + result.stderr  # 3: lint problems


@pytest.mark.parametrize("metric", METRICS, ids=lambda m: m.name)
def test_help_text_reads_the_same_in_both_formats(metric: MetricSpec) -> None:
    """The text format escapes only backslash and newline in HELP, OpenMetrics also `"`: a
    help text with none of them is the same bytes in both, and passes promtool in both."""
    assert not set(metric.help) & {'"', "\\", "\n"}, metric.help


def test_exposition_declares_exactly_the_spec() -> None:
    """Type and help of every family come from the spec; every sample has the declared label
    names (plus the cluster's static labels on per-cluster families)."""
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(golden_store(), build_info=BUILD_INFO))
    families = {f.name: f for f in om_parse(om_generate_latest(registry).decode())}
    expected = {m.family_name: m for m in METRICS if m.name not in NOT_FROM_SNAPSHOTS}
    assert set(families) == set(expected)
    for name, family in families.items():
        metric = expected[name]
        assert family.type == metric.type, name
        assert family.documentation == metric.help, name
        for sample in family.samples:
            names = set(sample.labels) - {"le"}
            static = {"env", "region"} if metric.per_cluster else set()
            assert set(metric.labels) <= names <= set(metric.labels) | static, sample


def test_reserved_labels_are_every_spec_label() -> None:
    for metric in METRICS:
        assert set(metric.labels) <= RESERVED_LABELS, metric.name
    assert {"le", "job", "instance"} <= RESERVED_LABELS


def _readme_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `(\w+)` \| (\w+) \| ([^|]*) \|", line)
        if match:
            labels = tuple(x.strip() for x in match[3].split(",") if x.strip() not in ("", "—"))
            rows[match[1]] = (match[2], labels)
    return rows


def test_readme_metric_table_matches_the_spec() -> None:
    rows = _readme_table()
    assert set(rows) == set(METRICS_BY_NAME), "README's metric table and exporter.metrics differ"
    for name, (type_, labels) in rows.items():
        metric = METRICS_BY_NAME[name]
        assert (type_, labels) == (metric.type, metric.labels), name


_METRIC_NAME = re.compile(r"\b(kafka_\w+)")


def _names_in(exprs: list[str]) -> set[str]:
    return {m for expr in exprs for m in _METRIC_NAME.findall(expr)}


def _sample_names() -> set[str]:
    return {name for m in METRICS for name in m.sample_names}


def test_dashboards_query_only_metrics_of_the_spec() -> None:
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query") and isinstance(value, str):
                    exprs.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    boards = sorted((ROOT / "dashboards").glob("*.json"))
    assert boards
    for board in boards:
        walk(json.loads(board.read_text(encoding="utf-8")))
    names = _names_in(exprs)
    assert names, "no metric found in the dashboards"
    assert names <= _sample_names(), names - _sample_names()


def test_alert_rules_use_only_metrics_of_the_spec() -> None:
    rules = yaml.safe_load((ROOT / "dashboards" / "alerts" / "rules.yaml").read_text("utf-8"))
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    # Recording rules' own series (level:metric:operations) are the rules', not the exporter's.
    records = {rule["record"] for group in rules["groups"] for rule in group["rules"]
               if "record" in rule}
    for record in records:
        exprs = [expr.replace(record, "") for expr in exprs]
    names = _names_in(exprs)
    assert names, "no metric found in the rules"
    assert names <= _sample_names(), names - _sample_names()


@pytest.mark.parametrize("name", sorted(METRICS_BY_NAME))
def test_spec_rows_follow_prometheus_naming(name: str) -> None:
    metric = METRICS_BY_NAME[name]
    assert re.fullmatch(r"kafka_[a-z0-9_]+", name)
    assert name.endswith("_total") == (metric.type == "counter")
    assert metric.help.endswith(".")
    assert len(set(metric.labels)) == len(metric.labels)
