"""Smoke tests for benchmarks/: each benchmark runs end to end at a tiny size, so they cannot rot.

They assert the output fields RESULTS.md is built from and that both pollers saw the same
simulated state (a benchmark comparing different work would be meaningless). No timing is
asserted: speed is measured by the benchmarks themselves, not by tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from waits import SUBPROCESS_HANG_S

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # runs each benchmark end to end

BENCHMARKS = REPO_ROOT / "benchmarks"
RESULT_PREFIX = "RESULT "


def _run(script: str, *args: str) -> tuple[str, list[dict[str, Any]]]:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_HANG_S,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = [
        json.loads(line[len(RESULT_PREFIX) :])
        for line in proc.stdout.splitlines()
        if line.startswith(RESULT_PREFIX)
    ]
    return proc.stdout, results


def _assert_machine(machine: dict[str, Any]) -> None:
    assert machine["nproc"] >= 1
    assert machine["cpu_model"]
    assert machine["ram_gib"] > 0
    assert machine["python"].startswith("3.")
    assert machine["date_utc"].endswith("UTC")


def test_bench_sim_scale_tiny_reports_startup_rss_and_baselines() -> None:
    stdout, results = _run(
        "bench_sim_scale.py", "--brokers", "2", "--partitions", "300", "--repeat", "1"
    )
    assert len(results) == 1
    s = results[0]
    assert s["bench"] == "sim_scale"
    _assert_machine(s["machine"])
    assert (s["brokers"], s["partitions"]) == (2, 300)
    # the seed plan: 10% idempotent, ~1% open transactions incl. long-running and hanging
    assert s["plan"]["idempotent_partitions"] == 30
    assert s["plan"]["long_running_transactions"] >= 1
    assert s["plan"]["hanging_transactions"] >= 1
    assert s["partitions_with_open_txn"] >= 3
    # the cluster served a full Metadata: our topics plus __transaction_state
    assert s["metadata_partitions"] >= 300
    for key in ("import_rss_mib", "empty_rss_mib", "full_rss_mib", "full_hwm_after_metadata_mib"):
        assert s[key] > 0, key
    assert s["full_startup_seconds"] > 0
    assert s["ratio_rss_full_vs_empty"] > 0
    assert s["ratio_rss_full_vs_import"] > 0
    assert "producer_state_rss_mib" in s
    assert s["meets_rss_target"] is True
    assert s["meets_startup_target"] is True
    assert "ratio full/no-producer-state" in stdout


def test_bench_poll_tiny_compares_both_pollers_on_the_same_state() -> None:
    stdout, results = _run(
        "bench_poll.py",
        "--brokers", "2",
        "--partitions", "300",
        "--latency-ms", "1",
        "--repeat", "1",
        "--sweep", "300",
        "--sweep-brokers", "3",
    )
    compare = [r for r in results if r["bench"] == "poll_compare"]
    sweep = [r for r in results if r["bench"] == "poll_sweep"]
    assert len(compare) == 1 and len(sweep) == 1
    c = compare[0]
    _assert_machine(c["machine"])
    ours, theirs = c["ours"], c["kafka_python"]
    assert ours["client"] == "ours" and theirs["client"] == "kafka-python"
    # same state seen by both: every partition, every open transaction, the late (hanging) ones
    for key in ("partitions", "open_transactions", "partitions_with_open_txn",
                "late_transactions", "lso_lag_partitions"):
        assert ours[key] == theirs[key], key
    # kafka-python describes the late ones; ours also open ones seen on two polls (orphans)
    assert ours["described_ids"] >= theirs["described_ids"] >= 1
    assert ours["partitions"] >= 300
    assert ours["open_transactions"] >= 3
    assert ours["late_transactions"] >= 1  # the seeded hanging transaction
    assert ours["unobserved"] == 0 and ours["request_errors"] == 0
    for client in (ours, theirs):
        assert len(client["polls"]) == 2
        for poll in client["polls"]:
            assert poll["wall_seconds"] > 0 and poll["cpu_seconds"] > 0
        assert client["hwm_mib"] > 0
        assert client["sim_cpu_seconds"] >= 0
    for key in ("ratio_cold_wall", "ratio_cold_cpu", "ratio_warm_wall", "ratio_warm_cpu",
                "ratio_peak_rss"):
        assert c[key] > 0, key
    assert "describe_producers" in theirs["calls"]
    p = sweep[0]
    assert (p["brokers"], p["partitions"]) == (3, 300)
    assert p["ours_cold_cpu_us_per_partition"] > 0
    assert p["ours_warm_cpu_us_per_partition"] > 0
    assert p["kafka_python"] is not None
    assert p["kafka_python_cold_cpu_us_per_partition"] > 0
    assert ours["metadata_reparsed"]["cpu_seconds"] > 0
    assert p["ours_metadata_reparsed_cpu_us_per_partition"] > 0
    assert p["ratio_warm_cpu"] > 0
    assert "Sweep" in stdout


def test_bench_poll_pairs_this_tree_with_and_without_gc_freeze() -> None:
    """The paired mode RESULTS.md's before/after rows come from (--baseline-tree is the same
    code path with another checkout as the second side)."""
    _, results = _run(
        "bench_poll.py", "--brokers", "2", "--partitions", "300", "--latency-ms", "1",
        "--repeat", "2", "--gc-freeze",
    )
    (r,) = results
    assert r["bench"] == "poll_vs_baseline_tree"
    _assert_machine(r["machine"])
    for side in ("this", "this_gc_freeze"):
        assert len(r[f"{side}_cold_cpu_seconds_all"]) == 2  # --repeat fresh processes each
        assert r[f"{side}_warm_cpu_seconds"] > 0 and r[f"{side}_cold_cpu_us_per_partition"] > 0
        assert 0 < r[f"{side}_hwm_mib_after_polls"] <= r[f"{side}_hwm_mib"]
        assert r[f"{side}_request_errors"] == 0
    assert r["this_open_transactions"] == r["this_gc_freeze_open_transactions"] >= 3
    assert r["ratio_this_gc_freeze_warm_cpu_seconds"] > 0
    assert "baseline_warm_cpu_seconds" not in r


def test_profile_poll_tiny_reports_gc_share_breakdown_and_top_functions() -> None:
    stdout, results = _run(
        "profile_poll.py", "--brokers", "2", "--partitions", "300", "--latency-ms", "1",
        "--top", "5",
    )
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "profile_poll"
    _assert_machine(r["machine"])
    assert len(r["warm_polls"]) == 2
    for poll in r["warm_polls"]:
        assert poll["cpu_seconds"] > 0
        assert 0 <= poll["gc_cpu_seconds"] <= poll["cpu_seconds"] + 0.01
    assert r["warm_cpu_seconds_gc_disabled"] > 0
    b = r["breakdown"]
    assert b["metadata_bytes"] > 0 and b["describe_producers_requests"] >= 1
    assert b["metadata_decode_cpu_seconds"] >= 0 and b["parse_metadata_cpu_seconds"] >= 0
    assert 1 <= len(r["top_own_time"]) <= 5
    assert all(0 <= row["own_share"] <= 1 for row in r["top_own_time"])
    assert "top functions by own time" in stdout


def test_bench_scrape_metrics_tiny_reports_renders_and_baselines() -> None:
    stdout, results = _run("bench_scrape_metrics.py", "--late", "50", "--repeat", "2", "--http",
                           "--http-requests", "5")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "scrape_metrics"
    _assert_machine(r["machine"])
    assert set(r["variants"]) == {"empty", "gauge", "late", "late_full"}
    v = r["variants"]
    # 50 late series (plus max-duration and LSO-lag series in late_full): bodies grow so
    assert v["empty"]["bytes"] < v["late"]["bytes"] < v["late_full"]["bytes"]
    assert all(x["median_ms"] > 0 for x in v.values())
    assert r["ratio_late_vs_gauge"] > 0 and r["ratio_late_vs_empty"] > 0
    assert "late/gauge" in stdout
    served = r["served"]
    assert set(served) == {"uncached", "cached", "after_publish", "after_publish_prerendered",
                           "cached_gzip", "cached_gzip_prometheus", "fresh_only",
                           "full_uncached", "full_cached"}
    assert served["fresh_only"]["bytes"] < served["cached"]["bytes"]
    assert r["ratio_cached_gzip_vs_cached"] > 0
    # the same registry answers with the same body size, cached or not (+- process metrics)
    assert abs(served["cached"]["bytes"] - served["uncached"]["bytes"]) < 200
    assert served["cached_gzip"]["bytes"] < served["cached"]["bytes"]
    assert r["ratio_cached_vs_uncached"] > 0 and "cached/uncached" in stdout
    assert r["ratio_cached_gzip_prometheus_vs_fresh_only"] > 0
    http = r["http"]  # whole requests to the real server: the late series really served
    assert http["late_series_in_body"] == 50 and http["requests_per_block"] == 5
    assert http["metrics_gzip_prometheus"]["bytes"] > http["healthz"]["bytes"] == 3
    assert http["refused_503_and_repeated"] == 0
    assert "/metrics minus /healthz" in stdout


def test_bench_publish_render_tiny_compares_with_the_previous_cache() -> None:
    stdout, results = _run("bench_publish_render.py", "--clusters", "3", "--late", "20",
                           "--minutes", "0.5")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "publish_render"
    _assert_machine(r["machine"])
    s = r["scenarios"]
    assert set(s) == {"never_scraped", "scraped", "previous_scraped"}
    assert s["never_scraped"]["scrapes"] == 0 and s["scraped"]["scrapes"] == 2
    assert s["scraped"]["publishes"] == s["never_scraped"]["publishes"] == 9
    assert s["scraped"]["body_checked_against_prometheus_client"] is True
    assert r["ratio_scraped_vs_previous"] > 0 and "scraped/previous" in stdout


def test_bench_serve_scraped_tiny_measures_both_phases_of_one_exporter() -> None:
    stdout, results = _run("bench_serve_scraped.py", "--clusters", "2", "--partitions", "200",
                           "--late", "3", "--seconds", "4", "--poll-interval", "1",
                           "--scrape-interval", "1.5")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "serve_scraped"
    _assert_machine(r["machine"])
    assert r["never_scraped"]["scrapes"] == 0 and r["scraped"]["scrapes"] >= 2
    assert r["scraped"]["late_series_in_last_scrape"] == 2 * 3  # both clusters see the 3
    assert r["never_scraped"]["cpu_seconds"] > 0
    assert r["ratio_scraped_vs_never_scraped"] > 0 and "scraped/never_scraped" in stdout


@pytest.mark.system_tools  # Java (Spark)
def test_bench_spark_history_tiny_runs_both_engines_on_the_same_history() -> None:
    stdout, results = _run("bench_spark_history.py", "--rows", "20000", "--clusters", "1",
                           "--polls", "400")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "spark_history"
    _assert_machine(r["machine"])
    assert 0 < r["rows"] <= 20000 and r["incidents"] > 0
    assert r["pandas_seconds"] > 0 and r["spark_job_seconds"] > 0
    assert r["ratio_spark_over_pandas"] > 0
    assert "in-process (pandas):" in stdout and "spark (local[2]):" in stdout


@pytest.mark.system_tools  # Java (Spark)
def test_bench_spark_scan_tiny_finds_the_same_late_clusters_on_every_path() -> None:
    stdout, results = _run("bench_spark_scan.py", "--clusters", "3", "--cores", "1",
                           "--latency-ms", "1", "--repeat", "1")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "spark_scan"
    _assert_machine(r["machine"])
    assert r["clusters"] == 3 and r["late_clusters"] == 1  # one hanging on every fifth
    assert [run["executor_cores"] for run in r["spark"]] == [1]
    assert r["threads_seconds"] > 0 and r["sequential_seconds"] > 0
    assert "spark local[1]:" in stdout


def test_bench_scrape_load_tiny_scrapes_a_real_serve_without_errors() -> None:
    stdout, results = _run("bench_scrape_load.py", "--seconds", "2", "--baseline-seconds", "1",
                           "--late", "5", "--young", "2", "--concurrency", "2",
                           "--poll-interval", "1")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "scrape_load"
    _assert_machine(r["machine"])
    assert r["late_series"] == 5
    for phase in ("baseline", "load"):
        assert r[phase]["scrapes"] > 0 and r[phase]["errors"] == 0
        assert r[phase]["exporter_up_after"] == 1.0
    assert r["load"]["concurrency"] == 2 and r["p50_ratio"] > 0 and "ratios:" in stdout


def test_soak_tiny_samples_rss_and_fds_and_ends_serve_cleanly() -> None:
    stdout, results = _run("soak.py", "--minutes", "0.1", "--sample-seconds", "2",
                           "--warmup-seconds", "1", "--tps", "2")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "soak"
    _assert_machine(r["machine"])
    assert len(r["samples"]) >= 2 and r["rss_mib_max"] > 0 and r["open_fds_max"] > 0
    assert r["scrapes"] > 0 and r["scrape_errors"] == 0
    assert r["up_at_end"] == 1.0 and r["late_series_at_end"] is True
    assert r["serve_exit_code"] == 0 and r["workload"]["committed"] > 0
    assert "soak 0.1 min: RSS" in stdout


def test_bench_scan_process_tiny_times_scan_and_its_baselines() -> None:
    baseline = REPO_ROOT  # the same tree as its own "before" side: the pairing still runs
    stdout, results = _run("bench_scan_process.py", "--partitions", "50", "--late", "2",
                           "--young", "2", "--repeat", "2", "--baseline-root", str(baseline),
                           "--default-scan")
    assert len(results) == 1
    r = results[0]
    assert r["bench"] == "scan_process"
    _assert_machine(r["machine"])
    assert (r["partitions"], r["late"], r["young"], r["repeat"]) == (50, 2, 2, 2)
    assert set(r["commands"]) == {"scan", "scan_baseline_root", "scan_default", "python_pass"}
    assert all(c["wall_median_s"] > 0 and c["cpu_median_s"] > 0 for c in r["commands"].values())
    assert r["ratio_scan_vs_python_pass_cpu"] > 0
    assert r["ratio_scan_vs_baseline_wall"] > 0 and "paired ratios" in stdout


def test_bench_poll_scale_tiny_polls_without_lost_requests_against_both_simulators(
    tmp_path: Path,
) -> None:
    # The baseline tree is this checkout's simulator copied aside: the code path is the same.
    import shutil

    shutil.copytree(REPO_ROOT / "simulator" / "kafka_sim", tmp_path / "simulator" / "kafka_sim")
    stdout, results = _run(
        "bench_poll_scale.py", "--brokers", "2", "--partitions", "400", "--polls", "2",
        "--sim-baseline-tree", str(tmp_path), "--baseline-polls", "2",
    )
    (s,) = results
    assert s["bench"] == "poll_scale"
    _assert_machine(s["machine"])
    assert s["this"]["sim"]["kafka_sim_from"] != s["baseline"]["sim"]["kafka_sim_from"]
    for side in ("this", "baseline"):
        polls = s[side]["polls"]
        assert len(polls) == 2
        assert all(p["partitions"] >= 400 and p["unobserved"] == 0 for p in polls)
        assert all(p["lost_requests"] == 0 and p["request_errors"] == {} for p in polls)
        assert s[side]["request_timeout_seconds"] == 10.0  # the shipped default
        assert s[side]["hwm_mib"] > 0
    assert s["meets_zero_lost"] is True
    # CPU is read in clock ticks (10 ms): at this size a side may take none, so a ratio of 0
    # (or None, when the baseline took none) is a real reading here, not a broken field.
    ratio = s["ratio_warm_sim_cpu_seconds"]
    assert ratio is None or (isinstance(ratio, float) and ratio >= 0)
    assert "targets: zero lost True" in stdout


def test_bench_poll_scale_polls_with_a_baseline_exporter_tree_in_the_same_run(
    tmp_path: Path,
) -> None:
    # The baseline tree is this checkout's exporter and benchmarks copied aside.
    import shutil

    for part in ("exporter", "benchmarks"):
        shutil.copytree(REPO_ROOT / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    stdout, results = _run(
        "bench_poll_scale.py", "--brokers", "2", "--partitions", "300", "--polls", "2",
        "--baseline-tree", str(tmp_path), "--repeat", "2",
    )
    (s,) = results
    runs = s["runs"]
    assert [len(runs["this"]), len(runs["baseline"])] == [2, 2]
    assert {r["exporter_from"] for r in runs["baseline"]} == {str(tmp_path.resolve())}
    assert {r["exporter_from"] for r in runs["this"]} == {str(REPO_ROOT.resolve())}
    for side in ("this", "baseline"):
        for run in runs[side]:
            assert all(p["partitions"] >= 300 and p["lost_requests"] == 0 for p in run["polls"])
    ratio = s["ratio_exporter_warm_cpu_seconds"]
    assert ratio is None or (isinstance(ratio, float) and ratio >= 0)
    assert "ratios this/baseline exporter" in stdout


def test_bench_blocked_groups_tiny_counts_no_group_request_without_late_transactions() -> None:
    stdout, results = _run("bench_blocked_groups.py", "--late", "0", "3", "--partitions", "20",
                           "--open", "2", "--groups", "2", "--repeat", "1")
    assert [r["late_partitions"] for r in results] == [0, 3]
    idle, late = results
    _assert_machine(idle["machine"])
    assert idle["group_requests"] == {} and idle["committed_offsets_read"] == 0
    assert idle["requests_with_groups"] == idle["requests_without_groups"]
    assert late["group_requests"]["ListGroups"] == 3
    assert late["group_requests"]["FindCoordinator(group)"] == 1
    assert late["committed_offsets_read"] == 2 * 3
    assert late["poll_cpu_seconds_with_groups"] > 0 and "extra ms/late" in stdout


def test_bench_blocked_min_age_tiny_reads_nothing_while_young_and_the_groups_once_old() -> None:
    stdout, results = _run("bench_blocked_min_age.py", "--partitions", "10", "--open", "3",
                           "--groups", "2", "--repeat", "1")
    assert [r["scenario"] for r in results] == ["young", "old"]
    young, old = results
    _assert_machine(young["machine"])
    assert young["group_requests"] == {} and young["blocked_groups_reported"] == 0
    assert young["requests_identical"] is True
    assert old["group_requests"]["ListGroups"] == 3
    assert old["group_requests"]["FindCoordinator(group)"] == 1
    assert old["blocked_groups_reported"] == 2 * 3
    assert old["requests_baseline"].get("ListGroups") is None  # the baseline reads no group
    assert old["poll_cpu_seconds_min_age"] > 0 and "extra ms/txn" in stdout


def test_bench_idle_crowd_tiny_scrapes_a_real_serve_with_and_without_the_crowd() -> None:
    _, results = _run("bench_idle_crowd.py", "--crowd", "30", "--seconds", "1.5", "--tls")
    (result,) = results
    assert result["crowd_connections_opened"] >= 30
    for phase in ("baseline", "with_crowd"):
        assert result[phase]["scrapes"] >= 3
        assert result[phase]["peak_rss_mib"] > 0
        assert result[phase]["peak_threads"] > 0
    assert {"ratio_p99", "ratio_rss", "machine", "load_average"} <= result.keys()


def test_bench_config_load_tiny_judges_both_sizes_against_the_bare_parse() -> None:
    _, results = _run("bench_config_load.py", "--sizes", "200,2000", "--repeat", "1")
    (result,) = results
    assert result["clusters_scaling"] == 10.0
    assert result["exporter_cpu_scaling"] > 0
    small, large = result["sizes"]
    assert small["clusters"] == 200 and "pure_python" in small
    assert large["exporter"]["cpu_seconds_median"] > 0 and large["cpu_ratio_exporter_vs_parse"]
    assert result["machine"]["nproc"] and result["machine_load_average_at_start"]


def test_bench_idle_crowd_tiny_with_a_crowd_that_reconnects_at_once() -> None:
    _, results = _run("bench_idle_crowd.py", "--crowd", "40", "--seconds", "1.5",
                      "--reopen-at-once", "--kinds", "idle,http09")
    (result,) = results
    assert result["reopen_at_once"] is True and result["crowd_kinds"] == ["idle", "http09"]
    assert result["crowd_connections_opened"] >= 40  # http09 lines are answered, reopened
    assert result["with_crowd"]["scrapes"] >= 3


def test_bench_password_guessing_tiny_scrapes_alone_and_while_guessing() -> None:
    _, results = _run("bench_password_guessing.py", "--guessers", "4", "--seconds", "1.5",
                      "--cost", "4")
    (result,) = results
    assert result["alone"]["guesses_by_status"] == {}
    assert sum(result["guessing"]["guesses_by_status"].values()) > 0
    for phase in ("alone", "guessing"):
        assert result[phase]["first_scrape_ms"] is not None
        assert result[phase]["scrapes"] >= 3
    assert {"ratio_p50", "machine", "load_average"} <= result.keys()


def test_bench_many_clusters_tiny_scrapes_while_every_poll_waits_on_its_broker() -> None:
    _, results = _run("bench_many_clusters.py", "--clusters", "30", "--seconds", "1.5",
                      "--scrape-interval", "0.2")
    (result,) = results
    _assert_machine(result["machine"])
    for side, clusters in (("baseline", 1), ("many", 30)):
        assert result[side]["clusters"] == clusters
        assert result[side]["scrapes"] >= 3 and result[side]["failed"] == 0
        assert result[side]["alive_at_end"] is True
        assert result[side]["threads"] >= 1
    assert result["broker"] == "silent"
