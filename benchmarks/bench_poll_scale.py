"""Polls of a very large cluster (default 100 brokers x 1,000,000 partitions) with the shipped
request timeout: does every request come back, and who sets the wall time?

Processes:
- the simulated cluster in its own child (`--serve`, as bench_poll.py: seeded with 10% of
  partitions with an idempotent producer and 1% with an open transaction, 5 ms latency), which
  answers one full Metadata before the poller starts (timed apart: the simulator builds its
  Metadata rows on the first request, a real broker before any), then freezes its heap
  (`gc.freeze()`: the cyclic GC no longer rescans the simulated state);
- our poller in a fresh child with the default ClusterSettings (request timeout 10 s) and the
  daemon's garbage-collector setting (`exporter.entry.tune_garbage_collector`), polling
  `--polls` times end to end (poll + analyze + publish). Per poll: wall, CPU of the poller
  (`time.process_time()`), CPU the simulator spent meanwhile (/proc/<pid>/stat), the request
  errors by API and error (a lost request is a REQUEST_TIMEOUT or a dropped connection), and
  partitions left unobserved. The observation is dropped before the next poll, as the daemon
  does, so the poller's peak RSS (VmHWM) is that of one poll. After the last poll, the
  pure-Python floor in the same process: each partition of the poll's mapping read once into
  a row; the warm polls' median CPU is printed against it, and so is the median of the last
  three polls (the settled poll, once `--polls` is enough for every partition to have joined
  the screening: 20,000 join per poll).
With `--baseline-tree DIR` the poller of another checkout (e.g. `git archive` of main before a
change, with its own copy of this script) polls the same simulator in the same run, the runs
interleaved `--repeat` times: ratio = this / baseline. With `--sim-baseline-tree DIR` the same
is measured against the simulator of another checkout.

Run: python benchmarks/bench_poll_scale.py [--brokers 100] [--partitions 1000000] [--polls 4]
     python benchmarks/bench_poll_scale.py --baseline-tree DIR [--repeat 2]
     python benchmarks/bench_poll_scale.py --sim-baseline-tree DIR [--baseline-polls 2]
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common
from bench_sim_scale import _metadata_round_trip

SCRIPT = Path(__file__).resolve()
TARGET_WALL_SECONDS = 10.0
TARGET_RSS_MIB = 400.0
SETTLED_POLLS = 3
"""The last polls of a run, once every partition has joined the screening (enough --polls)."""


def serve(brokers: int, partitions: int, latency_ms: int) -> int:
    """Start + seed a SimCluster, print 'READY <json>', serve until stdin closes."""

    import kafka_sim

    plan = common.seed_plan(partitions)
    started = time.perf_counter()
    sim = common.start_seeded_cluster(brokers, plan)
    startup = time.perf_counter() - started
    # One full Metadata before the pollers come, as a cluster that has been serving clients
    # has answered: the simulator builds its per-topic rows lazily on the first one (a broker
    # has its metadata image before any request), which would otherwise fall on the cold poll.
    host, port = sim.bootstrap_servers.split(",")[0].rsplit(":", 1)
    first_metadata_seconds, _ = _metadata_round_trip(host, int(port))
    # The simulator's state (a million partitions, their logs, the Metadata rows) lives as
    # long as the process: taken out of the cyclic GC's generations, the full collections that
    # the requests' garbage triggers stop rescanning it (a cost of a Python simulator, not one
    # a broker has).
    gc.collect()
    gc.freeze()
    sim.set_latency(latency_ms)
    info = {
        "bootstrap": sim.bootstrap_servers.split(",")[0],
        "startup_seconds": round(startup, 3),
        "first_metadata_seconds": round(first_metadata_seconds, 3),
        "plan": plan.summary(),
        "kafka_sim_from": str(Path(kafka_sim.__file__).resolve().parent.parent.parent),
    }
    return common.serve_until_stdin_closes(info, sim.close)


def _cpu_seconds_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pure_python_floor_seconds(leaders: Any) -> float:
    """CPU of the least a poll that looks at every partition must do in Python: read each
    partition of the poll's own mapping once into a row (best of 3, same process)."""
    best = float("inf")
    for _ in range(3):
        cpu = time.process_time()
        rows = [(tp.topic, tp.partition, leader) for tp, leader in leaders.items()]
        best = min(best, time.process_time() - cpu)
        del rows
    return best


