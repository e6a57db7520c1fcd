"""The HTTP/1.x server under /metrics: one event loop for every connection, a few threads for
the answers.

Why not a thread per connection: a client that connects and sends nothing (or a request line a
byte at a time, or half a TLS handshake) would hold a thread, so a cap on threads is a cap that
idle clients fill, and then every scrape is refused. Here only complete requests reach the
WSGI app, on a small thread pool.

A new connection is held as a bare socket, watched by the event loop, until its first flight
is whole: a complete request head (plain HTTP), a complete TLS record (the ClientHello), or
bytes that can only be answered with an error. Only then does it get a transport, a coroutine
and TLS state. A crowd that connects and sends nothing, or half a head, costs an accept(), a
registration and a close: less than the crowd pays to reconnect, so the server drains the
kernel's accept queue as fast as the crowd fills it, and a scraper's connection does not wait
in that queue behind the crowd (in a first-in first-out queue as long as the crowd, it did:
2,200 reconnecting clients made scrapes take 2.6 s). When the connection cap is reached, the
oldest of those bare connections is closed to make room; only when there is none, the
connection that has waited longest without sending a complete request (a TLS handshake under
way, a kept-alive connection between requests); counted as refused. A scraper sends its
request at once, so it is never the one closed, however many idle clients there are. Per
client address limits were not chosen: Prometheus often shares an address (NAT, a sidecar, a
node) with other clients, and such a limit can lock out the scraper itself.

Connections are kept alive (HTTP/1.1 persistent connections; HTTP/1.0 with `Connection:
keep-alive`): Prometheus reuses its connection from one scrape to the next, so a scrape costs
no TCP or TLS handshake. A connection between two requests is idle like one that has not sent
its first request yet: it is closed after the idle timeout, and first when the cap is reached
(the scraper's client opens a new one). Every request has a deadline for its head (TLS
handshake included on the first) and one for the whole exchange.

An optional `gate` (basic auth) sees each complete request on the event loop before the app:
it answers at once (a cached verdict) or awaits work done elsewhere, so a request it holds
never occupies an app thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any
from urllib.parse import unquote, urlsplit

from exporter.logs import get_logger

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Response = tuple[str, list[tuple[str, str]], bytes]
Gate = Callable[[dict[str, Any]], Awaitable[Response | None]]
"""Sees a complete request on the event loop: None lets it through to the app, a response
answers it instead."""

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
                431: "Request Header Fields Too Large", 501: "Not Implemented",
                505: "HTTP Version Not Supported"}
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
"""ASCII digits only: str.isdigit() also takes other scripts' digits and superscripts."""
ACCEPT_BATCH = 256
"""accept() calls per wake-up of the listening socket, before other connections get a turn."""
SWEEP_SECONDS = 0.25
"""How often bare connections past their head timeout are closed."""
_TLS_HANDSHAKE_RECORD = 0x16
_TLS_RECORD_MAX_BYTES = 5 + 16 * 1024 + 2048
_ACCEPT_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_WAIT: int | None = None
_SERVE = -1
_MAX_EMPTY_LINES = 8
"""Empty lines ignored before a request line (RFC 9112 2.2: a client may send one after a
request's body)."""


