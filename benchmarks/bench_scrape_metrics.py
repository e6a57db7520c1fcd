"""Render time of /metrics with many late transactions: `generate_latest` over our registry.

Target: a /metrics render with 10,000 late-transaction series in at most 100 ms. A
`ClusterSnapshot` is built directly (no poll) and published into a `SnapshotStore`; the
registry holds our `SnapshotCollector`, as `serve` does. Measured variants (same run):

- `empty` (baseline): a snapshot with no open transaction, the exporter's own series only;
- `gauge` (baseline): prometheus_client's own `Gauge` with the same late-transaction series
  (same labels), the library's floor for this many series;
- `late` (the measured thing): N late transactions on N partitions, only their series;
- `late_full`: as `late` plus each partition's max-duration and LSO-lag series (3N series),
  what a cluster with N late transactions really shows.

The `served` variants are whole /metrics answers of the exporter's registry (`build_registry`:
snapshot collector + process/platform/GC collectors) through a WSGI call, no socket:

- `uncached` (baseline): prometheus_client's `make_wsgi_app`, what /metrics did before
  exporter/expose/render_cache.py: every scrape formats every series;
- `cached`: our /metrics app, scrapes with no publish in between (the snapshot families'
  bytes are reused; process/GC/platform metrics rendered fresh);
- `after_publish`: our app, each scrape right after a publish (a miss: what the first scrape
  after every poll costs; the publish itself is not timed);
- `after_publish_prerendered`: the same with the publish re-rendering the formats scraped
  before, as `serve` wires it (the render moves to the poll thread; the publish is not timed);
- `cached_gzip`: as `cached` with `Accept-Encoding: gzip` (cached gzip members for the
  snapshot families; only the fresh process/platform/GC metrics compressed per scrape);
- `cached_gzip_prometheus`: as `cached_gzip` with the Accept header Prometheus sends
  (OpenMetrics 1.0.0 preferred): what a Prometheus scrape between two polls costs;
- `fresh_only` (baseline of the two above): only what every scrape renders afresh, the
  process/platform/GC collectors through `generate_latest`, no snapshot family (our app
  collects them on every scrape too, but writes their values into a template of their
  previous render instead of formatting them again);
- `full_cached` / `full_uncached`: the 3N-series snapshot (`late_full`), cached vs before.

Each variant: `--repeat` renders (default 20), median and p90 of wall time and CPU time
(`time.process_time`), in this process (no I/O, no threads: wall ~ CPU).

`--http` adds whole HTTP scrapes: the exporter's `MetricsServer` (the registry above, a
snapshot with the late series) in a process of its own; this process sends `--http-requests`
requests one after another, each on a new connection (the server answers HTTP/1.0 and
closes), and reads the server's CPU (utime + stime, /proc/PID/stat) before and after: CPU
per request for `/healthz` (baseline: the HTTP server's own cost, an answer of 3 bytes) and
for `/metrics` as Prometheus asks (OpenMetrics, gzip), in alternating blocks, medians of 3.

Run: python benchmarks/bench_scrape_metrics.py [--late 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
LABELS = ("cluster", "topic", "partition", "producer_id", "producer_epoch",
          "coordinator_epoch", "start_offset", "transactional_id", "classification")


def _snapshot(late_count: int, full: bool) -> Any:
    from exporter.model import (
        BrokerSummary,
        Classification,
        ClusterSnapshot,
        LateTransaction,
        OpenTransaction,
        StartTimeSource,
        TopicPartition,
    )

    now_ms = 1_800_000_000_000
    late = []
    for i in range(late_count):
        topic, partition = f"orders-{i // 2000:03d}", i % 2000
        age_ms = 3_600_000 + i * 7
        txn = OpenTransaction(
            topic=topic, partition=partition, leader_id=i % 50, producer_id=10_000 + i,
            producer_epoch=i % 5, coordinator_epoch=3, current_txn_start_offset=1_000 + i,
            last_timestamp_ms=now_ms - age_ms, start_time_ms=now_ms - age_ms,
            start_time_source=StartTimeSource.BATCH_TIMESTAMP,
        )
        late.append(LateTransaction(
            transaction=txn, age_seconds=age_ms / 1000.0,
            classification=Classification.HANGING if i % 3 else Classification.COORDINATOR_TRACKED,
            transactional_id=f"payments-writer-{i}",
        ))
    partitions = [TopicPartition(lt.transaction.topic, lt.transaction.partition) for lt in late]
    return ClusterSnapshot(
        cluster="bench",
        observed_at_ms=now_ms,
        up=True,
        brokers=tuple(BrokerSummary(b, True, 0, 0, 0, 900_000) for b in range(50)),
        max_active_transaction_duration_seconds=(
            {tp: lt.age_seconds for tp, lt in zip(partitions, late, strict=True)} if full else {}
        ),
        cluster_max_active_transaction_duration_seconds=max(
            (lt.age_seconds for lt in late), default=0.0),
        late_transactions=tuple(late),
        transaction_states={"Ongoing": late_count, "Empty": 100},
        last_stable_offset_lag={tp: 42 for tp in partitions} if full else {},
        unobserved_partitions=0,
        request_errors=(),
        poll_duration_seconds=1.0,
    )


def _registry_ours(late_count: int, full: bool) -> Any:
    from prometheus_client.registry import CollectorRegistry

    from exporter.expose.collector import SnapshotCollector
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    store = SnapshotStore([ClusterSettings(name="bench", bootstrap_servers=("localhost:9092",))])
    store.publish(_snapshot(late_count, full))
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    return registry


def _registry_gauge(late_count: int) -> Any:
    from prometheus_client import Gauge
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry()
    gauge = Gauge("kafka_late_transaction_age_seconds", "Age of each late open transaction.",
                  LABELS, registry=registry)
    for i in range(late_count):
        gauge.labels("bench", f"orders-{i // 2000:03d}", str(i % 2000), str(10_000 + i),
                     str(i % 5), "3", str(1_000 + i), f"payments-writer-{i}",
                     "hanging" if i % 3 else "coordinator_tracked").set(3_600 + i * 0.007)
    return registry


def _time_renders(registry: Any, repeat: int) -> dict[str, Any]:
    from prometheus_client import generate_latest

    return _time(lambda: generate_latest(registry), repeat)


def _time(render: Any, repeat: int, before_each: Any = None) -> dict[str, Any]:
    """Wall and CPU time of `render()`; `before_each()` runs untimed before every call."""
    walls, cpus = [], []
    size = len(render())  # warm-up (fills a cache); also the body size
    for _ in range(repeat):
        if before_each is not None:
            before_each()
        wall, cpu = time.perf_counter(), time.process_time()
        render()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    walls.sort()
    return {
        "median_ms": round(statistics.median(walls) * 1000, 2),
        "p90_ms": round(walls[int(0.9 * (len(walls) - 1))] * 1000, 2),
        "cpu_median_ms": round(statistics.median(cpus) * 1000, 2),
        "bytes": size,
    }


def _served(late_count: int, repeat: int) -> dict[str, dict[str, Any]]:
    """Whole /metrics answers of the exporter's registry through WSGI (see the docstring)."""
    from prometheus_client import generate_latest, make_wsgi_app

    from exporter.expose.registry import ExporterRegistry, build_registry
    from exporter.expose.render_cache import SnapshotRenderCache, make_metrics_app
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    def scrape(app: Any, **headers: str) -> Any:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "",
                   **headers}
        return lambda: b"".join(app(environ, lambda status, headers, *exc: None))

    out: dict[str, dict[str, Any]] = {}
    for prefix, full in (("", False), ("full_", True)):
        store = SnapshotStore([ClusterSettings(name="bench",
                                               bootstrap_servers=("localhost:9092",))])
        snap = _snapshot(late_count, full)
        store.publish(snap)
        registry = build_registry(store)
        ours = make_metrics_app(registry)
        out[f"{prefix}uncached"] = _time(scrape(make_wsgi_app(registry)), repeat)
        out[f"{prefix}cached"] = _time(scrape(ours), repeat)
        if not full:
            # publish() makes a new state object even for the same snapshot: a cache miss
            publish = functools.partial(store.publish, snap)
            out["after_publish"] = _time(scrape(ours), repeat, publish)
            # As `serve` wires it: each publish re-renders the formats scraped before.
            cache = SnapshotRenderCache()
            store.on_change(functools.partial(cache.warm, registry))
            prerendered = scrape(make_metrics_app(registry, cache))
            prerendered()  # the first scrape tells which format to keep ready
            out["after_publish_prerendered"] = _time(prerendered, repeat, publish)
            out["cached_gzip"] = _time(scrape(ours, HTTP_ACCEPT_ENCODING="gzip"), repeat)
            out["cached_gzip_prometheus"] = _time(
                scrape(ours, HTTP_ACCEPT_ENCODING="gzip", HTTP_ACCEPT=PROMETHEUS_ACCEPT),
                repeat)
            fresh = ExporterRegistry()
            for collector in registry.collectors()[1:]:
                fresh.register(collector)
            out["fresh_only"] = _time(functools.partial(generate_latest, fresh), repeat)
    return out


