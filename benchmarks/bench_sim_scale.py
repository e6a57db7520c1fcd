"""Start-up time and RSS of one SimCluster with many partitions and producer state.

Issue target: 50 brokers x 200,000 partitions with producer state (10% of partitions with an
idempotent producer, 1% with an open transaction, some long-running and some hanging) in
under 1 GB RSS, started in under 10 s.

Each variant runs in a fresh interpreter (RSS from /proc/self/status VmRSS/VmHWM):
- `import`: only imports the simulator (baseline for RSS: the cost of Python + the package);
- `empty`: the same brokers and topics, no producer state (baseline for time and RSS: what
  the producer state itself costs is full - empty);
- `full`: brokers, topics and producer state.
"Started" means every listener is up, topics exist and seeding is done; then one full
Metadata request (all partitions, over TCP) checks the cluster really serves, timed apart.

Run: python benchmarks/bench_sim_scale.py [--partitions 200000] [--brokers 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

TARGET_RSS_MIB = 1024.0
TARGET_STARTUP_SECONDS = 10.0
VARIANTS = ("import", "empty", "full")


def _metadata_round_trip(host: str, port: int) -> tuple[float, int]:
    """One Metadata v12 for all topics over a raw socket: (seconds, partitions in answer)."""
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
        version=12,
    )
    request.with_header(correlation_id=1, client_id="bench-sim-scale")
    response_class = request.header.get_response_class()
    started = time.perf_counter()
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        payload = _recv_exactly(sock, size)
    elapsed = time.perf_counter() - started
    response = response_class.decode(payload, version=12, header=True)
    return elapsed, sum(len(t.partitions) for t in response.topics)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(min(1 << 20, n - len(chunks)))
        if not chunk:
            raise ConnectionError("simulator closed the connection")
        chunks += chunk
    return bytes(chunks)


def child(variant: str, brokers: int, partitions: int) -> dict[str, Any]:
    rss_start = common.rss_mib()
    t0 = time.perf_counter()
    from kafka_sim.cluster import SimCluster  # noqa: F401  (the import is measured)
    from kafka_sim.seed import seed_cluster  # noqa: F401

    import_seconds = time.perf_counter() - t0
    record: dict[str, Any] = {
        "bench": "sim_scale",
        "variant": variant,
        "brokers": brokers,
        "partitions": partitions,
        "rss_start_mib": round(rss_start, 1),
        "import_seconds": round(import_seconds, 3),
    }
    if variant == "import":
        record.update(rss_mib=round(common.rss_mib(), 1), hwm_mib=round(common.hwm_mib(), 1))
        return record
    plan = common.seed_plan(partitions)
    t1 = time.perf_counter()
    sim = common.start_seeded_cluster(brokers, plan, producer_state=False)
    t2 = time.perf_counter()
    seeded_partitions = 0
    if variant == "full":
        now_ms = sim.call(sim.state.now_ms)
        for i, (topic, count) in enumerate(plan.idempotent_per_topic.items()):
            sim.call(common.seed_topic_idempotent, sim.state, topic, count, now_ms, i)
        seeded_partitions = sim.call(common.seed_transactions, sim.state, plan, now_ms)
    t3 = time.perf_counter()
    rss_started = common.rss_mib()
    hwm_started = common.hwm_mib()
    host, port = next(iter(sim.endpoints.values()))
    metadata_seconds, metadata_partitions = _metadata_round_trip(host, port)
    sim.close()
    record.update(
        start_seconds=round(t2 - t1, 3),
        seed_seconds=round(t3 - t2, 3),
        startup_seconds=round(t3 - t1, 3),
        rss_mib=round(rss_started, 1),
        hwm_mib=round(hwm_started, 1),
        first_metadata_seconds=round(metadata_seconds, 3),
        metadata_partitions=metadata_partitions,
        hwm_after_metadata_mib=round(common.hwm_mib(), 1),
        plan=plan.summary() if variant == "full" else None,
        partitions_with_open_txn=seeded_partitions,
    )
    return record


def run(brokers: int, partitions: int, repeat: int) -> dict[str, Any]:
    script = Path(__file__).resolve()
    machine = common.machine_info()  # before the runs: its load average is the one that matters
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(repeat):
        for variant in VARIANTS:
            args = [variant, "--brokers", str(brokers), "--partitions", str(partitions)]
            runs[variant].append(common.run_child(script, args))

    def med(variant: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[variant]))

    def peak(variant: str, key: str) -> float:
        return float(max(r[key] for r in runs[variant]))

    full_startup = med("full", "startup_seconds")
    full_rss = peak("full", "rss_mib")
    summary: dict[str, Any] = {
        "bench": "sim_scale",
        "machine": machine,
        "brokers": brokers,
        "partitions": partitions,
        "repeat": repeat,
        "plan": runs["full"][0]["plan"],
        "partitions_with_open_txn": runs["full"][0]["partitions_with_open_txn"],
        "import_rss_mib": peak("import", "rss_mib"),
        "empty_startup_seconds": med("empty", "startup_seconds"),
        "empty_rss_mib": peak("empty", "rss_mib"),
        "full_start_seconds": med("full", "start_seconds"),
        "full_seed_seconds": med("full", "seed_seconds"),
        "full_startup_seconds": full_startup,
        "full_rss_mib": full_rss,
        "full_hwm_mib": peak("full", "hwm_mib"),
        "full_first_metadata_seconds": med("full", "first_metadata_seconds"),
        "full_hwm_after_metadata_mib": peak("full", "hwm_after_metadata_mib"),
        "metadata_partitions": runs["full"][0]["metadata_partitions"],
        "ratio_startup_full_vs_empty": common.ratio(
            full_startup, med("empty", "startup_seconds")
        ),
        "ratio_rss_full_vs_empty": common.ratio(full_rss, peak("empty", "rss_mib")),
        "ratio_rss_full_vs_import": common.ratio(full_rss, peak("import", "rss_mib")),
        "producer_state_rss_mib": round(full_rss - peak("empty", "rss_mib"), 1),
        "target_rss_mib": TARGET_RSS_MIB,
        "target_startup_seconds": TARGET_STARTUP_SECONDS,
        "meets_rss_target": peak("full", "hwm_after_metadata_mib") < TARGET_RSS_MIB,
        "meets_startup_target": full_startup < TARGET_STARTUP_SECONDS,
    }
    return summary


def _print_table(s: dict[str, Any]) -> None:
    print(f"SimCluster {s['brokers']} brokers x {s['partitions']} partitions "
          f"(median of {s['repeat']} fresh processes; RSS = max)")
    print(f"  plan: {s['plan']}")
    print(f"  {'variant':<22}{'startup s':>12}{'RSS MiB':>12}")
    print(f"  {'import only':<22}{'-':>12}{s['import_rss_mib']:>12.1f}")
    for label, key in (("no producer state", "empty"), ("with producer state", "full")):
        print(f"  {label:<22}{s[key + '_startup_seconds']:>12.3f}{s[key + '_rss_mib']:>12.1f}")
    print(f"  ratio full/no-producer-state: startup {s['ratio_startup_full_vs_empty']}, "
          f"RSS {s['ratio_rss_full_vs_empty']}; "
          f"RSS full/import-only {s['ratio_rss_full_vs_import']}")
    print(f"  first full Metadata ({s['metadata_partitions']} partitions): "
          f"{s['full_first_metadata_seconds']:.3f} s, peak RSS after it "
          f"{s['full_hwm_after_metadata_mib']:.1f} MiB")
    print(f"  targets: RSS < {s['target_rss_mib']:.0f} MiB: {s['meets_rss_target']}; "
          f"startup < {s['target_startup_seconds']:.0f} s: {s['meets_startup_target']}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        common.emit(child(args.child, args.brokers, args.partitions))
        return 0
    summary = run(args.brokers, args.partitions, args.repeat)
    summary["load_average_at_end"] = common.load_average()
    _print_table(summary)
    common.emit(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
