"""Poll cost against producer states per partition: the full poll (DescribeProducers
for every partition, every poll) vs the screened one (every partition DescribeProducers
answered for screened through a fetch session per leader, asked DescribeProducers only where
LSO < HW and moved since last asked), on the same simulated cluster. The states are seeded compactly
(`seed_idle_producer_states`: the same answers as one explicit producer per state, in a few
bytes each), so that 200,000 partitions x 1,000 states fit.

Per mean states per partition (0 = no producer state at all, the baseline): a fresh SimCluster
of `--partitions` partitions on `--brokers` brokers, seeded with idempotent producer states
(0.1: skewed, hot topics holding most; >= 1: that many on every partition) and ~1% of the
partitions with an open transaction (so screening has partitions to ask about). For each
strategy, three cold polls (the first after a start, then the first reads and sessions),
recorded apart (`cold_polls`, and `first_vs_warm`: the first poll against the warm median),
then `--polls` warm polls measured:
- bytes received: the answers' payload bytes, per API (counted where the exporter decodes them);
- requests sent, per API;
- exporter CPU: the CPU time of the process's polling loop thread over the poll
  (`_common.polling_loop_cpu_s`: every poll runs on that shared loop, exporter/collect/loop.py,
  while the thread calling `poll()` only waits for it);
- simulator CPU: process CPU minus the exporter's (the broker side's cost, plus the sim's tick);
- wall: `ClusterPoller.poll()`.
The simulator runs in this process (its own thread), so wall includes waiting for it.
`--written F`: before every warm poll, a fraction F of the partitions (chosen anew each time,
the open transactions' partitions among them) gets one batch from a long-lived idempotent
producer (which wrote every partition once while seeding: one state more everywhere), so
that their offsets move between polls; 0 = a cluster standing still.

`--seed-only`: no polls; per level, the SimCluster's start (seconds, RSS) and the seeding's
(seconds, RSS after, peak RSS): what a cluster of that size costs before polling (one level per
run for an RSS that no earlier level has grown).

Run: python benchmarks/bench_producer_states.py [--partitions 1000] [--states 0,0.1,10,100,1000]
     [--written 0.1] [--seed-only]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulator"))

import _common as common
from kafka_sim.cluster import SimCluster
from kafka_sim.seed import (
    seed_idempotent_producer,
    seed_idle_producer_states,
    seed_open_transaction,
    skewed_state_counts,
    write_idempotent_batch,
)

from exporter.collect import connection as connection_module
from exporter.collect import fastdecode
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

PER_TOPIC = 100
TIMEOUT_MS = 900_000
OPEN_FRACTION = 0.01


class Traffic:
    """Answer bytes and requests per API name, counted inside BrokerConnection."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()

    def reset(self) -> None:
        self.bytes.clear()
        self.requests.clear()

    def poll_row(self, obs: Any) -> dict[str, Any]:
        """What one poll (counted since `reset`) received and sent, and what it found."""
        return {
            "bytes": sum(self.bytes.values()),
            "describe_producers_bytes": self.bytes["DescribeProducersRequest"],
            "list_offsets_bytes": self.bytes["ListOffsetsRequest"],
            "fetch_bytes": self.bytes["FetchRequest"],
            "requests": sum(self.requests.values()),
            "requests_by_api": dict(self.requests),
            "bytes_by_api": dict(self.bytes),
            "open": len(obs.open_transactions),
            "unobserved": len(obs.unobserved),
        }


@contextmanager
def counting(traffic: Traffic) -> Iterator[None]:
    cls = connection_module.BrokerConnection
    original_send = cls._send
    original_decode = fastdecode.decode_response

    def wrap(name: str, decode: Callable[[bytes, int], Any]) -> Callable[[bytes, int], Any]:
        def counted(payload: bytes, version: int) -> Any:
            traffic.bytes[name] += len(payload)
            return decode(payload, version)
        return counted

    async def send(self: Any, request: Any, version: int, timeout_seconds: float,
                   decode: Any = None) -> Any:
        name = str(getattr(request, "name", type(request).__name__))
        traffic.requests[name] += 1
        if decode is None:
            response_class = getattr(request, "response_class", None)
            if response_class is None:
                request.API_VERSION = version
                response_class = request.RESPONSE_TYPE if hasattr(
                    request, "RESPONSE_TYPE") else None
            if response_class is not None:
                decode = functools.partial(original_decode, response_class)
        if decode is not None:
            decode = wrap(name, decode)
        return await original_send(self, request, version, timeout_seconds, decode)

    cls._send = send  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls._send = original_send  # type: ignore[method-assign]


