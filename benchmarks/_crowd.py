"""An idle crowd of HTTP clients: what tests/resilience/test_resilience_idle_crowd.py and
benchmarks/bench_idle_crowd.py turn against the exporter's HTTP server."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Sequence


class Crowd:
    """Keeps `size` hostile connections to 127.0.0.1 open, from one thread, spread evenly over
    `kinds` (kind, port): "slowloris" (a header line, then a byte a second), "http09" (an
    HTTP/0.9 request line), "tls_half_open" (five bytes of a ClientHello, then nothing),
    "idle" (nothing at all). Each connection the server closes is opened again within a
    second, or at once with `reopen_at_once` (a crowd larger than the server's connection cap
    then reconnects as fast as the server closes it)."""

    def __init__(self, kinds: Sequence[tuple[str, int]], size: int,
                 reopen_at_once: bool = False) -> None:
        self._kinds = list(kinds)
        self._size = size
        self._reopen_at_once = reopen_at_once
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self.opened = 0
        self.answered_09 = 0
        self._thread = threading.Thread(target=self._run, name="crowd")

    def __enter__(self) -> Crowd:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _open(self, index: int) -> None:
        kind, port = self._kinds[index % len(self._kinds)]
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            return
        sock.setblocking(False)
        first = {"slowloris": b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ",
                 "http09": b"GET /metrics\r\n",
                 "tls_half_open": b"\x16\x03\x01\x02\x00",
                 "idle": b""}[kind]
        try:
            if first:
                sock.send(first)
        except OSError:
            sock.close()
            return
        self.opened += 1
        self._selector.register(sock, selectors.EVENT_READ, (index, kind))

    def _run(self) -> None:
        for index in range(self._size):
            self._open(index)
        last_trickle = time.monotonic()
        closed: list[int] = []
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                index, kind = key.data
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if kind == "http09" and data.startswith(b"HTTP/1.1 400"):
                    self.answered_09 += 1
                self._selector.unregister(sock)
                sock.close()
                if self._reopen_at_once:
                    self._open(index)
                else:
                    closed.append(index)
            if time.monotonic() - last_trickle >= 1.0:  # slowloris: one byte a second
                last_trickle = time.monotonic()
                for index in closed:
                    self._open(index)  # the crowd comes back every second
                closed.clear()
                for key in list(self._selector.get_map().values()):
                    if key.data[1] == "slowloris":
                        with contextlib.suppress(OSError):
                            key.fileobj.send(b"a")  # type: ignore[union-attr]
