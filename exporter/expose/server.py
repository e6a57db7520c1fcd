"""The HTTP/1.x server under /metrics: one event loop for every connection, a few threads for
the answers.

Why not a thread per connection: a client that connects and sends nothing (or a request line a
byte at a time, or half a TLS handshake) would hold a thread, so a cap on threads is a cap that
idle clients fill, and then every scrape is refused. Here a connection that has not sent a
whole request costs a socket and a coroutine; only complete requests reach the WSGI app, on a
small thread pool. When the connection cap is reached, the connection that has waited longest
without sending a complete request is closed to make room (counted as refused): a scraper sends
its request at once, so it is never the one closed, however many idle clients there are. Per
client address limits were not chosen: Prometheus often shares an address (NAT, a sidecar, a
node) with other clients, and such a limit can lock out the scraper itself.

One request per connection (`Connection: close`), as Prometheus scrapes. Every connection has
a deadline for its request head (TLS handshake included) and one for the whole exchange.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any
from urllib.parse import unquote

from exporter.logs import get_logger

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

MAX_REQUEST_HEAD_BYTES = 16 * 1024
"""Request line and headers together; more is answered 431."""
MAX_REQUEST_BODY_BYTES = 64 * 1024
"""No endpoint takes a body; a small one is read and ignored, a larger one answered 413."""
APP_THREADS = 16
"""Requests handed to the WSGI app at once; the rest wait in the event loop. Rendering is
CPU-bound Python, so more would not answer sooner; fewer would make identical scrapes that wait
for one shared render (SingleFlight) hold every thread."""
_REFUSED_PLAIN = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 29\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    b"too many concurrent requests\n"
)
_STATUS_TEXT = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large",
                431: "Request Header Fields Too Large", 505: "HTTP Version Not Supported"}


class _Protocol(asyncio.StreamReaderProtocol):
    """StreamReaderProtocol that, for TLS, reads nothing until the handshake starts: the
    ClientHello must reach the TLS layer (start_tls), not the plain stream's buffer."""

    def __init__(self, reader: asyncio.StreamReader, accepted: Any, *, pause: bool) -> None:
        super().__init__(reader, accepted)
        self._pause = pause

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._pause and isinstance(transport, asyncio.ReadTransport):
            transport.pause_reading()


