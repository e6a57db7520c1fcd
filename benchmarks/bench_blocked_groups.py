"""Blocked consumer groups: what the group lookup adds to a poll.

For each number of late partitions (0, then a sweep), a fresh child process starts a 3-broker
SimCluster, seeds one topic (`--partitions` partitions): `--open` coordinator-tracked open
transactions that are not late (so the poll reads LSOs on every scenario), `late` hanging
transactions (2 h old: late) on distinct partitions, and `--groups` consumer groups, each
committed at the LSO of every late partition (all blocked) and, with no late partition, on the
open ones. It then polls warm, alternating a poller with the group lookup and the same poller
with the lookup replaced by "nothing to look up" (the baseline, same run, same state):

- requests per poll by API, counted where the brokers answer them (the simulator's router);
- the CPU of a poll and its analysis (`analyze`): `time.thread_time()` of the polling thread
  (the simulator's own threads run in the same process and are not counted), median of
  `--repeat` polls per variant.

Run: python benchmarks/bench_blocked_groups.py              # 0, 10, 100, 1000 late, 50 groups
     python benchmarks/bench_blocked_groups.py --late 0 1000 --groups 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()
TOPIC = "orders"
HANG_AGE_MS = 2 * 3_600_000
OPEN_TIMEOUT_MS = 900_000
GROUP_APIS = {16: "ListGroups", 10: "FindCoordinator(group)", 9: "OffsetFetch"}
API_NAMES = {3: "Metadata", 61: "DescribeProducers", 66: "ListTransactions", 2: "ListOffsets",
             10: "FindCoordinator", 65: "DescribeTransactions", 1: "Fetch", 32: "DescribeConfigs",
             16: "ListGroups", 9: "OffsetFetch", 18: "ApiVersions"}


def child(partitions: int, late: int, open_txns: int, groups: int, repeat: int) -> None:
    from kafka_sim.cluster import SimCluster
    from kafka_sim.coordinator import CONSUMER_OFFSETS_TOPIC
    from kafka_sim.seed import seed_hanging_transaction, seed_open_transaction

    from exporter.analyze import analyze
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings

    if late + open_txns > partitions:
        raise SystemExit("late + open must fit in --partitions")
    sim = SimCluster(brokers=3, topics={TOPIC: partitions},
                     broker_config={"transaction.max.timeout.ms": str(OPEN_TIMEOUT_MS)}).start()
    try:
        def seed(state: Any) -> dict[int, int]:
            # Groups live in __consumer_offsets: made as a first group lookup would make it.
            state.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC)
            now = state.now_ms()
            lso: dict[int, int] = {}
            for i in range(late):
                txn = seed_hanging_transaction(state, f"hang-{i}", TOPIC, i,
                                               last_timestamp_ms=now - HANG_AGE_MS)
                lso[i] = txn.first_offsets[0]
            for j in range(open_txns):
                p = late + j
                txn = seed_open_transaction(state, f"open-{j}", [(TOPIC, p)], start_ms=now,
                                            timeout_ms=OPEN_TIMEOUT_MS)
                lso[p] = txn.first_offsets[0]
            # Every group committed at the LSO of each seeded partition (blocked where late).
            for g in range(groups):
                state.groups.commit(f"group-{g}", -1, "", 8,
                                    [(TOPIC, p, offset, -1, None) for p, offset in lso.items()],
                                    now)
            return lso

        sim.call(seed, sim.state)
        counts: Counter[tuple[int, int | None]] = Counter()
        router = sim.router
        handle = router.handle

        def counting(ctx: Any, request: Any) -> Any:
            key_type = getattr(request, "key_type", None) if ctx.api_key == 10 else None
            counts[(ctx.api_key, key_type)] += 1
            return handle(ctx, request)

        router.handle = counting
        settings = ClusterSettings(name="bench", bootstrap_servers=tuple(
            sim.bootstrap_servers.split(",")), request_timeout_seconds=30.0)
        poller = ClusterObserver(settings)
        lookup = poller.poller._groups.read

        async def no_lookup(*_args: Any) -> None:
            return None

        try:
            poller.poll()  # cold: connections, start-time Fetches
            poller.poll()  # the partitions join the screening: their offsets read once
            poller.poll()  # the fetch session started: both variants poll it warm
            cpu: dict[str, list[float]] = {"with_groups": [], "without_groups": []}
            requests: dict[str, dict[str, int]] = {}
            blocked = 0
            for _ in range(repeat):
                for variant in ("with_groups", "without_groups"):
                    poller.poller._groups.read = lookup if variant == "with_groups" else no_lookup  # type: ignore[method-assign]
                    counts.clear()
                    started = time.thread_time()
                    obs = poller.poll()
                    analyze(obs, settings)
                    cpu[variant].append(time.thread_time() - started)
                    requests[variant] = {
                        (GROUP_APIS[k] if (k in GROUP_APIS and (k != 10 or kt == 0))
                         else API_NAMES.get(k, str(k))): n
                        for (k, kt), n in sorted(counts.items())
                    }
                    if variant == "with_groups" and obs.consumer_groups is not None:
                        blocked = len(obs.consumer_groups.committed)
        finally:
            poller.close()
    finally:
        sim.close()
    with_cpu = statistics.median(cpu["with_groups"])
    without_cpu = statistics.median(cpu["without_groups"])
    group_requests = {
        name: n for name, n in requests["with_groups"].items() if name in GROUP_APIS.values()
    }
    common.emit({
        "bench": "blocked_groups",
        "partitions": partitions,
        "late_partitions": late,
        "open_not_late": open_txns,
        "groups": groups,
        "committed_offsets_read": blocked,
        "requests_with_groups": requests["with_groups"],
        "requests_without_groups": requests["without_groups"],
        "group_requests": group_requests,
        "group_requests_total": sum(group_requests.values()),
        "poll_cpu_seconds_with_groups": round(with_cpu, 4),
        "poll_cpu_seconds_without_groups": round(without_cpu, 4),
        "cpu_ratio": common.ratio(with_cpu, without_cpu),
        "extra_cpu_ms_per_late_partition": (
            round((with_cpu - without_cpu) * 1000 / late, 4) if late else None
        ),
        "repeat": repeat,
        "machine": common.machine_info(),
        "code": common.code_fingerprint(),
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--late", type=int, nargs="+", default=[0, 10, 100, 1000])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--open", type=int, default=100)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        child(args.partitions, args.late[0], args.open, args.groups, args.repeat)
        return 0
    print(f"load average at start: {common.load_average()}")
    header = (f"{'late':>6} {'groups':>6} {'group reqs':>10}  {'per API':<44} "
              f"{'cpu with':>9} {'without':>9} {'ratio':>6} {'extra ms/late':>13}")
    print(header)
    for late in args.late:
        r = common.run_child(SCRIPT, [
            "--late", str(late), "--partitions", str(args.partitions), "--open", str(args.open),
            "--groups", str(args.groups), "--repeat", str(args.repeat),
        ])
        per_api = ", ".join(f"{k} {v}" for k, v in r["group_requests"].items()) or "-"
        extra = r["extra_cpu_ms_per_late_partition"]
        print(f"{late:>6} {args.groups:>6} {r['group_requests_total']:>10}  {per_api:<44} "
              f"{r['poll_cpu_seconds_with_groups']:>9.4f} "
              f"{r['poll_cpu_seconds_without_groups']:>9.4f} {r['cpu_ratio'] or 0:>6.3f} "
              f"{'-' if extra is None else f'{extra:.4f}':>13}")
        common.emit(r)
    print(f"load average at end: {common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
