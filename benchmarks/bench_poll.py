"""One full poll: our ClusterPoller vs kafka-python 3.0.12's own admin calls, same sim state.

Processes (so that each CPU/RSS number belongs to one side only):
- the simulated cluster runs in its own child (`--serve`): SimCluster, seeded (10% of
  partitions with an idempotent producer, 1% with an open transaction incl. long-running and
  hanging ones), `set_latency(5)` on every response;
- each poller runs in a fresh child (`--child ours|kafka-python`); it reports wall time,
  `time.process_time()` (CPU of the polling process only) and VmHWM (peak RSS). Ours runs
  with the daemon's garbage-collector setting (`exporter.entry.tune_garbage_collector`).

"One poll" with kafka-python's public API (KafkaAdminClient), the nearest equivalent of ours:
  describe_topics()                       Metadata: every partition
  describe_producers(all partitions)      DescribeProducers, one request per leader
  list_transactions()                     ListTransactions, every broker
  describe_configs(BROKER each, 'all')    transaction.max.timeout.ms (first poll only, as ours)
  describe_transactions(late ids)         FindCoordinator + DescribeTransactions
  list_partition_offsets(open partitions) ListOffsets x2 (READ_UNCOMMITTED / READ_COMMITTED)
Not done by kafka-python (no admin API for it): reading each open transaction's start time
(our poller's Fetches of newly seen open transactions, batched per leader, first poll only).
kafka-python uses LastTimestamp instead, as the broker does.
"Cold" = first poll of a fresh client (connections, ApiVersions; kafka-python: constructing
KafkaAdminClient included); "warm" = the second poll on the same client.

Run: python benchmarks/bench_poll.py                 # 10 brokers x 20k, then the sweep
     python benchmarks/bench_poll.py --no-sweep      # only the comparison
     python benchmarks/bench_poll.py --baseline-tree DIR   # this tree's poller vs the one in
                                                     # DIR (e.g. a checkout of main), same sim
     python benchmarks/bench_poll.py --gc-freeze     # this tree's poller with and without
                                                     # gc.freeze() after the cold poll
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()
LATE_BUFFER_MS = 300_000
CLIENTS = ("ours", "kafka-python")
KAFKA_PYTHON_CALLS = (
    "describe_topics, describe_producers(all partitions), list_transactions, "
    "describe_configs(BROKER x all, config_filter=all; cold poll only), "
    "describe_transactions(late producers' ids), "
    "list_partition_offsets x2 (READ_UNCOMMITTED, READ_COMMITTED) on partitions with open txns"
)
OURS_CALLS = (
    "ClusterObserver.poll() (poller and orphan tracker) then analyze() and "
    "SnapshotStore.publish(): Metadata, "
    "DescribeProducers (batches of 500 per leader), "
    "ListTransactions (all brokers), DescribeConfigs (transaction.max.timeout.ms, cold only), "
    "Fetch per leader for new open txns (100 partitions each, cold only), "
    "FindCoordinator + DescribeTransactions (late ids), ListOffsets x2 per leader"
)


# -- the simulated cluster (its own process) --------------------------------------------------


def serve(brokers: int, partitions: int, latency_ms: int) -> int:
    """Start + seed a SimCluster, print 'READY <json>', serve until stdin closes."""
    plan = common.seed_plan(partitions)
    started = time.perf_counter()
    sim = common.start_seeded_cluster(brokers, plan)
    with_open = sim.call(_partitions_with_open_txn, sim.state)
    sim.set_latency(latency_ms)
    info = {
        "bootstrap": sim.bootstrap_servers.split(",")[0],
        "startup_seconds": round(time.perf_counter() - started, 3),
        "plan": plan.summary(),
        "partitions_with_open_txn": with_open,
    }
    return common.serve_until_stdin_closes(info, sim.close)


def _partitions_with_open_txn(state: Any) -> int:
    return sum(
        1
        for p in state.logs
        if not p.topic.is_internal
        and p.log is not None
        and any(e.current_txn_first_offset >= 0 for e in p.log.producers.values())
    )


@contextlib.contextmanager
def sim_server(brokers: int, partitions: int, latency_ms: int) -> Iterator[dict[str, Any]]:
    with common.serving_child(SCRIPT, ["--serve", "--brokers", str(brokers),
                                       "--partitions", str(partitions),
                                       "--latency-ms", str(latency_ms)]) as ready:
        yield ready


def _cpu_seconds_of(pid: int) -> float:
    """utime + stime of another process (the simulator), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the pollers (each in a fresh process) ----------------------------------------------------


