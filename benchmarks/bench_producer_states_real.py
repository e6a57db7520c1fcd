"""Poll cost against producer states per partition on a REAL Kafka broker: the full
poll (`screen_partitions=False`: DescribeProducers for every partition, every poll) vs
the default (screened) one, on the same broker state; with the broker's own cost per poll.

Per mean states per partition (0 = no producer state, the baseline): a fresh single-node KRaft
broker of the installed Kafka (`scripts/install-kafka`; nothing is installed here), one topic of
`--partitions` partitions, seeded with idempotent producer states: each short-lived idempotent
producer is one InitProducerId + ONE Produce carrying a one-record batch (sequence 0) for every
partition it writes (`kafka_sim.producer.idempotent_producer_write_all`), so 1,000 states on
1,000 partitions are 1,000 InitProducerId + 1,000 Produce requests. 0.1: skewed like
`kafka_sim.seed.skewed_state_counts` (10% of the partitions hold 90%); >= 1: that many on every
partition. Then ~1% of the partitions get an Ongoing transaction never ended (after the
idempotent states, so it is the newest state of its partition). One broker per level, not one
topic per level on one broker: the poller polls every partition of the cluster, and the
broker's heap, GC and caches at one level must not carry another level's million states.

Both pollers (one per strategy) make their cold poll (connections, counts learnt), then
`--warmup` unmeasured polls each, alternating (the broker's JIT compiles the paths of both
before either is measured); then `--polls` warm polls of the full poller, then of the screened:
- bytes received: answer payload bytes per API (counted where the exporter decodes them, the
  `Traffic`/`counting` wrapper of bench_producer_states.py); requests sent per API;
- exporter CPU: the CPU time of the process's polling loop thread over the poll
  (`_common.polling_loop_cpu_s`: every poll runs on that shared loop, exporter/collect/loop.py,
  while the thread calling `poll()` only waits for it);
- wall: `ClusterPoller.poll()`;
  (medians of the warm polls)
- broker CPU: the broker JVM's threads' CPU time (the scheduler's nanosecond account,
  /proc/<pid>/task/*/sched; utime+stime in 10 ms ticks where the kernel keeps none) read
  right before and after each warm poll, minus its CPU rate measured over an idle interval
  right before the polls (heartbeats, metadata, schedulers) times the polls' duration, per
  poll; split (idle not subtracted) into request threads (`data-plane-kafka-*`: network +
  request handler threads), GC and JIT;
- broker request time: Kafka's own `kafka.network:type=RequestMetrics,name=LocalTimeMs|
  TotalTimeMs,request=*` histograms (read with JmxTool before and after the warm polls), the
  per-API sum (Count x Mean) over the warm polls, per poll. Kafka rounds each request's time
  to whole ms, so sub-ms requests read 0 or 1.

`--written F`: before every poll, a fraction F of the partitions (drawn anew each time) gets
one batch from a long-lived idempotent producer that wrote every partition once while seeding
(one state more everywhere), so their offsets move between polls; 0 = a broker standing still.
These writes fall outside the broker CPU windows but inside Kafka's request metrics (Produce).

Run: python benchmarks/bench_producer_states_real.py [--kafka-version 4.0.2] [--partitions 1000]
       [--states 0,0.1,10,100,1000] [--polls 7] [--written 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulator"))

import _common as common
from bench_producer_states import Traffic, counting
from kafka_sim.producer import RawProducer, idempotent_producer_write_all, open_transaction
from kafka_sim.realkafka import KafkaInstall, RealKafkaCluster
from kafka_sim.routing import RawCluster
from kafka_sim.seed import skewed_state_counts

from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

TOPIC = "states"
MAX_TIMEOUT_MS = 3_600_000
"""transaction.max.timeout.ms and the open transactions' timeout: no open transaction may be
aborted by the coordinator while a level runs (a 1,000-state level takes minutes)."""
OPEN_FRACTION = 0.01
BROKER_CONFIG = {
    # As tests/realkafka/conftest.py (realhelpers.VERIFICATION_OFF).
    "transaction.partition.verification.enable": "false",
    "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
}
REQUEST_METRICS = ("LocalTimeMs", "TotalTimeMs")
JMX_TOOL = "org.apache.kafka.tools.JmxTool"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SHM = Path("/dev/shm")
"""The brokers' data goes to tmpfs when there is one: on this VM's ext4 disk the first index
entry of each of 1,000 fresh partitions (a write into a new page of its mmapped, sparse index
file: a request handler seen in `UnifiedLog.append` -> `TimeIndex.maybeAppend`) stalled every
Produce for 30-38 s; seeding 100 states took 43-61 s on disk, 7.5 s on tmpfs. The polls read
producer state from memory either way."""


# -- the broker's own cost ----------------------------------------------------------------------


def broker_pid(cluster: RealKafkaCluster, node_id: int = 1) -> int:
    pid = cluster.pid(node_id)
    if pid is None:
        raise RuntimeError(f"Kafka node {node_id} is not running")
    return pid


def _thread_group(name: str) -> str:
    """The kernel keeps 15 characters of a thread's name: enough to tell Kafka's request
    threads (network and handlers alike: "data-plane-kafk"), GC and the JIT apart."""
    if name.startswith("data-plane-kafk"):
        return "request_threads"
    if name.startswith(("GC Thread", "G1 ")):
        return "gc"
    if "CompilerThre" in name:
        return "jit"
    return "other"


def _runtime_s(task: Path) -> float | None:
    """The thread's CPU time in seconds from the scheduler's own account (`sched`,
    `se.sum_exec_runtime`, in ms with ns digits), or None where the kernel keeps none."""
    try:
        for line in (task / "sched").read_text().splitlines():
            if line.startswith("se.sum_exec_runtime"):
                return float(line.split(":", 1)[1]) / 1000.0
    except (OSError, ValueError):
        return None
    return None


def jvm_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of the JVM's live threads, per `_thread_group`, and "total": the scheduler's
    nanosecond account where the kernel has one (utime+stime count 10 ms ticks: a poll of a
    few ms would read 0 or 10), else utime+stime."""
    out = {"request_threads": 0.0, "gc": 0.0, "jit": 0.0, "other": 0.0}
    task_dir = Path(f"/proc/{pid}/task")
    precise = True
    for task in task_dir.iterdir():
        try:
            name = (task / "comm").read_text().strip()
            seconds = _runtime_s(task)
            if seconds is None:
                precise = False
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except OSError:
            continue  # a thread that ended meanwhile
        out[_thread_group(name)] += seconds
    if precise:
        out["total"] = sum(out.values())
    else:
        # Ended threads are only in the process's own counters: "total" comes from there.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["total"] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


