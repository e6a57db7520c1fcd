"""The alert rules file: valid for Prometheus, unit-tested with promtool, documented.

promtool comes from Debian's `prometheus` package (scripts/install-test-deps installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from waits import SUBPROCESS_HANG_S

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "dashboards" / "alerts" / "rules.yaml"
RULES_TEST = Path(__file__).resolve().parent / "rules_test.yaml"
RULES_TESTS = sorted(RULES_TEST.parent.glob("rules_test*.yaml"))
"""rules_test.yaml and one file per later alert (rules_test_<alert>.yaml)."""
RUNBOOK = REPO / "docs" / "runbook.md"

CRITICAL_ALERTS = {"KafkaLateTransactions", "KafkaHangingTransaction",
                   "KafkaOrphanedTransaction", "KafkaTxnExporterAbsent"}


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/install-test-deps (Debian package prometheus)"
    return promtool


def _all_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _rules() -> list[dict[str, Any]]:
    """The alerting rules."""
    return [rule for rule in _all_rules() if "alert" in rule]


def _records() -> dict[str, str]:
    """The recording rules (the held series), record -> expr."""
    return {rule["record"]: rule["expr"] for rule in _all_rules() if "record" in rule}


@pytest.mark.system_tools  # promtool
def test_promtool_check_rules_accepts_the_rules_file() -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)],
        capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_all_rules())} rules found" in result.stdout


@pytest.mark.system_tools  # promtool
def test_promtool_unit_tests_pass_for_every_alert() -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", *(path.name for path in RULES_TESTS)],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_HANG_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_both_firing_and_not_firing() -> None:
    tests = [
        case
        for path in RULES_TESTS
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]
    ]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts - firing == set(), "alerts never tested firing"
    assert alerts - silent == set(), "alerts never tested not firing"


def test_alerts_have_severity_and_annotations_with_runbook_anchor() -> None:
    """Severities are kube-prometheus-stack's critical/warning/info; what pages is critical."""
    for rule in _rules():
        expected = "critical" if rule["alert"] in CRITICAL_ALERTS else "warning"
        assert rule["labels"]["severity"] == expected, rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) >= {"summary", "description", "runbook_url"}, rule["alert"]
        assert annotations["runbook_url"].endswith(f"docs/runbook.md#{rule['alert'].lower()}")


def _github_anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to dashes."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_runbook_url_anchor_exists_in_the_runbook() -> None:
    headings = {
        _github_anchor(line.lstrip("#"))
        for line in RUNBOOK.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    for rule in _rules():
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor in headings, f"{rule['alert']}: no heading for #{anchor} in docs/runbook.md"


def test_page_alerts_are_safe_with_several_exporter_replicas() -> None:
    """Counts are summed per replica and then max'ed across replicas, never summed."""
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    held = _records()
    late = exprs["KafkaLateTransactions"].removesuffix(" > 0")
    assert held[late].startswith(
        "max without (instance, pod) (sum without (broker) "
        "(kafka_partitions_with_late_transactions)) or "
    )
    hanging = held[exprs["KafkaHangingTransaction"]]
    assert hanging.startswith("max without (instance, pod, ")
    assert 'classification="hanging"' in hanging


def test_held_series_carry_themselves_only_while_no_replica_has_a_complete_verdict() -> None:
    """The latch: each held series is the live one, or its own last value unless a replica of
    the cluster has a complete verdict -- instant vectors only, whatever the outage's length."""
    held = _records()
    assert len(held) == 5
    for record, expr in held.items():
        _live, carried = expr.split(" or ", 1)
        assert carried.startswith(f"({record} unless ignoring ("), record
        assert carried.endswith("== 1))"), record
        assert "[" not in expr.replace('{stuck="true"}', ""), "no range or subquery"


def test_no_rule_aggregates_away_the_clusters_static_labels() -> None:
    """`max by (cluster)` would drop env/region & co.; only replica labels may go."""
    for rule in _all_rules():
        assert " by (" not in rule["expr"], rule.get("alert", rule.get("record"))


def test_the_stale_poll_rule_follows_the_poll_interval_metric() -> None:
    (rule,) = [r for r in _rules() if r["alert"] == "KafkaTxnExporterPollsStale"]
    assert "> 3 * max without (instance, pod) (kafka_txn_exporter_poll_interval_seconds)" in (
        rule["expr"]
    )
    assert not re.search(r"> *[0-9.]+ *$", rule["expr"]), "no fixed number of seconds"


@pytest.mark.system_tools  # promtool
def test_the_exporter_absence_rules_exist_and_use_the_selector(tmp_path: Path) -> None:
    """The selector is a generator parameter; a custom one reaches both absence rules."""
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.generate", "--out-dir", str(tmp_path),
         "--exporter-selector", 'job="kte", namespace="mon"',
         "--set", "KafkaTxnExporterAbsent.window=3m",
         "--set", "KafkaHangingTransaction.severity=info"],
        cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = yaml.safe_load((tmp_path / "alerts" / "rules.yaml").read_text(encoding="utf-8"))
    rules = {r.get("alert"): r for g in doc["groups"] for r in g["rules"]}
    assert rules["KafkaTxnExporterAbsent"]["expr"] == (
        'absent_over_time(kafka_txn_exporter_build_info{job="kte", namespace="mon"}[3m])'
    )
    assert rules["KafkaTxnExporterTargetDown"]["expr"] == 'up{job="kte", namespace="mon"} == 0'
    assert rules["KafkaHangingTransaction"]["labels"] == {"severity": "info"}
    checked = subprocess.run(
        [_promtool(), "check", "rules", str(tmp_path / "alerts" / "rules.yaml")],
        capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_generator_rejects_an_unknown_setting(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.generate", "--out-dir", str(tmp_path),
         "--set", "KafkaHangingTransaction.threshold=5"],
        cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ALERT.KEY=VALUE" in result.stderr