class _BadRequest(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass(eq=False)
class _Connection:
    """One accepted connection; `waiting` until its request head is complete."""

    writer: asyncio.StreamWriter
    accepted: float
    task: asyncio.Task[None] | None = None
    waiting: bool = True
    peer: str = ""


@dataclass
class ServerLimits:
    max_connections: int
    """Connections open at once (idle ones are closed first to make room)."""
    head_timeout_seconds: float
    """From accept to the end of the request head, TLS handshake included."""
    request_deadline_seconds: float
    """From accept to the last byte of the answer."""
    stop_grace_seconds: float = 1.0


@dataclass
class _Counters:
    refused: int = 0
    accept_errors: int = 0
    """Pauses of the accept loop after accept() failed for lack of descriptors or memory."""
    last_accept_error: float = -1.0
    open: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class EventLoopHttpServer:
    """Serves `app` on a bound listening socket from a thread of its own (start/stop)."""

    def __init__(
        self,
        listen: socket.socket,
        app: WsgiApp,
        limits: ServerLimits,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._listen = listen
        self._app = app
        self.limits = limits
        self._ssl = ssl_context
        self._counters = _Counters()
        self._connections: dict[_Connection, None] = {}  # insertion order = accept order
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._pool = ThreadPoolExecutor(max_workers=APP_THREADS, thread_name_prefix="http-app")
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._started = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self.server_address: tuple[str, int] = listen.getsockname()[:2]

    # -- what the collector and tests read ---------------------------------------------
    @property
    def refused_connections(self) -> int:
        return self._counters.refused

    @property
    def accept_errors(self) -> int:
        return self._counters.accept_errors

    def open_connections(self) -> int:
        return self._counters.open

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        tls = self._ssl is not None

        def protocol() -> asyncio.StreamReaderProtocol:
            reader = asyncio.StreamReader(limit=MAX_REQUEST_HEAD_BYTES)
            return _Protocol(reader, self._accepted, pause=tls)

        async def begin() -> None:
            self._server = await self._loop.create_server(protocol, sock=self._listen)

        self._loop.run_until_complete(begin())
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def stop(self) -> None:
        """No new connection; answers under way get the grace period; then all is closed."""
        if not self._thread.is_alive():
            self._listen.close()
            self._pool.shutdown(wait=False)
            return
        done = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            done.result(timeout=self.limits.stop_grace_seconds + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + self.limits.stop_grace_seconds
        while any(not c.waiting for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self._connections):
            _abort(connection.writer)
            if connection.task is not None:
                connection.task.cancel()
        await asyncio.sleep(0)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio reports a failed accept() (out of descriptors or memory) here, and stops
        accepting for a second: count each such pause once (one wake-up reports every
        connection waiting in the backlog), log the 1st, 2nd, 4th, 8th ... pause."""
        message = str(context.get("message", ""))
        if "accept" not in message:
            get_logger("exporter.http").debug("http_loop_error", message=message)
            return
        now = time.monotonic()
        with self._counters.lock:
            if now - self._counters.last_accept_error < 0.5:
                return
            self._counters.last_accept_error = now
            self._counters.accept_errors += 1
            errors = self._counters.accept_errors
        if errors & (errors - 1) == 0:
            exc = context.get("exception")
            get_logger("exporter.http").warning(
                "http_accept_failed", error=getattr(exc, "strerror", None) or str(exc),
                accept_errors=errors, open_connections=self._counters.open,
                retry_in_seconds=1.0,
            )

    # -- one connection ------------------------------------------------------------------
    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer=writer, accepted=time.monotonic(),
                                 task=asyncio.current_task(), peer=_peer(writer))
        if not self._admit(connection):
            with self._counters.lock:
                self._counters.refused += 1
            if self._ssl is None:
                writer.write(_REFUSED_PLAIN)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.drain(), 1.0)
            _abort(writer)
            return
        try:
            await asyncio.wait_for(self._exchange(connection, reader),
                                   self.limits.request_deadline_seconds)
        except (TimeoutError, asyncio.CancelledError, ConnectionError, OSError, ssl.SSLError):
            pass
        except Exception:
            get_logger("exporter.http").debug("http_connection_error", exc_info=True)
        finally:
            self._connections.pop(connection, None)
            with self._counters.lock:
                self._counters.open = len(self._connections)
            _abort(connection.writer)

    def _admit(self, connection: _Connection) -> bool:
        """Room for one more, closing the longest-waiting idle connection when full."""
        if len(self._connections) >= self.limits.max_connections:
            idle = next((c for c in self._connections if c.waiting), None)
            if idle is None:
                return False
            self._connections.pop(idle)
            with self._counters.lock:
                self._counters.refused += 1
            _abort(idle.writer)
            if idle.task is not None:
                idle.task.cancel()
        self._connections[connection] = None
        with self._counters.lock:
            self._counters.open = len(self._connections)
        return True

    async def _exchange(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        head_left = self.limits.head_timeout_seconds
        if self._ssl is not None:
            started = time.monotonic()
            try:
                await connection.writer.start_tls(self._ssl, ssl_handshake_timeout=head_left)
            except (ssl.SSLError, OSError, TimeoutError) as exc:
                get_logger("exporter.http").debug(
                    "tls_handshake_failed", client=connection.peer, error=str(exc))
                return
            head_left -= time.monotonic() - started
        try:
            environ = await asyncio.wait_for(self._read_request(connection, reader),
                                             max(0.01, head_left))
        except TimeoutError:
            return  # nothing complete in time: no answer is owed
        except _BadRequest as bad:
            await self._send(connection.writer, _error_response(bad.status), head=False)
            return
        connection.waiting = False
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self._pool, _call_app, self._app, environ)
        await self._send(connection.writer, response, head=environ["REQUEST_METHOD"] == "HEAD")
        get_logger("exporter.http").debug(
            "http_request", client=connection.peer, method=environ["REQUEST_METHOD"],
            path=environ["PATH_INFO"], status=response[0])

    async def _read_request(
        self, connection: _Connection, reader: asyncio.StreamReader
    ) -> dict[str, Any]:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise _BadRequest(431) from None
        except asyncio.IncompleteReadError:
            raise ConnectionResetError from None
        parts = line.decode("latin-1").strip().split()
        if len(parts) != 3:
            raise _BadRequest(400)  # HTTP/0.9 ("GET /") or garbage: answered at once
        method, target, version = parts
        if not version.startswith("HTTP/1."):
            raise _BadRequest(505 if version.startswith("HTTP/") else 400)
        headers: list[tuple[str, str]] = []
        size = len(line)
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                raise _BadRequest(431) from None
            except asyncio.IncompleteReadError:
                raise ConnectionResetError from None
            size += len(line)
            if size > MAX_REQUEST_HEAD_BYTES:
                raise _BadRequest(431)
            if line in (b"\r\n", b"\n"):
                break
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon or not name or name != name.strip():
                raise _BadRequest(400)
            headers.append((name, value.strip()))
        environ = self._environ(connection, method, target, version, headers)
        length = environ.get("CONTENT_LENGTH") or "0"
        if not length.isdigit():
            raise _BadRequest(400)
        if int(length) > MAX_REQUEST_BODY_BYTES:
            raise _BadRequest(413)
        body = await reader.readexactly(int(length)) if int(length) else b""
        environ["wsgi.input"] = BytesIO(body)
        return environ

    def _environ(
        self, connection: _Connection, method: str, target: str, version: str,
        headers: list[tuple[str, str]],
    ) -> dict[str, Any]:
        path, _, query = target.partition("?")
        host, port = self.server_address
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method.upper(),
            "PATH_INFO": unquote(path, "latin-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": host,
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": version,
            "REMOTE_ADDR": connection.peer,
            "SCRIPT_NAME": "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self._ssl is not None else "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in headers:
            key = name.upper().replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value
            else:
                http_key = "HTTP_" + key
                environ[http_key] = f"{environ[http_key]},{value}" if http_key in environ \
                    else value
        return environ

    async def _send(
        self, writer: asyncio.StreamWriter, response: tuple[str, list[tuple[str, str]], bytes],
        *, head: bool,
    ) -> None:
        status, headers, body = response
        names = {name.lower() for name, _ in headers}
        lines = [f"HTTP/1.1 {status}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if "content-length" not in names:
            lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head:
            writer.write(body)
        await writer.drain()
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()


def _call_app(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run the WSGI app on a pool thread; a failure is a 500, never a dropped connection."""
    captured: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
        captured[:] = [status, headers]
        return lambda _data: None

    try:
        chunks = app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return captured[0], list(captured[1]), body
    except Exception:
        get_logger("exporter.http").warning("http_app_failed", exc_info=True)
        return _error_response(500)


def _error_response(status: int) -> tuple[str, list[tuple[str, str]], bytes]:
    text = _STATUS_TEXT.get(status, "Internal Server Error")
    body = f"{text}\n".encode()
    return f"{status} {text}", [("Content-Type", "text/plain; charset=utf-8")], body


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    with contextlib.suppress(Exception):
        transport.abort()