def poll(bootstrap: str, sim_pid: int, polls: int) -> dict[str, Any]:
    import structlog

    import exporter
    from exporter.analyze import analyze
    from exporter.entry import tune_garbage_collector
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    tune_garbage_collector()  # as the daemon's entry point does
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    settings = ClusterSettings(name="bench", bootstrap_servers=(bootstrap,))
    poller = ClusterObserver(settings)
    store = SnapshotStore([settings])
    records = []
    floor = 0.0
    for _ in range(polls):
        load = common.load_average()[0]
        sim_cpu = _cpu_seconds_of(sim_pid)
        wall, cpu = time.perf_counter(), time.process_time()
        observation = poller.poll()
        store.publish(analyze(observation, settings))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        errors = Counter(f"{e.api}:{e.error}" for e in observation.request_errors)
        records.append({
            "wall_seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "sim_cpu_seconds": round(_cpu_seconds_of(sim_pid) - sim_cpu, 3),
            "load_1min_at_start": load,
            "partitions": len(observation.leaders),
            "open_transactions": len(observation.open_transactions),
            "unobserved": len(observation.unobserved),
            "request_errors": dict(errors),
            "lost_requests": sum(n for k, n in errors.items()
                                 if "TIMEOUT" in k or "DISCONNECT" in k or "CONNECTION" in k),
        })
        if len(records) == polls:
            floor = _pure_python_floor_seconds(observation.leaders)
        del observation  # the daemon keeps only the published snapshot between polls
    poller.close()
    return {
        "exporter_from": str(Path(exporter.__file__).resolve().parent.parent),
        "request_timeout_seconds": settings.request_timeout_seconds,
        "floor_cpu_seconds": round(floor, 4),
        "polls": records,
        "hwm_mib": round(common.hwm_mib(), 1),
    }


def _summarize(result: dict[str, Any]) -> dict[str, Any]:
    warm = result["polls"][1:] or result["polls"]
    for key in ("wall_seconds", "cpu_seconds", "sim_cpu_seconds"):
        result[f"warm_median_{key}"] = round(statistics.median(p[key] for p in warm), 3)
    settled = result["polls"][-SETTLED_POLLS:]
    result["settled_median_cpu_seconds"] = round(
        statistics.median(p["cpu_seconds"] for p in settled), 3)
    result["lost_requests_total"] = sum(p["lost_requests"] for p in result["polls"])
    if result["floor_cpu_seconds"] > 0:
        for key in ("warm", "settled"):
            result[f"{key}_cpu_vs_floor"] = round(
                result[f"{key}_median_cpu_seconds"] / result["floor_cpu_seconds"], 2)
    return result


def measure(brokers: int, partitions: int, latency_ms: int, polls: int,
            sim_tree: Path | None,
            poller_scripts: Sequence[tuple[str, Path]] = (("this", SCRIPT),),
            repeat: int = 1) -> dict[str, list[dict[str, Any]]]:
    """Each poller (name, the bench script of its checkout, which imports that checkout's
    exporter) polls the same simulator `repeat` times, in an order that rotates so that a
    change of load hits every side alike."""
    env_tree = None if sim_tree is None else str(sim_tree.resolve() / "simulator")
    old = os.environ.get("PYTHONPATH")
    if env_tree is not None:  # the sim child imports kafka_sim from that tree
        os.environ["PYTHONPATH"] = env_tree + (os.pathsep + old if old else "")
    try:
        serving = common.serving_child(SCRIPT, [
            "--serve", "--brokers", str(brokers), "--partitions", str(partitions),
            "--latency-ms", str(latency_ms)])
        sim = serving.__enter__()
    finally:
        if env_tree is not None:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in poller_scripts}
    sides = list(poller_scripts)
    try:
        for i in range(repeat):
            for name, script in sides[i % len(sides):] + sides[:i % len(sides)]:
                result = common.run_child(
                    script, ["poller", "--bootstrap", sim["bootstrap"],
                             "--sim-pid", str(sim["pid"]), "--polls", str(polls)],
                    timeout_seconds=1800)
                result["sim"] = sim
                runs[name].append(_summarize(result))
    finally:
        serving.__exit__(None, None, None)
    return runs


