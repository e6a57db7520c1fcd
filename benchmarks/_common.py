"""Shared pieces of the benchmarks: machine facts, RSS, the seeded simulated cluster.

Every measurement runs in a fresh child process (`python benchmarks/<bench>.py --child ...`),
so RSS high-water marks and CPU time belong to the thing measured and to nothing else; the
parent only orchestrates and prints ratios against a baseline measured in the same run.
Results are printed as one JSON object per line (prefixed "RESULT ") so the smoke test and
RESULTS.md can rely on field names.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_PREFIX = "RESULT "

PARTITIONS_PER_TOPIC = 2000
"""Seeded clusters use topics of this many partitions (200k partitions = 100 topics)."""

IDEMPOTENT_FRACTION = 0.10
OPEN_TXN_PARTITION_FRACTION = 0.01
PARTITIONS_PER_OPEN_TXN = 2
OPEN_TXN_TIMEOUT_MS = 900_000
"""Open transactions use the broker's max timeout (15 min), so the coordinator's timeout sweep
cannot abort them while a benchmark runs (the state must be the same for every poller)."""
OPEN_TXN_MAX_AGE_MS = 60_000
LONG_RUNNING_AGE_MS = 10 * 60_000
"""Long-running, coordinator-tracked, not yet late (15 min timeout + 5 min buffer)."""
HANGING_MIN_AGE_MS = 3_600_000
HANGING_MAX_AGE_MS = 86_400_000


# -- machine ------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """nproc, CPU model, RAM, Python: what RESULTS.md records next to every number."""
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total_kib = proc_status_kib("MemTotal", path="/proc/meminfo")
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "ram_gib": round(mem_total_kib / 1024 / 1024, 1) if mem_total_kib else None,
        "python": platform.python_version(),
        "load_average_at_start": load_average(),
        "code_fingerprint": code_fingerprint(),
    }


def code_fingerprint() -> dict[str, str]:
    """Short sha256 of the measured sources (the collect layer, the simulator): the tree changes
    while people work, and a result is only comparable with another measured on the same code."""
    import hashlib

    out: dict[str, str] = {}
    for source in ("exporter/collect", "simulator/kafka_sim"):
        digest = hashlib.sha256()
        for path in sorted((REPO_ROOT / source).glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        out[source] = digest.hexdigest()[:12]
    return out


def load_average() -> list[float]:
    """1/5/15-min load: other work on the machine inflates wall times (CPU times less so)."""
    return [round(x, 2) for x in os.getloadavg()]


def proc_status_kib(field: str, path: str = "/proc/self/status") -> int:
    """A kB field of /proc/self/status (VmRSS, VmHWM) or /proc/meminfo (MemTotal); 0 if absent."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mib() -> float:
    return proc_status_kib("VmRSS") / 1024


def hwm_mib() -> float:
    """Peak RSS of this process so far (VmHWM)."""
    return proc_status_kib("VmHWM") / 1024


# -- output -------------------------------------------------------------------------------------



def read_listen_url(proc: subprocess.Popen[str], timeout_seconds: float = 600.0) -> str:
    """The URL a `serve` child logs in its `exporter_started` line (JSON logs on stderr).
    Generous: at load 15 on two cores a start takes far longer than when idle."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if '"exporter_started"' in line:
            return str(json.loads(line)["listen"])
    raise RuntimeError("serve did not log exporter_started")


def polling_loop_cpu_s() -> float:
    """CPU seconds of the process's polling loop thread (`exporter.collect.loop`, started if
    not yet): every poll runs there, while the thread calling `poll()` only waits. From the
    scheduler's nanosecond account (/proc/self/task/<tid>/schedstat), ticks where none."""
    from exporter.collect import loop

    loop.shared_loop()
    thread = loop._thread
    assert thread is not None and thread.native_id is not None
    task = f"/proc/self/task/{thread.native_id}"
    try:
        with open(f"{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"{task}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def emit(record: dict[str, Any]) -> None:
    print(RESULT_PREFIX + json.dumps(record, sort_keys=True), flush=True)


def parse_results(stdout: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len(RESULT_PREFIX) :])
        for line in stdout.splitlines()
        if line.startswith(RESULT_PREFIX)
    ]


