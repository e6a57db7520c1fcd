"""`kafka-txn-exporter demo --kafka real`: the demo on a real local broker.

Runs once, on the newest version of the matrix: the demo as a subprocess starts its broker from
the installed jars, its workload and (backdated, verification off) its hanging transaction, and
the exporter's /metrics must show that hanging transaction. Without an installed Kafka the
command exits 2 with one line naming scripts/install-kafka.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from realhelpers import kafka_versions

from exporter.demo import HANGING_TOPIC

STARTUP_SECONDS = 90.0
"""Generous: broker start on a loaded 2-core machine; the test returns as soon as it sees it."""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_") or k == "KTE_KAFKA_HOME"}
    env.update(extra)
    return env


def _hanging(metrics_text: str) -> list[dict[str, str]]:
    return [
        dict(s.labels)
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
        if s.name == "kafka_late_transaction_age_seconds"
        and s.labels.get("classification") == "hanging"
    ]


def test_demo_on_a_real_broker_finds_its_hanging_transaction() -> None:
    version = kafka_versions()[-1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--kafka", "real", "--kafka.version", version,
         "--web.port", "0", "--duration", str(STARTUP_SECONDS), "--log.format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        base = ""
        deadline = time.monotonic() + STARTUP_SECONDS
        while not base and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if match := re.search(r"metrics:\s+(http://\S+)/metrics", line):
                base = match.group(1)
        assert base, f"demo did not print its metrics URL (exit {proc.poll()})"
        found: list[dict[str, str]] = []
        text = ""
        while not found and time.monotonic() < deadline:
            with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
                text = resp.read().decode()
            found = _hanging(text)
            if not found:
                time.sleep(0.5)
        assert [(h["topic"], h["partition"], h["transactional_id"]) for h in found] == [
            (HANGING_TOPIC, "0", "demo-hanging-1")
        ], text[-3000:]
        assert 'kafka_transaction_partition_verification_enabled{broker="1",' in text
        assert re.search(
            r'kafka_partitions_with_hanging_transactions\{broker="1",[^}]*\} 1\.0', text
        ), text[-3000:]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0


def test_demo_on_a_real_broker_without_kafka_installed_says_how_to_install(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "demo", "--kafka", "real", "--web.port", "0"],
        capture_output=True, text=True, timeout=60, env=_env(KTE_KAFKA_HOME=str(tmp_path)),
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and "scripts/install-kafka" in lines[0], lines
