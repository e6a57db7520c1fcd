"""Serve CPU with and without a scraper: many clusters polled, one Prometheus every 15 s.

Target: with 20 clusters and one scraper every 15 s, serve's CPU must stay within
1.5x of the never-scraped run. Processes (each number belongs to one side only):
- the simulated cluster (`--serve-sim`): 3 brokers, one topic of `--partitions` (10,000)
  partitions, `--late` (20) hanging transactions;
- the real exporter (`python -m exporter serve`) with `--clusters` (20) clusters in its
  config, all pointing at that simulator (each its own cluster to the exporter: own poller,
  own series), polled every `--poll-interval` (10 s).
After a warm-up (every cluster polled once), the exporter's CPU (utime + stime from
/proc/PID/stat) is measured over `--seconds` (60) with no scraper (the baseline), then over
the same time with a scraper asking every `--scrape-interval` (15 s) as Prometheus does
(OpenMetrics preferred, gzip). Same process, same run.

Run: python benchmarks/bench_serve_scraped.py [--clusters 20] [--partitions 10000] [--seconds 60]
     [--exporter-root DIR]   # another revision's exporter package, for a before/after pair
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()
TOPIC = "orders"
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def serve_sim(partitions: int, late: int) -> int:
    from kafka_sim.cluster import SimCluster
    from kafka_sim.seed import seed_hanging_transaction

    sim = SimCluster(brokers=3, topics={TOPIC: partitions},
                     broker_config={"transaction.max.timeout.ms": "60000"}).start()
    now = int(sim.clock.now_ms())

    def seed(state: Any) -> None:
        for i in range(late):
            seed_hanging_transaction(state, f"bench-hang-{i}", TOPIC, i % partitions,
                                     last_timestamp_ms=now - 3_600_000 - i * 1000)

    sim.call(seed, sim.state)
    return common.serve_until_stdin_closes({"bootstrap": sim.bootstrap_servers}, sim.close)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def exporter_process(config: Path, root: Path) -> Iterator[tuple[str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", "127.0.0.1", "--web.port", "0", "--log.level", "info",
         "--log.format", "json"],
        env=env, cwd=root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    drain: subprocess.Popen[bytes] | None = None
    try:
        assert proc.stderr is not None
        url = common.read_listen_url(proc)
        drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if drain is not None:
            drain.wait(timeout=5)


def _scrape(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": PROMETHEUS_ACCEPT,
                                                   "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return gzip.decompress(resp.read())


def _wait_all_polled(url: str, clusters: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        up = [line for line in body.splitlines()
              if line.startswith("kafka_txn_exporter_up{") and line.endswith(" 1.0")]
        if len(up) == clusters:
            return
        time.sleep(1)
    raise RuntimeError("not every cluster polled successfully in time: "
                       + "; ".join(line for line in body.splitlines()
                                   if line.startswith("kafka_txn_exporter_up"))[:500])


def _phase(url: str, pid: int, seconds: float, scrape_every: float | None) -> dict[str, Any]:
    start_cpu, start = _cpu_seconds(pid), time.monotonic()
    scrapes, late_lines = 0, 0
    next_scrape = start + (scrape_every / 2 if scrape_every else seconds + 1)
    while (now := time.monotonic()) < start + seconds:
        if scrape_every and now >= next_scrape:
            body = _scrape(url)
            scrapes += 1
            late_lines = body.count(b"\nkafka_late_transaction_age_seconds{")
            next_scrape += scrape_every
        time.sleep(0.05)
    elapsed = time.monotonic() - start
    cpu = _cpu_seconds(pid) - start_cpu
    return {"cpu_seconds": round(cpu, 2), "share_of_a_core": round(cpu / elapsed, 4),
            "seconds": round(elapsed, 1), "scrapes": scrapes,
            "late_series_in_last_scrape": late_lines}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--late", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--poll-interval", type=float, default=10.0)
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--exporter-root", type=Path, default=common.REPO_ROOT,
                        help="directory whose `exporter` package runs (e.g. an older revision "
                             "unpacked with `git archive REV exporter | tar -x -C DIR`)")
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_sim:
        return serve_sim(args.partitions, args.late)
    machine = common.machine_info()
    with common.serving_child(SCRIPT, ["--serve-sim", "--partitions", str(args.partitions),
                                       "--late", str(args.late)]) as sim, \
            tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        bootstrap = sim["bootstrap"]
        servers = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        clusters = "".join(
            f"  - name: c{i:02d}\n    bootstrap_servers: {json.dumps(servers)}\n"
            f"    poll_interval_seconds: {args.poll_interval}\n"
            "    late_buffer_seconds: 10\n"
            for i in range(args.clusters))
        config.write_text("clusters:\n" + clusters + "log: {level: warning, format: json}\n")
        with exporter_process(config, args.exporter_root) as (url, pid):
            _wait_all_polled(url, args.clusters, 30 + 3 * args.poll_interval)
            baseline = _phase(url, pid, args.seconds, None)
            scraped = _phase(url, pid, args.seconds, args.scrape_interval)
    result = {
        "bench": "serve_scraped",
        "machine": machine,
        "clusters": args.clusters,
        "partitions": args.partitions,
        "late": args.late,
        "exporter_root_is_this_tree": args.exporter_root.resolve() == common.REPO_ROOT,
        "poll_interval_seconds": args.poll_interval,
        "scrape_interval_seconds": args.scrape_interval,
        "never_scraped": baseline,
        "scraped": scraped,
        "ratio_scraped_vs_never_scraped": common.ratio(scraped["cpu_seconds"],
                                                       baseline["cpu_seconds"]),
        "machine_load_average_at_end": common.load_average(),
    }
    print(f"machine: {machine}")
    print(f"serve, {args.clusters} clusters x {args.partitions} partitions ({args.late} late), "
          f"poll every {args.poll_interval} s, {args.seconds} s per phase:")
    for name, phase in (("never_scraped", baseline), ("scraped", scraped)):
        print(f"  {name:<14} CPU {phase['cpu_seconds']:>6.2f} s ({phase['share_of_a_core']:.1%} "
              f"of a core), scrapes {phase['scrapes']}")
    print(f"  ratio scraped/never_scraped {result['ratio_scraped_vs_never_scraped']}")
    common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
