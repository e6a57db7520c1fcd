"""Benchmark: `spark scan` over a fleet of simulated clusters vs polling it in one process.

One run, same fleet, same state: N simulated clusters (each 3 brokers, 60 partitions, one
hanging transaction on every fifth cluster, `--latency-ms` of real delay on every response to
stand for a network round trip), then

- baseline: the daemon's way, one process polling every cluster at once on a thread pool
  (the scheduler gives each cluster its own worker thread), and sequentially for reference;
- `spark scan` (`scan_job.scan_fleet`, one task per cluster) with 1, 2, ... executor cores
  (`local[k]`), session start timed apart.

Every path polls each cluster once (no orphan check) and must find the same late/hanging
transactions. Prints one `RESULT` JSON line.

    python benchmarks/bench_spark_scan.py [--clusters 50] [--cores 1,2] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, load_average, machine_info, ratio

BROKER_CONFIG = {
    "transaction.partition.verification.enable": "false",
    "transaction.max.timeout.ms": "60000",
}
BACKDATE_MS = 400_000


def verdicts(snapshots: list[object]) -> list[tuple[str, int, int, bool]]:
    result = []
    for snap in snapshots:
        late = getattr(snap, "late_transactions", ())
        result.append((getattr(snap, "cluster", "?"), len(late),
                       sum(1 for lt in late if lt.classification == "hanging"),
                       bool(getattr(snap, "up", False))))
    return sorted(result)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--cores", default="1,2", help="executor cores to try (local[k])")
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per path (best kept)")
    args = parser.parse_args(argv)

    from kafka_sim.cluster import SimCluster
    from kafka_sim.producer import hanging_transaction

    from exporter.scan import scan_cluster
    from exporter.settings import ClusterSettings
    from exporter.spark import scan_job
    from exporter.spark.session import get_session

    load_before = load_average()
    with ExitStack() as stack:
        clusters: list[ClusterSettings] = []
        for i in range(args.clusters):
            sim = stack.enter_context(SimCluster(brokers=3, topics={"orders": 30, "hang": 30},
                                                 broker_config=BROKER_CONFIG))
            if i % 5 == 0:
                hanging_transaction(sim.bootstrap_servers, f"hang-{i}", "hang", 0,
                                    backdate_ms=BACKDATE_MS)
            if args.latency_ms:
                sim.set_latency(args.latency_ms)
            clusters.append(ClusterSettings(
                name=f"c{i:03d}", bootstrap_servers=tuple(sim.bootstrap_servers.split(",")),
                request_timeout_seconds=10,
            ))
        print(f"{len(clusters)} simulated clusters up", flush=True)

        def best(fn: object) -> tuple[float, list[object]]:
            times, out = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                out = fn()  # type: ignore[operator]
                times.append(time.perf_counter() - t)
            return min(times), out

        def on_threads() -> list[object]:
            with ThreadPoolExecutor(max_workers=len(clusters)) as pool:
                return list(pool.map(scan_cluster, clusters))

        threads_s, threaded = best(on_threads)
        expected = verdicts(threaded)
        print(f"one process, {len(clusters)} threads: {threads_s:.2f}s", flush=True)
        seq_s, sequential = best(lambda: [scan_cluster(c) for c in clusters])
        assert verdicts(sequential) == expected
        print(f"one process, sequential: {seq_s:.2f}s", flush=True)

        spark_runs = []
        for cores in [int(c) for c in args.cores.split(",")]:
            t = time.perf_counter()
            spark = get_session(f"local[{cores}]", {"spark.ui.enabled": "false",
                                                    "spark.driver.host": "127.0.0.1",
                                                    "spark.driver.bindAddress": "127.0.0.1"})
            spark.sparkContext.setLogLevel("ERROR")
            start_s = time.perf_counter() - t
            job_s, scans = best(lambda spark=spark: scan_job.scan_fleet(spark, clusters))
            assert verdicts([s.snapshot for s in scans]) == expected
            spark.stop()
            print(f"spark local[{cores}]: {job_s:.2f}s job + {start_s:.1f}s session start",
                  flush=True)
            spark_runs.append({"executor_cores": cores, "job_seconds": round(job_s, 3),
                               "session_start_seconds": round(start_s, 2),
                               "ratio_over_threads": ratio(job_s, threads_s)})

    emit({
        "bench": "spark_scan", "machine": machine_info(), "clusters": len(clusters),
        "latency_ms": args.latency_ms, "load_average_before": load_before,
        "load_average_after": load_average(),
        "late_clusters": sum(1 for _, late, _, _ in expected if late),
        "threads_seconds": round(threads_s, 3), "sequential_seconds": round(seq_s, 3),
        "spark": spark_runs,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
