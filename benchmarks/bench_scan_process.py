"""`scan` as a whole process: start-up, one poll of a one-broker cluster, the table, exit.

Target: `scan` of a one-broker cluster with 1,000 partitions in at most 0.2 s
(median, whole process). Processes:
- the simulated cluster (`--serve-sim`, a process of its own, started first): 1 broker, one
  topic of `--partitions` (1,000) partitions, `--late` (5) hanging transactions, so the scan
  takes its whole path (producers, transactions, start times) and prints rows;
- each measured command, run `--repeat` times in turn (A B C A B C ...), fresh processes:
  - `scan`: `python -m exporter scan --bootstrap-servers ... --orphan-check-seconds 0` with
    this tree's exporter: one poll, as `find-hanging` takes one look (by default a scan that
    sees open transactions not yet late polls again at once to ask their coordinators, and
    waits only to confirm one found not tracked: `--default-scan` adds that command too,
    `scan_default`; `--young N` seeds N such healthy transactions);
  - `python -c pass` (baseline): the interpreter's own start-up and exit;
  - `scan` of another revision (`--baseline-root DIR`, optional): the same command with
    that directory's `exporter` package (e.g. `git archive REV exporter | tar -x -C DIR`).
Each exporter tree is byte-compiled first (`compileall`), as a pip install does, so neither
side pays for compiling its sources. Every scan's exit status and row count are checked.
Wall time from `time.perf_counter` around the run; CPU (user + system) from the children's
rusage. Ratios are per round (paired), medians over the rounds.

Run: python benchmarks/bench_scan_process.py [--partitions 1000] [--late 5] [--repeat 15]
     [--baseline-root DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()
TOPIC = "orders"
EXIT_HANGING = 1  # exporter.scan: hanging transactions found (0: none)
YOUNG_TIMEOUT_MS = 900_000  # young transactions stay open, not late, for the whole run


def serve_sim(partitions: int, late: int, young: int) -> int:
    from kafka_sim.cluster import SimCluster
    from kafka_sim.seed import seed_hanging_transaction, seed_open_transaction

    sim = SimCluster(brokers=1, topics={TOPIC: partitions},
                     broker_config={"transaction.max.timeout.ms": str(YOUNG_TIMEOUT_MS)}).start()
    now = int(sim.clock.now_ms())

    def seed(state: Any) -> None:
        for i in range(late):
            seed_hanging_transaction(state, f"bench-hang-{i}", TOPIC, i * partitions // late,
                                     last_timestamp_ms=now - 3_600_000 - i * 1000)
        for i in range(young):  # on the odd partitions: the hanging ones take even ones
            seed_open_transaction(state, f"bench-young-{i}", [(TOPIC, (2 * i + 1) % partitions)],
                                  start_ms=now, timeout_ms=YOUNG_TIMEOUT_MS)

    sim.call(seed, sim.state)
    return common.serve_until_stdin_closes({"bootstrap": sim.bootstrap_servers}, sim.close)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("KTE_") and k != "PYTHONDONTWRITEBYTECODE"}


def _compile(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "exporter")],
                   env=_env(), check=True, stdout=subprocess.DEVNULL)


def _knows_orphan_check(root: Path) -> bool:
    """Revisions before the orphan check poll once anyway and lack the flag."""
    return "--orphan-check-seconds" in (root / "exporter" / "cli.py").read_text()


def _run(command: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """(wall s, CPU s, exit status, stdout) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout + done.stderr


def _summary(walls: list[float], cpus: list[float]) -> dict[str, Any]:
    return {"wall_median_s": round(statistics.median(walls), 4),
            "wall_min_s": round(min(walls), 4), "wall_max_s": round(max(walls), 4),
            "cpu_median_s": round(statistics.median(cpus), 4)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--late", type=int, default=5)
    parser.add_argument("--young", type=int, default=0,
                        help="healthy open transactions, coordinator-tracked, not late: the "
                             "default scan asks their coordinators with a second poll")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="directory whose `exporter` package is the before side")
    parser.add_argument("--default-scan", action="store_true",
                        help="also time the scan with its default orphan check")
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_sim:
        return serve_sim(args.partitions, args.late, args.young)
    machine = common.machine_info()
    roots = {"scan": common.REPO_ROOT}
    if args.baseline_root is not None:
        roots["scan_baseline_root"] = args.baseline_root.resolve()
    for root in roots.values():
        _compile(root)
    with common.serving_child(SCRIPT, ["--serve-sim", "--partitions", str(args.partitions),
                                       "--late", str(args.late),
                                       "--young", str(args.young)]) as sim:
        bootstrap = sim["bootstrap"]
        servers = bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap)
        scan = [sys.executable, "-m", "exporter", "scan", "--bootstrap-servers", servers,
                "--log.format", "json"]
        one_poll = ["--orphan-check-seconds", "0"]
        commands: dict[str, tuple[list[str], Path]] = {
            name: ([*scan, *one_poll] if _knows_orphan_check(root) else scan, root)
            for name, root in roots.items()}
        if args.default_scan:
            commands["scan_default"] = (scan, common.REPO_ROOT)
        commands["python_pass"] = ([sys.executable, "-c", "pass"], common.REPO_ROOT)
        for command, cwd in commands.values():  # warm-up: page cache, the simulator's state
            _run(command, cwd)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, (command, cwd) in commands.items():
                wall, cpu, status, output = _run(command, cwd)
                if name != "python_pass":
                    rows = output.count(f"\n{TOPIC} ")
                    if status != (EXIT_HANGING if args.late else 0) or rows != args.late:
                        raise RuntimeError(f"{name}: exit {status}, {rows} rows:\n{output[-2000:]}")
                walls[name].append(wall)
                cpus[name].append(cpu)
    results = {name: _summary(walls[name], cpus[name]) for name in commands}

    def paired(a: str, b: str, series: dict[str, list[float]]) -> float:
        return round(statistics.median(x / y for x, y in zip(series[a], series[b],
                                                             strict=True)), 3)

    result: dict[str, Any] = {
        "bench": "scan_process",
        "machine": machine,
        "partitions": args.partitions,
        "late": args.late,
        "young": args.young,
        "repeat": args.repeat,
        "commands": results,
        "scan_command": commands["scan"][0][2:],
        "ratio_scan_vs_python_pass_wall": paired("scan", "python_pass", walls),
        "ratio_scan_vs_python_pass_cpu": paired("scan", "python_pass", cpus),
        "machine_load_average_at_end": common.load_average(),
    }
    if "scan_baseline_root" in commands:
        result["ratio_scan_vs_baseline_wall"] = paired("scan", "scan_baseline_root", walls)
        result["ratio_scan_vs_baseline_cpu"] = paired("scan", "scan_baseline_root", cpus)
    print(f"machine: {machine}")
    print(f"scan as a whole process, 1 broker x {args.partitions} partitions ({args.late} "
          f"hanging, {args.young} young), {args.repeat} rounds:")
    for name, r in results.items():
        print(f"  {name:<20} wall median {r['wall_median_s']:.3f} s (min {r['wall_min_s']:.3f}, "
              f"max {r['wall_max_s']:.3f})  CPU median {r['cpu_median_s']:.3f} s")
    print("  paired ratios: " + ", ".join(f"{k} {v}" for k, v in result.items()
                                          if k.startswith("ratio_")))
    common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