class _Meter:
    """Wall, CPU (process_time) of one phase; peak RSS is read at the end of the child."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> dict[str, float]:
        return {
            "wall_seconds": round(time.perf_counter() - self.wall, 4),
            "cpu_seconds": round(time.process_time() - self.cpu, 4),
        }


def poll_ours(
    bootstrap: str, polls: int, profile_path: str | None, gc_freeze: bool = False
) -> dict[str, Any]:
    import structlog

    from exporter.analyze import analyze
    from exporter.entry import tune_garbage_collector
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    tune_garbage_collector()  # as the daemon's entry point does
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    settings = ClusterSettings(
        name="bench", bootstrap_servers=(bootstrap,), request_timeout_seconds=120.0
    )
    rss_before = common.rss_mib()
    poller = ClusterObserver(settings)
    store = SnapshotStore([settings])
    phases: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    profiler: Any = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile()
    for i in range(polls):
        meter = _Meter()
        if profiler is not None:
            profiler.enable()
        observation = poller.poll()
        store.publish(analyze(observation, settings))  # end to end, as the scheduler does
        if profiler is not None:
            profiler.disable()
        phases.append(meter.stop())
        counts = _observation_counts(observation)
        # The next poll runs without this observation, as in the daemon (its scheduler drops
        # it once published; the store keeps the snapshot): peak RSS is the poller's own.
        del observation
        if i == 0 and gc_freeze:
            gc.freeze()  # as `serve` would after start-up (the what-if of --gc-freeze)
    hwm_after_polls = common.hwm_mib()
    # A warm poll whose Metadata answer changed (a leader moved, a topic was created): the
    # client's parse of the last answer is dropped, so Metadata is decoded and parsed again.
    poller.poller._client._last_full_metadata = None
    meter = _Meter()
    store.publish(analyze(poller.poll(), settings))
    metadata_reparsed = meter.stop()
    poller.close()
    if profiler is not None:
        profiler.dump_stats(profile_path)
    return {
        "client": "ours",
        "calls": OURS_CALLS,
        "polls": phases,
        "metadata_reparsed": metadata_reparsed,
        "rss_before_mib": round(rss_before, 1),
        "hwm_mib_after_polls": round(hwm_after_polls, 1),
        "hwm_mib": round(common.hwm_mib(), 1),
        "gc_freeze": gc_freeze,
        **counts,
    }


def _observation_counts(o: Any) -> dict[str, int]:
    late = [
        t for t in o.open_transactions
        if o.observed_at_ms - t.start_time_ms
        > (o.brokers[0].transaction_max_timeout_ms or 900_000) + LATE_BUFFER_MS
    ]
    return {
        "partitions": len(o.leaders),
        "open_transactions": len(o.open_transactions),
        "partitions_with_open_txn": len({(t.topic, t.partition) for t in o.open_transactions}),
        "late_transactions": len(late),
        "described_ids": len(o.descriptions),
        "lso_lag_partitions": len(o.last_stable_offset_lag),
        "unobserved": len(o.unobserved),
        "request_errors": len(o.request_errors),
    }


def poll_kafka_python(bootstrap: str, polls: int) -> dict[str, Any]:
    import logging

    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, OffsetSpec
    from kafka.protocol.consumer.offsets import IsolationLevel
    from kafka.structs import TopicPartition

    logging.getLogger("kafka").setLevel(logging.ERROR)
    rss_before = common.rss_mib()
    phases: list[dict[str, Any]] = []
    meter = _Meter()
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="bench-kafka-python", request_timeout_ms=120_000
    )
    max_timeouts: dict[int, int] = {}
    counts: dict[str, int] = {}
    for i in range(polls):
        if i:
            meter = _Meter()
        now_ms = time.time_ns() // 1_000_000
        topics = admin.describe_topics()
        partitions = [
            TopicPartition(t["name"], p["partition_index"])
            for t in topics
            for p in t["partitions"]
        ]
        leaders = {
            TopicPartition(t["name"], p["partition_index"]): p["leader_id"]
            for t in topics
            for p in t["partitions"]
        }
        producers = admin.describe_producers(partitions)
        listings = admin.list_transactions()
        if not max_timeouts:
            brokers = sorted({b for b in leaders.values() if b >= 0})
            configs = admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(b)) for b in brokers],
                config_filter="all",
            )
            for name, entries in configs.get("broker", {}).items():
                entry = entries.get("transaction.max.timeout.ms")
                value = entry.get("value") if isinstance(entry, dict) else entry
                if value is not None:
                    max_timeouts[int(name)] = int(value)
        open_txns = [
            (tp, ps)
            for tp, state in producers.items()
            for ps in state.active_producers
            if ps.current_transaction_start_offset >= 0
        ]
        ids_by_pid = {
            t.producer_id: t.transactional_id for ts in listings.values() for t in ts
        }
        late_pids = {
            ps.producer_id
            for tp, ps in open_txns
            if now_ms - ps.last_timestamp
            > max_timeouts.get(leaders[tp], 900_000) + LATE_BUFFER_MS
        }
        late_ids = sorted({ids_by_pid[p] for p in late_pids if p in ids_by_pid})
        descriptions = admin.describe_transactions(late_ids) if late_ids else {}
        open_partitions = {tp: OffsetSpec.LATEST for tp, _ in open_txns}
        high = admin.list_partition_offsets(open_partitions, IsolationLevel.READ_UNCOMMITTED)
        stable = admin.list_partition_offsets(open_partitions, IsolationLevel.READ_COMMITTED)
        phases.append(meter.stop())
        counts = {
            "partitions": len(partitions),
            "open_transactions": len(open_txns),
            "partitions_with_open_txn": len(open_partitions),
            "late_transactions": sum(1 for _, ps in open_txns if ps.producer_id in late_pids),
            "described_ids": len(descriptions),
            "lso_lag_partitions": len(high.keys() & stable.keys()),
            "max_timeouts_read": len(max_timeouts),
        }
    admin.close()
    return {
        "client": "kafka-python",
        "calls": KAFKA_PYTHON_CALLS,
        "polls": phases,
        "rss_before_mib": round(rss_before, 1),
        "hwm_mib": round(common.hwm_mib(), 1),
        **counts,
    }


# -- orchestration ------------------------------------------------------------------------------


def measure(
    client: str, bootstrap: str, sim_pid: int, polls: int, repeat: int,
    profile: str | None = None,
) -> dict[str, Any]:
    """`repeat` fresh client processes against the same sim; medians of wall/CPU, max RSS."""
    runs = []
    for i in range(repeat):
        sim_cpu_before = _cpu_seconds_of(sim_pid)
        extra = ["--profile", profile] if profile and client == "ours" and i == 0 else []
        record = common.run_child(
            SCRIPT, [client, "--bootstrap", bootstrap, "--polls", str(polls), *extra]
        )
        record["sim_cpu_seconds"] = round(_cpu_seconds_of(sim_pid) - sim_cpu_before, 3)
        runs.append(record)
    merged = dict(runs[0])
    merged["repeat"] = repeat
    merged["polls"] = [
        {
            key: round(statistics.median(r["polls"][i][key] for r in runs), 4)
            for key in ("wall_seconds", "cpu_seconds")
        }
        for i in range(polls)
    ]
    if "metadata_reparsed" in runs[0]:
        merged["metadata_reparsed"] = {
            key: round(statistics.median(r["metadata_reparsed"][key] for r in runs), 4)
            for key in ("wall_seconds", "cpu_seconds")
        }
    merged["hwm_mib"] = max(r["hwm_mib"] for r in runs)
    merged["rss_before_mib"] = max(r["rss_before_mib"] for r in runs)
    merged["sim_cpu_seconds"] = round(statistics.median(r["sim_cpu_seconds"] for r in runs), 3)
    merged["cold_wall_seconds_all"] = [r["polls"][0]["wall_seconds"] for r in runs]
    return merged


def compare_trees(
    baseline_trees: list[str], brokers: int, partitions: int, latency_ms: int, polls: int,
    repeat: int, gc_freeze_side: bool = False,
) -> dict[str, Any]:
    """Our poller from this tree vs from each baseline tree (another checkout: "DIR" or
    "NAME=DIR") and/or vs this tree with `gc.freeze()` after the cold poll; same sim process,
    runs interleaved (the order rotates) so that load changes hit every side alike;
    ratio = side / this."""
    sides: list[tuple[str, Path, list[str]]] = [("this", SCRIPT, [])]
    for spec in baseline_trees:
        name, _, tree = spec.rpartition("=")
        sides.append((name or "baseline", Path(tree).resolve() / "benchmarks" / SCRIPT.name, []))
    if gc_freeze_side:
        sides.append(("this_gc_freeze", SCRIPT, ["--gc-freeze"]))
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side, _, _ in sides}
    with sim_server(brokers, partitions, latency_ms) as sim:
        for i in range(repeat):
            for side, script, extra in sides[i % len(sides):] + sides[:i % len(sides)]:
                runs[side].append(common.run_child(
                    script,
                    ["ours", "--bootstrap", sim["bootstrap"], "--polls", str(polls), *extra],
                ))
    result: dict[str, Any] = {
        "bench": "poll_vs_baseline_tree",
        "brokers": brokers,
        "partitions": partitions,
        "latency_ms": latency_ms,
        "repeat": repeat,
        "sim": sim,
    }
    for side, records in runs.items():
        for i, name in enumerate(("cold", "warm")[:polls]):
            for key in ("wall_seconds", "cpu_seconds"):
                values = [r["polls"][i][key] for r in records]
                result[f"{side}_{name}_{key}"] = round(statistics.median(values), 4)
                result[f"{side}_{name}_{key}_all"] = values
            result[f"{side}_{name}_cpu_us_per_partition"] = round(
                result[f"{side}_{name}_cpu_seconds"] / partitions * 1e6, 2)
        for key in ("wall_seconds", "cpu_seconds"):
            result[f"{side}_metadata_reparsed_{key}"] = round(
                statistics.median(r["metadata_reparsed"][key] for r in records), 4)
        result[f"{side}_hwm_mib"] = max(r["hwm_mib"] for r in records)
        if all("hwm_mib_after_polls" in r for r in records):
            result[f"{side}_hwm_mib_after_polls"] = max(r["hwm_mib_after_polls"] for r in records)
        result[f"{side}_rss_before_mib"] = max(r["rss_before_mib"] for r in records)
        result[f"{side}_open_transactions"] = records[0]["open_transactions"]
        result[f"{side}_request_errors"] = max(r["request_errors"] for r in records)
    for side in runs:
        if side == "this":
            continue
        for name in ("cold", "warm")[:polls]:
            for key in ("wall_seconds", "cpu_seconds"):
                result[f"ratio_{side}_{name}_{key}"] = common.ratio(
                    result[f"{side}_{name}_{key}"], result[f"this_{name}_{key}"])
        result[f"ratio_{side}_peak_rss"] = common.ratio(
            result[f"{side}_hwm_mib"], result["this_hwm_mib"])
    return result


def compare(
    brokers: int, partitions: int, latency_ms: int, polls: int, repeat: int,
    profile: str | None = None,
) -> dict[str, Any]:
    with sim_server(brokers, partitions, latency_ms) as sim:
        ours = measure("ours", sim["bootstrap"], sim["pid"], polls, repeat, profile)
        theirs = measure("kafka-python", sim["bootstrap"], sim["pid"], polls, repeat)
    result: dict[str, Any] = {
        "bench": "poll_compare",
        "brokers": brokers,
        "partitions": partitions,
        "latency_ms": latency_ms,
        "sim": sim,
        "ours": ours,
        "kafka_python": theirs,
    }
    for i, name in enumerate(("cold", "warm")[:polls]):
        a, b = ours["polls"][i], theirs["polls"][i]
        result[f"ratio_{name}_wall"] = common.ratio(a["wall_seconds"], b["wall_seconds"])
        result[f"ratio_{name}_cpu"] = common.ratio(a["cpu_seconds"], b["cpu_seconds"])
    result["ratio_peak_rss"] = common.ratio(ours["hwm_mib"], theirs["hwm_mib"])
    return result


def sweep_point(
    brokers: int, partitions: int, latency_ms: int, polls: int, repeat: int,
    with_kafka_python: bool, kafka_python_repeat: int,
) -> dict[str, Any]:
    with sim_server(brokers, partitions, latency_ms) as sim:
        ours = measure("ours", sim["bootstrap"], sim["pid"], polls, repeat)
        theirs = (
            measure("kafka-python", sim["bootstrap"], sim["pid"], polls, kafka_python_repeat)
            if with_kafka_python else None
        )
    point: dict[str, Any] = {
        "bench": "poll_sweep",
        "brokers": brokers,
        "partitions": partitions,
        "latency_ms": latency_ms,
        "sim": sim,
        "ours": ours,
        "kafka_python": theirs,
    }
    reparsed = ours["metadata_reparsed"]["cpu_seconds"]
    point["ours_metadata_reparsed_cpu_us_per_partition"] = round(reparsed / partitions * 1e6, 2)
    for i, name in enumerate(("cold", "warm")[:polls]):
        cpu = ours["polls"][i]["cpu_seconds"]
        point[f"ours_{name}_cpu_us_per_partition"] = round(cpu / partitions * 1e6, 2)
        if theirs is not None:
            point[f"ratio_{name}_wall"] = common.ratio(
                ours["polls"][i]["wall_seconds"], theirs["polls"][i]["wall_seconds"])
            point[f"ratio_{name}_cpu"] = common.ratio(cpu, theirs["polls"][i]["cpu_seconds"])
        if theirs is not None:
            cpu_kp = theirs["polls"][i]["cpu_seconds"]
            point[f"kafka_python_{name}_cpu_us_per_partition"] = round(
                cpu_kp / partitions * 1e6, 2)
    return point


def _fmt_poll(p: dict[str, Any]) -> str:
    return f"wall {p['wall_seconds']:.3f} s, CPU {p['cpu_seconds']:.3f} s"


def _print_compare(r: dict[str, Any]) -> None:
    print(f"\nOne poll, {r['brokers']} brokers x {r['partitions']} partitions, "
          f"{r['latency_ms']} ms latency per response; seed {r['sim']['plan']}")
    for key in ("ours", "kafka_python"):
        c = r[key]
        print(f"  {c['client']:<13} cold: {_fmt_poll(c['polls'][0])}; "
              + (f"warm: {_fmt_poll(c['polls'][1])}; " if len(c["polls"]) > 1 else "")
              + f"peak RSS {c['hwm_mib']:.1f} MiB (before {c['rss_before_mib']:.1f}); "
              f"sim CPU {c['sim_cpu_seconds']:.2f} s")
        print(f"  {'':<13} saw {c['partitions']} partitions, {c['open_transactions']} open txns, "
              f"{c['late_transactions']} late, {c['described_ids']} described, "
              f"{c['lso_lag_partitions']} LSO lags")
    print(f"  ratios ours/kafka-python: cold wall {r['ratio_cold_wall']}, cold CPU "
          f"{r['ratio_cold_cpu']}" + (f", warm wall {r['ratio_warm_wall']}, warm CPU "
                                      f"{r['ratio_warm_cpu']}" if "ratio_warm_wall" in r else "")
          + f", peak RSS {r['ratio_peak_rss']}")
    print(f"  kafka-python calls: {KAFKA_PYTHON_CALLS}")


def _print_sweep(points: list[dict[str, Any]]) -> None:
    print("\nSweep (ours; CPU = process_time of the polling process):")
    print(f"  {'partitions':>10} {'cold wall':>10} {'cold CPU':>9} {'us/part':>8} "
          f"{'warm wall':>10} {'warm CPU':>9} {'us/part':>8} {'peak RSS':>9}")
    for p in points:
        o = p["ours"]["polls"]
        warm = o[1] if len(o) > 1 else {"wall_seconds": float("nan"), "cpu_seconds": float("nan")}
        print(f"  {p['partitions']:>10} {o[0]['wall_seconds']:>10.3f} {o[0]['cpu_seconds']:>9.3f} "
              f"{p['ours_cold_cpu_us_per_partition']:>8.2f} {warm['wall_seconds']:>10.3f} "
              f"{warm['cpu_seconds']:>9.3f} {p.get('ours_warm_cpu_us_per_partition', 0):>8.2f} "
              f"{p['ours']['hwm_mib']:>9.1f}")
        r = p["ours"]["metadata_reparsed"]
        print(f"  {'':>10} warm poll with Metadata decoded again (answer changed): wall "
              f"{r['wall_seconds']:.3f} s, CPU {r['cpu_seconds']:.3f} s, "
              f"{p['ours_metadata_reparsed_cpu_us_per_partition']:.2f} us/partition")
        if p["kafka_python"] is not None:
            k = p["kafka_python"]["polls"]
            print(f"  {'  kafka-py':>10} {k[0]['wall_seconds']:>10.3f} {k[0]['cpu_seconds']:>9.3f} "
                  f"{p['kafka_python_cold_cpu_us_per_partition']:>8.2f}"
                  + (f" {k[1]['wall_seconds']:>10.3f} {k[1]['cpu_seconds']:>9.3f} "
                     f"{p['kafka_python_warm_cpu_us_per_partition']:>8.2f}" if len(k) > 1 else "")
                  + f" {p['kafka_python']['hwm_mib']:>9.1f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=int, default=5)
    parser.add_argument("--polls", type=int, default=2, choices=(1, 2))
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh client processes per measurement (median reported)")
    parser.add_argument("--sweep-brokers", type=int, default=50)
    parser.add_argument("--sweep", default="20000,100000,200000",
                        help="comma-separated partition counts for the sweep (ours)")
    parser.add_argument("--sweep-kafka-python-max", type=int, default=200_000,
                        help="also run kafka-python at sweep sizes up to this many partitions")
    parser.add_argument("--sweep-kafka-python-repeat", type=int, default=1,
                        help="kafka-python runs per sweep size above --partitions (it is slow)")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help="write a cProfile of our poller's polls here")
    parser.add_argument("--baseline-tree", action="append", default=[],
                        metavar="[NAME=]DIR",
                        help="compare this tree's poller with the one in this checkout only "
                        "(repeatable; NAME labels the side, default 'baseline')")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="also run this tree's poller with gc.freeze() after its cold "
                        "poll, interleaved with the runs without (what-if)")
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.brokers, args.partitions, args.latency_ms)
    if args.child == "ours":
        common.emit(poll_ours(args.bootstrap, args.polls, args.profile, args.gc_freeze))
        return 0
    if args.child == "kafka-python":
        common.emit(poll_kafka_python(args.bootstrap, args.polls))
        return 0

    machine = common.machine_info()
    print(f"machine: {machine}")
    if args.baseline_tree or args.gc_freeze:
        result = compare_trees(args.baseline_tree, args.brokers, args.partitions,
                               args.latency_ms, args.polls, args.repeat, args.gc_freeze)
        result["machine"] = machine
        result["load_average_after"] = common.load_average()
        common.emit(result)
        return 0
    result = compare(args.brokers, args.partitions, args.latency_ms, args.polls, args.repeat,
                     args.profile)
    result["machine"] = machine
    _print_compare(result)
    common.emit(result)
    if args.no_sweep:
        return 0
    points = []
    for size in (int(s) for s in args.sweep.split(",") if s.strip()):
        point = sweep_point(args.sweep_brokers, size, args.latency_ms, args.polls, args.repeat,
                            with_kafka_python=size <= args.sweep_kafka_python_max,
                            kafka_python_repeat=(args.repeat if size <= args.partitions
                                                 else args.sweep_kafka_python_repeat))
        point["machine"] = machine
        points.append(point)
        common.emit(point)
    _print_sweep(points)
    print(f"load average after the run: {common.load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
