"""/metrics formatting CPU around publishes: many clusters, one Prometheus scraping every 15 s.

`serve`'s publish and scrape path is replayed in this process on a
simulated clock (no poll, no socket, no sleeping): `--clusters` clusters, each with `--late`
late transactions, publish every `--poll-interval` seconds (staggered over the interval, as
the scheduler spreads them); a scraper asks every `--scrape-interval` seconds the way
Prometheus does (OpenMetrics preferred, `Accept-Encoding: gzip`). Every publish makes a new
state object (a cache miss for its cluster), as a real poll does. Measured: CPU seconds
(`time.process_time`) of all publishes (with the store's listeners, as `serve` wires them)
and scrapes over `--minutes` simulated minutes. Scenarios, same run:

- `never_scraped` (baseline): publishes only;
- `scraped`: publishes + the scraper, with exporter/expose/render_cache.py as it is;
- `previous_scraped` (baseline of the change): the same events against the render cache
  before it was cut per cluster, rebuilt here: one cached body per format for the whole
  collector, every publish re-rendering every format cached before (forever), gzip (level 9) of the
  whole body on every scrape.

The bodies of the `scraped` scenario are checked against prometheus_client's own rendering
of the same state at the end (decompressed, byte for byte).

Run: python benchmarks/bench_publish_render.py [--clusters 20] [--late 1000] [--minutes 2]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def _snapshot(cluster: str, late_count: int, seed: int) -> Any:
    from exporter.model import (
        BrokerSummary,
        Classification,
        ClusterSnapshot,
        LateTransaction,
        OpenTransaction,
        StartTimeSource,
        TopicPartition,
    )

    now_ms = 1_800_000_000_000 + seed * 10_000
    late = []
    for i in range(late_count):
        age_ms = 3_600_000 + i * 7 + seed * 10_000
        txn = OpenTransaction(
            topic=f"orders-{i // 2000:03d}", partition=i % 2000, leader_id=i % 6,
            producer_id=10_000 + i, producer_epoch=i % 5, coordinator_epoch=3,
            current_txn_start_offset=1_000 + i, last_timestamp_ms=now_ms - age_ms,
            start_time_ms=now_ms - age_ms, start_time_source=StartTimeSource.BATCH_TIMESTAMP,
        )
        late.append(LateTransaction(
            transaction=txn, age_seconds=age_ms / 1000.0,
            classification=Classification.HANGING if i % 3 else Classification.COORDINATOR_TRACKED,
            transactional_id=f"payments-writer-{i}",
        ))
    partitions = [TopicPartition(lt.transaction.topic, lt.transaction.partition) for lt in late]
    return ClusterSnapshot(
        cluster=cluster, observed_at_ms=now_ms, up=True,
        brokers=tuple(BrokerSummary(b, True, 0, 0, 0, 900_000) for b in range(6)),
        max_active_transaction_duration_seconds={
            tp: lt.age_seconds for tp, lt in zip(partitions, late, strict=True)},
        cluster_max_active_transaction_duration_seconds=max(
            (lt.age_seconds for lt in late), default=0.0),
        late_transactions=tuple(late),
        transaction_states={"Ongoing": late_count, "Empty": 100},
        last_stable_offset_lag={}, unobserved_partitions=0, request_errors=(),
        poll_duration_seconds=1.0,
    )


class _PreviousCache:
    """The render cache before it was cut per cluster, rebuilt for the baseline: the whole snapshot
    collector rendered per format, every format cached before re-rendered on every publish,
    and the whole body gzip-compressed (level 9) on every scrape."""

    def __init__(self, registry: Any, collector: Any) -> None:
        self._registry = registry
        self._collector = collector
        self._states: object = None
        self._bodies: dict[str, bytes] = {}
        self._encoders: dict[str, Any] = {}

    def _render(self, encoder: Any, content_type: str) -> bytes:
        from exporter.expose.render_cache import _Collectors

        states = self._collector.published_states()
        if self._states is not states:
            self._states, self._bodies = states, {}
        if content_type not in self._bodies:
            self._bodies[content_type] = encoder(_Collectors([self._collector]))
        self._encoders[content_type] = encoder
        return self._bodies[content_type]

    def warm(self, _cluster: str | None) -> None:
        for content_type, encoder in list(self._encoders.items()):
            self._render(encoder, content_type)

    def scrape(self, accept: str) -> bytes:
        from prometheus_client.exposition import choose_encoder

        from exporter.expose.render_cache import _Collectors, _without_eof

        encoder, content_type = choose_encoder(accept)
        om = content_type.startswith("application/openmetrics-text")
        snapshot = _without_eof(self._render(encoder, content_type), om)
        fresh = [c for c in self._registry.collectors() if c is not self._collector]
        rest = encoder(_Collectors(fresh))
        return gzip.compress(snapshot + rest)


def _events(clusters: list[str], minutes: float, poll: float, scrape: float,
            scraped: bool) -> list[tuple[float, str, str]]:
    horizon = minutes * 60
    events = []
    for i, name in enumerate(clusters):
        t = poll * (i + 0.5) / len(clusters)
        while t < horizon:
            events.append((t, "publish", name))
            t += poll
    if scraped:
        t = scrape / 2
        while t < horizon:
            events.append((t, "scrape", ""))
            t += scrape
    return sorted(events)


def _run(scenario: str, args: argparse.Namespace, snapshots: dict[str, list[Any]]
         ) -> dict[str, Any]:
    from exporter.expose.collector import SnapshotCollector
    from exporter.expose.registry import build_registry
    from exporter.expose.render_cache import SnapshotRenderCache, make_metrics_app
    from exporter.settings import ClusterSettings
    from exporter.snapshots import SnapshotStore

    names = list(snapshots)
    store = SnapshotStore([ClusterSettings(name=n, bootstrap_servers=("h:1",)) for n in names])
    registry = build_registry(store)
    collector = next(c for c in registry.collectors() if isinstance(c, SnapshotCollector))
    for name in names:  # the state before the measured window
        store.publish(snapshots[name][0], now_seconds=0.0)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "",
               "HTTP_ACCEPT": PROMETHEUS_ACCEPT, "HTTP_ACCEPT_ENCODING": "gzip"}
    scrape: Callable[[], bytes]
    if scenario == "previous_scraped":
        previous = _PreviousCache(registry, collector)
        store.on_change(previous.warm)

        def scrape() -> bytes:
            return previous.scrape(PROMETHEUS_ACCEPT)
    else:
        cache = SnapshotRenderCache()
        store.on_change(lambda cluster: cache.warm(registry, cluster))
        app = make_metrics_app(registry, cache)

        def scrape() -> bytes:
            return b"".join(app(environ, lambda *a: None))

    events = _events(names, args.minutes, args.poll_interval, args.scrape_interval,
                     scenario != "never_scraped")
    counters = dict.fromkeys(names, 0)
    cpu = {"publish": 0.0, "scrape": 0.0}
    scrape_cpu: list[float] = []
    body = b""
    for t, kind, name in events:
        start = time.process_time()
        if kind == "publish":
            counters[name] += 1
            store.publish(snapshots[name][counters[name] % len(snapshots[name])],
                          now_seconds=t)
        else:
            body = scrape()
        spent = time.process_time() - start
        cpu[kind] += spent
        if kind == "scrape":
            scrape_cpu.append(spent)
    checked = None
    if body and scenario == "scraped":  # one more scrape of the final state, not timed
        from prometheus_client.openmetrics.exposition import generate_latest

        reference = generate_latest(collector).removesuffix(b"# EOF\n")
        checked = gzip.decompress(scrape()).startswith(reference)
        assert checked, "the scraped body differs from prometheus_client's rendering"
    seconds = args.minutes * 60
    total = cpu["publish"] + cpu["scrape"]
    return {
        "cpu_seconds": round(total, 3),
        "publish_cpu_seconds": round(cpu["publish"], 3),
        "scrape_cpu_seconds": round(cpu["scrape"], 3),
        "share_of_a_core": round(total / seconds, 4),
        "publishes": sum(counters.values()),
        "scrapes": len(scrape_cpu),
        "scrape_cpu_median_ms": round(statistics.median(scrape_cpu) * 1000, 2)
        if scrape_cpu else None,
        "gzip_body_bytes": len(body),
        "body_checked_against_prometheus_client": checked,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--late", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--poll-interval", type=float, default=10.0)
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    args = parser.parse_args(argv)
    machine = common.machine_info()
    snapshots = {f"cluster-{i:02d}": [_snapshot(f"cluster-{i:02d}", args.late, seed)
                                      for seed in range(2)] for i in range(args.clusters)}
    scenarios = {name: _run(name, args, snapshots)
                 for name in ("never_scraped", "scraped", "previous_scraped")}
    result = {
        "bench": "publish_render",
        "machine": machine,
        "clusters": args.clusters,
        "late_per_cluster": args.late,
        "simulated_minutes": args.minutes,
        "poll_interval_seconds": args.poll_interval,
        "scrape_interval_seconds": args.scrape_interval,
        "scenarios": scenarios,
        "ratio_scraped_vs_previous": common.ratio(scenarios["scraped"]["cpu_seconds"],
                                                  scenarios["previous_scraped"]["cpu_seconds"]),
        "ratio_scrape_cpu_vs_previous": common.ratio(
            scenarios["scraped"]["scrape_cpu_median_ms"] or 0.0,
            scenarios["previous_scraped"]["scrape_cpu_median_ms"] or 1.0),
        "machine_load_average_at_end": common.load_average(),
    }
    print(f"machine: {machine}")
    print(f"{args.clusters} clusters x {args.late} late, publish every {args.poll_interval} s, "
          f"scrape every {args.scrape_interval} s, {args.minutes} simulated minutes:")
    for name, s in scenarios.items():
        print(f"  {name:<17} CPU {s['cpu_seconds']:>7.3f} s ({s['share_of_a_core']:.2%} of a "
              f"core; publishes {s['publish_cpu_seconds']:.3f} s, scrapes "
              f"{s['scrape_cpu_seconds']:.3f} s, median scrape {s['scrape_cpu_median_ms']} ms)")
    print(f"  ratios: scraped/previous {result['ratio_scraped_vs_previous']}, "
          f"scrape CPU scraped/previous {result['ratio_scrape_cpu_vs_previous']}")
    common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