class _Stream:
    """A connection's bytes, plain or TLS, with the line reading an HTTP head needs.

    TLS runs on ssl.MemoryBIO in this coroutine rather than through asyncio's TLS transport,
    which allocates a 256 KiB buffer per connection as it is accepted: 1,000 half-open
    handshakes held 600 MiB that way. Here a connection costs what OpenSSL and its own bytes
    need."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 tls: ssl.SSLObject | None) -> None:
        self._reader = reader
        self._writer = writer
        self._tls = tls
        # drain() then waits until the kernel has every byte: the connection is aborted (not
        # lingered on) once the exchange ends, which would drop bytes still buffered here.
        writer.transport.set_write_buffer_limits(0)
        self._outgoing = ssl.MemoryBIO()
        self._incoming = ssl.MemoryBIO()
        self._buffer = bytearray()

    @classmethod
    def wrap(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
             context: ssl.SSLContext | None) -> _Stream:
        stream = cls(reader, writer, None)
        if context is not None:
            stream._tls = context.wrap_bio(stream._incoming, stream._outgoing, server_side=True)
        return stream

    async def handshake(self) -> None:
        assert self._tls is not None
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._pull()
        self._flush()

    def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            self._writer.write(pending)

    async def _pull(self) -> None:
        """Send what TLS has to say, then feed it the peer's next bytes."""
        self._flush()
        await self._writer.drain()
        data = await self._reader.read(16 * 1024)
        if not data:
            raise ConnectionResetError("closed by the client")
        self._incoming.write(data)

    async def _more(self) -> None:
        if self._tls is None:
            data = await self._reader.read(16 * 1024)
            if not data:
                raise ConnectionResetError("closed by the client")
            self._buffer += data
            return
        while True:
            try:
                self._buffer += self._tls.read(16 * 1024)
                return
            except ssl.SSLWantReadError:
                await self._pull()
            except ssl.SSLZeroReturnError:
                raise ConnectionResetError("closed by the client") from None

    async def readline(self, limit: int) -> bytes:
        """One line with its newline; _BadRequest(431) past `limit` bytes without one."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) >= limit:
                raise _BadRequest(431)
            await self._more()

    def feed(self, early: bytes) -> None:
        """Bytes read before this stream existed (the first flight)."""
        if self._tls is None:
            self._buffer += early
        else:
            self._incoming.write(early)

    async def wait_data(self) -> None:
        """Until some bytes of the next request are here (the idle wait of a kept-alive
        connection)."""
        if not self._buffer:
            await self._more()

    async def readexactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            await self._more()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def send(self, data: bytes) -> None:
        if self._tls is None:
            self._writer.write(data)
        else:
            view = memoryview(data)
            while view:
                written = self._tls.write(view[: 64 * 1024])
                view = view[written:]
                self._flush()
        await self._writer.drain()

    async def close_write(self) -> None:
        """TLS close_notify or a TCP FIN, after every byte of the answer."""
        if self._tls is not None:
            with contextlib.suppress(ssl.SSLError):
                self._tls.unwrap()
            self._flush()
            await self._writer.drain()
        elif self._writer.can_write_eof():
            with contextlib.suppress(OSError):
                self._writer.write_eof()


class _BadRequest(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass(eq=False)
class _Connection:
    """One accepted connection: `bare` (a socket the event loop watches) until its first
    flight is whole, then served by a coroutine; `waiting` until a request head is complete
    (and again between two requests of a kept-alive connection)."""

    sock: socket.socket
    accepted: float
    peer: str = ""
    bare: bool = True
    early: bytearray = field(default_factory=bytearray)
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task[None] | None = None
    waiting: bool = True


@dataclass
class ServerLimits:
    max_connections: int
    """Connections open at once (idle ones are closed first to make room)."""
    head_timeout_seconds: float
    """From accept to the end of the request head, TLS handshake included."""
    request_deadline_seconds: float
    """From accept (or, on a kept-alive connection, from the first byte of a request) to the
    last byte of the answer."""
    idle_timeout_seconds: float = 120.0
    """A kept-alive connection waits this long for its next request."""
    stop_grace_seconds: float = 1.0
    listen_backlog: int = 4096


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
        gate: Gate | None = None,
    ) -> None:
        self._listen = listen
        self._app = app
        self._gate = gate
        self._stopping = False
        self.limits = limits
        self._ssl = ssl_context
        self._counters = _Counters()
        self._connections: dict[_Connection, None] = {}  # insertion order = accept order
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._pool = ThreadPoolExecutor(max_workers=APP_THREADS, thread_name_prefix="http-app")
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._started = threading.Event()
        self._accepting = False
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

        self._listen.setblocking(False)
        self._resume_accept()
        self._loop.call_later(SWEEP_SECONDS, self._sweep)
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
        self._stopping = True
        self._pause_accept()
        self._listen.close()
        deadline = time.monotonic() + self.limits.stop_grace_seconds
        while any(not c.waiting for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self._connections):
            self._drop(connection)
        await asyncio.sleep(0)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        get_logger("exporter.http").debug("http_loop_error",
                                          message=str(context.get("message", "")))

    # -- accepting -----------------------------------------------------------------------
    def _resume_accept(self) -> None:
        if not self._accepting and not self._stopping:
            self._loop.add_reader(self._listen.fileno(), self._accept_ready)
            self._accepting = True

    def _pause_accept(self) -> None:
        if self._accepting:
            self._loop.remove_reader(self._listen.fileno())
            self._accepting = False

    def _accept_ready(self) -> None:
        """Take what the kernel has accepted, a batch at a time: each new connection is a bare
        socket until its first flight is whole (`_first_flight`)."""
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _ACCEPT_OUT_OF_RESOURCES:
                    self._accept_failed(exc)
                    return
                continue  # e.g. ECONNABORTED: that client is gone, the next one is not
            sock.setblocking(False)
            peer = str(address[0]) if isinstance(address, tuple) and address else ""
            connection = _Connection(sock=sock, accepted=time.monotonic(), peer=peer)
            if not self._admit(connection):
                with self._counters.lock:
                    self._counters.refused += 1
                if self._ssl is None:
                    with contextlib.suppress(OSError):
                        sock.send(_REFUSED_PLAIN)
                sock.close()
                continue
            self._loop.add_reader(sock.fileno(), self._first_flight, connection)

    def _first_flight(self, connection: _Connection) -> None:
        """A bare connection has bytes: once they make a whole first flight, a coroutine
        serves it."""
        try:
            data = connection.sock.recv(16 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(connection)
            return
        connection.early += data
        verdict = self._first_flight_verdict(connection.early)
        if verdict is _WAIT:
            return
        if verdict != _SERVE:  # an error answer, sent from here: no coroutine for it
            if verdict:
                with contextlib.suppress(OSError):
                    connection.sock.send(_canned(verdict))
            self._drop(connection)
            return
        self._loop.remove_reader(connection.sock.fileno())
        connection.bare = False
        connection.task = self._loop.create_task(self._serve(connection))

    def _first_flight_verdict(self, early: bytearray) -> int | None:
        """_WAIT for more bytes; _SERVE a whole request head or TLS record (or more than a
        head may hold); else the status to answer at once (0: close without a word, as to
        bytes that are not TLS on the TLS port)."""
        if self._ssl is not None:
            if early[0] != _TLS_HANDSHAKE_RECORD:
                return 0
            if len(early) >= _TLS_RECORD_MAX_BYTES:
                return _SERVE
            whole = len(early) >= 5 and len(early) >= 5 + int.from_bytes(early[3:5], "big")
            return _SERVE if whole else _WAIT
        if len(early) >= MAX_REQUEST_HEAD_BYTES or b"\n\r\n" in early or b"\n\n" in early:
            return _SERVE
        line = bytes(early.lstrip(b"\r\n"))
        end = line.find(b"\n")
        if end < 0:
            return _WAIT
        parts = line[:end].split()
        if len(parts) != 3:
            return 400  # HTTP/0.9 ("GET /") or garbage: answered at once
        if not parts[2].startswith(b"HTTP/1."):
            return 505 if parts[2].startswith(b"HTTP/") else 400
        return _WAIT

    def _sweep(self) -> None:
        """Close bare connections whose head timeout has passed (a coroutine has its own)."""
        now = time.monotonic()
        limit = min(self.limits.head_timeout_seconds, self.limits.request_deadline_seconds)
        for connection in [c for c in self._connections if c.bare and now - c.accepted > limit]:
            self._drop(connection)
        if not self._stopping:
            self._loop.call_later(SWEEP_SECONDS, self._sweep)

    def _drop(self, connection: _Connection) -> None:
        """Close a connection in whatever state it is."""
        if self._connections.pop(connection, False) is None:
            with self._counters.lock:
                self._counters.open = len(self._connections)
        if connection.bare:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(connection.sock.fileno())
            connection.sock.close()
            return
        if connection.writer is not None:
            _abort(connection.writer)
        else:
            connection.sock.close()
        if connection.task is not None:
            connection.task.cancel()

    def _accept_failed(self, exc: OSError) -> None:
        """accept() failed for lack of descriptors or memory: stop accepting for a second
        (the backlog keeps the clients) instead of spinning on the failure; count each such
        pause, log the 1st, 2nd, 4th, 8th ... pause."""
        self._pause_accept()
        self._loop.call_later(1.0, self._resume_accept)
        now = time.monotonic()
        with self._counters.lock:
            if now - self._counters.last_accept_error < 0.5:
                return
            self._counters.last_accept_error = now
            self._counters.accept_errors += 1
            errors = self._counters.accept_errors
        if errors & (errors - 1) == 0:
            get_logger("exporter.http").warning(
                "http_accept_failed", error=getattr(exc, "strerror", None) or str(exc),
                accept_errors=errors, open_connections=self._counters.open,
                retry_in_seconds=1.0,
            )

    # -- one connection ------------------------------------------------------------------
    async def _serve(self, connection: _Connection) -> None:
        """A connection whose first flight is whole, from its first request to its end."""
        try:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=2 ** 16, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            transport, _ = await loop.connect_accepted_socket(lambda: protocol,
                                                              sock=connection.sock)
            connection.writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._exchange(connection, reader)
        except (TimeoutError, asyncio.CancelledError, ConnectionError, OSError, ssl.SSLError):
            pass
        except Exception:
            get_logger("exporter.http").debug("http_connection_error", exc_info=True)
        finally:
            self._connections.pop(connection, None)
            with self._counters.lock:
                self._counters.open = len(self._connections)
            if connection.writer is not None:
                _abort(connection.writer)
            else:
                connection.sock.close()

    def _admit(self, connection: _Connection) -> bool:
        """Room for one more: when full, close the oldest bare connection, else the one that
        has waited longest for a complete request; False when every one has sent its
        request."""
        if len(self._connections) >= self.limits.max_connections:
            idle = next((c for c in self._connections if c.bare), None) or next(
                (c for c in self._connections if c.waiting), None)
            if idle is None:
                return False
            self._drop(idle)
            with self._counters.lock:
                self._counters.refused += 1
        self._connections[connection] = None
        with self._counters.lock:
            self._counters.open = len(self._connections)
        return True

    async def _exchange(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        """Requests on one connection, one after the other, until one of them (or the server)
        closes it or a timeout does."""
        assert connection.writer is not None
        stream = _Stream.wrap(reader, connection.writer, self._ssl)
        stream.feed(bytes(connection.early))
        connection.early = bytearray()
        loop = asyncio.get_running_loop()
        limits = self.limits
        began = connection.accepted  # time.monotonic(), the event loop's clock
        first = True
        while True:
            if not first:
                try:
                    async with asyncio.timeout(limits.idle_timeout_seconds):
                        await stream.wait_data()
                except TimeoutError:
                    return  # idle too long: close without a word, as between requests
                began = loop.time()
            head_by = began + min(limits.head_timeout_seconds, limits.request_deadline_seconds)
            try:
                async with asyncio.timeout_at(head_by):
                    if first and self._ssl is not None:
                        await stream.handshake()
                    environ = await self._read_request(connection, stream)
            except TimeoutError:
                return  # nothing complete in time: no answer is owed
            except ssl.SSLError as exc:
                get_logger("exporter.http").debug(
                    "tls_handshake_failed", client=connection.peer, error=str(exc))
                return
            except _BadRequest as bad:
                async with asyncio.timeout_at(began + limits.request_deadline_seconds):
                    await self._send(stream, _error_response(bad.status), head=False,
                                     keep_alive=False, http10=False)
                return
            connection.waiting = False
            keep_alive = _keep_alive(environ)
            http10 = environ["SERVER_PROTOCOL"] == "HTTP/1.0"
            async with asyncio.timeout_at(began + limits.request_deadline_seconds):
                response = await self._gate(environ) if self._gate is not None else None
                if response is None:
                    response = await loop.run_in_executor(self._pool, _call_app, self._app,
                                                          environ)
                keep_alive = keep_alive and not self._stopping
                await self._send(stream, response, head=environ["REQUEST_METHOD"] == "HEAD",
                                 keep_alive=keep_alive, http10=http10)
            get_logger("exporter.http").debug(
                "http_request", client=connection.peer, method=environ["REQUEST_METHOD"],
                path=environ["PATH_INFO"], status=response[0])
            if not keep_alive:
                return
            # Idle again, and the youngest idle connection (the last to be closed for room).
            connection.waiting = True
            if connection in self._connections:  # not closed to make room meanwhile
                del self._connections[connection]
                self._connections[connection] = None
            first = False

    async def _read_request(self, connection: _Connection, stream: _Stream) -> dict[str, Any]:
        line = await stream.readline(MAX_REQUEST_HEAD_BYTES)
        size = len(line)
        for _ in range(_MAX_EMPTY_LINES):
            if line not in (b"\r\n", b"\n"):
                break
            line = await stream.readline(MAX_REQUEST_HEAD_BYTES - size)
            size += len(line)
        parts = line.decode("latin-1").strip().split()
        if len(parts) != 3:
            raise _BadRequest(400)  # HTTP/0.9 ("GET /") or garbage: answered at once
        method, target, version = parts
        if not version.startswith("HTTP/1."):
            raise _BadRequest(505 if version.startswith("HTTP/") else 400)
        headers: list[tuple[str, str]] = []
        while True:
            line = await stream.readline(MAX_REQUEST_HEAD_BYTES - size)
            size += len(line)
            if line in (b"\r\n", b"\n"):
                break
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon or not name or name != name.strip():
                raise _BadRequest(400)
            headers.append((name, value.strip()))
        if any(name.lower() == "transfer-encoding" for name, _ in headers):
            raise _BadRequest(501)  # no endpoint takes a body, let alone a chunked one
        lengths = {value for name, value in headers if name.lower() == "content-length"}
        length = lengths.pop() if len(lengths) == 1 else "0" if not lengths else ""
        if not _CONTENT_LENGTH.fullmatch(length):
            raise _BadRequest(400)  # not a number, or two different lengths
        if int(length) > MAX_REQUEST_BODY_BYTES:
            raise _BadRequest(413)
        environ = self._environ(connection, method, target, version, headers)
        environ["wsgi.input"] = BytesIO(await stream.readexactly(int(length)))
        return environ

    def _environ(
        self, connection: _Connection, method: str, target: str, version: str,
        headers: list[tuple[str, str]],
    ) -> dict[str, Any]:
        if target[:8].lower().startswith(("http://", "https://")):
            # The absolute form (RFC 9112 3.2.2), which HTTP/1.1 servers must accept; its
            # authority replaces the Host header.
            absolute = urlsplit(target)
            target = (absolute.path or "/") + ("?" + absolute.query if absolute.query else "")
            headers = [(n, v) for n, v in headers if n.lower() != "host"]
            headers.append(("Host", absolute.netloc))
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

    async def _send(self, stream: _Stream, response: Response, *, head: bool,
                    keep_alive: bool, http10: bool) -> None:
        """The answer (its head only for HEAD, with the length a GET would have); unless kept
        alive, then the end of the connection."""
        status, headers, body = response
        names = {name.lower() for name, _ in headers}
        lines = [f"HTTP/1.1 {status}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if "content-length" not in names:
            lines.append(f"Content-Length: {len(body)}")
        if not keep_alive:
            lines.append("Connection: close")
        elif http10:
            lines.append("Connection: keep-alive")
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                          + (b"" if head else body))
        if not keep_alive:
            await stream.close_write()


def _keep_alive(environ: dict[str, Any]) -> bool:
    """HTTP/1.1 keeps the connection unless the client says `close`; HTTP/1.0 closes it unless
    the client says `keep-alive`."""
    tokens = {t.strip().lower() for t in str(environ.get("HTTP_CONNECTION", "")).split(",")}
    if "close" in tokens:
        return False
    return environ["SERVER_PROTOCOL"] != "HTTP/1.0" or "keep-alive" in tokens


def _call_app(app: WsgiApp, environ: dict[str, Any]) -> Response:
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


def _canned(status: int) -> bytes:
    """An error answer with `Connection: close`, as bytes."""
    reason, headers, body = _error_response(status)
    head = [f"HTTP/1.1 {reason}", *(f"{n}: {v}" for n, v in headers),
            f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _error_response(status: int) -> Response:
    text = _STATUS_TEXT.get(status, "Internal Server Error")
    body = f"{text}\n".encode()
    return f"{status} {text}", [("Content-Type", "text/plain; charset=utf-8")], body


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    with contextlib.suppress(Exception):
        transport.abort()
