"""Many scrapers at once: identical concurrent /metrics requests share one render
(exporter/expose/http.py SingleFlight), different ones do not, and a failed render does not
take the waiting requests down with it. Found with benchmarks/bench_scrape_load.py: 50
scrapers each rendering the same 1,000-transaction snapshot under the GIL took ~1.8 s each."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily

from exporter.expose.http import MetricsServer, SingleFlight
from exporter.expose.registry import ExporterRegistry
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore


class SlowCollector:
    """Takes 0.3 s per collect and counts collects."""

    def __init__(self) -> None:
        self.collects = 0
        self._lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            self.collects += 1
            n = self.collects
        time.sleep(0.3)
        yield GaugeMetricFamily("slow_render", "renders so far", value=n)


@pytest.fixture
def slow_server() -> Iterator[tuple[str, SlowCollector]]:
    collector = SlowCollector()
    registry = ExporterRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    store = SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])
    server = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0), registry, store)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/metrics", collector
    finally:
        server.stop()


def fetch(url: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read().decode()


def test_concurrent_identical_scrapes_share_renders(
    slow_server: tuple[str, SlowCollector],
) -> None:
    url, collector = slow_server
    with ThreadPoolExecutor(max_workers=30) as pool:
        results = list(pool.map(lambda _: fetch(url), range(30)))
    assert all(status == 200 and "slow_render" in body for status, _, body in results)
    # 30 requests within one or two 0.3 s renders: a handful of renders, not 30.
    assert collector.collects <= 4
    assert len({body for _, _, body in results}) <= collector.collects


def test_different_formats_are_rendered_separately(
    slow_server: tuple[str, SlowCollector],
) -> None:
    url, _ = slow_server
    openmetrics = "application/openmetrics-text; version=1.0.0"
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda i: fetch(url, openmetrics if i % 2 else None), range(10)))
    for i, (status, content_type, body) in enumerate(results):
        assert status == 200
        if i % 2:
            assert content_type.startswith("application/openmetrics-text")
            assert body.rstrip().endswith("# EOF")
        else:
            assert content_type.startswith("text/plain")
            assert "# EOF" not in body


def test_a_failed_render_does_not_fail_the_requests_waiting_for_it() -> None:
    started = threading.Event()
    release = threading.Event()
    calls: list[int] = []

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        calls.append(1)
        if len(calls) == 1:
            started.set()
            release.wait(5)
            raise RuntimeError("render failed")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    flight = SingleFlight(app)
    statuses: list[str] = []
    errors: list[BaseException] = []

    def request() -> None:
        try:
            body = flight({"REQUEST_METHOD": "GET"},
                          lambda status, headers: statuses.append(status))
            assert b"".join(body) == b"ok"
        except BaseException as exc:
            errors.append(exc)

    leader = threading.Thread(target=request)
    leader.start()
    assert started.wait(5)
    follower = threading.Thread(target=request)
    follower.start()
    time.sleep(0.1)  # the follower is now waiting on the leader's render
    release.set()
    leader.join(5)
    follower.join(5)
    assert [type(e) for e in errors] == [RuntimeError]  # the leader's own request fails...
    assert statuses == ["200 OK"]  # ...the follower rendered for itself
    assert len(calls) == 2


def test_idle_connections_are_dropped_and_do_not_block_scrapes() -> None:
    """A client that connects and sends nothing (slowloris) is disconnected after the head
    timeout instead of holding a descriptor forever; scrapes go on meanwhile."""
    import socket

    store = SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])
    server = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0), ExporterRegistry(),
                           store, head_timeout_seconds=0.5)
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
    try:
        assert fetch(url)[0] == 200
        began = time.monotonic()
        for sock in idle:
            assert sock.recv(1) == b""  # closed by the server
        assert time.monotonic() - began < 4.0
    finally:
        for sock in idle:
            sock.close()
        server.stop()
