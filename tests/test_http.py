"""HTTP endpoints on 127.0.0.1:0: /metrics negotiation, /healthz, /readyz."""

from __future__ import annotations

import gzip
import http.client
import re
import socket
import time
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


# ------------------------------------------------------------------ HTTP/1.1 details


def _raw(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """Send `request` as is; everything the server sends until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


@pytest.fixture
def server(store: SnapshotStore) -> Iterator[MetricsServer]:
    srv = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0),
                        build_registry(store), store, idle_timeout_seconds=1.0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("length", [b"\xb9", b"1\xb2", b"\xb3", "\u0661".encode(),
                                    "\uff11".encode(), b"1 1", b"-1", b"0x1", b"+1"],
                         ids=["latin1-superscript-one", "latin1-superscript-two",
                              "latin1-superscript-three", "arabic-indic-utf8", "fullwidth-utf8",
                              "space", "negative", "hex", "plus"])
def test_a_content_length_not_of_ascii_digits_is_answered_400(
    server: MetricsServer, length: bytes
) -> None:
    """Header bytes are read as Latin-1, where the superscripts are digits to str.isdigit()
    (and int() then fails on them): only ASCII digits make a length."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n"
    answer = _raw(server.port, request)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:200]
    assert b"\r\nConnection: close\r\n" in answer


def test_two_different_content_lengths_are_answered_400(server: MetricsServer) -> None:
    answer = _raw(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                               b"Content-Length: 2\r\n\r\nab")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


def test_a_chunked_request_body_is_answered_501_and_closed(server: MetricsServer) -> None:
    """No endpoint takes a body; a chunked one is refused rather than mistaken, on a
    kept-alive connection, for the next request."""
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = _raw(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                               b"chunked\r\n\r\n1c\r\n" + smuggled + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 501 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/metrics",
                                    "HTTP://example.org/metrics?x=1", "http://h"],
                         ids=["own-authority", "other-authority-with-query", "no-path"])
def test_the_absolute_form_of_a_request_target_is_accepted(
    server: MetricsServer, target: str
) -> None:
    """RFC 9112 3.2.2: a server must accept the absolute form (what clients send to a proxy)."""
    url = target.format(port=server.port)
    answer = _raw(server.port, f"GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                  .encode())
    if url.endswith("/metrics") or "/metrics?" in url:
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
        assert b"kafka_txn_exporter_up" in answer
    else:  # no path is "/": the status page
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
        assert b"<html" in answer.lower()


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/"])
def test_head_is_answered_like_get_without_a_body(server: MetricsServer, path: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("HEAD", path)
        head = conn.getresponse()
        assert head.status == 200
        assert head.read() == b""
        conn.request("GET", path)  # the same connection: HEAD sent no body to misread
        get_ = conn.getresponse()
        body = get_.read()
        assert get_.status == 200 and body
        assert head.getheader("Content-Type") == get_.getheader("Content-Type")
        if path != "/metrics":  # /metrics' process metrics move between two renders
            assert int(head.getheader("Content-Length") or -1) == len(body)
        else:
            assert int(head.getheader("Content-Length") or -1) > 0
    finally:
        conn.close()


def _requests_on_one_connection(conn: http.client.HTTPConnection, n: int) -> list[int]:
    ports: list[int] = []
    for _ in range(n):
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and b"kafka_txn_exporter_up" in resp.read()
        assert resp.getheader("Connection") != "close"
        assert conn.sock is not None
        ports.append(conn.sock.getsockname()[1])
    return ports


def test_keep_alive_serves_many_scrapes_on_one_connection(server: MetricsServer) -> None:
    """Prometheus reuses its connection from scrape to scrape: five scrapes, one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        assert len(set(_requests_on_one_connection(conn, 5))) == 1
    finally:
        conn.close()


def test_keep_alive_over_tls(pki: Path, store: SnapshotStore) -> None:
    cfg = pki / "web.yml"
    cfg.write_text("tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    srv = _tls_server(store, cfg)
    conn = http.client.HTTPSConnection("localhost", srv.port, timeout=5,
                                       context=_client_ctx(pki, False))
    try:
        assert len(set(_requests_on_one_connection(conn, 3))) == 1
    finally:
        conn.close()
        srv.stop()


def test_pipelined_requests_are_answered_in_order(server: MetricsServer) -> None:
    answer = _raw(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert statuses == [b"200", b"404", b"200"], answer


@pytest.mark.parametrize(("request_", "closed"), [
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", True),
    (b"GET /healthz HTTP/1.0\r\n\r\n", True),
    (b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", False),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", False),
], ids=["1.1-close", "1.0", "1.0-keep-alive", "1.1"])
def test_the_connection_closes_when_the_client_asks_or_after_the_idle_timeout(
    server: MetricsServer, request_: bytes, closed: bool
) -> None:
    """The server fixture's idle timeout is 1 s: a kept-alive connection is closed by the
    server once idle that long (well within the 10 s bound here)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request_)
        answer = b""
        while not answer.endswith(b"ok\n"):
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert (b"\r\nConnection: close\r\n" in answer) == closed
        if request_.startswith(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive"):
            assert b"\r\nConnection: keep-alive\r\n" in answer
        began = time.monotonic()
        assert sock.recv(1) == b""  # closed: at once, or once idle for 1 s
        waited = time.monotonic() - began
    assert waited < 0.5 if closed else 0.8 <= waited < 10.0
