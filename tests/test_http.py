"""HTTP endpoints on 127.0.0.1:0: /metrics negotiation, /healthz, /readyz."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from exporter_factories import broker, snapshot

from exporter.expose.http import MetricsServer
from exporter.expose.registry import build_registry
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore


@pytest.fixture
def store() -> SnapshotStore:
    return SnapshotStore([
        ClusterSettings(name="c1", bootstrap_servers=("h:1",)),
        ClusterSettings(name="c2", bootstrap_servers=("h:1",)),
    ])


@pytest.fixture
def base_url(store: SnapshotStore) -> Iterator[str]:
    server = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0),
                           build_registry(store), store)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_healthz_is_200(base_url: str) -> None:
    status, _, body = get(base_url + "/healthz")
    assert (status, body) == (200, b"ok\n")


def test_readyz_503_until_every_cluster_polled_ok(base_url: str, store: SnapshotStore) -> None:
    status, _, body = get(base_url + "/readyz")
    assert status == 503
    assert b"c1, c2" in body
    store.publish(snapshot("c1", brokers=[broker(1)]))
    status, _, body = get(base_url + "/readyz")
    assert status == 503
    assert b"c2" in body and b"c1" not in body
    store.publish(snapshot("c2", up=False))  # a poll that reached nothing is not success
    assert get(base_url + "/readyz")[0] == 503
    store.publish(snapshot("c2", brokers=[broker(1)]))
    status, _, body = get(base_url + "/readyz")
    assert (status, body) == (200, b"ready\n")


def test_metrics_text_format(base_url: str, store: SnapshotStore) -> None:
    store.publish(snapshot("c1", brokers=[broker(1)]))
    status, headers, body = get(base_url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert 'kafka_txn_exporter_up{cluster="c1"} 1.0' in text
    assert 'kafka_txn_exporter_up{cluster="c2"} 0.0' in text
    assert "process_cpu_seconds_total" in text or "python_info" in text


def test_metrics_gzip_and_openmetrics_negotiation(base_url: str) -> None:
    status, headers, body = get(base_url + "/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("Content-Encoding") == "gzip"
    assert b"kafka_txn_exporter_build_info" in gzip.decompress(body)
    status, headers, body = get(
        base_url + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_unknown_path_is_404(base_url: str) -> None:
    assert get(base_url + "/nope")[0] == 404


def test_status_page_at_root(base_url: str, store: SnapshotStore) -> None:
    from exporter_factories import late, open_txn

    store.publish(snapshot("c1", brokers=[broker(1, late_=1, hanging=1)],
                           late_transactions=[late(open_txn("pay<ments", 3, start_offset=77))]))
    store.record_failure("c2", "ConnectionError: refused", 0.1)
    status, headers, body = get(base_url + "/")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    page = body.decode()
    assert 'data-cluster="c1"' in page and 'data-cluster="c2"' in page
    assert "ConnectionError: refused" in page
    assert "pay&lt;ments" in page and "pay<ments" not in page  # escaped
    assert "--start-offset 77" in page


# ------------------------------------------------------------------ TLS via the web config file

import ssl  # noqa: E402
from pathlib import Path  # noqa: E402

from security.pki import issue  # noqa: E402

from exporter.config import ConfigError  # noqa: E402
from exporter.expose.http import load_web_config  # noqa: E402


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = issue(tmp_path, "ca", None, ca=True)
    issue(tmp_path, "server", ca, dns=("localhost",))
    issue(tmp_path, "client", ca, dns=("localhost",))
    return tmp_path


def _tls_server(store: SnapshotStore, web_config: Path) -> MetricsServer:
    server = MetricsServer(
        WebSettings(listen_address="127.0.0.1", port=0, web_config_file=str(web_config)),
        build_registry(store), store)
    server.start()
    return server


def _client_ctx(pki: Path, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if with_cert:
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    return ctx


def test_tls_web_config_serves_https_with_extra_headers(pki: Path, store: SnapshotStore) -> None:
    cfg = pki / "web.yml"
    cfg.write_text("tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
                   "http_server_config: {headers: {X-Frame-Options: deny}}\n")
    server = _tls_server(store, cfg)
    try:
        assert server.scheme == "https"
        url = f"https://localhost:{server.port}/healthz"
        with urllib.request.urlopen(url, context=_client_ctx(pki, False), timeout=5) as resp:
            assert resp.status == 200 and resp.headers["X-Frame-Options"] == "deny"
        # a plaintext client gets no HTTP answer, and does not block the next TLS client
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=2)
        with urllib.request.urlopen(url, context=_client_ctx(pki, False), timeout=5) as resp:
            assert resp.status == 200
    finally:
        server.stop()


def test_tls_client_certificate_required(pki: Path, store: SnapshotStore) -> None:
    cfg = pki / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   "  client_auth_type: RequireAndVerifyClientCert\n"
                   "  client_ca_file: ca.crt\n  min_version: TLS13\n")
    server = _tls_server(store, cfg)
    try:
        url = f"https://localhost:{server.port}/healthz"
        with urllib.request.urlopen(url, context=_client_ctx(pki, True), timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, context=_client_ctx(pki, False), timeout=5).read()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("basic_auth_users: {admin: $2y$10$abc}", "basic_auth_users.admin: expected a bcrypt hash"),
        ("tls_server_config: {cert_file: server.crt}", "cert_file and key_file are required"),
        ("tls_server_config: {cert_file: nope.crt, key_file: server.key}",
         "tls_server_config.cert_file: file not found"),
        ("tls_server_config: {cert_file: server.crt, key_file: client.key}",
         "tls_server_config: cannot load cert_file/key_file"),
        ("tls_server_config: {cert_file: server.crt, key_file: server.key, "
         "client_auth_type: RequireAndVerifyClientCert}", "client_ca_file: required"),
        ("tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: TLS9}",
         "tls_server_config.min_version: expected one of"),
        ("tls_server_config: {cert_file: server.crt, key_file: server.key, cipher_suites: []}",
         "unsupported key 'cipher_suites'"),
        ("tls_config: {}", "unknown key 'tls_config'"),
    ],
)
def test_bad_web_config_names_the_key(pki: Path, text: str, expected: str) -> None:
    cfg = pki / "web.yml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_web_config(str(cfg))
    assert str(info.value).startswith("web.web_config_file: ")
    assert expected in str(info.value)


class _BigCollector:
    """About 3 MB of exposition: far more than one socket buffer or one TLS record."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("big_series", "many series", labels=["i"])
        for i in range(60_000):
            family.add_metric([f"{i:040d}"], float(i))
        yield family


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_large_answer_arrives_whole(pki: Path, store: SnapshotStore, tls: bool) -> None:
    """The connection is closed (not lingered on) after the answer: every byte must have left
    first, over plain TCP and TLS alike."""
    cfg = pki / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    registry = build_registry(store)
    registry.register(_BigCollector())  # type: ignore[arg-type]
    server = MetricsServer(
        WebSettings(listen_address="127.0.0.1", port=0, web_config_file=str(cfg) if tls else None),
        registry, store)
    server.start()
    try:
        url = f"{'https' if tls else 'http'}://localhost:{server.port}/metrics"
        context = _client_ctx(pki, with_cert=False) if tls else None
        with urllib.request.urlopen(url, timeout=30, context=context) as resp:
            body = resp.read()
            assert len(body) == int(resp.headers["Content-Length"]) > 3_000_000
        assert body.count(b"big_series{") == 60_000
    finally:
        server.stop()
