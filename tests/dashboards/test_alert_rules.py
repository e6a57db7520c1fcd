"""The alert rules file: valid for Prometheus, unit-tested with promtool, documented.

promtool comes from Debian's `prometheus` package (scripts/install-test-deps installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "dashboards" / "alerts" / "rules.yaml"
RULES_TEST = Path(__file__).resolve().parent / "rules_test.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"

PAGE_ALERTS = {"KafkaLateTransactions", "KafkaHangingTransaction"}


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/install-test-deps (Debian package prometheus)"
    return promtool


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_check_rules_accepts_the_rules_file() -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass_for_every_alert() -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_both_firing_and_not_firing() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts - firing == set(), "alerts never tested firing"
    assert alerts - silent == set(), "alerts never tested not firing"


def test_alerts_have_severity_and_annotations_with_runbook_anchor() -> None:
    for rule in _rules():
        expected = "page" if rule["alert"] in PAGE_ALERTS else "warning"
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
    """Counts are summed per replica (instance) and then max'ed across replicas, never summed."""
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    assert exprs["KafkaLateTransactions"].startswith(
        "max by (cluster) (sum by (cluster, instance) (kafka_partitions_with_late_transactions))"
    )
    assert exprs["KafkaHangingTransaction"].startswith("max by (")
    assert 'classification="hanging"' in exprs["KafkaHangingTransaction"]
