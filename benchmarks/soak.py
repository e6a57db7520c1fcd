"""Soak: the real `serve` process against a SimCluster with a churning transactional workload.

Why: a daemon that leaks a socket per poll, a task per failed request or a cache entry per
finished transaction looks fine in a 5 s test and dies after a week. This runs `serve` (as a
subprocess, polling every second) for `--minutes` while `kafka_sim.workload.Workload` commits,
aborts and keeps long-running transactions open, plus one hanging transaction so a late series
exists. /metrics is scraped every 2 s. The serve process's RSS (VmRSS) and open file descriptors
(/proc/<pid>/fd) are sampled at start (after a warm-up) and every `--sample-seconds`; the
result is one `RESULT {json}` line with start/end/max numbers, scrape and poll counts.

With `--clusters N` (N > 1) the one `serve` process polls N simulated clusters (each its own
SimCluster with its own workload and hanging transaction), configured by a YAML file as an
operator would; polls and `up` are then summed over the clusters.

    python benchmarks/soak.py --minutes 30
    python benchmarks/soak.py --minutes 30 --tls-auth   # /metrics over HTTPS + basic auth
    python benchmarks/soak.py --minutes 30 --clusters 20 --poll-interval 5s --tps 1

With `--tracemalloc-every S` the serve process runs under tracemalloc and writes a snapshot
(after a collection) every S seconds; the result gives the traced size of each and the 10
largest differences by line from the first snapshot to the last: what RSS growth is made of.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, emit, machine_info, read_listen_url
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from kafka_sim.workload import Workload

TRACED_SERVE = """
import gc, os, runpy, sys, threading, time, tracemalloc
tracemalloc.start()
out, every = sys.argv[1], float(sys.argv[2])
sys.argv = ["kafka-txn-exporter", *sys.argv[3:]]
def dump():
    n = 0
    while True:
        time.sleep(every)
        gc.collect()
        path = os.path.join(out, f"{n:04d}.snap")
        tracemalloc.take_snapshot().dump(path + ".part")  # whole, or not there: serve may
        os.replace(path + ".part", path)                   # stop mid-dump
        n += 1
threading.Thread(target=dump, daemon=True).start()
runpy.run_module("exporter", run_name="__main__", alter_sys=True)
"""

TOPIC = "soak"
HANG_TOPIC = "soak-hang"


def proc_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric_value(text: str, prefix: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return None


def metric_sum(text: str, prefix: str) -> float | None:
    """The sum over every series starting with `prefix` (one per cluster); None if none."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(prefix)]
    return sum(values) if values else None


def metric_count(text: str, prefix: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith(prefix))


def clusters_config(bootstraps: list[str], poll_interval: str) -> str:
    """The YAML an operator would write for these clusters (names soak-00, soak-01, ...)."""
    lines = ["clusters:"]
    for i, bootstrap in enumerate(bootstraps):
        lines += [
            f"  - name: soak-{i:02d}",
            f'    bootstrap_servers: "{bootstrap}"',
            f"    poll_interval_seconds: {poll_interval}",
            "    request_timeout_seconds: 5s",
            "    late_buffer_seconds: 10s",
            "    min_reported_duration_seconds: 0",
        ]
    lines += ["log:", "  format: json", "  level: warning"]
    return "\n".join(lines) + "\n"



