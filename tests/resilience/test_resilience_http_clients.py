"""Slow and abundant HTTP clients, and a process out of descriptors.

The server runs in this process so the tests can count its threads and lower the
descriptor limit; every bound is shrunk (deadline 1.5 s, cap 16) so the tests stay short.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.expose.http import MetricsServer, connection_cap
from exporter.expose.registry import build_registry
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore

pytestmark = pytest.mark.slow  # real HTTP clients against serve, with timeouts

DEADLINE_SECONDS = 1.5
CAP = 16


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    store = SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])
    srv = MetricsServer(WebSettings(listen_address="127.0.0.1", port=0), build_registry(store),
                        store, max_connections=CAP, request_deadline_seconds=DEADLINE_SECONDS)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def scrape(srv: MetricsServer, timeout: float = 5.0) -> str:
    url = f"http://127.0.0.1:{srv.port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def refused_total(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "kafka_txn_exporter_http_connections_refused":
            return float(family.samples[0].value)
    raise AssertionError("kafka_txn_exporter_http_connections_refused_total missing")


def wait_until(predicate: object, timeout: float) -> bool:
    assert callable(predicate)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_one_byte_per_second_does_not_keep_a_connection_alive(server: MetricsServer) -> None:
    """Each byte restarts the idle timeout; the whole-request deadline still cuts it."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    closed_after: float | None = None
    start = time.monotonic()
    try:
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server closed the connection: reset or broken pipe
                closed_after = time.monotonic() - start
                break
            time.sleep(0.2)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except BlockingIOError:
                pass
            except OSError:
                closed_after = time.monotonic() - start
                break
            finally:
                sock.setblocking(True)
    finally:
        sock.close()
    assert closed_after is not None, "a trickling client kept its connection for 20 s"
    assert DEADLINE_SECONDS * 0.8 <= closed_after <= DEADLINE_SECONDS + 2.0


def closed_unanswered(sock: socket.socket) -> bool:
    """The server closed `sock` without a byte of answer: an orderly close, or a reset (the
    kernel resets a connection closed with bytes of the request still unread)."""
    try:
        return sock.recv(200) == b""
    except ConnectionResetError:
        return True


def test_a_thousand_slow_connections_cannot_starve_a_scrape(server: MetricsServer) -> None:
    """1,000 clients that send half a request, CAP at a time open: each new one closes the
    idle connection that waited longest (counted as refused), no thread is started for any of
    them, and a scrape made in the middle of the flood is answered."""
    threads_before = threading.active_count()
    peak = [0]
    flooding = threading.Event()

    def sample() -> None:
        while not flooding.wait(0.01):
            peak[0] = max(peak[0], threading.active_count() - threads_before - 1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    clients: list[socket.socket] = []
    try:
        for i in range(1000):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished
            clients.append(sock)
            if i == 500:
                assert "kafka_txn_exporter_up" in scrape(server)
        assert wait_until(lambda: server._server.refused_connections >= 1000 - CAP, 10.0)
        assert server._server.open_connections() <= CAP
        assert closed_unanswered(clients[0])  # the oldest idle one was closed
    finally:
        flooding.set()
        sampler.join()
        for sock in clients:
            sock.close()
    # The event loop and the app's thread pool exist before the flood; it adds no thread.
    assert peak[0] <= 1, f"{peak[0]} threads started for 1,000 slow connections"
    assert wait_until(lambda: server._server.open_connections() == 0, DEADLINE_SECONDS + 3)
    assert refused_total(scrape(server)) == server._server.refused_connections >= 1000 - CAP


def test_connection_cap_leaves_most_descriptors_to_kafka() -> None:
    assert connection_cap(64, 1024) == 64
    assert connection_cap(64, 100) == 25
    assert connection_cap(64, 2) == 1


def _cpu_seconds_over(window: float) -> float:
    start_cpu, start = time.process_time(), time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - start
    return (time.process_time() - start_cpu) / elapsed


def test_out_of_descriptors_the_accept_loop_waits_and_recovers(server: MetricsServer) -> None:
    """With every descriptor taken, accept() fails with EMFILE while a connection waits in the
    backlog; the loop backs off instead of spinning, and serves again once descriptors return.
    CPU is measured for the whole process over 2 s: a spinning accept loop uses ~a core."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # its descriptor, before filling
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 16, hard))
    try:
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        client.connect(("127.0.0.1", server.port))  # accepted by the kernel, not by us
        client.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        time.sleep(0.3)
        busy = _cpu_seconds_over(2.0)
        assert server._server.accept_errors >= 1, "accept() never failed: limit not reached"
        assert busy < 0.1, f"accept loop used {busy:.0%} of a core while out of descriptors"
        # One pause of a second per failed wake-up: a handful in 2.3 s, not thousands.
        assert server._server.accept_errors <= 5, server._server.accept_errors
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    client.settimeout(5)
    answer = b""
    while chunk := client.recv(4096):
        answer += chunk
    client.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n"), answer
    assert "kafka_txn_exporter_up" in scrape(server)
