"""The HTTP endpoints: /metrics, /healthz, /readyz (and a small landing page at /).

An event-loop server (exporter.expose.server) runs in its own daemon thread and hands complete
requests to the WSGI app on a few threads. Handlers only read the `SnapshotStore`'s current
state, so a scrape never waits for a poll. /metrics negotiates OpenMetrics vs text format from
`Accept` and gzip from `Accept-Encoding` as prometheus_client's own WSGI app does, renders the
snapshot families once per published state (exporter.expose.render_cache) and shares one render
between concurrent identical scrapes (`SingleFlight`). TLS (and client certificates) and basic
auth (bcrypt hashes, `basic_auth_users`) come from an exporter-toolkit web config file
(parsed once by exporter.webconfig). prometheus_client has no server-side authentication,
so basic auth (`BasicAuth`) is a gate the server runs on its event loop before the app: a
request whose credentials were verified before passes at once, and the bcrypt checks run on a
thread of their own, one at a time, so password guessing never takes the app's threads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import resource
import secrets
import socket
import ssl
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import bcrypt
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.errors import ConfigError
from exporter.expose.collector import new_family
from exporter.expose.registry import ExporterRegistry
from exporter.expose.render_cache import SnapshotRenderCache, make_metrics_app
from exporter.expose.server import EventLoopHttpServer, Response, ServerLimits
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
    command lines. HEAD is answered as GET (the server sends the head only).
    """
    render_cache = SnapshotRenderCache()
    store.on_change(lambda cluster: render_cache.warm(registry, cluster))
    metrics_app = SingleFlight(make_metrics_app(registry, render_cache))

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/") or "/"
        if path == metrics_path:
            if environ.get("REQUEST_METHOD") == "HEAD":  # prometheus_client answers 405
                environ = {**environ, "REQUEST_METHOD": "GET"}
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
"""One request, from accept (TLS handshake included) or, on a kept-alive connection, from its
first byte, to the last byte of its answer."""
HTTP_IDLE_TIMEOUT_SECONDS = 150.0
"""How long a kept-alive connection waits for its next request: longer than Prometheus'
usual scrape intervals (1 min by default, 2 min at most in common setups), so a scraper keeps
its connection. An idle connection holds no thread and is the first closed when the
connection cap is reached."""
MAX_HTTP_CONNECTIONS = 1024
"""Connections open at once (under TLS each one past its ClientHello holds some 52 KiB of
OpenSSL state: a bound on memory). When full, the oldest connection whose first flight is not
whole yet is closed to make room, else the one that has waited longest without sending a
complete request (counted in kafka_txn_exporter_http_connections_refused_total); only when
every open connection has sent its request is a new one refused (503 on plain HTTP, closed on
TLS). Lowered to a quarter of the process's descriptor limit when that is smaller, so Kafka
polling keeps its descriptors."""
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

    def __init__(self, server: EventLoopHttpServer, auth: BasicAuth | None = None) -> None:
        self._server = server
        self._auth = auth

    def collect(self) -> Iterator[Metric]:
        refused = new_family(spec("kafka_txn_exporter_http_connections_refused_total"))
        assert isinstance(refused, CounterMetricFamily)
        refused.add_metric([], float(self._server.refused_connections))
        yield refused
        if self._auth is not None:
            failures = new_family(spec("kafka_txn_exporter_http_auth_failures_total"))
            assert isinstance(failures, CounterMetricFamily)
            counts = self._auth.failures()
            for reason in AUTH_FAILURE_REASONS:
                failures.add_metric([reason], float(counts[reason]))
            yield failures


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
MAX_CONCURRENT_BCRYPT_CHECKS = 1
"""bcrypt is deliberately slow (~50-250 ms of a core per check): checks run one at a time on
a thread of their own, as exporter-toolkit serialises them, so a flood of wrong passwords
costs at most one core and leaves the others to polling and rendering."""
MAX_PENDING_BCRYPT_CHECKS = 64
"""Checks waiting for the bcrypt thread. When full, the client address with the most checks
waiting gives one up (its oldest, whose client may have given up already), answered 503
unchecked: a flood from some addresses never keeps another address's check out."""
AUTH_FAILURE_REASONS = ("missing", "wrong", "not_checked")
"""Why a request was refused (kafka_txn_exporter_http_auth_failures_total's `reason`): no
usable basic credentials; credentials bcrypt (or the 72-byte bound) refused; too many checks
waiting (503)."""
_BCRYPT_MAX_PASSWORD_BYTES = 72
_REALM = 'Basic realm="kafka-txn-exporter", charset="UTF-8"'
_UNAUTHORIZED_BODY = b"Unauthorized\n"
_BUSY_BODY = b"too many password checks waiting; retry\n"