def run(minutes: float, sample_seconds: float, tps: float, warmup_seconds: float,
        tls_auth: bool = False, clusters: int = 1, poll_interval: str = "1s",
        tracemalloc_every: float = 0.0) -> dict[str, Any]:
    machine = machine_info()
    web_dir = tempfile.mkdtemp(prefix="soak-web-") if tls_auth else None
    context: Any = None
    headers: dict[str, str] = {}
    web_env: dict[str, str] = {}
    if web_dir:
        from bench_scrape_load import tls_auth_setup

        web_config, context, headers["Authorization"] = tls_auth_setup(Path(web_dir))
        web_env["KTE_WEB_CONFIG_FILE"] = web_config
    config_dir = tempfile.mkdtemp(prefix="soak-config-")
    with ExitStack() as stack:
        sims = [stack.enter_context(SimCluster(
            brokers=3,
            topics={TOPIC: 12, HANG_TOPIC: 1},
            broker_config={
                "transaction.max.timeout.ms": "60000",
                "transaction.partition.verification.enable": "false",
            },
        )) for _ in range(clusters)]
        for i, sim in enumerate(sims):
            hanging_transaction(sim.bootstrap_servers, f"soak-hang-{i + 1}", HANG_TOPIC, 0,
                                backdate_ms=400_000)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
        if clusters == 1:
            env.update(
                KTE_CLUSTER_NAME="soak",
                KTE_CLUSTER_BOOTSTRAP_SERVERS=sims[0].bootstrap_servers,
                KTE_CLUSTER_POLL_INTERVAL_SECONDS=poll_interval,
                KTE_CLUSTER_REQUEST_TIMEOUT_SECONDS="5s",
                KTE_CLUSTER_LATE_BUFFER_SECONDS="10s",
                KTE_CLUSTER_MIN_REPORTED_DURATION_SECONDS="0",
                KTE_LOG_FORMAT="json",
                KTE_LOG_LEVEL="warning",
                **web_env,
            )
            config_args: list[str] = []
        else:
            config_file = Path(config_dir) / "soak.yaml"
            config_file.write_text(clusters_config([sim.bootstrap_servers for sim in sims],
                                                   poll_interval))
            env.update(web_env)
            config_args = ["--config", str(config_file)]
        # stderr is read once for the URL, then drained to a file so the pipe never fills.
        launcher = [sys.executable, "-m", "exporter"]
        if tracemalloc_every:
            launcher = [sys.executable, "-c", TRACED_SERVE, config_dir, str(tracemalloc_every)]
        proc = subprocess.Popen(
            [*launcher, "serve", *config_args,
             "--web.listen-address", "127.0.0.1", "--web.port", "0", "--log.level", "info"],
            env=env, cwd=REPO_ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        workloads = [Workload(
            sim.bootstrap_servers, TOPIC, partitions=range(12), transactions_per_second=tps,
            long_running_ms=20_000, max_open_long_running=5, seed=7 + i,
        ) for i, sim in enumerate(sims)]
        scrapes = scrape_errors = 0
        samples: list[dict[str, Any]] = []
        try:
            url = read_listen_url(proc)
            assert proc.stderr is not None
            drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
            for workload in workloads:
                workload.start()
            began = time.monotonic()
            end = began + warmup_seconds + minutes * 60
            next_sample = began + warmup_seconds
            last_text = ""
            while time.monotonic() < end:
                try:
                    request = urllib.request.Request(url, headers=headers)
                    with urllib.request.urlopen(request, timeout=5, context=context) as resp:
                        last_text = resp.read().decode()
                    scrapes += 1
                except OSError:
                    scrape_errors += 1
                now = time.monotonic()
                if now >= next_sample:
                    samples.append({
                        "t_seconds": round(now - began, 1),
                        "rss_mib": round(proc_rss_kib(proc.pid) / 1024, 1),
                        "open_fds": proc_fds(proc.pid),
                        "polls": metric_sum(
                            last_text, 'kafka_txn_exporter_poll_duration_seconds_count{'),
                        "load_1min": round(os.getloadavg()[0], 2),
                    })
                    print(json.dumps(samples[-1]), flush=True)
                    next_sample += sample_seconds
                time.sleep(2.0)
            up = metric_sum(last_text, "kafka_txn_exporter_up{")
            late_series = metric_count(last_text, 'kafka_late_transaction_age_seconds{')
        finally:
            for workload in workloads:
                workload.stop()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = -9
        drain.wait(timeout=5)
    if web_dir:
        shutil.rmtree(web_dir, ignore_errors=True)
    traced = traced_growth(Path(config_dir)) if tracemalloc_every else None
    shutil.rmtree(config_dir, ignore_errors=True)
    first, last = samples[0], samples[-1]
    return {
        "bench": "soak",
        "machine": machine,
        "minutes": minutes,
        "warmup_seconds": warmup_seconds,
        "clusters": clusters,
        "poll_interval": poll_interval,
        "workload_tps": tps,  # per cluster
        "tls_basic_auth": tls_auth,
        "workload": {
            "committed": sum(w.stats.committed for w in workloads),
            "aborted": sum(w.stats.aborted for w in workloads),
            "long_running_started": sum(w.stats.long_running_started for w in workloads),
            "errors": sum(w.stats.errors for w in workloads),
        },
        "polls": last["polls"],
        "scrapes": scrapes,
        "scrape_errors": scrape_errors,
        "up_at_end": up,
        "late_series_at_end": late_series == clusters,  # every cluster's hanging one
        "late_series_count_at_end": late_series,
        "rss_mib_start": first["rss_mib"],
        "rss_mib_end": last["rss_mib"],
        "rss_mib_max": max(s["rss_mib"] for s in samples),
        "open_fds_start": first["open_fds"],
        "open_fds_end": last["open_fds"],
        "open_fds_max": max(s["open_fds"] for s in samples),
        "samples": samples,
        "serve_exit_code": code,
        **({"tracemalloc": traced} if traced is not None else {}),
    }


def traced_growth(directory: Path) -> dict[str, Any]:
    """Traced size of every snapshot and what grew most from the first to the last."""
    import tracemalloc

    paths = sorted(directory.glob("*.snap"))
    if len(paths) < 2:
        return {"snapshots": len(paths)}
    first, last = (tracemalloc.Snapshot.load(str(p)) for p in (paths[0], paths[-1]))
    sizes = [round(sum(t.size for t in tracemalloc.Snapshot.load(str(p)).traces) / 2**20, 3)
             for p in paths]
    return {
        "snapshots": len(paths),
        "traced_mib": sizes,
        "top_differences_first_to_last": [
            {"where": str(d.traceback[0]), "size_diff_kib": round(d.size_diff / 1024, 1),
             "count_diff": d.count_diff}
            for d in last.compare_to(first, "lineno")[:10]
        ],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--tps", type=float, default=5.0,
                        help="workload transactions/second (per cluster)")
    parser.add_argument("--clusters", type=int, default=1,
                        help="simulated clusters polled by the one serve process")
    parser.add_argument("--poll-interval", default="1s", help="every cluster's poll interval")
    parser.add_argument("--tracemalloc-every", type=float, default=0.0, metavar="SECONDS",
                        help="run serve under tracemalloc, a snapshot every SECONDS")
    parser.add_argument("--warmup-seconds", type=float, default=30.0)
    parser.add_argument("--tls-auth", action="store_true",
                        help="serve /metrics over HTTPS with basic auth (bcrypt) and scrape so")
    args = parser.parse_args(argv)
    result = run(args.minutes, args.sample_seconds, args.tps, args.warmup_seconds,
                 args.tls_auth, args.clusters, args.poll_interval, args.tracemalloc_every)
    emit(result)
    print(f"soak {args.minutes:g} min: RSS {result['rss_mib_start']} -> {result['rss_mib_end']} MiB"
          f" (max {result['rss_mib_max']}), fds {result['open_fds_start']} -> "
          f"{result['open_fds_end']} (max {result['open_fds_max']}), polls {result['polls']}, "
          f"scrapes {result['scrapes']} ({result['scrape_errors']} errors), "
          f"workload {result['workload']}")
    return 0 if result["scrape_errors"] == 0 and result["serve_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
