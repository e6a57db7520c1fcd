"""The HTTP endpoints: /metrics, /healthz, /readyz (and a small landing page at /).

An event-loop server (exporter.expose.server) runs in its own daemon thread and hands complete
requests to the WSGI app on a few threads. Handlers only read the `SnapshotStore`'s current
state, so a scrape never waits for a poll. /metrics negotiates OpenMetrics vs text format from
`Accept` and gzip from `Accept-Encoding` as prometheus_client's own WSGI app does, renders the
snapshot families once per published state (exporter.expose.render_cache) and shares one render
between concurrent identical scrapes (`SingleFlight`). TLS (and client certificates) and basic
auth (bcrypt hashes, `basic_auth_users`) come from an exporter-toolkit web config file
(parsed once by exporter.webconfig). prometheus_client has no server-side authentication,
so basic auth is a WSGI wrapper (`BasicAuth`) around the whole app.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import resource
import secrets
import socket
import ssl
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import bcrypt
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.errors import ConfigError
from exporter.expose.collector import new_family
from exporter.expose.registry import ExporterRegistry
from exporter.expose.render_cache import SnapshotRenderCache, make_metrics_app
from exporter.expose.server import EventLoopHttpServer, ServerLimits
from exporter.expose.status import CONTENT_SECURITY_POLICY, render_status_page
from exporter.logs import get_logger
from exporter.metrics import spec
from exporter.settings import WebConfigSettings, WebSettings, WebTlsSettings
from exporter.snapshots import SnapshotStore
from exporter.tlsfiles import load_cert_chain
from exporter.webconfig import PREFIX, parse_web_config_file

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

def make_app(
    registry: ExporterRegistry,
    store: SnapshotStore,
    config_file: str | None = None,
    metrics_path: str = "/metrics",
) -> WsgiApp:
    """Route the exporter's paths; everything else is 404.

    `metrics_path` is --web.telemetry-path.

    `/` is the status page (exporter.expose.status); `config_file` goes into its abort
    command lines.
    """
    render_cache = SnapshotRenderCache()
    store.on_change(lambda: render_cache.warm(registry))
    metrics_app = SingleFlight(make_metrics_app(registry, render_cache))

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/") or "/"
        if path == metrics_path:
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            waiting = store.not_ready()
            if waiting:
                return _text(
                    start_response,
                    "503 Service Unavailable",
                    "not ready: no successful poll yet for cluster(s): "
                    + ", ".join(waiting) + "\n",
                )
            return _text(start_response, "200 OK", "ready\n")
        if path == "/":
            states = store.states()
            page = render_status_page(
                {name: st.snapshot for name, st in states.items()},
                errors={name: st.last_error for name, st in states.items()},
                config_file=config_file,
                metrics_path=metrics_path,
            )
            start_response("200 OK", [
                ("Content-Type", "text/html; charset=utf-8"),
                ("Content-Length", str(len(page))),
                ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
                ("X-Content-Type-Options", "nosniff"),
                ("Cache-Control", "no-store"),
            ])
            return [page]
        return _text(start_response, "404 Not Found", "not found\n")

    return app


class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.response: tuple[str, list[tuple[str, str]], bytes] | None = None


class SingleFlight:
    """Concurrent identical /metrics requests share one render.

    Rendering is CPU-bound Python (~35 ms for 1,000 late transactions on one core): 50
    scrapers arriving together would each render the same snapshot, serialized by the GIL, so
    the last waits 50 renders. A request that arrives while an identical one (same method,
    query, Accept, Accept-Encoding) is being rendered waits for that render and gets its bytes
    instead. SingleFlight keeps nothing once a render finished (the snapshot families' bytes are
    reused until the next publish by exporter.expose.render_cache, the rest is rendered afresh),
    so data are never older than the render already under way when a request arrived.
    """

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, ...], _Flight] = {}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        key = tuple(str(environ.get(name, "")) for name in (
            "REQUEST_METHOD", "QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING"))
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if leader:
            try:
                flight.response = self._render(environ)
            finally:
                with self._lock:
                    del self._flights[key]
                flight.done.set()
        else:
            flight.done.wait()
        if flight.response is None:  # the leader failed: render for this request alone
            flight.response = self._render(environ)
        status, headers, body = flight.response
        start_response(status, list(headers))
        return [body]

    def _render(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        captured: list[Any] = []

        def capture(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            captured[:] = [status, headers]
            return lambda _data: None

        body = b"".join(self._app(environ, capture))
        return captured[0], captured[1], body


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))],
    )
    return [data]


LISTEN_BACKLOG = 4096
"""As Go's net package: ask for the most (the kernel caps it at net.core.somaxconn, 4096 by
default since Linux 5.4). A full backlog drops SYNs, which clients retry after 1 s, 3 s, 7 s: a
burst of concurrent scrapers overflowed socketserver's 5 (benchmarks/bench_scrape_load.py), and
a crowd reconnecting in bursts overflowed 128, delaying a scrape by 1 s now and then
(benchmarks/bench_idle_crowd.py)."""
HTTP_HEAD_TIMEOUT_SECONDS = 10.0
"""From accept to a complete request head (TLS handshake included): a client that connects
and sends nothing, or trickles its request, is closed after this long."""
HTTP_REQUEST_DEADLINE_SECONDS = 30.0
"""Whole connection, TLS handshake, request and response included (one request per
connection)."""
MAX_HTTP_CONNECTIONS = 1024
"""Connections open at once (under TLS each holds some 52 KiB of OpenSSL state: a bound on
memory). When full, the connection that has waited longest without sending
a complete request is closed to make room (counted in
kafka_txn_exporter_http_connections_refused_total); only when every open connection has sent
its request is a new one refused (503 on plain HTTP, closed on TLS). Lowered to a quarter of the
process's descriptor limit when that is smaller, so Kafka polling keeps its descriptors."""
STOP_GRACE_SECONDS = 1.0
"""On stop, answers already under way get this long to finish before their connections are
cut (a scrape of a few MB takes milliseconds; a trickling client is not waited for)."""


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as Go programs do at start-up); the
    soft limit in force afterwards (unlimited counts as a large number)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(requested: int, nofile_limit: int) -> int:
    """At most `requested`, and at most a quarter of the descriptor limit."""
    return max(1, min(requested, nofile_limit // 4))


class HttpServerCollector(Collector):
    """The HTTP server's own counters, read on every scrape."""

    def __init__(self, server: EventLoopHttpServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        refused = new_family(spec("kafka_txn_exporter_http_connections_refused_total"))
        assert isinstance(refused, CounterMetricFamily)
        refused.add_metric([], float(self._server.refused_connections))
        yield refused


def _listening_socket(address: str, port: int) -> socket.socket:
    """Bound and listening, IPv6 when the address is ('::' needs AF_INET6)."""
    infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# --------------------------------------------------------------------------- web config
# The exporter-toolkit web config file is parsed once by exporter.webconfig into a
# WebConfigSettings record; here it becomes a TLS context and a basic-auth check.

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The web config made live; `ssl_context` None means plain HTTP."""

    ssl_context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    """user -> bcrypt hash; empty means no authentication."""


def build_ssl_context(tls: WebTlsSettings, where: str = f"{PREFIX}: tls_server_config"
                      ) -> ssl.SSLContext:
    """The server's TLS context; an encrypted key never prompts (exporter.tlsfiles)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS[tls.min_version]
    if tls.max_version:
        context.maximum_version = _TLS_VERSIONS[tls.max_version]
    load_cert_chain(context, tls.cert_file, tls.key_file, tls.key_password, where)
    context.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{where}.client_ca_file: cannot load: {exc}") from None
    return context


def build_web_config(settings: WebConfigSettings) -> WebConfig:
    context = build_ssl_context(settings.tls) if settings.tls is not None else None
    return WebConfig(context, dict(settings.headers), dict(settings.basic_auth_users))


def load_web_config(path: str) -> WebConfig:
    """Parse a web config file and make it live (for callers without loaded settings)."""
    return build_web_config(parse_web_config_file(path))


# --------------------------------------------------------------------------- basic auth

UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})
"""Probes stay open: kubelet's httpGet probes send no credentials, and these answer only
"ok"/"ready" or the names of clusters not polled yet. `/`, `/metrics` and every other path
(a 404 included) need credentials once `basic_auth_users` is set."""
AUTH_CACHE_SIZE = 1024
MAX_CONCURRENT_BCRYPT_CHECKS = 2
"""A flood of wrong passwords costs at most this many cores (bcrypt is deliberately slow)."""
_BCRYPT_MAX_PASSWORD_BYTES = 72
_REALM = 'Basic realm="kafka-txn-exporter", charset="UTF-8"'


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, as Prometheus exporter-toolkit does it.

    bcrypt takes ~50-250 ms per check, too slow for every scrape, so successful checks are
    cached. The cache key is an HMAC (with a random per-process key) of user, password and
    stored hash: neither the password nor a fast unkeyed hash of it is kept in memory. Failed
    checks are never cached. An unknown user is checked against a dummy hash of the same cost
    as a configured user's, so the response time does not tell which user names exist, whatever
    the hashes' costs; bcrypt's own compare is constant-time. With users of several costs, each
    unknown name is given one of the users' costs, picked by a keyed hash of the name (stable
    for the process, in proportion to how many users have each cost, unpredictable from
    outside): an unknown name answers like some known user, always at the same speed.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self._cache_key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._bcrypt_slots = threading.BoundedSemaphore(MAX_CONCURRENT_BCRYPT_CHECKS)
        self._user_costs = sorted(int(h[4:6]) for h in self._users.values()) or [10]
        self._dummy_hashes = {
            cost: bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(cost))
            for cost in set(self._user_costs)
        }

    def _dummy_hash(self, user: str) -> bytes:
        """The dummy hash an unknown `user` is checked against (see the class docstring)."""
        pick = hmac.new(self._cache_key, b"dummy\0" + user.encode("utf-8"), hashlib.sha256)
        index = int.from_bytes(pick.digest()[:8], "big") % len(self._user_costs)
        return self._dummy_hashes[self._user_costs[index]]

    def check(self, user: str, password: str) -> bool:
        """True when `password` matches the user's bcrypt hash."""
        hashed = self._users.get(user)
        secret = password.encode("utf-8")
        digest = hmac.new(
            self._cache_key,
            b"\0".join((user.encode("utf-8"), secret, hashed or b"")),
            hashlib.sha256,
        ).digest()
        if hashed is not None:
            with self._lock:
                if digest in self._cache:
                    self._cache.move_to_end(digest)
                    return True
        if len(secret) > _BCRYPT_MAX_PASSWORD_BYTES:
            return False  # bcrypt ignores bytes past 72: refuse rather than truncate
        with self._bcrypt_slots:
            ok = bcrypt.checkpw(secret, hashed if hashed is not None else self._dummy_hash(user))
        if not ok or hashed is None:
            return False
        with self._lock:
            self._cache[digest] = None
            if len(self._cache) > AUTH_CACHE_SIZE:
                self._cache.popitem(last=False)
        return True

    def authorized(self, header: str | None) -> bool:
        """Check an `Authorization` header value; anything malformed is simply unauthorized."""
        if not header:
            return False
        scheme, _, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(":")
        return bool(sep) and self.check(user, password)

    def wrap(self, app: WsgiApp) -> WsgiApp:
        def wrapped(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/") or "/"
            if path in UNAUTHENTICATED_PATHS or self.authorized(
                environ.get("HTTP_AUTHORIZATION")
            ):
                return app(environ, start_response)
            get_logger("exporter.http").debug(
                "http_unauthorized", client=str(environ.get("REMOTE_ADDR", "")), path=path
            )
            body = b"Unauthorized\n"
            start_response("401 Unauthorized", [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("WWW-Authenticate", _REALM),
            ])
            return [body]

        return wrapped


def _with_headers(app: WsgiApp, headers: Mapping[str, str]) -> WsgiApp:
    if not headers:
        return app

    def wrapped(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, response_headers: list[tuple[str, str]], *exc: Any) -> Any:
            return start_response(status, [*response_headers, *headers.items()], *exc)

        return app(environ, start)

    return wrapped


class MetricsServer:
    """The HTTP(S) server in a daemon thread; `port` is the bound port (useful with port 0)."""

    def __init__(
        self,
        web: WebSettings,
        registry: ExporterRegistry,
        store: SnapshotStore,
        config_file: str | None = None,
        *,
        max_connections: int | None = None,
        request_deadline_seconds: float | None = None,
        head_timeout_seconds: float | None = None,
    ) -> None:
        parsed = web.web_config
        if parsed is None and web.web_config_file:  # settings built by hand, not loaded
            parsed = parse_web_config_file(web.web_config_file)
        web_config = build_web_config(parsed) if parsed is not None else WebConfig()
        context = web_config.ssl_context
        cap = connection_cap(MAX_HTTP_CONNECTIONS if max_connections is None
                             else max_connections, raise_nofile_limit())
        limits = ServerLimits(
            max_connections=cap,
            head_timeout_seconds=HTTP_HEAD_TIMEOUT_SECONDS if head_timeout_seconds is None
            else head_timeout_seconds,
            request_deadline_seconds=HTTP_REQUEST_DEADLINE_SECONDS
            if request_deadline_seconds is None else request_deadline_seconds,
            stop_grace_seconds=STOP_GRACE_SECONDS,
            listen_backlog=LISTEN_BACKLOG,
        )
        app = make_app(registry, store, config_file, web.telemetry_path)
        if web_config.basic_auth_users:
            app = BasicAuth(web_config.basic_auth_users).wrap(app)
            if context is None:
                get_logger("exporter.http").warning(
                    "basic_auth_without_tls",
                    hint="passwords cross the network in clear text; add tls_server_config",
                )
        app = _with_headers(app, web_config.headers)
        self.basic_auth = bool(web_config.basic_auth_users)
        self._server = EventLoopHttpServer(
            _listening_socket(web.listen_address, web.port), app, limits, context)
        self.max_connections = cap
        registry.register(HttpServerCollector(self._server))
        self.scheme = "https" if context is not None else "http"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return str(self._server.server_address[0])

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()
