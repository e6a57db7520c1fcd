"""Smoke test of benchmarks/bench_producer_states_real.py at a tiny size, on each
Kafka version of the matrix: it seeds what it says, every strategy finds the open transaction,
and the broker's own figures are there (its CPU from /proc, Kafka's RequestMetrics through
JmxTool, whose names differ across versions). No timing is asserted. The benchmark starts and
stops its own broker."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from test_benchmarks_smoke import BENCHMARKS, REPO_ROOT, RESULT_PREFIX, _assert_machine

pytestmark = pytest.mark.slow

PARTITIONS = 20
STATES = 10


def run_bench(kafka_version: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_producer_states_real.py"),
         "--kafka-version", kafka_version, "--partitions", str(PARTITIONS),
         "--states", str(STATES), "--polls", "1", "--warmup", "0", "--written", "0.1",
         "--metadata-every-poll-too"],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [
        json.loads(line[len(RESULT_PREFIX) :])
        for line in proc.stdout.splitlines()
        if line.startswith(RESULT_PREFIX)
    ]


def test_real_producer_states_bench_tiny(kafka_version: str) -> None:
    (result,) = run_bench(kafka_version)
    _assert_machine(result["machine"])
    assert result["machine"]["kafka_version"] == kafka_version
    seeding = result["seeding"]
    assert seeding["states"] == PARTITIONS * STATES
    assert seeding["producers"] == STATES
    full, screened = result["full"], result["screened"]
    every_poll = result["screened_metadata_every_poll"]
    assert full["open"] == screened["open"] == every_poll["open"]
    assert every_poll["open"] == seeding["open_transactions"] == 1
    for side in (full, screened, every_poll):
        assert side["bytes"] > 0 and side["exporter_cpu_s"] > 0 and side["wall_s"] > 0
        assert set(side["broker_cpu_by_threads_s"]) == {"request_threads", "gc", "jit", "other"}
        local = side["broker_request_metrics"]["LocalTimeMs"]
        assert local["Produce"]["requests_per_poll"] == PARTITIONS // 10  # --written 0.1
    # Warm polls reuse the cold poll's Metadata answer (nothing changed); the baseline asks it
    # every poll, and the broker counts it.
    assert "MetadataRequest" not in full["requests_by_api"]
    assert "MetadataRequest" not in screened["requests_by_api"]
    assert every_poll["requests_by_api"]["MetadataRequest"] == 1
    local = every_poll["broker_request_metrics"]["LocalTimeMs"]
    assert local["Metadata"]["requests_per_poll"] >= 1
    assert (
        full["broker_request_metrics"]["LocalTimeMs"]["DescribeProducers"]["requests_per_poll"] >= 1
    )
    assert screened["describe_producers_bytes"] < full["describe_producers_bytes"]