def serve_http(late_count: int) -> int:
    """The `--serve-http` child: the exporter's HTTP server over a published snapshot."""
    from exporter.expose.http import MetricsServer
    from exporter.expose.registry import build_registry
    from exporter.logs import configure_logging
    from exporter.settings import ClusterSettings, WebSettings
    from exporter.snapshots import SnapshotStore

    configure_logging("json", "warning")  # as serve does (stderr); debug lines would be cost
    store = SnapshotStore([ClusterSettings(name="bench", bootstrap_servers=("localhost:9092",))])
    store.publish(_snapshot(late_count, False))
    server = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0),
                           build_registry(store), store)
    server.start()
    return common.serve_until_stdin_closes({"port": server.port}, server.stop)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _http(late_count: int, requests: int) -> dict[str, Any]:
    """Server CPU per request, /healthz vs a Prometheus-like gzip /metrics (see the docstring)."""
    import gzip
    import http.client

    kinds = {"healthz": ("/healthz", {}),
             "metrics_gzip_prometheus": ("/metrics", {"Accept": PROMETHEUS_ACCEPT,
                                                      "Accept-Encoding": "gzip"})}
    per_request: dict[str, list[float]] = {kind: [] for kind in kinds}
    sizes: dict[str, int] = {}
    with common.serving_child(Path(__file__).resolve(),
                              ["--serve-http", "--late", str(late_count)]) as child:
        port, pid = int(child["port"]), int(child["pid"])

        refused = 0

        def get(path: str, headers: dict[str, str]) -> bytes:
            """One request on its own connection; a 503 (the server's connection cap) would be
            counted and asked again."""
            nonlocal refused
            while True:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request("GET", path, headers=headers)
                    resp = conn.getresponse()
                    body = resp.read()
                finally:
                    conn.close()
                if resp.status == 200:
                    return body
                if resp.status != 503:
                    raise RuntimeError(f"{path}: HTTP {resp.status}")
                refused += 1

        for kind, (path, headers) in kinds.items():  # warm-up; the first scrape formats
            for _ in range(20):
                sizes[kind] = len(get(path, headers))
        late_lines = gzip.decompress(get(*kinds["metrics_gzip_prometheus"])).count(
            b"\nkafka_late_transaction_age_seconds{")
        for _ in range(3):
            for kind, (path, headers) in kinds.items():
                before = _cpu_seconds(pid)
                for _ in range(requests):
                    get(path, headers)
                per_request[kind].append((_cpu_seconds(pid) - before) / requests)
    out: dict[str, Any] = {
        kind: {"server_cpu_ms_per_request": round(statistics.median(v) * 1000, 3),
               "bytes": sizes[kind]}
        for kind, v in per_request.items()}
    out["requests_per_block"] = requests
    out["refused_503_and_repeated"] = refused
    out["late_series_in_body"] = late_lines
    out["metrics_minus_healthz_ms"] = round(
        out["metrics_gzip_prometheus"]["server_cpu_ms_per_request"]
        - out["healthz"]["server_cpu_ms_per_request"], 3)
    return out