def seed(sim: SimCluster, partitions: int, mean_states: float, rng_seed: int,
         writer: bool = False) -> dict[str, Any]:
    rng = random.Random(rng_seed)
    now = sim.clock.now_ms()
    layout = [(f"t{i // PER_TOPIC:04d}", i % PER_TOPIC) for i in range(partitions)]
    if mean_states >= 1:
        counts = {tp: int(mean_states) for tp in layout}
    elif mean_states > 0:
        counts = skewed_state_counts(layout, mean_states, rng=rng)
    else:
        counts = {}

    def seed_states(chunk: list[tuple[tuple[str, int], int]]) -> None:
        for (topic, p), n in chunk:
            seed_idle_producer_states(sim.state, topic, p, n, now_ms=now,
                                      max_age_ms=3_600_000, rng=rng)

    # In calls of ~1M states each: one call per loop turn must end within SimCluster.call's
    # timeout (200,000 partitions x 1,000 states take minutes); in order, so the same result.
    chunk: list[tuple[tuple[str, int], int]] = []
    for item in counts.items():
        chunk.append(item)
        if len(chunk) * max(1, mean_states) >= 1_000_000:
            sim.call(seed_states, chunk)
            chunk = []
    sim.call(seed_states, chunk)

    def on_loop() -> dict[str, Any]:
        opened = 0
        for i in range(max(1, round(partitions * OPEN_FRACTION))):
            topic, p = layout[rng.randrange(len(layout))]
            seed_open_transaction(sim.state, f"bench-open-{i}", [(topic, p)],
                                  start_ms=now - 10_000, timeout_ms=TIMEOUT_MS)
            opened += 1
        pid = -1
        if writer:
            pid = seed_idempotent_producer(sim.state, *layout[0], timestamp_ms=now)
            for topic, p in layout[1:]:
                write_idempotent_batch(sim.state, topic, p, producer_id=pid, timestamp_ms=now)
        return {"states": sum(counts.values()), "open_transactions": opened,
                "writer": pid, "layout": layout}

    return sim.call(on_loop)


def traffic_between_polls(sim: SimCluster, seeded: dict[str, Any], fraction: float,
                          rng: random.Random) -> Callable[[], None]:
    """Writes a batch to `fraction` of the partitions (the seeded writer's), on the loop."""
    layout, pid = seeded["layout"], seeded["writer"]

    def write() -> None:
        now = sim.clock.now_ms()
        for topic, p in rng.sample(layout, round(len(layout) * fraction)):
            write_idempotent_batch(sim.state, topic, p, producer_id=pid, timestamp_ms=now)

    return lambda: sim.call(write)


def measure(sim: SimCluster, screening: bool, polls: int, traffic: Traffic,
            between: Callable[[], None] | None = None) -> dict[str, Any]:
    settings = ClusterSettings(name="bench", bootstrap_servers=tuple(
        sim.bootstrap_servers.split(",")), request_timeout_seconds=300.0)
    poller = ClusterObserver(settings, clock_ms=sim.clock.now_ms,
                           screen_partitions=screening)
    rows: list[dict[str, Any]] = []
    try:
        cold: list[dict[str, Any]] = []
        for _ in range(3):  # cold: connections, counts learnt, first reads, sessions
            if between is not None:
                between()
            traffic.reset()
            cpu0, wall0 = common.polling_loop_cpu_s(), time.perf_counter()
            obs = poller.poll()
            wall = time.perf_counter() - wall0
            cold.append({"bytes": sum(traffic.bytes.values()),
                         "exporter_cpu_s": common.polling_loop_cpu_s() - cpu0,
                         "wall_s": wall, "open": len(obs.open_transactions)})
        for _ in range(polls):
            if between is not None:
                between()
            traffic.reset()
            cpu0, proc0 = common.polling_loop_cpu_s(), time.process_time()
            wall0 = time.perf_counter()
            obs = poller.poll()
            wall = time.perf_counter() - wall0
            cpu = common.polling_loop_cpu_s() - cpu0
            proc = time.process_time() - proc0
            rows.append({**traffic.poll_row(obs), "exporter_cpu_s": cpu,
                         "sim_cpu_s": max(0.0, proc - cpu), "wall_s": wall})
    finally:
        poller.close()
    med = {k: statistics.median(r[k] for r in rows) for k in (
        "bytes", "describe_producers_bytes", "list_offsets_bytes", "fetch_bytes", "requests",
        "exporter_cpu_s", "sim_cpu_s", "wall_s")}
    med["cold_polls"] = cold
    med["first_vs_warm"] = {
        k: common.ratio(cold[0][k], med[k]) for k in ("bytes", "exporter_cpu_s", "wall_s")
    }
    med["open"] = rows[-1]["open"]
    med["unobserved"] = rows[-1]["unobserved"]
    med["requests_by_api"] = rows[-1]["requests_by_api"]
    return med


