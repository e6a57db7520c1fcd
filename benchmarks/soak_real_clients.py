"""Soak: real transactional clients under faults against one real broker, every exporter verdict
kept. The count that matters is false verdicts: late, hanging or orphaned said of a transaction
its coordinator tracks. It must be 0.

Why: the in-suite tests (tests/realkafka/test_real_client_*.py) run a few hundred transactions
per client to stay inside the suite's time; production runs millions. This runs, on one
single-node KRaft broker of `--kafka` (scripts/install-kafka, scripts/install-clients):

- librdkafka (confluent-kafka) producers committing `--rdkafka-transactions` transactions back
  to back, all the time;
- every `--fault-seconds`, the next fault of a cycle: a librdkafka producer killed with SIGKILL
  mid-transaction (transaction.timeout.ms 10 s); a Kafka Streams exactly_once_v2 instance joining
  (a rebalance); the oldest Streams instance killed with SIGKILL; the Flink job (KafkaSink
  EXACTLY_ONCE, checkpoint every 2 s) killed with SIGKILL and started again from its last
  checkpoint; a clean broker restart;
- the exporter's poller every half second, its verdicts on the clients' topics kept.

Transactions are counted as each client counts them: librdkafka's commits, Streams'
`commit-total` metrics (the last value each instance printed), Flink's completed checkpoints
times the sink's parallelism (2). The result is one `RESULT {json}` line.

    python benchmarks/soak_real_clients.py --kafka 4.4.0
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "realkafka"), str(ROOT / "tests"), str(ROOT / "simulator")]

from clienthelpers import (  # noqa: E402
    CLIENTS_BROKER_CONFIG,
    FLINK_JVM,
    Feed,
    Lines,
    clients_home,
    flink_home,
    java_app,
    kill9,
    rdkafka_producer,
    start_loop,
)
from kafka_sim.realkafka import start_cluster  # noqa: E402
from realhelpers import create_topic  # noqa: E402


def _last_number(lines: Lines, prefix: str) -> int:
    values = [int(line.split()[1]) for line in list(lines.lines) if line.startswith(prefix)]
    return values[-1] if values else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", default="4.4.0")
    parser.add_argument("--rdkafka-transactions", type=int, default=6000)
    parser.add_argument("--fault-seconds", type=float, default=25.0)
    parser.add_argument("--minutes", type=float, default=8.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="soak-clients-"))
    cluster = start_cluster(args.kafka, work / "kafka", broker_config=CLIENTS_BROKER_CONFIG)
    streams_home = clients_home() / f"streams-{args.kafka}"
    flink = flink_home()
    try:
        bs = cluster.bootstrap
        rdk = create_topic(cluster, "soak-rdk", partitions=3)
        rdk_kill = create_topic(cluster, "soak-rdk-kill")
        source = create_topic(cluster, "soak-streams-in", partitions=4)
        sink = create_topic(cluster, "soak-streams-out", partitions=4)
        flink_out = create_topic(cluster, "soak-flink-out", partitions=2)
        running = start_loop(cluster, [rdk, rdk_kill, sink, flink_out, "__consumer_offsets"])
        loop = running.loop
        feed = Feed(bs, source).start()

        loops = [
            rdkafka_producer(
                "loop",
                bs,
                rdk,
                f"soak-rdk-{i}",
                str(args.rdkafka_transactions // 2),
                "3",
                log=work / f"rdk-{i}.log",
            )
            for i in range(2)
        ]
        streams: list[Lines] = []
        dead_streams_commits = 0
        flink_jobs: list[Lines] = []
        flink_checkpoints = 0
        faults: list[tuple[float, str]] = []
        checkpoints = work / "flink-checkpoints"
        checkpoints.mkdir()

        def start_streams(n: int) -> Lines:
            state = work / f"streams-state-{n}"
            state.mkdir()
            log = work / f"streams-{n}.log"
            child = java_app(streams_home / "lib", streams_home / "classes", "StreamsEosApp", bs,
                             "soak-streams", source, sink, str(state), "2", log=log)  # fmt: skip
            return Lines(child, log)

        def start_flink(restore: Path | None) -> Lines:
            log = work / f"flink-{len(flink_jobs)}.log"
            extra = [str(restore)] if restore is not None else []
            child = java_app(flink / "lib", flink / "classes", "FlinkEosJob", bs, flink_out,
                             "soak-flink", str(checkpoints), "2000", *extra, log=log,
                             jvm=FLINK_JVM)  # fmt: skip
            return Lines(child, log)

        streams.append(start_streams(0))
        flink_jobs.append(start_flink(None))
        started = time.monotonic()
        cycle = 0
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.fault_seconds)
            kind = cycle % 5
            cycle += 1
            loop.phase = f"fault {cycle}"
            if kind == 0:
                child = rdkafka_producer("open", bs, rdk_kill, f"soak-rdk-kill-{cycle}", "10000",
                                         "0", log=work / f"rdk-kill-{cycle}.log")  # fmt: skip
                Lines(child, work / f"rdk-kill-{cycle}.log").wait("open", lambda s: s == "OPEN", 90)
                kill9(child)
                faults.append((time.monotonic() - started, "librdkafka producer killed"))
            elif kind == 1:
                streams.append(start_streams(cycle))
                faults.append((time.monotonic() - started, "Streams instance joined"))
            elif kind == 2 and len(streams) > 1:
                victim = streams.pop(0)
                dead_streams_commits += _last_number(victim, "COMMITS")
                kill9(victim.child)
                faults.append((time.monotonic() - started, "Streams instance killed"))
            elif kind == 3:
                job = flink_jobs[-1]
                flink_checkpoints += sum(1 for s in list(job.lines) if s.startswith("CHECKPOINT"))
                kill9(job.child)
                done = [p.parent for p in checkpoints.glob("*/chk-*/_metadata")]
                restore = max(done, key=lambda p: int(p.name.split("-")[1])) if done else None
                flink_jobs.append(start_flink(restore))
                faults.append((time.monotonic() - started, "Flink job killed and restored"))
            elif kind == 4:
                cluster.kill(1, signal.SIGTERM)
                cluster.restart(1)
                faults.append((time.monotonic() - started, "broker restarted"))
        loop.phase = "end"
        rdk_done = 0
        for i, child in enumerate(loops):
            lines = Lines(child, work / f"rdk-{i}.log")
            index = lines.wait("done", lambda s: s.startswith("DONE"), 900)
            rdk_done += int(lines.lines[index].split()[1])
        feed.stop()
        streams_commits = dead_streams_commits + sum(_last_number(s, "COMMITS") for s in streams)
        flink_checkpoints += sum(
            1 for s in list(flink_jobs[-1].lines) if s.startswith("CHECKPOINT")
        )
        for lines in [*streams, *flink_jobs]:
            kill9(lines.child)
        running.stop()
        false = loop.false_verdicts()
        result = {
            "kafka": args.kafka,
            "transactions": {
                "librdkafka": rdk_done,
                "kafka_streams": streams_commits,
                "flink": flink_checkpoints * 2,
            },
            "transactions_total": rdk_done + streams_commits + flink_checkpoints * 2,
            "faults": [f"{at:.0f}s {what}" for at, what in faults],
            "polls": len(loop.records),
            "open_transactions_seen": len(loop.distinct_transactions()),
            "false_verdicts": len(false),
            "false_examples": [f"{phase}: {v}" for phase, v in false[:5]],
            "seconds": round(time.monotonic() - started),
        }
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    threading.excepthook = lambda a: print(f"thread failed: {a.exc_value!r}", file=sys.stderr)
    main()