def _expose_fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parent.parent / "exporter" / "expose")
                       .glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--late", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--http", action="store_true", help="also whole HTTP scrapes")
    parser.add_argument("--http-requests", type=int, default=1000)
    parser.add_argument("--serve-http", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_http:
        return serve_http(args.late)
    machine = common.machine_info()
    variants = {
        "empty": _time_renders(_registry_ours(0, False), args.repeat),
        "gauge": _time_renders(_registry_gauge(args.late), args.repeat),
        "late": _time_renders(_registry_ours(args.late, False), args.repeat),
        "late_full": _time_renders(_registry_ours(args.late, True), args.repeat),
    }
    served = _served(args.late, args.repeat)
    result: dict[str, Any] = {
        "bench": "scrape_metrics",
        "machine": machine,
        "late_transactions": args.late,
        "repeat": args.repeat,
        "expose_fingerprint": _expose_fingerprint(),
        "variants": variants,
        "served": served,
        "ratio_cached_vs_uncached": common.ratio(served["cached"]["median_ms"],
                                                 served["uncached"]["median_ms"]),
        "ratio_cached_gzip_vs_cached": common.ratio(served["cached_gzip"]["cpu_median_ms"],
                                                    served["cached"]["cpu_median_ms"]),
        "ratio_cached_gzip_prometheus_vs_fresh_only": common.ratio(
            served["cached_gzip_prometheus"]["cpu_median_ms"],
            served["fresh_only"]["cpu_median_ms"]),
        "ratio_after_publish_vs_uncached": common.ratio(served["after_publish"]["median_ms"],
                                                        served["uncached"]["median_ms"]),
        "ratio_late_vs_gauge": common.ratio(variants["late"]["median_ms"],
                                            variants["gauge"]["median_ms"]),
        "ratio_late_vs_empty": common.ratio(variants["late"]["median_ms"],
                                            variants["empty"]["median_ms"]),
        "ratio_late_full_vs_late": common.ratio(variants["late_full"]["median_ms"],
                                                variants["late"]["median_ms"]),
    }
    print(f"machine: {machine}")
    print(f"generate_latest, {args.late} late transactions, {args.repeat} renders each:")
    for name, v in variants.items():
        print(f"  {name:<10} median {v['median_ms']:>8.2f} ms  p90 {v['p90_ms']:>8.2f} ms  "
              f"CPU {v['cpu_median_ms']:>8.2f} ms  {v['bytes']:>9} bytes")
    print(f"  ratios: late/gauge {result['ratio_late_vs_gauge']}, late/empty "
          f"{result['ratio_late_vs_empty']}, late_full/late {result['ratio_late_full_vs_late']}")
    print(f"/metrics of build_registry through WSGI, {args.late} late transactions "
          f"(full_*: 3x the series):")
    for name, v in served.items():
        print(f"  {name:<25} median {v['median_ms']:>8.2f} ms  p90 {v['p90_ms']:>8.2f} ms  "
              f"CPU {v['cpu_median_ms']:>8.2f} ms  {v['bytes']:>9} bytes")
    print(f"  ratios: cached/uncached {result['ratio_cached_vs_uncached']}, after_publish/"
          f"uncached {result['ratio_after_publish_vs_uncached']}, cached_gzip_prometheus/"
          f"fresh_only {result['ratio_cached_gzip_prometheus_vs_fresh_only']}")
    if args.http:
        result["http"] = http_result = _http(args.late, args.http_requests)
        print(f"whole HTTP requests, new connection each, {args.http_requests} per block, "
              f"server CPU per request (median of 3 blocks):")
        for kind in ("healthz", "metrics_gzip_prometheus"):
            r = http_result[kind]
            print(f"  {kind:<25} {r['server_cpu_ms_per_request']:.3f} ms  {r['bytes']} bytes")
        print(f"  /metrics minus /healthz: {http_result['metrics_minus_healthz_ms']:.3f} ms")
        result["machine_load_average_at_end"] = common.load_average()
    common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
