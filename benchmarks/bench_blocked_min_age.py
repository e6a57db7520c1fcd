"""Blocked before late: what `blocked_groups_min_age_seconds` adds to a poll.

For each scenario, a fresh child process starts a 3-broker SimCluster, seeds one topic
(`--partitions` partitions) with `--open` coordinator-tracked open transactions on distinct
partitions (timeout 15 min: never late here) and `--groups` consumer groups each committed at
the LSO of every one of them (every group would be blocked), and polls warm with two pollers of
the same cluster, alternating:

- "min age": the default `blocked_groups_min_age_seconds` (120 s);
- "baseline": the same with the minimum age at its maximum (7 days): groups are read only behind
  late or orphaned transactions, as before the setting existed.

Scenarios: `young` (every transaction started now: below the minimum age) and `old` (every
transaction started 10 min ago: past it, not late). Measured per variant: requests per poll by
API, counted where the brokers answer them (the simulator's router), and the CPU of a poll and its
`analyze`, `time.thread_time()` of the polling thread (the simulator's threads are not counted),
median of `--repeat` warm polls.

Run: python benchmarks/bench_blocked_min_age.py                   # young and old, 100 and 1000
     python benchmarks/bench_blocked_min_age.py --open 100 --groups 20
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
TIMEOUT_MS = 900_000
OLD_AGE_MS = 600_000  # 10 min: past the 120 s minimum, not late (15 min + 5 min)
MAX_MIN_AGE_SECONDS = 7 * 86_400.0
GROUP_APIS = {16: "ListGroups", 10: "FindCoordinator(group)", 9: "OffsetFetch",
              60: "DescribeCluster"}
API_NAMES = {3: "Metadata", 61: "DescribeProducers", 66: "ListTransactions", 2: "ListOffsets",
             10: "FindCoordinator", 65: "DescribeTransactions", 1: "Fetch", 32: "DescribeConfigs",
             18: "ApiVersions", **GROUP_APIS}
VARIANTS = ("min_age", "baseline")


def child(scenario: str, partitions: int, open_txns: int, groups: int, repeat: int) -> None:
    from dataclasses import replace

    from kafka_sim.cluster import SimCluster
    from kafka_sim.coordinator import CONSUMER_OFFSETS_TOPIC
    from kafka_sim.seed import seed_open_transaction

    from exporter.analyze import analyze
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings

    if open_txns > partitions:
        raise SystemExit("--open must fit in --partitions")
    sim = SimCluster(brokers=3, topics={TOPIC: partitions},
                     broker_config={"transaction.max.timeout.ms": str(TIMEOUT_MS)}).start()
    try:
        def seed(state: Any) -> None:
            state.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC)
            now = state.now_ms()
            start = now - OLD_AGE_MS if scenario == "old" else now
            lso: dict[int, int] = {}
            for p in range(open_txns):
                txn = seed_open_transaction(state, f"sink-{p}-1", [(TOPIC, p)], start_ms=start,
                                            timeout_ms=TIMEOUT_MS)
                lso[p] = txn.first_offsets[0]
            for g in range(groups):
                state.groups.commit(f"group-{g}", -1, "", 8,
                                    [(TOPIC, p, offset, -1, None) for p, offset in lso.items()],
                                    now)

        sim.call(seed, sim.state)
        counts: Counter[tuple[int, int | None]] = Counter()
        router = sim.router
        handle = router.handle

        def counting(ctx: Any, request: Any) -> Any:
            key_type = getattr(request, "key_type", None) if ctx.api_key == 10 else None
            counts[(ctx.api_key, key_type)] += 1
            return handle(ctx, request)

        router.handle = counting
        base = ClusterSettings(name="bench", bootstrap_servers=tuple(
            sim.bootstrap_servers.split(",")), request_timeout_seconds=30.0)
        settings = {
            "min_age": base,
            "baseline": replace(base, blocked_groups_min_age_seconds=MAX_MIN_AGE_SECONDS),
        }
        pollers = {v: ClusterObserver(s, clock_ms=sim.clock.now_ms) for v, s in settings.items()}
        try:
            for poller in pollers.values():
                poller.poll()  # cold: connections, start-time Fetches
                poller.poll()
            cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
            requests: dict[str, dict[str, int]] = {}
            blocked: dict[str, int] = {}
            for _ in range(repeat):
                for variant in VARIANTS:
                    counts.clear()
                    started = time.thread_time()
                    obs = pollers[variant].poll()
                    snap = analyze(obs, settings[variant])
                    cpu[variant].append(time.thread_time() - started)
                    requests[variant] = {
                        (GROUP_APIS[k] if k in GROUP_APIS and (k != 10 or kt == 0)
                         else API_NAMES.get(k, str(k))): n
                        for (k, kt), n in sorted(counts.items())
                    }
                    blocked[variant] = sum(len(b.blocked_groups)
                                           for b in snap.blocking_transactions)
        finally:
            for poller in pollers.values():
                poller.close()
    finally:
        sim.close()
    with_cpu = statistics.median(cpu["min_age"])
    base_cpu = statistics.median(cpu["baseline"])
    group_requests = {
        name: n for name, n in requests["min_age"].items() if name in GROUP_APIS.values()
    }
    common.emit({
        "bench": "blocked_min_age",
        "scenario": scenario,
        "partitions": partitions,
        "open_transactions": open_txns,
        "groups": groups,
        "blocked_groups_reported": blocked["min_age"],
        "requests_min_age": requests["min_age"],
        "requests_baseline": requests["baseline"],
        "requests_identical": requests["min_age"] == requests["baseline"],
        "group_requests": group_requests,
        "group_requests_total": sum(group_requests.values()),
        "poll_cpu_seconds_min_age": round(with_cpu, 4),
        "poll_cpu_seconds_baseline": round(base_cpu, 4),
        "cpu_ratio": common.ratio(with_cpu, base_cpu),
        "extra_cpu_ms_per_old_transaction": (
            round((with_cpu - base_cpu) * 1000 / open_txns, 4)
            if scenario == "old" and open_txns else None
        ),
        "repeat": repeat,
        "machine": common.machine_info(),
        "code": common.code_fingerprint(),
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", nargs="+", choices=("young", "old"),
                        default=["young", "old"])
    parser.add_argument("--open", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        child(args.scenario[0], args.partitions, args.open[0], args.groups, args.repeat)
        return 0
    print(f"load average at start: {common.load_average()}")
    print(f"{'scenario':>8} {'open':>6} {'groups':>6} {'blocked':>8} {'group reqs':>10} "
          f"{'same reqs':>9} {'cpu min age':>11} {'baseline':>9} {'ratio':>6} "
          f"{'extra ms/txn':>12}")
    for scenario in args.scenario:
        for open_txns in args.open:
            r = common.run_child(SCRIPT, [
                "--scenario", scenario, "--open", str(open_txns),
                "--partitions", str(args.partitions), "--groups", str(args.groups),
                "--repeat", str(args.repeat),
            ])
            extra = r["extra_cpu_ms_per_old_transaction"]
            print(f"{scenario:>8} {open_txns:>6} {args.groups:>6} "
                  f"{r['blocked_groups_reported']:>8} {r['group_requests_total']:>10} "
                  f"{r['requests_identical']!s:>9} {r['poll_cpu_seconds_min_age']:>11.4f} "
                  f"{r['poll_cpu_seconds_baseline']:>9.4f} {r['cpu_ratio'] or 0:>6.3f} "
                  f"{'-' if extra is None else f'{extra:.4f}':>12}")
            common.emit(r)
    print(f"load average at end: {common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
