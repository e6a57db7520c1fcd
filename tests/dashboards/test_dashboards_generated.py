"""The checked-in dashboards and rules are exactly what the generator produces, and well formed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from waits import SUBPROCESS_HANG_S

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = {
    "overview": REPO / "dashboards" / "kafka-transactions-overview.json",
    "health": REPO / "dashboards" / "kafka-txn-exporter-health.json",
}
GENERATED = [*DASHBOARDS.values(), REPO / "dashboards" / "alerts" / "rules.yaml"]


def _generate(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dashboards.generate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_HANG_S,
    )


def test_checked_in_files_match_a_fresh_generation(tmp_path: Path) -> None:
    result = _generate("--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    for path in GENERATED:
        fresh = tmp_path / path.relative_to(REPO / "dashboards")
        assert fresh.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{path.relative_to(REPO)} is stale: run `python -m dashboards.generate`"
        )


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    assert _generate("--out-dir", str(tmp_path)).returncode == 0
    assert _generate("--check", "--out-dir", str(tmp_path)).returncode == 0
    (tmp_path / "alerts" / "rules.yaml").write_text("groups: []\n", encoding="utf-8")
    result = _generate("--check", "--out-dir", str(tmp_path))
    assert result.returncode == 1
    assert "alerts/rules.yaml" in result.stderr


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_panels_have_description_unit_and_templated_datasource(name: str) -> None:
    board = json.loads(DASHBOARDS[name].read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["cluster"]["type"] == "query"
    assert variables["cluster"]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in _panels(board):
        title = panel["title"]
        assert len(panel.get("description", "")) > 40, f"{title}: needs a description"
        assert panel["datasource"]["uid"] == "${datasource}", title
        unit = panel["fieldConfig"]["defaults"].get("unit") or {
            o["matcher"]["options"]: prop["value"]
            for o in panel["fieldConfig"].get("overrides", [])
            for prop in o["properties"]
            if prop["id"] == "unit"
        }
        assert unit, f"{title}: no unit"
        assert panel["targets"], title
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", title
            if "build_info" not in target["expr"]:
                assert 'cluster=~"$cluster"' in target["expr"], title


def test_overview_has_late_partitions_late_transactions_table_and_transaction_metrics() -> None:
    board = json.loads(DASHBOARDS["overview"].read_text(encoding="utf-8"))
    by_title = {p["title"]: p for p in _panels(board)}
    late = by_title["Partitions with late transactions"]
    steps = late["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": 1}, "late partitions must turn red above 0"
    table = by_title["Late transactions"]
    expr = table["targets"][0]["expr"]
    for label in (
        "topic",
        "partition",
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        "start_offset",
        "transactional_id",
        "classification",
    ):
        assert label in expr, f"late transactions table lacks {label}"
    exprs = " ".join(t["expr"] for p in by_title.values() for t in p["targets"])
    for metric in (
        "kafka_partitions_with_hanging_transactions",
        "kafka_partitions_with_open_transactions",
        "kafka_cluster_max_active_transaction_duration_seconds",
        "kafka_partition_max_active_transaction_duration_seconds",
        "kafka_partition_last_stable_offset_lag",
        "kafka_transactions{",
    ):
        assert metric in exprs


def test_health_dashboard_covers_the_exporter_metrics() -> None:
    board = json.loads(DASHBOARDS["health"].read_text(encoding="utf-8"))
    exprs = " ".join(t["expr"] for p in _panels(board) for t in p["targets"])
    for metric in (
        "kafka_txn_exporter_up",
        "kafka_txn_exporter_broker_up",
        "kafka_txn_exporter_poll_duration_seconds_bucket",
        "kafka_txn_exporter_request_errors_total",
        "kafka_txn_exporter_last_successful_poll_timestamp_seconds",
        "kafka_txn_exporter_unobserved_partitions",
    ):
        assert metric in exprs
    assert "by (cluster, broker, api, error)" in exprs


def test_checked_in_dashboards_and_chart_files_are_fresh() -> None:
    """`--check` without --out-dir covers dashboards/ and the chart's files/ (rules template)."""
    result = _generate("--check")
    assert result.returncode == 0, result.stderr


def test_overview_has_an_exposure_row_with_the_three_flags() -> None:
    board = json.loads(DASHBOARDS["overview"].read_text(encoding="utf-8"))
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[-1] == "Which clusters are exposed?"
    by_title = {p["title"]: p for p in _panels(board)}
    version = by_title["Finalized transaction.version"]
    assert "kafka_finalized_transaction_version" in version["targets"][0]["expr"]
    steps = version["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "green", "value": 2}, "only level 2 is green"
    verification = by_title["Partition verification by broker"]
    assert "kafka_transaction_partition_verification_enabled" in (
        verification["targets"][0]["expr"])
    compacted = by_title["Compacted topics with late or orphaned transactions"]
    assert "kafka_topic_compacted" in compacted["targets"][0]["expr"]
