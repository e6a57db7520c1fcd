"""The chart's KafkaTwoPhaseTransactionStuck tunables and two_phase_late_seconds."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "kafka-txn-exporter"


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def _docs(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    rendered = chart.render(copy.deepcopy(values), name="kte", namespace="monitoring")
    return [doc for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def test_the_two_phase_alert_is_tunable_and_can_be_turned_off(chart: helm.Chart) -> None:
    tuned = {"prometheusRule": {"enabled": True, "rules": {"KafkaTwoPhaseTransactionStuck": {
        "for": "30m", "severity": "critical"}}}}
    (rule_doc,) = [d for d in _docs(chart, tuned) if d["kind"] == "PrometheusRule"]
    rules = {r.get("alert"): r for g in rule_doc["spec"]["groups"] for r in g["rules"]}
    stuck = rules["KafkaTwoPhaseTransactionStuck"]
    assert (stuck["for"], stuck["labels"]["severity"]) == ("30m", "critical")
    assert stuck["expr"] == "transaction:kafka_two_phase_transaction_stuck_age_seconds:held"
    off = {"prometheusRule": {"enabled": True, "rules": {
        "KafkaTwoPhaseTransactionStuck": {"enabled": False}}}}
    (rule_doc,) = [d for d in _docs(chart, off) if d["kind"] == "PrometheusRule"]
    names = {r.get("alert") for g in rule_doc["spec"]["groups"] for r in g["rules"]}
    assert "KafkaTwoPhaseTransactionStuck" not in names and "KafkaHangingTransaction" in names


def test_two_phase_late_seconds_reaches_the_exporter_config(chart: helm.Chart) -> None:
    values = {"config": {"clusters": [{"name": "a", "bootstrap_servers": ["a:9092"],
                                       "two_phase_late_seconds": "2h"}]}}
    configmaps = [d for d in _docs(chart, values) if d["kind"] == "ConfigMap"]
    texts = [text for d in configmaps for text in d.get("data", {}).values()]
    (config,) = [yaml.safe_load(t) for t in texts if "two_phase_late_seconds" in t]
    assert config["clusters"][0]["two_phase_late_seconds"] == "2h"
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"config": {"clusters": [
            {"name": "a", "bootstrap_servers": ["a:9092"], "two_phase_late_seconds": -1}]}})
