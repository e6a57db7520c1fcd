"""Smoke test of benchmarks/bench_producer_states.py at a tiny size: the fields
RESULTS.md's producer-states section is built from, and both strategies saw the same open
transactions. No timing is asserted."""

from __future__ import annotations

import pytest
from test_benchmarks_smoke import _assert_machine, _run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("written", ["0", "0.5"])
def test_bench_producer_states_tiny_reports_both_strategies(written: str) -> None:
    _, results = _run("bench_producer_states.py", "--partitions", "200", "--brokers", "2",
                      "--states", "0,10", "--polls", "1", "--written", written)
    assert [r["mean_states"] for r in results] == [0.0, 10.0]
    for r in results:
        _assert_machine(r["machine"])
        full, screened = r["full"], r["screened"]
        assert screened["open"] == full["open"] == r["open_transactions"] >= 1
        assert full["unobserved"] == screened["unobserved"] == 0
        for side in (full, screened):
            assert side["bytes"] > 0 and side["exporter_cpu_s"] > 0 and side["wall_s"] > 0
    _, crowded = results
    assert crowded["states"] == 2000
    for r in results:  # every partition screened, with producer states or without
        full, screened = r["full"], r["screened"]
        assert screened["describe_producers_bytes"] < full["describe_producers_bytes"]
        assert screened["requests_by_api"]["FetchRequest"] == 2  # one per leader
        assert "FetchRequest" not in full["requests_by_api"]
        moved = screened["fetch_bytes"]
        assert (moved > 1000) == (written != "0"), moved  # written partitions are reported
