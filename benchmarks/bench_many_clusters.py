"""Scrapes while thousands of clusters poll: does /metrics still answer promptly?

`serve` with `--clusters` (20,000) clusters, every one pointing at a broker that never answers
(a listening port nobody reads: each poll waits out its request timeout) or that refuses
(`--broker refused`: each poll fails at once). From the start, /metrics is scraped every
`--scrape-interval` (0.5 s) for `--seconds` (60); each scrape's time to the full body is
recorded (a scrape that takes more than 30 s, or fails, counts as failed). The same run first
measures the baseline: the same exporter with one cluster. Also recorded: the exporter's
threads, descriptors and peak RSS at the end, and the load average.

Run: python benchmarks/bench_many_clusters.py [--clusters 20000] [--seconds 60]
     [--broker silent|refused] [--exporter-root DIR]   # another revision, for a before/after pair
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

SCRAPE_TIMEOUT_SECONDS = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(path: Path, clusters: int, bootstrap: str, port: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write(f"web: {{listen_address: 127.0.0.1, port: {port}}}\nclusters:\n")
        for i in range(clusters):
            out.write(f"  - {{name: c{i}, bootstrap_servers: ['{bootstrap}'], "
                      "poll_interval_seconds: 30, request_timeout_seconds: 20}\n")


def _scrape(port: int) -> float | None:
    began = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=SCRAPE_TIMEOUT_SECONDS) as response:
            response.read()
    except OSError:
        return None
    return time.monotonic() - began


def measure(clusters: int, bootstrap: str, seconds: float, interval: float,
            exporter_root: Path) -> dict[str, Any]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "clusters.yaml"
        _config(config, clusters, bootstrap, port)
        env = {**os.environ, "PYTHONPATH": str(exporter_root)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config),
             "--log.level", "error"],
            cwd=exporter_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            times: list[float] = []
            failed = 0
            started_by = time.monotonic() + 600
            while _scrape(port) is None:  # listening yet?
                assert proc.poll() is None, f"serve exited with {proc.returncode}"
                assert time.monotonic() < started_by, "serve never answered"
                time.sleep(0.2)
            deadline = time.monotonic() + seconds  # the window scrapes, start-up apart
            while time.monotonic() < deadline:
                took = _scrape(port)
                if took is None:
                    failed += 1
                else:
                    times.append(took)
                time.sleep(interval)
            status = f"/proc/{proc.pid}/status"
            threads = common.proc_status_kib("Threads", status)  # a count, read the same way
            descriptors = len(os.listdir(f"/proc/{proc.pid}/fd"))
            hwm_mib = common.proc_status_kib("VmHWM", status) / 1024
            alive = proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    times.sort()
    return {
        "clusters": clusters,
        "scrapes": len(times) + failed,
        "failed": failed,
        "under_1s": sum(1 for t in times if t < 1.0),
        "p50_s": round(statistics.median(times), 3) if times else None,
        "p99_s": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3) if times else None,
        "max_s": round(times[-1], 3) if times else None,
        "threads": threads,
        "descriptors": descriptors,
        "peak_rss_mib": round(hwm_mib, 1),
        "alive_at_end": alive,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrape-interval", type=float, default=0.5)
    parser.add_argument("--broker", choices=("silent", "refused"), default="silent")
    parser.add_argument("--exporter-root", type=Path, default=common.REPO_ROOT)
    args = parser.parse_args()
    with socket.socket() as silent:
        if args.broker == "silent":
            silent.bind(("127.0.0.1", 0))
            silent.listen(4096)
            bootstrap = f"127.0.0.1:{silent.getsockname()[1]}"
        else:
            bootstrap = "127.0.0.1:1"
        load_before = common.load_average()
        baseline = measure(1, bootstrap, args.seconds, args.scrape_interval, args.exporter_root)
        many = measure(args.clusters, bootstrap, args.seconds, args.scrape_interval,
                       args.exporter_root)
    common.emit({
        "bench": "many_clusters",
        "broker": args.broker,
        "machine": common.machine_info(),
        "load_before": load_before,
        "load_after": common.load_average(),
        "baseline": baseline,
        "many": many,
        "p50_ratio": common.ratio(many["p50_s"] or 0.0, baseline["p50_s"] or 0.0),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
