"""RSS of the poller around Metadata changes: where a changed answer's
memory goes, and whether RSS stays at one level when the Metadata keeps changing.

Processes: this one is the poller (measured); the seeded simulator runs in a child (as
bench_poll_scale.py's: 10% idempotent, 1% open transactions, 5 ms latency, first Metadata
answered and its heap frozen before the polls) that also reads commands on its stdin:
`move` moves one partition's leader (leader epoch + 1, Metadata version + 1), so the next
Metadata answer differs in a few bytes, as after a real leader election.

Sequence: `--warm-polls` polls, then `--changes` times (one leader move, one poll, then
`--steady-polls` polls). After every poll (the observation dropped, as the daemon does):
VmRSS, the poll's own peak (VmHWM reset before each poll through /proc/self/clear_refs), the
cyclic GC's collections during the poll, pymalloc's arenas (sys._debugmallocstats; None under
tracemalloc, whose hooks hide them), and with
`--tracemalloc` the traced size after the poll and its peak during it, plus the 10 largest
differences by line between before the first change and after its next poll. With
`--malloc-trim` every sample is also taken after glibc's malloc_trim(0) (an experiment: what
the allocator keeps but does not use). `--drop-parse` drops the client's parse of the last
answer instead of moving a leader (what bench_poll.py's "Metadata changed" poll does).

Run: python benchmarks/bench_metadata_rss.py [--brokers 100] [--partitions 1000000]
        [--changes 5] [--tracemalloc] [--malloc-trim]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()


def serve(brokers: int, partitions: int, latency_ms: int) -> int:
    """Seeded SimCluster; 'READY <json>'; then one leader move per `move` line on stdin."""
    from bench_sim_scale import _metadata_round_trip

    plan = common.seed_plan(partitions)
    sim = common.start_seeded_cluster(brokers, plan)
    host, port = sim.bootstrap_servers.split(",")[0].rsplit(":", 1)
    first_metadata_seconds, _ = _metadata_round_trip(host, int(port))
    gc.collect()
    gc.freeze()
    sim.set_latency(latency_ms)
    topic = next(iter(plan.topics))
    print("READY " + json.dumps({
        "bootstrap": sim.bootstrap_servers.split(",")[0], "plan": plan.summary(),
        "first_metadata_seconds": round(first_metadata_seconds, 3), "pid": os.getpid(),
    }), flush=True)
    moves = 0
    for line in sys.stdin:
        if line.strip() == "move":
            def move(state: Any, index: int) -> int:
                p = state.partition(topic, index)
                target = p.leader_id % brokers + 1  # ids 1..brokers
                state.move_partition_leader(topic, index, target)
                return int(target)

            target = sim.call(move, sim.state, moves % plan.topics[topic])
            moves += 1
            print(f"OK {target}", flush=True)
    sim.close()
    return 0


def _reset_peak() -> None:
    """VmHWM := VmRSS (Linux >= 4.0), so the next VmHWM is this poll's own peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _arenas() -> int | None:
    """pymalloc arenas allocated now (from sys._debugmallocstats, which writes to fd 2)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        for line in out:
            if line.startswith("# arenas allocated current"):
                return int(line.split("=")[1].strip().replace(",", ""))
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    sim = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--serve", "--brokers", str(args.brokers),
         "--partitions", str(args.partitions), "--latency-ms", str(args.latency_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=common.REPO_ROOT,
    )
    assert sim.stdin is not None and sim.stdout is not None
    line = sim.stdout.readline()
    if not line.startswith("READY "):
        raise RuntimeError(f"simulator did not start: {line!r}")
    info = json.loads(line[len("READY "):])

    import structlog

    from exporter.analyze import analyze
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    libc = ctypes.CDLL("libc.so.6") if args.malloc_trim else None
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start()
    # Metadata every poll: each changed answer is parsed by the poll right after the move (with
    # Metadata reused, the move would show first as a not-leader error, then be read).
    settings = ClusterSettings(name="bench", bootstrap_servers=(info["bootstrap"],),
                               request_timeout_seconds=args.request_timeout,
                               metadata_max_age_seconds=0)
    poller = ClusterObserver(settings)
    store = SnapshotStore([settings])
    samples: list[dict[str, Any]] = []
    snapshots: dict[str, Any] = {}

    def one_poll(label: str) -> None:
        _reset_peak()
        if args.tracemalloc:
            tracemalloc.reset_peak()
        before = [s["collections"] for s in gc.get_stats()]
        wall, cpu = time.perf_counter(), time.process_time()
        observation = poller.poll()
        store.publish(analyze(observation, settings))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        partitions, errors = len(observation.leaders), len(observation.request_errors)
        del observation  # as the daemon: only the published snapshot stays
        sample: dict[str, Any] = {
            "poll": label,
            "wall_seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "partitions": partitions,
            "request_errors": errors,
            "gc_collections": [s["collections"] - b for s, b in zip(gc.get_stats(), before,
                                                                     strict=True)],
            "peak_mib": round(common.hwm_mib(), 1),
            "rss_mib": round(common.rss_mib(), 1),
            "pymalloc_arenas": _arenas(),
        }
        if args.tracemalloc:
            current, peak = tracemalloc.get_traced_memory()
            sample["traced_mib"] = round(current / 2**20, 1)
            sample["traced_peak_mib"] = round(peak / 2**20, 1)
        if libc is not None:
            libc.malloc_trim(0)
            sample["rss_after_malloc_trim_mib"] = round(common.rss_mib(), 1)
        samples.append(sample)
        print(json.dumps(sample), flush=True)

    try:
        for i in range(args.warm_polls):
            one_poll("cold" if i == 0 else "warm")
        for change in range(args.changes):
            if args.tracemalloc and change == 0:
                gc.collect()
                snapshots["before"] = tracemalloc.take_snapshot()
            if args.drop_parse:
                poller.poller._client._last_full_metadata = None
            else:
                sim.stdin.write("move\n")
                sim.stdin.flush()
                if not sim.stdout.readline().startswith("OK"):
                    raise RuntimeError("the simulator did not move the leader")
            one_poll(f"change {change + 1}")
            for _ in range(args.steady_polls):
                one_poll("steady")
            if args.tracemalloc and change == 0:
                gc.collect()
                snapshots["after"] = tracemalloc.take_snapshot()
    finally:
        poller.close()
        sim.stdin.close()
        sim.wait(timeout=60)
    result: dict[str, Any] = {
        "bench": "metadata_rss",
        "brokers": args.brokers,
        "partitions": args.partitions,
        "drop_parse": args.drop_parse,
        "tracemalloc": args.tracemalloc,
        "sim": info,
        "samples": samples,
        "peak_mib_max": max(s["peak_mib"] for s in samples),
        "peak_mib_max_warm": max(s["peak_mib"] for s in samples if s["poll"] == "warm"),
        "peak_mib_max_change": max(
            (s["peak_mib"] for s in samples if s["poll"].startswith("change")), default=None),
    }
    if snapshots:
        diff = snapshots["after"].compare_to(snapshots["before"], "lineno")
        result["tracemalloc_top_differences"] = [
            {"where": str(d.traceback[0]), "size_diff_kib": round(d.size_diff / 1024, 1),
             "count_diff": d.count_diff}
            for d in diff[:10]
        ]
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--latency-ms", type=int, default=5)
    parser.add_argument("--warm-polls", type=int, default=3)
    parser.add_argument("--changes", type=int, default=5)
    parser.add_argument("--steady-polls", type=int, default=2)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--malloc-trim", action="store_true")
    parser.add_argument("--drop-parse", action="store_true",
                        help="drop the client's last parse instead of moving a leader")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.brokers, args.partitions, args.latency_ms)
    machine = common.machine_info()
    result = run(args)
    result["machine"] = machine
    result["load_average_after"] = common.load_average()
    common.emit(result)
    for s in result.get("tracemalloc_top_differences", []):
        print(f"  {s['size_diff_kib']:>10.1f} KiB {s['count_diff']:>8} {s['where']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
