"""Smoke runs of the poller-memory benchmarks (tiny sizes): the multi-cluster soak with its
tracemalloc snapshots, and the Metadata-change RSS benchmark. What they print is what
benchmarks/RESULTS.md quotes, so a field that goes missing or a run that fails is caught."""

from __future__ import annotations

from test_benchmarks_smoke import _assert_machine, _run


def test_soak_of_several_clusters_polls_each_and_reports_traced_growth() -> None:
    stdout, results = _run("soak.py", "--minutes", "0.15", "--sample-seconds", "3",
                           "--warmup-seconds", "3", "--tps", "1", "--clusters", "2",
                           "--poll-interval", "1s", "--tracemalloc-every", "3")
    (r,) = results
    _assert_machine(r["machine"])
    assert r["clusters"] == 2 and r["poll_interval"] == "1s"
    assert r["up_at_end"] == 2.0  # summed over the clusters: both up
    assert r["late_series_at_end"] is True and r["late_series_count_at_end"] == 2
    assert r["scrape_errors"] == 0 and r["serve_exit_code"] == 0
    assert r["workload"]["committed"] > 0 and r["polls"] >= 4
    traced = r["tracemalloc"]
    assert traced["snapshots"] >= 2 and len(traced["traced_mib"]) == traced["snapshots"]
    assert all(size > 1 for size in traced["traced_mib"])  # the exporter's own heap, traced
    assert traced["top_differences_first_to_last"]
    assert "soak 0.15 min: RSS" in stdout


def test_bench_metadata_rss_tiny_moves_leaders_and_samples_each_poll() -> None:
    _, results = _run("bench_metadata_rss.py", "--brokers", "3", "--partitions", "600",
                      "--warm-polls", "2", "--changes", "2", "--steady-polls", "1",
                      "--tracemalloc", "--malloc-trim")
    (r,) = results
    _assert_machine(r["machine"])
    polls = [s["poll"] for s in r["samples"]]
    assert polls == ["cold", "warm", "change 1", "steady", "change 2", "steady"]
    assert all(s["partitions"] >= 600 and s["request_errors"] == 0 for s in r["samples"])
    assert all(s["peak_mib"] >= s["rss_mib"] > 0 for s in r["samples"])
    assert all(s["rss_after_malloc_trim_mib"] > 0 and s["traced_mib"] > 0
               for s in r["samples"])
    assert r["peak_mib_max"] >= r["peak_mib_max_change"] > 0
    assert r["tracemalloc_top_differences"]
