"""benchmarks/soak.py and benchmarks/bench_scrape_load.py run end to end at a tiny size, so
they cannot rot (fields RESULTS.md is built from; no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # runs the soak and load benchmarks


def run(script: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    assert result["machine"]["nproc"] >= 1 and result["machine"]["date_utc"].endswith("UTC")
    return result


def test_soak_tiny() -> None:
    r = run("soak.py", "--minutes", "0.04", "--warmup-seconds", "2", "--tps", "10")
    assert r["scrape_errors"] == 0 and r["serve_exit_code"] == 0
    assert r["polls"] >= 2 and r["up_at_end"] == 1 and r["late_series_at_end"]
    assert r["workload"]["committed"] + r["workload"]["aborted"] > 0
    assert r["rss_mib_start"] > 0 and r["open_fds_start"] > 0


def test_scrape_load_tiny() -> None:
    r = run("bench_scrape_load.py", "--late", "20", "--young", "2", "--concurrency", "4",
            "--seconds", "1.5", "--baseline-seconds", "1", "--poll-interval", "0.5")
    assert r["late_series"] == 20
    for phase in ("baseline", "load"):
        assert r[phase]["errors"] == 0 and r[phase]["scrapes"] > 0
        assert r[phase]["p99_ms"] >= r[phase]["p50_ms"] > 0
    assert r["load"]["concurrency"] == 4 and r["load"]["polls_during"] >= 1
