"""/metrics renders the snapshot families once per published state (exporter/expose/render_cache):
a scrape with no publish since the last one reuses their bytes, a publish invalidates them, the
other collectors stay fresh, and the answers are the ones prometheus_client's own app gives."""

from __future__ import annotations

import copy
import gzip
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from exporter_factories import broker, late, open_txn, snapshot
from prometheus_client import GCCollector, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse
from prometheus_client.registry import Collector

from exporter.expose.collector import SnapshotCollector
from exporter.expose.registry import ExporterRegistry, build_registry
from exporter.expose.render_cache import MAX_CACHED_FORMATS, make_metrics_app
from exporter.model import TopicPartition
from exporter.settings import ClusterSettings
from exporter.snapshots import ClusterState, SnapshotStore

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
WsgiApp = Any


class CountingSnapshotCollector(SnapshotCollector):
    """Counts the clusters collected for /metrics: the observable difference between a cached
    and a fresh render (the cache formats each cluster's families apart)."""

    def __init__(self, store: SnapshotStore) -> None:
        super().__init__(store)
        self.collects = 0
        self.collected: list[str] = []

    def collect(self) -> Iterator[Metric]:
        raise AssertionError("/metrics formats the clusters apart, never the whole collector")

    def cluster_families(self, state: ClusterState) -> list[Metric]:
        self.collects += 1
        self.collected.append(state.name)
        return super().cluster_families(state)


