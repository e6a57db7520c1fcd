"""/metrics while an idle crowd holds connections open.

The real exporter (`python -m exporter serve`, default HTTP limits, a cluster that does not
answer: the server's work is what is measured) is scraped every `--scrape-every` seconds for
`--seconds`, first alone (the baseline), then while `--crowd` connections of
benchmarks/_crowd.py (slowloris, HTTP/0.9 lines and, with --tls, half-open TLS handshakes) are
kept open against it. Reports, per phase: scrapes answered within 1 s, latency p50/p99/max, the
exporter's RSS and threads (from /proc), and the ratios crowd/baseline.

Run: python benchmarks/bench_idle_crowd.py                    # 1,000 connections, 2 x 60 s
     python benchmarks/bench_idle_crowd.py --tls              # HTTPS + basic auth
     python benchmarks/bench_idle_crowd.py --crowd 50 --seconds 3   # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common
import bench_scrape_load as load
from _crowd import Crowd

ANSWERED_WITHIN_SECONDS = 1.0


def _proc(pid: int, field: str) -> int:
    return common.proc_status_kib(field, f"/proc/{pid}/status")


def _phase(url: str, pid: int, seconds: float, every: float) -> dict[str, Any]:
    headers = {"Authorization": load.AUTH["header"]} if load.AUTH else {}
    latencies: list[float] = []
    answered = 0
    peak_threads = peak_rss_kib = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=ANSWERED_WITHIN_SECONDS,
                                        context=load.AUTH.get("context")) as resp:
                ok = resp.status == 200 and b"kafka_txn_exporter_up" in resp.read()
        except OSError:
            ok = False
        took = time.perf_counter() - began
        latencies.append(took)
        answered += ok and took <= ANSWERED_WITHIN_SECONDS
        peak_threads = max(peak_threads, _proc(pid, "Threads"))
        peak_rss_kib = max(peak_rss_kib, _proc(pid, "VmRSS"))
        time.sleep(max(0.0, every - took))
    latencies.sort()
    return {
        "scrapes": len(latencies),
        "answered_within_1s": answered,
        "answered_fraction": answered / len(latencies),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
        "max_ms": round(1000 * latencies[-1], 2),
        "peak_threads": peak_threads,
        "peak_rss_mib": round(peak_rss_kib / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crowd", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrape-every", type=float, default=0.05)
    parser.add_argument("--tls", action="store_true", help="HTTPS + basic auth")
    parser.add_argument("--reopen-at-once", action="store_true",
                        help="the crowd reconnects as soon as the server closes a connection")
    parser.add_argument("--kinds", default="slowloris,http09",
                        help="crowd kinds (benchmarks/_crowd.py); with --tls, tls_half_open "
                        "is added")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        web_config = None
        if args.tls:
            web_config, context, header = load.tls_auth_setup(Path(tmp))
            load.AUTH.update(context=context, header=header)
        with load.exporter_process("127.0.0.1:1", 30.0, web_config) as (url, pid):
            url = url.replace("localhost", "127.0.0.1")
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            baseline = _phase(url, pid, args.seconds, args.scrape_every)
            kinds = [(kind, port) for kind in args.kinds.split(",")]
            if args.tls:
                kinds.append(("tls_half_open", port))
            with Crowd(kinds, args.crowd, args.reopen_at_once) as crowd:
                time.sleep(1.0)
                loaded = _phase(url, pid, args.seconds, args.scrape_every)
                opened = crowd.opened
    common.emit({
        "benchmark": "idle_crowd",
        "tls": args.tls,
        "crowd": args.crowd,
        "crowd_kinds": [kind for kind, _ in kinds],
        "reopen_at_once": args.reopen_at_once,
        "crowd_connections_opened": opened,
        "baseline": baseline,
        "with_crowd": loaded,
        "ratio_p99": common.ratio(loaded["p99_ms"], baseline["p99_ms"]),
        "ratio_rss": common.ratio(loaded["peak_rss_mib"], baseline["peak_rss_mib"]),
        "machine": common.machine_info(),
        "load_average": common.load_average(),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
