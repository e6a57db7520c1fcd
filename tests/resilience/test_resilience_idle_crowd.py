"""An idle crowd cannot starve the scraper (issue 30 item 3).

1,000 connections that never finish a request -- slowloris (a header line a byte at a time),
half-open TLS handshakes (five bytes of a ClientHello, then nothing) and HTTP/0.9 request lines
-- kept open (re-opened as the server closes them) against the plain and the TLS server, while
a scraper asks /metrics of both every 0.1 s at the server's default limits. Every scrape must be
answered within Prometheus' scrape timeout (the old thread-per-connection server refused them
all; how fast is measured by benchmarks/bench_idle_crowd.py, not here), and the crowd must start
no thread in the server.
"""

from __future__ import annotations

import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from security.pki import issue

from exporter.expose.http import MetricsServer
from exporter.expose.registry import build_registry
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _crowd import Crowd

pytestmark = pytest.mark.slow

CROWD = 1000
RUN_SECONDS = 15.0
SCRAPE_EVERY_SECONDS = 0.1
SCRAPE_TIMEOUT_SECONDS = 10.0
"""Prometheus' default scrape_timeout."""


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[MetricsServer, MetricsServer, Path]]:
    ca = issue(tmp_path, "ca", None, ca=True)
    issue(tmp_path, "server", ca, dns=("localhost",))
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    store = SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])
    registry = build_registry(store)
    plain = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0), registry, store)
    tls = MetricsServer(
        WebSettings(listen_address="127.0.0.1", port=0, web_config_file=str(web)),
        build_registry(store), store)
    plain.start()
    tls.start()
    try:
        yield plain, tls, tmp_path
    finally:
        plain.stop()
        tls.stop()


def _scrape(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_SECONDS, context=context) as resp:
            return resp.status == 200 and b"kafka_txn_exporter_up" in resp.read()
    except OSError:
        return False


def test_a_thousand_idle_connections_do_not_starve_scrapes(
    servers: tuple[MetricsServer, MetricsServer, Path],
) -> None:
    plain, tls, pki = servers
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    threads_before = threading.active_count()
    results: list[tuple[bool, float]] = []
    kinds = [("slowloris", plain.port), ("http09", plain.port),
             ("tls_half_open", tls.port), ("slowloris", tls.port)]
    with Crowd(kinds, CROWD) as crowd:
        time.sleep(1.0)  # the crowd is in
        peak_threads = threading.active_count()
        end = time.monotonic() + RUN_SECONDS
        while time.monotonic() < end:
            for url, ctx in ((f"http://127.0.0.1:{plain.port}/metrics", None),
                             (f"https://localhost:{tls.port}/metrics", context)):
                began = time.monotonic()
                ok = _scrape(url, ctx)
                results.append((ok, time.monotonic() - began))
            peak_threads = max(peak_threads, threading.active_count())
            time.sleep(SCRAPE_EVERY_SECONDS)
        opened, answered_09 = crowd.opened, crowd.answered_09
    assert len(results) >= 50
    failed = [took for ok, took in results if not ok]
    assert not failed, f"{len(failed)} of {len(results)} scrapes failed"
    assert opened >= CROWD
    assert answered_09 > 0  # HTTP/0.9 lines are answered 400 at once, not held
    # The crowd thread is the only one the test adds; the servers start none for the crowd
    # (the app's pool threads already exist after the first scrape).
    assert peak_threads - threads_before <= 1 + 2 * 16
