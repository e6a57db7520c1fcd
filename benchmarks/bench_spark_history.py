"""Benchmark: `spark history` in-process (pandas) vs Spark local[2] vs a Spark standalone
cluster (master + worker JVMs on loopback, `--standalone`), same input, one run.

Generates a history dataset in the exact layout/schema HistoryWriter writes (vectorised with
numpy instead of 10 million Python objects), then times both engines end to end (read, compute
the three tables, write Parquet + CSV, summary) and checks their results are equal.

    python benchmarks/bench_spark_history.py --rows 10000000 [--standalone] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from _common import emit, load_average, machine_info, ratio

from exporter.history import (
    OPEN_TRANSACTIONS_DIR,
    OPEN_TRANSACTIONS_SCHEMA,
    POLLS_DIR,
    POLLS_SCHEMA,
    partition_dir,
    utc_date,
)

POLL_MS = 30_000
POLLS_PER_FILE = 120  # HistoryWriter(buffer_polls=120): one file per cluster-hour
T0_MS = 1_795_132_800_000  # a UTC midnight
LATE_AFTER_MS = 60_000 + 300_000  # transaction.max.timeout.ms 60 s + default 5 min buffer
TOPICS = [f"topic-{i:02d}" for i in range(50)]
PARTITIONS = 12


def generate(root: Path, rows: int, clusters: int, polls: int, seed: int = 7) -> int:
    rng = np.random.default_rng(seed)
    per_cluster = rows // clusters
    written = 0
    for c in range(clusters):
        cluster = f"cluster-{c}"
        # Incidents: mostly short (1-3 polls), 5% long-running (10-200 polls: late ones).
        est = int(per_cluster / 7) + 1000
        long_ = rng.random(est) < 0.05
        n_polls = np.where(long_, rng.integers(10, 201, est), rng.integers(1, 4, est))
        cut = int(np.searchsorted(np.cumsum(n_polls), per_cluster))
        n_polls = n_polls[:cut]
        n_inc = len(n_polls)
        first = rng.integers(0, polls - n_polls + 1)
        topic_idx = rng.integers(0, len(TOPICS), n_inc)
        partition = rng.integers(0, PARTITIONS, n_inc).astype(np.int32)
        producer_id = np.arange(n_inc, dtype=np.int64) + c * 10_000_000
        start_offset = rng.integers(0, 1_000_000, n_inc)
        start_ms = T0_MS + first * POLL_MS - rng.integers(0, POLL_MS, n_inc)
        has_tid = rng.random(n_inc) < 0.8
        tid_pool = np.array([f"app-{i}" for i in range(500)] + [""], dtype=object)
        tid = np.where(has_tid, tid_pool[rng.integers(0, 500, n_inc)], "")
        hanging_inc = ~has_tid | (rng.random(n_inc) < 0.1)

        inc_of_row = np.repeat(np.arange(n_inc), n_polls)
        offset_in = np.arange(len(inc_of_row)) - np.repeat(np.cumsum(n_polls) - n_polls, n_polls)
        poll_of_row = first[inc_of_row] + offset_in
        order = np.argsort(poll_of_row, kind="stable")
        inc_of_row, poll_of_row = inc_of_row[order], poll_of_row[order]
        observed = T0_MS + poll_of_row * POLL_MS
        age_ms = observed - start_ms[inc_of_row]
        late = age_ms > LATE_AFTER_MS
        classification = np.where(
            late, np.where(hanging_inc[inc_of_row], "hanging", "coordinator_tracked"), None
        )
        # Poll boundaries of each file (rows are sorted by poll).
        bounds = np.searchsorted(poll_of_row, np.arange(0, polls + POLLS_PER_FILE, POLLS_PER_FILE))
        for f in range(len(bounds) - 1):
            lo, hi = int(bounds[f]), int(bounds[f + 1])
            first_poll = f * POLLS_PER_FILE
            if first_poll >= polls:
                break
            day = utc_date(T0_MS + first_poll * POLL_MS)
            name = f"{T0_MS + first_poll * POLL_MS}-bench.parquet"
            sl = slice(lo, hi)
            ii = inc_of_row[sl]
            table = pa.table(
                {
                    "observed_at_ms": observed[sl],
                    "topic": np.array(TOPICS, dtype=object)[topic_idx[ii]],
                    "partition": partition[ii],
                    "leader_id": (partition[ii] % 3 + 1).astype(np.int32),
                    "producer_id": producer_id[ii],
                    "producer_epoch": np.zeros(hi - lo, dtype=np.int32),
                    "coordinator_epoch": np.zeros(hi - lo, dtype=np.int32),
                    "current_txn_start_offset": start_offset[ii],
                    "last_timestamp_ms": start_ms[ii],
                    "start_time_ms": start_ms[ii],
                    "start_time_source": np.full(hi - lo, "batch_timestamp", dtype=object),
                    "transactional_id": tid[ii],
                    "age_seconds": np.maximum(age_ms[sl], 0) / 1000.0,
                    "late": late[sl],
                    "classification": classification[sl],
                },
                OPEN_TRANSACTIONS_SCHEMA,
            )
            target = partition_dir(root, OPEN_TRANSACTIONS_DIR, cluster, day)
            target.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, target / name, compression="zstd")
            written += table.num_rows
            p_idx = np.arange(first_poll, min(first_poll + POLLS_PER_FILE, polls))
            counts = np.bincount(poll_of_row[sl] - first_poll, minlength=len(p_idx))[: len(p_idx)]
            down = rng.random(len(p_idx)) < 0.002
            unobserved = [
                [{"topic": TOPICS[int(rng.integers(0, len(TOPICS)))], "partition": 0}]
                if rng.random() < 0.01 else []
                for _ in p_idx
            ]
            polls_table = pa.table(
                {
                    "observed_at_ms": T0_MS + p_idx * POLL_MS,
                    "up": ~down,
                    "open_transactions": counts.astype(np.int64),
                    "late_transactions": np.zeros(len(p_idx), dtype=np.int64),
                    "unobserved": unobserved,
                    "poll_duration_seconds": np.full(len(p_idx), 0.2),
                },
                POLLS_SCHEMA,
            )
            target = partition_dir(root, POLLS_DIR, cluster, day)
            target.mkdir(parents=True, exist_ok=True)
            pq.write_table(polls_table, target / name, compression="zstd")
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--polls", type=int, default=2880, help="polls per cluster (30 s each)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--standalone", action="store_true",
                        help="also run on a standalone master + worker (2 cores) on loopback")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-history-"))
    history, out_local, out_spark = work / "history", work / "out-pandas", work / "out-spark"
    try:
        t = time.perf_counter()
        rows = generate(history, args.rows, args.clusters, args.polls)
        print(f"generated {rows} rows in {time.perf_counter() - t:.1f}s", flush=True)

        from exporter.spark import report

        t = time.perf_counter()
        local = report.report_from_directory(history)
        report.write_tables(local.tables(), out_local)
        lines = report.summary_lines(
            report.counts_of(local), local.late_minutes, local.top_transactional_ids
        )
        local_s = time.perf_counter() - t
        print("\n".join(lines))
        print(f"in-process (pandas): {local_s:.1f}s", flush=True)

        from exporter.spark import history_job
        from exporter.spark.session import get_session

        t = time.perf_counter()
        spark = get_session(args.master, {"spark.driver.memory": "4g",
                                          "spark.sql.shuffle.partitions": "8",
                                          "spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        startup_s = time.perf_counter() - t
        t = time.perf_counter()
        result = history_job.build_report(spark, history)
        history_job.write_tables(result.tables(), out_spark)
        lines = report.summary_lines(result.counts(), result.late_minutes.toPandas(),
                                     result.top_transactional_ids.toPandas())
        spark_s = time.perf_counter() - t
        print("\n".join(lines))
        print(f"spark ({args.master}): {spark_s:.1f}s job + {startup_s:.1f}s session start",
              flush=True)

        import pandas as pd  # type: ignore[import-untyped]

        for name in ("incidents", "late_minutes", "top_transactional_ids"):
            a = pd.read_parquet(out_local / f"{name}.parquet")
            b = pd.read_parquet(out_spark / f"{name}.parquet")
            assert len(a) == len(b), (name, len(a), len(b))
        same_ended = (
            pd.read_parquet(out_local / "incidents.parquet")["ended"].sum()
            == pd.read_parquet(out_spark / "incidents.parquet")["ended"].sum()
        )
        assert same_ended
        spark.stop()
        result_record: dict[str, object] = {
            "bench": "spark_history", "machine": machine_info(), "rows": rows,
            "incidents": len(local.incidents), "pandas_seconds": round(local_s, 2),
            "spark_master": args.master, "spark_job_seconds": round(spark_s, 2),
            "spark_session_start_seconds": round(startup_s, 2),
            "ratio_spark_over_pandas": ratio(spark_s, local_s),
        }
        if args.standalone:
            from _spark_standalone import standalone_cluster

            out_cluster = work / "out-standalone"
            with standalone_cluster(cores=2, memory="5g") as url:
                t = time.perf_counter()
                spark = get_session(url, {"spark.executor.memory": "4g",
                                          "spark.sql.shuffle.partitions": "8",
                                          "spark.ui.enabled": "false",
                                          "spark.driver.host": "127.0.0.1",
                                          "spark.driver.bindAddress": "127.0.0.1"})
                spark.sparkContext.setLogLevel("ERROR")
                cluster_start_s = time.perf_counter() - t
                t = time.perf_counter()
                result = history_job.build_report(spark, history)
                history_job.write_tables(result.tables(), out_cluster)
                report.summary_lines(result.counts(), result.late_minutes.toPandas(),
                                     result.top_transactional_ids.toPandas())
                cluster_s = time.perf_counter() - t
                spark.stop()
            for name in ("incidents", "late_minutes", "top_transactional_ids"):
                a = pd.read_parquet(out_local / f"{name}.parquet")
                b = pd.read_parquet(out_cluster / f"{name}.parquet")
                assert len(a) == len(b), (name, len(a), len(b))
            print(f"spark (standalone, 2 cores): {cluster_s:.1f}s job + {cluster_start_s:.1f}s "
                  "session start", flush=True)
            result_record.update({
                "standalone_job_seconds": round(cluster_s, 2),
                "standalone_session_start_seconds": round(cluster_start_s, 2),
                "ratio_standalone_over_pandas": ratio(cluster_s, local_s),
            })
        result_record["load_average_after"] = load_average()
        emit(result_record)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
