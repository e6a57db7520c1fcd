"""Where our poller's CPU goes: GC share, Metadata decode/parse, and a cProfile of one poll.

A diagnostic companion of bench_poll.py (same simulated cluster in its own process, same seed),
for whoever optimises exporter/collect. In a fresh child it measures, on warm polls:
- CPU per poll and the CPU spent in the cyclic garbage collector (gc.callbacks, thread_time);
- the same poll with the collector disabled (a what-if: the upper bound of GC tuning);
- Metadata alone: request + kafka-python decode, decode only (re-decoding the same bytes),
  and `parse_metadata`; DescribeProducers decode only; the collect layer's response shape
  checks (`exporter.collect.shapes`, when present) on those same responses;
- the top functions of one warm poll by own time (cProfile; its overhead inflates totals,
  read the shares, not the seconds).

Run: python benchmarks/profile_poll.py [--brokers 50] [--partitions 200000] [--latency-ms 5]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common
import bench_poll

SCRIPT = Path(__file__).resolve()


class _GcMeter:
    """CPU of this thread spent inside gc collections, and how many (gen 2 apart)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self.gen2 = 0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def close(self) -> None:
        gc.callbacks.remove(self._callback)

    def reset(self) -> None:
        self.seconds, self.collections, self.gen2 = 0.0, 0, 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        self.seconds += time.thread_time() - self._started
        self.collections += 1
        if info.get("generation") == 2:
            self.gen2 += 1


def _metadata_breakdown(bootstrap: str) -> dict[str, Any]:
    from kafka.protocol.metadata import MetadataRequest

    from exporter.collect.apis.describe_producers import describe_producers_request
    from exporter.collect.apis.metadata import build_metadata_request, parse_metadata
    from exporter.collect.client import ClusterClient, batch_partitions
    from exporter.settings import ClusterSettings

    client = ClusterClient(
        ClusterSettings(name="profile", bootstrap_servers=(bootstrap,),
                        request_timeout_seconds=120.0)
    )

    async def run() -> dict[str, Any]:
        view = await client.metadata()
        host, port = next(iter(client.brokers.values()))
        connection = await client.pool.get(host, port)
        request = build_metadata_request(None, connection.version_for(MetadataRequest))
        t = time.thread_time()
        response = await connection.request(request, 120.0)
        request_seconds = time.thread_time() - t
        t = time.thread_time()
        parse_metadata(response)
        parse_seconds = time.thread_time() - t
        raw = response.encode(header=True)
        t = time.thread_time()
        type(response).decode(raw, version=response.API_VERSION, header=True)
        decode_seconds = time.thread_time() - t
        calls = [
            client.send(leader, describe_producers_request(batch))
            for leader, per_topic in view.by_leader.items()
            for batch in batch_partitions(per_topic, 500)
        ]
        t = time.thread_time()
        responses = await asyncio.gather(*calls)
        dp_seconds = time.thread_time() - t
        raws = [r.encode(header=True) for r in responses]
        t = time.thread_time()
        for r, b in zip(responses, raws, strict=True):
            type(r).decode(b, version=r.API_VERSION, header=True)
        dp_decode_seconds = time.thread_time() - t
        lean = _lean_decode_seconds(raw, response.API_VERSION, raws)
        shape_seconds = _shape_check_seconds([response, *responses])
        await client.close()
        return {
            "metadata_version": response.API_VERSION,
            "metadata_bytes": len(raw),
            "metadata_request_cpu_seconds": round(request_seconds, 3),
            "metadata_decode_cpu_seconds": round(decode_seconds, 3),
            "parse_metadata_cpu_seconds": round(parse_seconds, 3),
            "describe_producers_requests": len(responses),
            "describe_producers_bytes": sum(map(len, raws)),
            "describe_producers_all_cpu_seconds": round(dp_seconds, 3),
            "describe_producers_decode_cpu_seconds": round(dp_decode_seconds, 3),
            "shape_check_cpu_seconds": shape_seconds,
            **lean,
        }

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def _lean_decode_seconds(metadata: bytes, version: int, producers: list[bytes]) -> dict[str, Any]:
    """The same answers through exporter/collect/fastdecode.py (what the poller now uses)."""
    try:
        from exporter.collect.fastdecode import decode_describe_producers, decode_metadata
    except ImportError:
        return {}
    from exporter.collect.apis.metadata import parse_metadata

    t = time.thread_time()
    lean = decode_metadata(metadata, version)
    decode_seconds = time.thread_time() - t
    t = time.thread_time()
    parse_metadata(lean)
    parse_seconds = time.thread_time() - t
    t = time.thread_time()
    for raw in producers:
        decode_describe_producers(raw, 0)
    dp_seconds = time.thread_time() - t
    return {
        "lean_metadata_decode_cpu_seconds": round(decode_seconds, 3),
        "lean_parse_metadata_cpu_seconds": round(parse_seconds, 3),
        "lean_describe_producers_decode_cpu_seconds": round(dp_seconds, 3),
    }


