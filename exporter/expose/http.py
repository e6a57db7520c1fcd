"""The HTTP endpoints: /metrics, /healthz, /readyz (and a small landing page at /).

A thread-per-request WSGI server (prometheus_client's ThreadingWSGIServer) runs in its own
daemon thread. Handlers only read the `SnapshotStore`'s current state, so a scrape never waits
for a poll. /metrics is prometheus_client's own WSGI app, which negotiates OpenMetrics vs text
format from `Accept` and gzip from `Accept-Encoding`. TLS (and client certificates) come from
an exporter-toolkit web config file (`load_web_config`).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import yaml
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from exporter.config import ConfigError
from exporter.expose.collector import SnapshotStore
from exporter.expose.status import CONTENT_SECURITY_POLICY, render_status_page
from exporter.logs import get_logger
from exporter.settings import WebSettings

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

def make_app(
    registry: CollectorRegistry, store: SnapshotStore, config_file: str | None = None
) -> WsgiApp:
    """Route the exporter's paths; everything else is 404.

    `/` is the status page (exporter.expose.status); `config_file` goes into its abort
    command lines.
    """
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/") or "/"
        if path == "/metrics":
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


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))],
    )
    return [data]


class _QuietHandler(WSGIRequestHandler):
    """Request lines go to debug-level structured logs instead of stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        get_logger("exporter.http").debug("http_request", message=format % args)


def _best_family(address: str, port: int) -> tuple[socket.AddressFamily, str]:
    """IPv6 listen addresses ('::') need AF_INET6; the stdlib server defaults to AF_INET."""
    infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


# --------------------------------------------------------------------------- web config
# The Prometheus exporter-toolkit web config file format (the same file node_exporter & co
# take with --web.config.file). Implemented: tls_server_config (cert_file, key_file,
# client_auth_type, client_ca_file, min_version, max_version) and http_server_config.headers.
# basic_auth_users needs bcrypt, which is not a dependency yet: it is rejected, never ignored.

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
_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
             "max_version")
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The parsed web config file; `ssl_context` None means plain HTTP."""

    ssl_context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _resolve(base: Path, name: Any, where: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: expected a file name, got {name!r}")
    path = Path(name) if Path(name).is_absolute() else base / name  # relative to the file
    if not path.is_file():
        raise ConfigError(f"{where}: file not found: {str(path)!r}")
    return str(path)


def load_web_config(path: str) -> WebConfig:
    """Parse and check an exporter-toolkit web config file; ConfigError names the key."""
    prefix = "web.web_config_file"
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{prefix}: cannot read {path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{prefix}: invalid YAML in {path!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping in {path!r}")
    base = Path(path).parent
    for key in data:
        if key == "basic_auth_users":
            raise ConfigError(
                f"{prefix}: basic_auth_users is not supported yet (needs bcrypt); "
                "put an authenticating proxy in front or use client certificates"
            )
        if key not in ("tls_server_config", "http_server_config"):
            raise ConfigError(f"{prefix}: unknown key {key!r}")

    headers: dict[str, str] = {}
    http_cfg = data.get("http_server_config") or {}
    if not isinstance(http_cfg, dict):
        raise ConfigError(f"{prefix}: http_server_config: expected a mapping")
    for key, value in http_cfg.items():
        if key == "headers":
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ConfigError(f"{prefix}: http_server_config.headers: expected a mapping "
                                  "of header name to string value")
            headers.update(value)
        elif key != "http2":  # HTTP/2 is not offered by this server; the flag is moot
            raise ConfigError(f"{prefix}: http_server_config: unknown key {key!r}")

    tls_cfg = data.get("tls_server_config")
    if tls_cfg is None:
        return WebConfig(None, headers)
    where = f"{prefix}: tls_server_config"
    if not isinstance(tls_cfg, dict):
        raise ConfigError(f"{where}: expected a mapping")
    for key in tls_cfg:
        if key not in _TLS_KEYS:
            raise ConfigError(f"{where}: unsupported key {key!r} (supported: "
                              f"{', '.join(_TLS_KEYS)})")
    if "cert_file" not in tls_cfg or "key_file" not in tls_cfg:
        raise ConfigError(f"{where}: cert_file and key_file are required")
    cert = _resolve(base, tls_cfg["cert_file"], f"{where}.cert_file")
    key_file = _resolve(base, tls_cfg["key_file"], f"{where}.key_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = {}
    for name in ("min_version", "max_version"):
        value = tls_cfg.get(name)
        if value is not None and value not in _TLS_VERSIONS:
            raise ConfigError(f"{where}.{name}: expected one of {', '.join(_TLS_VERSIONS)}, "
                              f"got {value!r}")
        versions[name] = value
    context.minimum_version = _TLS_VERSIONS[versions["min_version"] or "TLS12"]
    if versions["max_version"]:
        context.maximum_version = _TLS_VERSIONS[versions["max_version"]]
    try:
        context.load_cert_chain(cert, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{where}: cannot load cert_file/key_file: {exc}") from None
    auth = tls_cfg.get("client_auth_type", "NoClientCert")
    if auth in _UNSUPPORTED_CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: {auth} (a client certificate without "
                          "verification) is not supported; use RequireAndVerifyClientCert")
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: expected one of "
                          f"{', '.join(_CLIENT_AUTH)}, got {auth!r}")
    context.verify_mode = _CLIENT_AUTH[auth]
    if auth != "NoClientCert":
        if "client_ca_file" not in tls_cfg:
            raise ConfigError(f"{where}.client_ca_file: required with client_auth_type {auth}")
        ca = _resolve(base, tls_cfg["client_ca_file"], f"{where}.client_ca_file")
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{where}.client_ca_file: cannot load: {exc}") from None
    return WebConfig(context, headers)


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
        registry: CollectorRegistry,
        store: SnapshotStore,
        config_file: str | None = None,
    ) -> None:
        web_config = load_web_config(web.web_config_file) if web.web_config_file else WebConfig()
        family, address = _best_family(web.listen_address, web.port)
        context = web_config.ssl_context

        class Server(ThreadingWSGIServer):
            address_family = family

            def get_request(self) -> tuple[socket.socket, Any]:
                conn, addr = super().get_request()
                if context is None:
                    return conn, addr
                # Handshake later, on the request's own thread: a slow or silent client must
                # not block the accept loop (and with it every other scrape).
                return context.wrap_socket(conn, server_side=True,
                                           do_handshake_on_connect=False), addr

            def finish_request(self, request: Any, client_address: Any) -> None:
                if isinstance(request, ssl.SSLSocket):
                    request.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)
                    try:
                        request.do_handshake()
                    except (ssl.SSLError, OSError) as exc:
                        get_logger("exporter.http").debug(
                            "tls_handshake_failed", client=str(client_address[0]), error=str(exc)
                        )
                        return
                    request.settimeout(None)
                super().finish_request(request, client_address)

            def handle_error(self, request: Any, client_address: Any) -> None:
                get_logger("exporter.http").debug("http_connection_error", exc_info=True)

        app = _with_headers(make_app(registry, store, config_file), web_config.headers)
        self._server = make_server(address, web.port, app, Server, handler_class=_QuietHandler)
        self.scheme = "https" if context is not None else "http"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http", kwargs={"poll_interval": 0.2},
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def address(self) -> str:
        return str(self._server.server_address[0])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