def request_metrics(cluster: RealKafkaCluster) -> dict[str, dict[str, tuple[float, float]]]:
    """{metric: {request: (count, sum ms)}} from Kafka's RequestMetrics histograms (JmxTool)."""
    names = [
        arg
        for metric in REQUEST_METRICS
        for arg in ("--object-name", f"kafka.network:type=RequestMetrics,name={metric},request=*")
    ]
    result = cluster.tool(
        JMX_TOOL, "--jmx-url", cluster.jmx_url(1), *names, "--attributes", "Count,Mean",
        "--one-time", "true", "--report-format", "csv", "--date-format", "yyyy", timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"JmxTool failed: {(result.stdout + result.stderr)[-2000:]}")
    raw: dict[tuple[str, str], dict[str, float]] = {}
    for line in result.stdout.splitlines():
        key, comma, value = line.rpartition(",")
        if not comma or ":" not in key or "request=" not in key:
            continue
        object_name, _, attribute = key.rpartition(":")
        props = dict(p.split("=", 1) for p in object_name.split(":", 1)[1].split(","))
        try:
            raw.setdefault((props["name"], props["request"]), {})[attribute] = float(
                value.strip().strip('"')
            )
        except (KeyError, ValueError):
            continue
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for (metric, request), attrs in raw.items():
        count = attrs.get("Count", 0.0)
        out.setdefault(metric, {})[request] = (count, count * attrs.get("Mean", 0.0))
    return out