def _shape_check_seconds(responses: list[Any]) -> float | None:
    """CPU of the collect layer's response shape checks on these responses (None: no checks)."""
    try:
        from exporter.collect.shapes import check_response
    except ImportError:
        return None
    t = time.thread_time()
    for r in responses:
        check_response(r, r.API_KEY, r.API_VERSION)
    return round(time.thread_time() - t, 3)


def child(bootstrap: str, partitions: int, top: int) -> dict[str, Any]:
    import structlog

    from exporter.collect.loop import run as run_on_loop
    from exporter.observe import ClusterObserver
    from exporter.settings import ClusterSettings

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    poller = ClusterObserver(
        ClusterSettings(name="profile", bootstrap_servers=(bootstrap,),
                        request_timeout_seconds=120.0)
    )
    poller.poll()  # cold poll: connections, start times, configs
    meter = _GcMeter()
    warm: list[dict[str, float]] = []
    for _ in range(2):
        meter.reset()
        t = time.process_time()  # the poll runs on the shared polling loop's thread
        poller.poll()
        cpu = time.process_time() - t
        warm.append({"cpu_seconds": round(cpu, 3), "gc_cpu_seconds": round(meter.seconds, 3),
                     "gc_collections": meter.collections, "gc_gen2_collections": meter.gen2})
    # A warm poll whose Metadata answer changed: the client's parse of the last one dropped.
    reparsed: dict[str, float] = {}
    if hasattr(poller.poller._client, "_last_full_metadata"):
        poller.poller._client._last_full_metadata = None
        meter.reset()
        t = time.process_time()
        poller.poll()
        reparsed = {"cpu_seconds": round(time.process_time() - t, 3),
                    "gc_cpu_seconds": round(meter.seconds, 3)}
    meter.close()  # its callback must not show up in the profile below
    gc.disable()
    t = time.process_time()
    poller.poll()
    cpu_gc_off = time.process_time() - t
    gc.enable()
    profiler = cProfile.Profile()

    async def profiled() -> None:
        # cProfile sees the thread that enables it: the polling loop's, where the poll runs.
        profiler.enable()
        try:
            await poller.poll_async()
        finally:
            profiler.disable()

    run_on_loop(profiled())
    poller.close()
    raw_stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    waiting = "<method 'poll' of 'select.epoll' objects>"  # idle time, not CPU
    raw_stats = {k: v for k, v in raw_stats.items() if k[2] != waiting}
    total = sum(v[2] for v in raw_stats.values())
    rows = sorted(raw_stats.items(), key=lambda kv: kv[1][2], reverse=True)
    top_rows = [
        {
            "function": f"{Path(file).name}:{line}({name})",
            "own_share": round(v[2] / total, 3),
            "cumulative_share": round(v[3] / total, 3),
            "calls": v[1],
        }
        for (file, line, name), v in rows
    ][:top]
    gc_share = [round(w["gc_cpu_seconds"] / w["cpu_seconds"], 3) for w in warm if w["cpu_seconds"]]
    return {
        "bench": "profile_poll",
        "partitions": partitions,
        "warm_polls": warm,
        "gc_share_of_poll_cpu": gc_share,
        "warm_cpu_seconds_gc_disabled": round(cpu_gc_off, 3),
        "warm_poll_metadata_reparsed": reparsed,
        "cpu_us_per_partition_warm": round(warm[-1]["cpu_seconds"] / partitions * 1e6, 2),
        "hwm_mib": round(common.hwm_mib(), 1),
        "breakdown": _metadata_breakdown(bootstrap),
        "top_own_time": top_rows,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=200_000)
    parser.add_argument("--latency-ms", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        common.emit(child(args.bootstrap, args.partitions, args.top))
        return 0
    machine = common.machine_info()
    with bench_poll.sim_server(args.brokers, args.partitions, args.latency_ms) as sim:
        result = common.run_child(
            SCRIPT,
            ["--bootstrap", sim["bootstrap"], "--partitions", str(args.partitions),
             "--top", str(args.top)],
        )
    result.update(machine=machine, brokers=args.brokers, latency_ms=args.latency_ms)
    print(f"machine: {machine}")
    print(f"our poller, {args.brokers} brokers x {args.partitions} partitions, warm polls:")
    for w in result["warm_polls"]:
        print(f"  CPU {w['cpu_seconds']:.3f} s, of which GC {w['gc_cpu_seconds']:.3f} s "
              f"({w['gc_collections']} collections, {w['gc_gen2_collections']} full)")
    print(f"  with gc.disable(): CPU {result['warm_cpu_seconds_gc_disabled']:.3f} s")
    if result["warm_poll_metadata_reparsed"]:
        r = result["warm_poll_metadata_reparsed"]
        print(f"  Metadata answer changed (decoded + parsed again): CPU {r['cpu_seconds']:.3f} s,"
              f" of which GC {r['gc_cpu_seconds']:.3f} s")
    print(f"  breakdown: {result['breakdown']}")
    print("  top functions by own time (share of profiled CPU):")
    for row in result["top_own_time"]:
        print(f"    {row['own_share']:>6.1%} own {row['cumulative_share']:>6.1%} cum "
              f"{row['calls']:>8}  {row['function']}")
    common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