def run_child(script: Path, args: Sequence[str], timeout_seconds: float = 600) -> dict[str, Any]:
    """Run `script --child args...` in a fresh interpreter; return its single RESULT record."""
    proc = subprocess.run(
        [sys.executable, str(script), "--child", *args],
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        cwd=REPO_ROOT,
        check=False,
    )
    results = parse_results(proc.stdout)
    if proc.returncode != 0 or len(results) != 1:
        raise RuntimeError(
            f"child {script.name} {' '.join(args)} failed (rc={proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return results[0]


@contextlib.contextmanager
def serving_child(script: Path, args: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Run `script args` until the block ends; yield the JSON of its `READY {...}` line.

    The child serves (e.g. a seeded simulator in its own process, so its CPU is not counted)
    until its stdin closes.
    """
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"simulator did not start: {line!r}")
        yield json.loads(line[len("READY "):])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_until_stdin_closes(info: dict[str, Any], stop: Callable[[], object]) -> int:
    """The child side of `serving_child`: announce `READY {info}`, serve until the parent
    closes our stdin, then `stop()` (e.g. the simulator's `close`)."""
    print("READY " + json.dumps({**info, "pid": os.getpid()}), flush=True)
    sys.stdin.read()
    stop()
    return 0


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


# -- the seeded cluster -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeedPlan:
    """How many of each producer kind a cluster of `partitions` partitions gets."""

    partitions: int
    topics: dict[str, int]
    idempotent_per_topic: dict[str, int]
    open_transactions: int
    long_running_transactions: int
    hanging_transactions: int

    @property
    def idempotent_partitions(self) -> int:
        return sum(self.idempotent_per_topic.values())

    def summary(self) -> dict[str, int]:
        d = asdict(self)
        return {
            "partitions": self.partitions,
            "topics": len(self.topics),
            "idempotent_partitions": self.idempotent_partitions,
            "open_transactions": d["open_transactions"],
            "long_running_transactions": d["long_running_transactions"],
            "hanging_transactions": d["hanging_transactions"],
            "partitions_with_open_txn_target": round(
                self.partitions * OPEN_TXN_PARTITION_FRACTION
            ),
        }


def seed_plan(partitions: int) -> SeedPlan:
    """10% of partitions with an idempotent producer; ~1% with an open transaction, of which
    a few are long-running (coordinator-tracked) and a few hanging (late, untracked)."""
    per_topic = min(PARTITIONS_PER_TOPIC, partitions)
    n_topics = max(1, partitions // per_topic)
    topics = {f"bench-{i:03d}": per_topic for i in range(n_topics)}
    rest = partitions - per_topic * n_topics
    if rest:
        topics[f"bench-{n_topics:03d}"] = rest
    idempotent = {t: max(1, round(n * IDEMPOTENT_FRACTION)) for t, n in topics.items()}
    txn_partitions = max(3, round(partitions * OPEN_TXN_PARTITION_FRACTION))
    hanging = max(1, partitions // 10_000)
    long_running = max(1, partitions // 20_000)
    open_txns = max(1, (txn_partitions - hanging) // PARTITIONS_PER_OPEN_TXN - long_running)
    return SeedPlan(partitions, topics, idempotent, open_txns, long_running, hanging)


def seed_topic_idempotent(state: Any, topic: str, count: int, now_ms: int, rng_seed: int) -> int:
    """Idempotent producers on the first `count` partitions of `topic` (runs on the sim loop)."""
    from kafka_sim.seed import seed_cluster

    summary = seed_cluster(
        state, now_ms=now_ms, idempotent_partitions={topic: count}, rng_seed=rng_seed
    )
    return int(summary.idempotent_producers)


def seed_transactions(state: Any, plan: SeedPlan, now_ms: int, rng_seed: int = 1) -> int:
    """Open, long-running and hanging transactions on random partitions (runs on the sim loop).

    Returns the number of distinct partitions with an open transaction."""
    from kafka_sim.seed import seed_hanging_transaction, seed_open_transaction

    rng = random.Random(rng_seed)
    names = list(plan.topics)
    touched: set[tuple[str, int]] = set()

    def pick() -> tuple[str, int]:
        name = names[rng.randrange(len(names))]
        return name, rng.randrange(plan.topics[name])

    def tps() -> list[tuple[str, int]]:
        return list(dict.fromkeys(pick() for _ in range(PARTITIONS_PER_OPEN_TXN)))

    for i in range(plan.open_transactions):
        parts = tps()
        touched.update(parts)
        seed_open_transaction(
            state,
            f"bench-open-{i}",
            parts,
            start_ms=now_ms - rng.randrange(OPEN_TXN_MAX_AGE_MS),
            timeout_ms=OPEN_TXN_TIMEOUT_MS,
        )
    for i in range(plan.long_running_transactions):
        parts = tps()
        touched.update(parts)
        seed_open_transaction(
            state,
            f"bench-long-{i}",
            parts,
            start_ms=now_ms - LONG_RUNNING_AGE_MS,
            timeout_ms=OPEN_TXN_TIMEOUT_MS,
        )
    for i in range(plan.hanging_transactions):
        topic, index = pick()
        touched.add((topic, index))
        seed_hanging_transaction(
            state,
            f"bench-hang-{i}",
            topic,
            index,
            last_timestamp_ms=now_ms - rng.randrange(HANGING_MIN_AGE_MS, HANGING_MAX_AGE_MS),
        )
    return len(touched)


def start_seeded_cluster(brokers: int, plan: SeedPlan, producer_state: bool = True) -> Any:
    """A started SimCluster with the plan's topics and (optionally) its producer state.

    Seeding runs on the simulator's loop thread (`SimCluster.call`), one call per topic so no
    single call comes near the facade's control timeout."""
    from kafka_sim.cluster import SimCluster

    sim = SimCluster(brokers=brokers, topics=plan.topics).start()
    if producer_state:
        now_ms = sim.call(sim.state.now_ms)
        for i, (topic, count) in enumerate(plan.idempotent_per_topic.items()):
            sim.call(seed_topic_idempotent, sim.state, topic, count, now_ms, i)
        sim.call(seed_transactions, sim.state, plan, now_ms)
    return sim