def seed_only(partitions: int, brokers: int, levels: list[float],
              info: dict[str, Any]) -> int:
    """Start and seed a cluster per level, measured; no poll."""
    for mean in levels:
        topics = {f"t{i:04d}": min(PER_TOPIC, partitions - i * PER_TOPIC)
                  for i in range((partitions + PER_TOPIC - 1) // PER_TOPIC)}
        rss0, t0 = common.rss_mib(), time.perf_counter()
        with SimCluster(brokers=brokers, topics=topics, broker_config={
                "transaction.max.timeout.ms": str(TIMEOUT_MS)}) as sim:
            started_s, rss1 = time.perf_counter() - t0, common.rss_mib()
            t1 = time.perf_counter()
            seeded = seed(sim, partitions, mean, rng_seed=1)
            record = {"bench": "producer_states_seeding", "machine": info, "mean_states": mean,
                      "states": seeded["states"], "start_s": started_s, "seed_s":
                      time.perf_counter() - t1, "rss_before_mib": rss0,
                      "rss_started_mib": rss1, "rss_seeded_mib": common.rss_mib(),
                      "peak_rss_mib": common.hwm_mib()}
        common.emit(record)
        print(f"{mean:>7} states/partition: {record['states']:,} states; start "
              f"{started_s:.1f} s, RSS {rss1:.0f} MiB; seeding {record['seed_s']:.1f} s, "
              f"RSS {record['rss_seeded_mib']:.0f} MiB (peak {record['peak_rss_mib']:.0f})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--states", default="0,0.1,10,100,1000")
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--written", type=float, default=0.0)
    parser.add_argument("--full-up-to", type=float, default=None, metavar="STATES",
                        help="measure the full poll only at levels up to STATES (at 200k "
                             "partitions x 1,000 states one full poll moves ~7 GB)")
    parser.add_argument("--seed-only", action="store_true")
    args = parser.parse_args()
    info = {**common.machine_info(), "load_average": common.load_average(),
            "partitions": args.partitions, "brokers": args.brokers, "polls": args.polls,
            "written": args.written}
    print(json.dumps(info))
    if args.seed_only:
        return seed_only(args.partitions, args.brokers,
                         [float(s) for s in args.states.split(",")], info)
    traffic = Traffic()
    results: dict[float, dict[str, dict[str, Any]]] = {}
    with counting(traffic):
        for mean in (float(s) for s in args.states.split(",")):
            topics = {f"t{i:04d}": min(PER_TOPIC, args.partitions - i * PER_TOPIC)
                      for i in range((args.partitions + PER_TOPIC - 1) // PER_TOPIC)}
            with SimCluster(brokers=args.brokers, topics=topics, broker_config={
                    "transaction.max.timeout.ms": str(TIMEOUT_MS)}) as sim:
                seeded = seed(sim, args.partitions, mean, rng_seed=1,
                              writer=args.written > 0)
                # The simulated brokers share this process: their seeded objects (millions
                # at 1,000 states) are moved out of the collector's sight, so that a
                # collection triggered by either side does not scan them (an exporter runs
                # in a process of its own).
                gc.collect()
                gc.freeze()
                between = (traffic_between_polls(sim, seeded, args.written, random.Random(2))
                           if args.written > 0 else None)
                polls = args.polls if mean < 1000 else max(2, args.polls // 2)
                full = (measure(sim, False, polls, traffic, between)
                        if args.full_up_to is None or mean <= args.full_up_to else None)
                screened = measure(sim, True, polls, traffic, between)
            gc.unfreeze()
            results[mean] = {"screened": screened} if full is None else {
                "full": full, "screened": screened}
            assert full is None or screened["open"] == full["open"], (screened, full)
            common.emit({"bench": "producer_states", "machine": info, "mean_states": mean,
                         "states": seeded["states"],
                         "open_transactions": seeded["open_transactions"],
                         **results[mean]})
    base = results.get(0.0)
    print(f"\n{'states':>7} | {'strategy':>9} | {'bytes':>10} | {'req':>4} | {'exp CPU ms':>10} |"
          f" {'sim CPU ms':>10} | {'wall ms':>8} | x bytes/CPU/sim vs 0 states | x vs full")
    for mean, r in results.items():
        for name, row in r.items():
            vs0 = "/".join(
                f"{common.ratio(row[k], base['screened'][k]) or 0:.2f}"
                for k in ("bytes", "exporter_cpu_s", "sim_cpu_s")) if base else "-"
            vsf = "/".join(
                f"{common.ratio(row[k], r['full'][k]) or 0:.2f}"
                for k in ("bytes", "exporter_cpu_s", "sim_cpu_s")) if "full" in r else "-"
            print(f"{mean:>7} | {name:>9} | {row['bytes']:>10.0f} | "
                  f"{row.get('requests', 0):>4} | {row['exporter_cpu_s'] * 1000:>10.1f} | "
                  f"{row['sim_cpu_s'] * 1000:>10.1f} | {row['wall_s'] * 1000:>8.1f} | "
                  f"{vs0:>27} | {vsf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