def _unauthorized() -> Response:
    return "401 Unauthorized", [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(_UNAUTHORIZED_BODY))),
        ("WWW-Authenticate", _REALM),
    ], _UNAUTHORIZED_BODY


def _busy() -> Response:
    return "503 Service Unavailable", [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(_BUSY_BODY))),
        ("Retry-After", "1"),
    ], _BUSY_BODY


def _credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic` value; None when absent or malformed."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


@dataclass(slots=True)
class _PendingCheck:
    secret: bytes
    hashed: bytes
    verdict: asyncio.Future[bool | None]


class _FairBcryptQueue:
    """bcrypt checks waiting for the one bcrypt thread, taken round robin over client
    addresses (each address's own checks in arrival order).

    A guesser's checks wait their turn among its own: a client from another address waits at
    most one check per address with checks waiting, not behind the whole flood. Ordering, not
    a limit per address: a scraper that shares its address with others (NAT, a sidecar) is not
    locked out, it waits behind its own address's checks. The queue lives on the server's
    event loop; only bcrypt runs elsewhere.
    """

    def __init__(self, run: Callable[[bytes, bytes], bool], limit: int) -> None:
        self._run = run
        self._limit = limit
        self._lanes: OrderedDict[str, deque[_PendingCheck]] = OrderedDict()
        self._pending = 0
        self._worker: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="http-bcrypt")

    async def check(self, peer: str, secret: bytes, hashed: bytes) -> bool | None:
        """bcrypt's verdict; None when the check was given up for room (not checked)."""
        loop = asyncio.get_running_loop()
        if self._pending >= self._limit:
            # Room from the address with the most checks waiting: its oldest check, the one
            # whose client is likeliest to have given up already.
            busiest, lane = max(self._lanes.items(), key=lambda item: len(item[1]))
            victim = lane.popleft()
            self._pending -= 1
            if not lane:
                del self._lanes[busiest]
            if not victim.verdict.done():
                victim.verdict.set_result(None)
        verdict: asyncio.Future[bool | None] = loop.create_future()
        self._lanes.setdefault(peer, deque()).append(_PendingCheck(secret, hashed, verdict))
        self._pending += 1
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        return await verdict

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._lanes:
            peer, lane = next(iter(self._lanes.items()))
            job = lane.popleft()
            self._pending -= 1
            if lane:
                self._lanes.move_to_end(peer)
            else:
                del self._lanes[peer]
            if job.verdict.done():  # the client went away (or its deadline passed)
                continue
            try:
                ok = await loop.run_in_executor(self._pool, self._run, job.secret, job.hashed)
            except Exception:
                ok = False
            if not job.verdict.done():
                job.verdict.set_result(ok)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, as Prometheus exporter-toolkit does it.

    bcrypt takes ~50-250 ms per check, too slow for every scrape, so successful checks are
    cached. The cache key is an HMAC (with a random per-process key) of user, password and
    stored hash: neither the password nor a fast unkeyed hash of it is kept in memory. Failed
    checks are never cached, so wrong guesses cannot push a verified scraper out of the cache.
    An unknown user is checked against a dummy hash of the same cost
    as a configured user's, so the response time does not tell which user names exist, whatever
    the hashes' costs; bcrypt's own compare is constant-time. With users of several costs, each
    unknown name is given one of the users' costs, picked by a keyed hash of the name (stable
    for the process, in proportion to how many users have each cost, unpredictable from
    outside): an unknown name answers like some known user, always at the same speed.

    On the server (`gate`) a cached success passes on the event loop, without waiting for
    anything; every other check waits for the one bcrypt thread in a `_FairBcryptQueue` of
    bounded length. What wrong passwords cost is bounded (one core, MAX_PENDING_BCRYPT_CHECKS
    requests held) and counted (`failures`).
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
        self._queue = _FairBcryptQueue(self._bcrypt, MAX_PENDING_BCRYPT_CHECKS)
        self._failures: Counter[str] = Counter()

    def _dummy_hash(self, user: str) -> bytes:
        """The dummy hash an unknown `user` is checked against (see the class docstring)."""
        pick = hmac.new(self._cache_key, b"dummy\0" + user.encode("utf-8"), hashlib.sha256)
        index = int.from_bytes(pick.digest()[:8], "big") % len(self._user_costs)
        return self._dummy_hashes[self._user_costs[index]]

    def _bcrypt(self, secret: bytes, hashed: bytes) -> bool:
        with self._bcrypt_slots:
            return bool(bcrypt.checkpw(secret, hashed))

    def _lookup(self, user: str, password: str) -> tuple[bytes, bytes, bytes | None, bool]:
        """(secret, cache key, the user's hash or None, whether a success is cached)."""
        hashed = self._users.get(user)
        secret = password.encode("utf-8")
        digest = hmac.new(
            self._cache_key,
            b"\0".join((user.encode("utf-8"), secret, hashed or b"")),
            hashlib.sha256,
        ).digest()
        if hashed is None:
            return secret, digest, None, False
        with self._lock:
            cached = digest in self._cache
            if cached:
                self._cache.move_to_end(digest)
        return secret, digest, hashed, cached

    def _remember(self, digest: bytes) -> None:
        with self._lock:
            self._cache[digest] = None
            if len(self._cache) > AUTH_CACHE_SIZE:
                self._cache.popitem(last=False)

    def check(self, user: str, password: str) -> bool:
        """True when `password` matches the user's bcrypt hash (on the calling thread)."""
        secret, digest, hashed, cached = self._lookup(user, password)
        if cached:
            return True
        if len(secret) > _BCRYPT_MAX_PASSWORD_BYTES:
            return False  # bcrypt ignores bytes past 72: refuse rather than truncate
        ok = self._bcrypt(secret, hashed if hashed is not None else self._dummy_hash(user))
        if not ok or hashed is None:
            return False
        self._remember(digest)
        return True

    def authorized(self, header: str | None) -> bool:
        """Check an `Authorization` header value; anything malformed is simply unauthorized."""
        credentials = _credentials(header)
        return credentials is not None and self.check(*credentials)

    def failures(self) -> Counter[str]:
        """Refused requests so far, by AUTH_FAILURE_REASONS."""
        with self._lock:
            return Counter(self._failures)

    def _refuse(self, reason: str, environ: dict[str, Any], path: str) -> Response:
        with self._lock:
            self._failures[reason] += 1
        get_logger("exporter.http").debug(
            "http_unauthorized", client=str(environ.get("REMOTE_ADDR", "")), path=path,
            reason=reason)
        return _busy() if reason == "not_checked" else _unauthorized()

    async def gate(self, environ: dict[str, Any]) -> Response | None:
        """The server's gate: None lets the request through, else the answer (401, or 503
        when its check was given up for room)."""
        path = environ.get("PATH_INFO", "/") or "/"
        if path in UNAUTHENTICATED_PATHS:
            return None
        credentials = _credentials(environ.get("HTTP_AUTHORIZATION"))
        if credentials is None:
            return self._refuse("missing", environ, path)
        user, password = credentials
        secret, digest, hashed, cached = self._lookup(user, password)
        if cached:
            return None
        if len(secret) > _BCRYPT_MAX_PASSWORD_BYTES:
            return self._refuse("wrong", environ, path)
        verdict = await self._queue.check(
            str(environ.get("REMOTE_ADDR", "")), secret,
            hashed if hashed is not None else self._dummy_hash(user))
        if verdict is None:
            return self._refuse("not_checked", environ, path)
        if not verdict or hashed is None:
            return self._refuse("wrong", environ, path)
        self._remember(digest)
        return None

    def close(self) -> None:
        self._queue.close()


def _with_headers(app: WsgiApp, headers: Mapping[str, str]) -> WsgiApp:
    if not headers:
        return app

    def wrapped(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, response_headers: list[tuple[str, str]], *exc: Any) -> Any:
            return start_response(status, [*response_headers, *headers.items()], *exc)

        return app(environ, start)

    return wrapped


def _gate_with_headers(gate: Callable[[dict[str, Any]], Any], headers: Mapping[str, str]
                       ) -> Callable[[dict[str, Any]], Any]:
    """The configured response headers on the gate's answers too (a 401 included)."""
    if not headers:
        return gate

    async def gated(environ: dict[str, Any]) -> Response | None:
        response: Response | None = await gate(environ)
        if response is None:
            return None
        status, response_headers, body = response
        return status, [*response_headers, *headers.items()], body

    return gated


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
        idle_timeout_seconds: float | None = None,
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
            idle_timeout_seconds=HTTP_IDLE_TIMEOUT_SECONDS if idle_timeout_seconds is None
            else idle_timeout_seconds,
        )
        app = make_app(registry, store, config_file, web.telemetry_path)
        self._auth: BasicAuth | None = None
        gate = None
        if web_config.basic_auth_users:
            self._auth = BasicAuth(web_config.basic_auth_users)
            gate = _gate_with_headers(self._auth.gate, web_config.headers)
            if context is None:
                get_logger("exporter.http").warning(
                    "basic_auth_without_tls",
                    hint="passwords cross the network in clear text; add tls_server_config",
                )
        app = _with_headers(app, web_config.headers)
        self.basic_auth = bool(web_config.basic_auth_users)
        self._server = EventLoopHttpServer(
            _listening_socket(web.listen_address, web.port), app, limits, context, gate)
        self.max_connections = cap
        registry.register(HttpServerCollector(self._server, self._auth))
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
        if self._auth is not None:
            self._auth.close()