def metrics_delta(
    before: dict[str, dict[str, tuple[float, float]]],
    after: dict[str, dict[str, tuple[float, float]]],
    polls: int,
) -> dict[str, dict[str, dict[str, float]]]:
    """Per metric and request type that ran in between: requests and ms, per poll."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for metric, requests in after.items():
        for request, (count, total_ms) in requests.items():
            count0, total0 = before.get(metric, {}).get(request, (0.0, 0.0))
            if count > count0:
                out.setdefault(metric, {})[request] = {
                    "requests_per_poll": round((count - count0) / polls, 2),
                    "ms_per_poll": round(max(0.0, total_ms - total0) / polls, 2),
                }
    return out


# -- seeding ------------------------------------------------------------------------------------


def state_counts(partitions: int, mean_states: float, rng: random.Random) -> dict[int, int]:
    layout = [(TOPIC, p) for p in range(partitions)]
    if mean_states >= 1:
        return dict.fromkeys(range(partitions), int(mean_states))
    if mean_states > 0:
        return {p: n for (_, p), n in skewed_state_counts(layout, mean_states, rng=rng).items()}
    return {}


def seed(
    cluster: RealKafkaCluster, partitions: int, mean_states: float, workers: int, rng_seed: int
) -> dict[str, Any]:
    """Idempotent producer states, then the open transactions. Producer i writes to every
    partition holding more than i states, so the producers are max(count) and each a pair of
    requests; `workers` threads (a connection each) keep the broker busy while Python encodes."""
    rng = random.Random(rng_seed)
    counts = state_counts(partitions, mean_states, rng)
    producers = max(counts.values(), default=0)
    started = time.perf_counter()
    local = threading.local()
    clusters: list[RawCluster] = []
    lock = threading.Lock()
    per_producer_s: list[float] = []

    def one(i: int) -> int:
        raw = getattr(local, "raw", None)
        if raw is None:
            raw = local.raw = RawCluster(cluster.bootstrap, "bench-seed", 60.0)
            with lock:
                clusters.append(raw)
        targets = [p for p, n in counts.items() if n > i]
        began = time.perf_counter()
        idempotent_producer_write_all(raw, TOPIC, targets, timeout_s=60.0)
        with lock:
            per_producer_s.append(time.perf_counter() - began)
        return len(targets)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            states = sum(pool.map(one, range(producers)))
    finally:
        for raw in clusters:
            raw.close()
    seeded_s = time.perf_counter() - started
    started = time.perf_counter()
    open_partitions = rng.sample(range(partitions), max(1, round(partitions * OPEN_FRACTION)))
    for i, partition in enumerate(open_partitions):
        txn = open_transaction(
            cluster.bootstrap, f"bench-open-{i}", TOPIC, [partition],
            transaction_timeout_ms=MAX_TIMEOUT_MS, timeout_s=60.0,
        )  # fmt: skip
        txn.close_quietly()  # left Ongoing at the coordinator; the connection is not needed
    return {
        "states": states,
        "producers": producers,
        "partitions_with_states": len(counts),
        "max_states_per_partition": producers,
        "seed_idempotent_s": round(seeded_s, 2),
        "seed_open_s": round(time.perf_counter() - started, 2),
        "seed_producer_median_s": round(statistics.median(per_producer_s or [0.0]), 3),
        "seed_producer_max_s": round(max(per_producer_s, default=0.0), 3),
        "open_transactions": len(open_partitions),
    }


class Writer:
    """`--written`: a long-lived idempotent producer that wrote every partition once while
    seeding (one state more everywhere) and writes one batch to the partitions it is given
    before every poll, so that their offsets move between polls (a cluster not standing still).
    One Produce per partition, as a producer sending each record on its own."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.partitions = partitions
        self.producer = RawProducer(bootstrap, None, timeout_s=60.0)
        self.producer.init_producer_id()
        self.write(range(partitions))

    def write(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.producer.produce(TOPIC, partition, [(b"w", b"written", None)], transactional=False)
        self.producer.batches.clear()  # only the sequences are needed

    def between_polls(self, fraction: float, rng: random.Random) -> Callable[[], None]:
        count = round(self.partitions * fraction)
        return lambda: self.write(sorted(rng.sample(range(self.partitions), count)))

    def close(self) -> None:
        self.producer.close()


# -- measuring ----------------------------------------------------------------------------------


def idle_cpu_rate(pid: int, seconds: float) -> float:
    """The JVM's CPU seconds per second while nobody asks it anything."""
    cpu0, wall0 = jvm_cpu_s(pid)["total"], time.perf_counter()
    time.sleep(seconds)
    return (jvm_cpu_s(pid)["total"] - cpu0) / (time.perf_counter() - wall0)


def new_poller(
    cluster: RealKafkaCluster, screening: bool, metadata_max_age_seconds: float = 300.0
) -> ClusterObserver:
    """`metadata_max_age_seconds` 0: Metadata every poll (the poll before Metadata was reused
    between polls), the baseline of `--metadata-every-poll-too`."""
    settings = ClusterSettings(
        name="bench-real",
        bootstrap_servers=tuple(cluster.bootstrap.split(",")),
        request_timeout_seconds=300.0,
        metadata_max_age_seconds=metadata_max_age_seconds,
    )
    return ClusterObserver(settings, screen_partitions=screening)


def cold_poll(
    poller: ClusterObserver, traffic: Traffic, between: Callable[[], None]
) -> dict[str, float]:
    """The first poll: connections, metadata, counts learnt."""
    between()
    traffic.reset()
    cpu0, wall0 = common.polling_loop_cpu_s(), time.perf_counter()
    poller.poll()
    return {"bytes": sum(traffic.bytes.values()), "wall_s": time.perf_counter() - wall0,
            "exporter_cpu_s": common.polling_loop_cpu_s() - cpu0}


def measure(
    cluster: RealKafkaCluster, poller: ClusterObserver, polls: int, traffic: Traffic,
    cold: dict[str, float], between: Callable[[], None],
) -> dict[str, Any]:
    """`polls` warm polls of one strategy in a row, between two JmxTool reads and after an
    idle interval as long as they should take (the cold poll's wall times polls, 3-20 s). The
    broker's CPU is read right before and after each poll, so `between` (the writes of
    `--written`) is not counted in it; Kafka's request metrics do count those Produce requests."""
    pid = broker_pid(cluster)
    rows: list[dict[str, Any]] = []
    jmx_before = request_metrics(cluster)
    idle_rate = idle_cpu_rate(pid, min(20.0, max(3.0, cold["wall_s"] * polls)))
    busy: dict[str, float] = {}
    walls = 0.0
    for _ in range(polls):
        between()
        traffic.reset()
        jvm0 = jvm_cpu_s(pid)
        cpu0, wall0 = common.polling_loop_cpu_s(), time.perf_counter()
        obs = poller.poll()
        wall = time.perf_counter() - wall0
        cpu = common.polling_loop_cpu_s() - cpu0
        jvm1 = jvm_cpu_s(pid)
        walls += time.perf_counter() - wall0
        for k, v in jvm1.items():
            busy[k] = busy.get(k, 0.0) + v - jvm0.get(k, 0.0)
        rows.append({**traffic.poll_row(obs), "exporter_cpu_s": cpu, "wall_s": wall})
    jmx_after = request_metrics(cluster)
    med: dict[str, Any] = {
        k: statistics.median(r[k] for r in rows)
        for k in ("bytes", "describe_producers_bytes", "list_offsets_bytes", "fetch_bytes",
                  "requests", "exporter_cpu_s", "wall_s")
    }  # fmt: skip
    med.update({
        "cold": cold,
        "open": rows[-1]["open"],
        "unobserved": rows[-1]["unobserved"],
        "requests_by_api": rows[-1]["requests_by_api"],
        "bytes_by_api": rows[-1]["bytes_by_api"],
        "broker_idle_cpu_per_s": round(idle_rate, 4),
        "broker_cpu_s": max(0.0, busy["total"] - idle_rate * walls) / polls,
        "broker_cpu_by_threads_s": {
            k: round(v / polls, 4) for k, v in busy.items() if k != "total"
        },
        "broker_cpu_raw_s": busy["total"] / polls,
        "broker_request_metrics": metrics_delta(jmx_before, jmx_after, polls),
    })  # fmt: skip
    return med


def start_broker(version: str, workdir: Path, heap: str) -> RealKafkaCluster:
    cluster = RealKafkaCluster(
        install=KafkaInstall.find(version), workdir=workdir, broker_config=BROKER_CONFIG,
        heap=heap,
    )  # fmt: skip
    try:
        return cluster.start(timeout=300.0)
    except BaseException:
        cluster.stop()
        raise


def measure_strategies(
    cluster: RealKafkaCluster, args: argparse.Namespace, traffic: Traffic,
    between: Callable[[], None],
) -> dict[str, dict[str, Any]]:
    """The pollers cold, `--warmup` alternating unmeasured polls, then each measured: "full"
    and "screened", and with `--metadata-every-poll-too` "screened_metadata_every_poll"
    (Metadata asked every poll, as before it was reused between polls)."""
    with counting(traffic):
        pollers = {"full": new_poller(cluster, False), "screened": new_poller(cluster, True)}
        if args.metadata_every_poll_too:
            pollers["screened_metadata_every_poll"] = new_poller(cluster, True, 0.0)
        try:
            colds = {name: cold_poll(p, traffic, between) for name, p in pollers.items()}
            for _ in range(args.warmup):  # the broker's JIT, for every strategy alike
                for p in pollers.values():
                    between()
                    p.poll()
            return {
                name: measure(cluster, p, args.polls, traffic, colds[name], between)
                for name, p in pollers.items()
            }
        finally:
            for p in pollers.values():
                p.close()


def run_level(args: argparse.Namespace, mean: float, traffic: Traffic) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-states-{mean}-", dir=args.workdir))
    try:
        started = time.perf_counter()
        cluster = start_broker(args.kafka_version, workdir, args.heap)
        try:
            broker_start_s = time.perf_counter() - started
            started = time.perf_counter()
            cluster.create_topic(TOPIC, args.partitions, timeout=600.0)
            topic_s = time.perf_counter() - started
            seeded = seed(cluster, args.partitions, mean, args.seed_workers, rng_seed=1)
            seeded.update(broker_start_s=round(broker_start_s, 2), create_topic_s=round(topic_s, 2))
            writer = Writer(cluster.bootstrap, args.partitions) if args.written > 0 else None
            print(json.dumps({"mean_states": mean, **seeded}), flush=True)
            between: Callable[[], None] = (
                writer.between_polls(args.written, random.Random(2)) if writer else lambda: None
            )
            try:
                measured = measure_strategies(cluster, args, traffic, between)
            finally:
                if writer is not None:
                    writer.close()
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert all(m["open"] == seeded["open_transactions"] for m in measured.values()), measured
    return {"seeding": seeded, **measured}


_STRATEGIES = ("full", "screened", "screened_metadata_every_poll")
_SHORT = {"full": "full", "screened": "screened", "screened_metadata_every_poll": "meta-all"}


def _x(value: float, base: float) -> str:
    r = common.ratio(value, base)
    return "-" if r is None else f"{r:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Full vs screened poll against producer states per partition, on a real "
        "single-node Kafka broker (started per level from scripts/install-kafka's jars)."
    )
    parser.add_argument("--kafka-version", default="4.0.2")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--states", default="0,0.1,10,100,1000",
                        help="mean producer states per partition, one broker per level")
    parser.add_argument("--polls", type=int, default=7, help="warm polls per strategy")
    parser.add_argument("--warmup", type=int, default=2,
                        help="unmeasured polls per strategy after the cold ones (broker JIT)")
    parser.add_argument("--written", type=float, default=0.0,
                        help="fraction of the partitions written (one batch each, by one "
                        "long-lived idempotent producer) before every poll; 0 = standing still")
    parser.add_argument("--metadata-every-poll-too", action="store_true",
                        help="also measure the screened poll with Metadata asked every poll "
                        "(metadata_max_age_seconds 0), the baseline of Metadata reuse")
    parser.add_argument("--heap", default="2g", help="broker heap (-Xmx/-Xms); 1M states fit 2g")
    parser.add_argument("--seed-workers", type=int, default=2,
                        help="threads (a connection each) sending the seeding producers")
    parser.add_argument("--workdir", default=str(SHM) if SHM.is_dir() and os.access(
                        SHM, os.W_OK) else None,
                        help="where the brokers' data goes (default: /dev/shm if writable, "
                        "else the system temp dir; removed after each level)")
    args = parser.parse_args()
    levels = [float(s) for s in args.states.split(",")]
    info = {**common.machine_info(), "kafka_version": args.kafka_version,
            "partitions": args.partitions, "polls": args.polls, "heap": args.heap,
            "warmup": args.warmup, "written": args.written}
    print(json.dumps(info), flush=True)
    traffic = Traffic()
    results: dict[float, dict[str, Any]] = {}
    for mean in levels:
        r = run_level(args, mean, traffic)
        results[mean] = r
        common.emit({"bench": "producer_states_real", "machine": info, "mean_states": mean,
                     "load_average": common.load_average(), **r})
    base = results.get(0.0)
    print(f"\nKafka {args.kafka_version}, {args.partitions} partitions, medians of {args.polls} "
          "warm polls (broker CPU: mean per poll, idle rate subtracted)")
    print(f"{'states':>7} | {'strategy':>8} | {'bytes':>10} | {'req':>4} | {'exp CPU ms':>10} | "
          f"{'brk CPU ms':>10} | {'wall ms':>8} | x vs 0 states (bytes/exp/brk) | "
          "x vs full (bytes/exp/brk)")
    keys = ("bytes", "exporter_cpu_s", "broker_cpu_s")
    for mean, r in results.items():
        for name in _STRATEGIES:
            if name not in r:
                continue
            row = r[name]
            vs0 = "/".join(_x(row[k], base["screened"][k]) for k in keys) if base else "-"
            vsf = "/".join(_x(row[k], r["full"][k]) for k in keys)
            print(f"{mean:>7} | {_SHORT[name]:>8} | {row['bytes']:>10.0f} | {row['requests']:>4} | "
                  f"{row['exporter_cpu_s'] * 1000:>10.1f} | {row['broker_cpu_s'] * 1000:>10.1f} | "
                  f"{row['wall_s'] * 1000:>8.1f} | {vs0:>29} | {vsf}")
    print("\nBroker LocalTimeMs per poll, per API (Kafka's RequestMetrics):")
    for mean, r in results.items():
        for name in _STRATEGIES:
            if name not in r:
                continue
            local = r[name]["broker_request_metrics"].get("LocalTimeMs", {})
            parts = ", ".join(f"{api} {v['ms_per_poll']:.1f} ms/{v['requests_per_poll']:g} req"
                              for api, v in sorted(local.items()))
            print(f"{mean:>7} | {_SHORT[name]:>8} | {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