class TickCollector(Collector):
    """A counter that advances on every collect, like process_cpu_seconds_total."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ticks = 0

    def collect(self) -> Iterable[Metric]:
        self.ticks += 1
        yield CounterMetricFamily(self.name, "Collects so far.", value=self.ticks)


class StaticCollector(Collector):
    def __init__(self, name: str) -> None:
        self.name = name

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, 'Doc with "quotes" and \\ backslash.',
                                   labels=["k"])
        family.add_metric(['va"l\\ue\n'], 2.5)
        yield family


def scrape(app: WsgiApp, accept: str | None = None, query: str = "",
           accept_encoding: str | None = None, method: str = "GET") -> tuple[str, dict[str, str],
                                                                          bytes]:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": "/metrics",
                               "QUERY_STRING": query}
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if accept_encoding is not None:
        environ["HTTP_ACCEPT_ENCODING"] = accept_encoding
    captured: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
        captured[:] = [status, dict(headers)]

    body = b"".join(app(environ, start_response))
    return captured[0], captured[1], body


@pytest.fixture
def store() -> SnapshotStore:
    return SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])


def late_snapshot(age_ms: int, producer_id: int = 7) -> Any:
    txn = open_txn("orders", 3, producer_id=producer_id, age_ms=age_ms)
    return snapshot("c1", brokers=[broker(1, late_=1, hanging=1)],
                    late_transactions=[late(txn, transactional_id="writer-1")])


def late_ages(body: bytes) -> dict[str, float]:
    return {s.labels["producer_id"]: s.value
            for f in text_parse(body.decode()) for s in f.samples
            if s.name == "kafka_late_transaction_age_seconds"}


def test_second_scrape_without_publish_reuses_snapshot_render_others_fresh(
    store: SnapshotStore,
) -> None:
    collector = CountingSnapshotCollector(store)
    tick = TickCollector("ticks")
    registry = ExporterRegistry()
    registry.register(collector)
    registry.register(tick)
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))

    _, _, first = scrape(app)
    _, _, second = scrape(app)

    assert collector.collects == 1  # the snapshot families were not collected again
    assert "ticks_total 1.0" in first.decode() and "ticks_total 2.0" in second.decode()
    assert first.replace(b"ticks_total 1.0", b"ticks_total 2.0") == second
    assert late_ages(second) == {"7": 400.0}


def test_publish_and_failed_poll_invalidate_the_render(store: SnapshotStore) -> None:
    collector = CountingSnapshotCollector(store)
    registry = ExporterRegistry()
    registry.register(collector)
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))
    assert late_ages(scrape(app)[2]) == {"7": 400.0}

    store.publish(late_snapshot(500_000, producer_id=8))
    body = scrape(app)[2]
    assert late_ages(body) == {"8": 500.0}
    assert collector.collects == 2

    store.record_failure("c1", "boom", 0.1)  # stale data must vanish at once
    body = scrape(app)[2]
    assert late_ages(body) == {}
    assert 'kafka_txn_exporter_up{cluster="c1"} 0.0' in body.decode()
    assert collector.collects == 3


@pytest.mark.parametrize("accept", [
    None,
    "text/plain; version=1.0.0; escaping=allow-utf-8",
    OPENMETRICS,
    "application/openmetrics-text; version=1.0.0; escaping=dots",
    "application/openmetrics-text",
])
def test_body_is_byte_identical_to_prometheus_client_app(
    store: SnapshotStore, accept: str | None
) -> None:
    """Registration order is kept: a fresh collector before and after the cached one."""
    registry = ExporterRegistry()
    registry.register(StaticCollector("before_static"))
    registry.register(SnapshotCollector(store))
    registry.register(StaticCollector("after_static"))
    store.publish(late_snapshot(400_000))
    reference = scrape(make_wsgi_app(registry), accept)
    app = make_metrics_app(registry)
    assert scrape(app, accept) == reference
    assert scrape(app, accept) == reference  # cached


def test_openmetrics_single_eof_and_same_samples_as_uncached(store: SnapshotStore) -> None:
    """With the real registry (process/GC/platform collectors) values of process metrics move
    between two renders, so compare the series and the values of everything else."""
    registry = build_registry(store)
    store.publish(late_snapshot(400_000))
    app = make_metrics_app(registry)
    for _ in range(2):  # a miss, then a hit
        status, headers, body = scrape(app, OPENMETRICS)
        assert status == "200 OK"
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.count(b"# EOF") == 1 and body.endswith(b"# EOF\n")
        ours = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in om_parse(body.decode()) for s in f.samples}
        reference_body = scrape(make_wsgi_app(registry), OPENMETRICS)[2]
        reference = {(s.name, tuple(sorted(s.labels.items()))): s.value
                     for f in om_parse(reference_body.decode()) for s in f.samples}
        assert ours.keys() == reference.keys()
        assert {k: v for k, v in ours.items() if k[0].startswith("kafka_")} == {
            k: v for k, v in reference.items() if k[0].startswith("kafka_")}
        assert ("kafka_late_transaction_age_seconds" in {k[0] for k in ours})
        assert any(k[0].startswith("process_") or k[0] == "python_info" for k in ours)


def test_text_and_openmetrics_are_cached_separately(store: SnapshotStore) -> None:
    collector = CountingSnapshotCollector(store)
    registry = ExporterRegistry()
    registry.register(collector)
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))
    text, om = scrape(app)[2], scrape(app, OPENMETRICS)[2]
    assert scrape(app)[2] == text and scrape(app, OPENMETRICS)[2] == om
    assert collector.collects == 2
    assert b"# EOF" not in text


def test_formats_kept_are_bounded(store: SnapshotStore) -> None:
    """A client cycling OpenMetrics versions cannot pin one body per variant."""
    collector = CountingSnapshotCollector(store)
    registry = ExporterRegistry()
    registry.register(collector)
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))
    versions = [f"application/openmetrics-text; version=1.0.{i}"
                for i in range(MAX_CACHED_FORMATS + 1)]
    for accept in versions:
        scrape(app, accept)
    scrape(app, versions[-1])  # still cached
    assert collector.collects == MAX_CACHED_FORMATS + 1
    scrape(app, versions[0])  # the oldest was evicted
    assert collector.collects == MAX_CACHED_FORMATS + 2


def test_name_filters_still_apply(store: SnapshotStore) -> None:
    registry = build_registry(store)
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))
    scrape(app)  # fill the cache: the filter must not be answered from it
    query = "name[]=kafka_txn_exporter_up&name[]=kafka_late_transaction_age_seconds"
    for accept in (None, OPENMETRICS):
        status, _, body = scrape(app, accept, query=query)
        assert status == "200 OK"
        parse = om_parse if accept else text_parse
        names = {s.name for f in parse(body.decode()) for s in f.samples}
        assert names == {"kafka_txn_exporter_up", "kafka_late_transaction_age_seconds"}


def test_gzip_is_the_compressed_body(store: SnapshotStore) -> None:
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(store))
    app = make_metrics_app(registry)
    store.publish(late_snapshot(400_000))
    plain = scrape(app, OPENMETRICS)[2]
    _, headers, compressed = scrape(app, OPENMETRICS, accept_encoding="gzip")
    assert headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(compressed) == plain


def test_other_methods_answered_as_prometheus_client_does(store: SnapshotStore) -> None:
    registry = build_registry(store)
    app = make_metrics_app(registry)
    status, headers, _ = scrape(app, method="POST")
    assert status.startswith("405") and headers["Allow"] == "OPTIONS,GET"
    assert scrape(app, method="OPTIONS")[0] == "200 OK"


def test_publish_prerenders_the_formats_scraped_before(store: SnapshotStore) -> None:
    """The first scrape after a poll finds its bytes ready: the publish rendered them."""
    from exporter.expose.render_cache import SnapshotRenderCache

    collector = CountingSnapshotCollector(store)
    registry = ExporterRegistry()
    registry.register(collector)
    cache = SnapshotRenderCache()
    store.on_change(lambda cluster: cache.warm(registry, cluster))
    app = make_metrics_app(registry, cache)
    store.publish(late_snapshot(400_000))
    assert collector.collects == 0  # nobody scraped yet: nothing rendered for nothing
    scrape(app, OPENMETRICS)
    assert collector.collects == 1

    store.publish(late_snapshot(500_000, producer_id=8))
    assert collector.collects == 2  # rendered by the publish, in the format asked before
    _, headers, body = scrape(app, OPENMETRICS)
    assert collector.collects == 2  # the scrape itself collected nothing
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    ages = {s.labels["producer_id"]: s.value for f in om_parse(body.decode())
            for s in f.samples if s.name == "kafka_late_transaction_age_seconds"}
    assert ages == {"8": 500.0}

    scrape(app)  # a format not asked before is rendered by its scrape, as before
    assert collector.collects == 3


@pytest.fixture
def three() -> SnapshotStore:
    """Three clusters with different static labels (one without any)."""
    return SnapshotStore([
        ClusterSettings(name="a", bootstrap_servers=("h:1",), labels={"env": "prod"}),
        ClusterSettings(name="b", bootstrap_servers=("h:1",),
                        labels={"env": "dev", "region": "eu"}),
        ClusterSettings(name="c", bootstrap_servers=("h:1",)),
    ])


def publish_late(store: SnapshotStore, cluster: str, age_ms: int, producer_id: int = 7) -> None:
    txn = open_txn("orders", 3, producer_id=producer_id, age_ms=age_ms)
    store.publish(snapshot(cluster, brokers=[broker(1, late_=1, hanging=1)],
                           durations={TopicPartition("orders", 3): age_ms / 1000},
                           late_transactions=[late(txn, transactional_id="writer-1")]))


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
def test_parts_joined_family_by_family_are_the_whole_render(
    three: SnapshotStore, accept: str | None
) -> None:
    """Per-cluster parts, one stale and two cached, give prometheus_client's exact body; the
    gzip body is the same bytes once decompressed."""
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(three))
    registry.register(StaticCollector("after_static"))
    publish_late(three, "a", 400_000)
    publish_late(three, "b", 500_000, producer_id=9)
    three.record_failure("c", "boom", 1.0)
    app = make_metrics_app(registry)
    for round_ in range(3):
        reference = scrape(make_wsgi_app(registry), accept)
        assert scrape(app, accept) == reference, round_
        _, headers, compressed = scrape(app, accept, accept_encoding="gzip")
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(compressed) == reference[2], round_
        publish_late(three, "b", 600_000 + round_, producer_id=10 + round_)  # one part stale


def test_a_publish_renders_only_its_cluster_and_only_formats_asked_since(
    three: SnapshotStore,
) -> None:
    collector = CountingSnapshotCollector(three)
    registry = ExporterRegistry()
    registry.register(collector)
    from exporter.expose.render_cache import SnapshotRenderCache

    cache = SnapshotRenderCache()
    three.on_change(lambda cluster: cache.warm(registry, cluster))
    app = make_metrics_app(registry, cache)
    for name in "abc":
        publish_late(three, name, 400_000)
    assert collector.collected == []  # nobody scraped: the publishes formatted nothing

    scrape(app, OPENMETRICS, accept_encoding="gzip")
    assert sorted(collector.collected) == ["a", "b", "c"]
    collector.collected.clear()

    publish_late(three, "b", 500_000)
    assert collector.collected == ["b"]  # the changed cluster, in the one format asked for
    scrape(app, OPENMETRICS, accept_encoding="gzip")
    assert collector.collected == ["b"]  # the scrape found everything ready

    publish_late(three, "b", 600_000)  # a scrape happened since b's last publish: warm b
    publish_late(three, "b", 700_000)  # none since: this publish formats nothing
    publish_late(three, "a", 700_000)  # none since a's last publish either... but one since
    assert collector.collected == ["b", "b", "a"]  # ...a's previous one, so a is warmed
    for _ in range(5):
        publish_late(three, "a", 800_000)
        publish_late(three, "c", 800_000)
    assert collector.collected == ["b", "b", "a", "c"]  # no scraper: renders stop


def test_cached_gzip_scrape_compresses_only_the_fresh_metrics(
    store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exporter.expose import render_cache

    registry = build_registry(store)
    store.publish(snapshot("c1", brokers=[broker(1)], late_transactions=[
        late(open_txn("orders", p, producer_id=p, age_ms=400_000 + p)) for p in range(300)]))
    app = make_metrics_app(registry)
    plain = scrape(app)[2]
    scrape(app, accept_encoding="gzip")  # first gzip scrape: the cached part gets its members
    compressed: list[bytes] = []
    real = render_cache._gzip

    def counting(data: bytes, *level: int) -> bytes:
        compressed.append(data)
        return real(data, *level)

    monkeypatch.setattr(render_cache, "_gzip", counting)
    _, _, body = scrape(app, accept_encoding="gzip")
    assert len(compressed) == 1 and compressed[0].startswith(b"# HELP process_")
    assert len(compressed[0]) < len(plain) / 10
    late_series = [line for line in gzip.decompress(body).splitlines()
                   if line.startswith(b"kafka_late_transaction_age_seconds{")]
    assert len(late_series) == 300


def test_gzip_members_compress_about_as_well_as_one_stream(three: SnapshotStore) -> None:
    """Small pieces are compressed together, not one member each (that was 5x the size)."""
    registry = build_registry(three)
    for name in "abc":
        publish_late(three, name, 400_000)
    app = make_metrics_app(registry)
    for _ in range(2):  # fresh, then from cached members
        _, _, body = scrape(app, OPENMETRICS, accept_encoding="gzip")
        plain = gzip.decompress(body)
        assert len(body) <= 1.2 * len(gzip.compress(plain, compresslevel=6)) + 200
        publish_late(three, "b", 500_000)


class SettableCollector(Collector):
    """Families whose values (and, on demand, shape) the test sets: like process metrics,
    whose values move between scrapes while names, labels and help stay."""

    def __init__(self) -> None:
        self.values: list[float] = [1.0, 2.0, 3.0]
        self.extra_label = False
        self.timestamp: float | None = None

    def collect(self) -> Iterable[Metric]:
        counter = CounterMetricFamily("work_seconds", 'Work "done" \\ so far.', labels=["kind"])
        counter.add_metric(["a"], self.values[0])
        counter.add_metric(['b"\n\\'], self.values[1], timestamp=self.timestamp)
        yield counter
        gauge = GaugeMetricFamily("open_things", "Things open now.",
                                  labels=["where", "shard"] if self.extra_label else [])
        gauge.add_metric(["here", "0"] if self.extra_label else [], self.values[2])
        yield gauge


class ReplayCollector(Collector):
    """The families one real collect gave, replayed with the values the test sets."""

    def __init__(self, collector: Collector) -> None:
        self.families = list(collector.collect())
        self.scale = 1.0

    def collect(self) -> Iterable[Metric]:
        for family in self.families:
            clone = copy.copy(family)
            clone.samples = [s._replace(value=s.value * self.scale) for s in family.samples]
            yield clone


PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
VALUE_SETS = [
    [1.0, 2.0, 3.0],
    [0.0, -0.0, 1e22],
    [1_795_596_528.76, 123456789.0, 7],
    [float("nan"), float("inf"), float("-inf")],
    [2.5e-7, 12345678.9, -3.25],
]


@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT, OPENMETRICS,
                                    "application/openmetrics-text; version=1.0.0; escaping=dots",
                                    "text/plain; version=1.0.0; escaping=allow-utf-8"])
def test_gzip_scrapes_decompress_to_prometheus_clients_body_as_values_move(
    store: SnapshotStore, accept: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body of a cached gzip scrape, decompressed, is byte for byte what
    prometheus_client's own app renders for the same registry, while the fresh collectors'
    values move (their render reused as a template) and when their shape changes."""
    from exporter.expose import render_cache

    made: list[int] = []
    real_make = render_cache._make_template

    def counting(*args: Any) -> Any:
        made.append(1)
        return real_make(*args)

    monkeypatch.setattr(render_cache, "_make_template", counting)
    settable = SettableCollector()
    registry = ExporterRegistry()
    registry.register(settable)
    registry.register(SnapshotCollector(store))
    registry.register(StaticCollector("after_static"))
    store.publish(late_snapshot(400_000))
    reference_app = make_wsgi_app(registry)
    app = make_metrics_app(registry)

    def same_as_reference() -> None:
        _, headers, body = scrape(app, accept, accept_encoding="gzip")
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == scrape(reference_app, accept)[2]

    for values in VALUE_SETS:
        settable.values = values
        same_as_reference()
    assert len(made) == 2  # one template per run of fresh collectors; then values only
    settable.extra_label = True  # a new shape: rendered again, a new template
    same_as_reference()
    settable.values = [4.0, 5.0, 6.0]
    same_as_reference()
    assert len(made) == 3
    settable.timestamp = 1_700_000_000.5  # rendered from more than values: no template
    for values in VALUE_SETS[:2]:
        settable.values = values
        same_as_reference()
    assert len(made) == 3


@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT])
def test_process_platform_and_gc_families_filled_in_are_prometheus_clients_render(
    store: SnapshotStore, accept: str | None
) -> None:
    """The real fresh collectors' families (replayed, so both renders see the same values)."""
    scratch = ExporterRegistry()
    replays = [ReplayCollector(c) for c in (ProcessCollector(registry=scratch),
                                            PlatformCollector(registry=scratch),
                                            GCCollector(registry=scratch))]
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(store))
    for replay in replays:
        registry.register(replay)
    store.publish(late_snapshot(400_000))
    reference_app = make_wsgi_app(registry)
    app = make_metrics_app(registry)
    for scale in (1.0, 1.5, 1e6, 0.001, 3.0):
        for replay in replays:
            replay.scale = scale
        plain = scrape(app, accept)[2]
        zipped = gzip.decompress(scrape(app, accept, accept_encoding="gzip")[2])
        reference = scrape(reference_app, accept)[2]
        assert plain == zipped == reference
        assert b"process_cpu_seconds_total" in plain and b"python_gc_collections_total" in plain