def _print(label: str, r: dict[str, Any]) -> None:
    print(f"\n{label}: exporter from {r.get('exporter_from', '-')}, simulator from "
          f"{r['sim']['kafka_sim_from']}, started in "
          f"{r['sim']['startup_seconds']} s, first full Metadata before the polls "
          f"{r['sim']['first_metadata_seconds']} s; request timeout "
          f"{r['request_timeout_seconds']} s")
    print(f"  {'poll':<6}{'wall s':>8}{'poller CPU s':>14}{'sim CPU s':>11}{'load':>7}"
          f"{'partitions':>12}{'unobserved':>12}{'lost':>6}  errors")
    for i, p in enumerate(r["polls"]):
        print(f"  {('cold' if i == 0 else f'warm{i}'):<6}{p['wall_seconds']:>8.2f}"
              f"{p['cpu_seconds']:>14.2f}{p['sim_cpu_seconds']:>11.2f}"
              f"{p['load_1min_at_start']:>7.2f}{p['partitions']:>12}{p['unobserved']:>12}"
              f"{p['lost_requests']:>6}  {p['request_errors'] or '-'}")
    print(f"  warm medians: wall {r['warm_median_wall_seconds']} s, poller CPU "
          f"{r['warm_median_cpu_seconds']} s, sim CPU {r['warm_median_sim_cpu_seconds']} s; "
          f"poller peak RSS {r['hwm_mib']} MiB")
    print(f"  pure-Python floor (each partition read once into a row): "
          f"{r['floor_cpu_seconds']} s CPU; warm poller CPU / floor: "
          f"{r.get('warm_cpu_vs_floor', '-')}; the last {SETTLED_POLLS} polls' median "
          f"{r['settled_median_cpu_seconds']} s, / floor: {r.get('settled_cpu_vs_floor', '-')}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--latency-ms", type=int, default=5)
    parser.add_argument("--polls", type=int, default=4)
    parser.add_argument("--sim-baseline-tree", type=Path,
                        help="also measure against the simulator of this checkout")
    parser.add_argument("--baseline-polls", type=int, default=2)
    parser.add_argument("--baseline-tree", type=Path,
                        help="also poll with the exporter of this checkout (e.g. `git archive` "
                             "of main before a change) against the same simulator, interleaved")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each poller with --baseline-tree (order rotates)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=("poller",), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--sim-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.brokers, args.partitions, args.latency_ms)
    if args.child == "poller":
        common.emit(poll(args.bootstrap, args.sim_pid, args.polls))
        return 0

    machine = common.machine_info()
    print(f"machine: {machine}")
    summary: dict[str, Any] = {
        "bench": "poll_scale", "machine": machine, "brokers": args.brokers,
        "partitions": args.partitions, "latency_ms": args.latency_ms,
    }
    sides: list[tuple[str, Path]] = [("this", SCRIPT)]
    if args.baseline_tree is not None:
        sides.append(("baseline", args.baseline_tree.resolve() / "benchmarks" / SCRIPT.name))
    runs = measure(args.brokers, args.partitions, args.latency_ms, args.polls, None, sides,
                   args.repeat)
    for name, records in runs.items():
        for i, record in enumerate(records):
            _print(f"{name} tree, run {i + 1}", record)
    this = runs["this"][0]
    summary["this"] = this
    if args.baseline_tree is not None:
        summary["runs"] = runs
        for key in ("wall_seconds", "sim_cpu_seconds", "cpu_seconds"):
            mine = statistics.median(r[f"warm_median_{key}"] for r in runs["this"])
            theirs = statistics.median(r[f"warm_median_{key}"] for r in runs["baseline"])
            summary[f"ratio_exporter_warm_{key}"] = common.ratio(mine, theirs)
        summary["ratio_exporter_settled_cpu_seconds"] = common.ratio(
            statistics.median(r["settled_median_cpu_seconds"] for r in runs["this"]),
            statistics.median(r["settled_median_cpu_seconds"] for r in runs["baseline"]))
        print(f"  ratios this/baseline exporter (warm medians over {args.repeat} runs each): "
              f"wall {summary['ratio_exporter_warm_wall_seconds']}, sim CPU "
              f"{summary['ratio_exporter_warm_sim_cpu_seconds']}, poller CPU "
              f"{summary['ratio_exporter_warm_cpu_seconds']}; poller CPU of the last "
              f"{SETTLED_POLLS} polls {summary['ratio_exporter_settled_cpu_seconds']}")
    if args.sim_baseline_tree is not None:
        base = measure(args.brokers, args.partitions, args.latency_ms, args.baseline_polls,
                       args.sim_baseline_tree)["this"][0]
        summary["baseline"] = base
        _print("baseline simulator", base)
        for key in ("wall_seconds", "sim_cpu_seconds", "cpu_seconds"):
            summary[f"ratio_warm_{key}"] = common.ratio(
                this[f"warm_median_{key}"], base[f"warm_median_{key}"])
        print(f"  ratios this/baseline simulator (warm medians): wall "
              f"{summary['ratio_warm_wall_seconds']}, sim CPU "
              f"{summary['ratio_warm_sim_cpu_seconds']}, poller CPU "
              f"{summary['ratio_warm_cpu_seconds']}")
    worst_wall = max(p["wall_seconds"] for p in this["polls"])
    summary.update(
        target_wall_seconds=TARGET_WALL_SECONDS, target_rss_mib=TARGET_RSS_MIB,
        meets_zero_lost=this["lost_requests_total"] == 0
        and all(p["unobserved"] == 0 for p in this["polls"]),
        meets_wall_warm=this["warm_median_wall_seconds"] <= TARGET_WALL_SECONDS,
        meets_wall_every_poll=worst_wall <= TARGET_WALL_SECONDS,
        meets_rss=this["hwm_mib"] <= TARGET_RSS_MIB,
        sim_cpu_above_poller_cpu=(
            this["warm_median_sim_cpu_seconds"] > this["warm_median_cpu_seconds"]),
        load_average_at_end=common.load_average(),
    )
    print(f"  targets: zero lost {summary['meets_zero_lost']}; warm wall <= "
          f"{TARGET_WALL_SECONDS:.0f} s {summary['meets_wall_warm']} (every poll "
          f"{summary['meets_wall_every_poll']}); poller RSS <= {TARGET_RSS_MIB:.0f} MiB "
          f"{summary['meets_rss']}; simulator CPU > poller CPU "
          f"{summary['sim_cpu_above_poller_cpu']}")
    print(f"load average at the end: {summary['load_average_at_end']}")
    common.emit(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
