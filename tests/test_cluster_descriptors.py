"""What a cluster costs: its broker connections and nothing else -- no descriptors of its own
(every cluster's polls share one event loop; a loop per cluster cost 3 more: epoll and a
self-pipe) and no thread (a poll waiting on a broker is a task on that loop; a thread per
running poll made thousands of clusters starve the web server). At the descriptor limit
`serve` says so in one line and exits 2, never a traceback.

The simulator runs in its own process, so /proc/<serve pid>/fd holds only the exporter's own
descriptors."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from waits import wait_for

EXPORTER = [sys.executable, "-m", "exporter"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _simulator(brokers: int) -> Iterator[str]:
    proc = subprocess.Popen([*EXPORTER, "sim", "--brokers", str(brokers)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _config(tmp_path: Path, clusters: int, bootstrap: str, port: int) -> Path:
    servers = ", ".join(f"'{s}'" for s in bootstrap.split(","))
    path = tmp_path / f"clusters-{clusters}.yaml"
    path.write_text(
        f"web: {{listen_address: 127.0.0.1, port: {port}}}\nclusters:\n" + "".join(
            f"  - {{name: c{i}, bootstrap_servers: [{servers}], poll_interval_seconds: 3600}}\n"
            for i in range(clusters)))
    return path


def _limit(descriptors: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))


@contextmanager
def _serve(config: Path, limit: int | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([*EXPORTER, "serve", "--config", str(config), "--log.format",
                             "json", "--log.level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=None if limit is None else _limit(limit))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _clusters_up(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    except OSError:  # not listening yet
        return 0
    return sum(1 for line in body.splitlines()
               if line.startswith("kafka_txn_exporter_up{") and line.endswith(" 1.0"))


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        (line,) = [line for line in status if line.startswith("Threads:")]
    return int(line.split()[1])


@contextmanager
def _silent_broker() -> Iterator[str]:
    """A port whose connections the kernel completes and nobody ever answers: every poll
    waits out its request timeout."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_polls_waiting_on_brokers_hold_no_thread_and_scrapes_stay_prompt(
    tmp_path: Path,
) -> None:
    """400 clusters whose broker never answers: all 400 polls wait at once (a minute's
    timeout), and the exporter runs a handful of threads, not one per waiting poll, and
    answers /metrics meanwhile: every scrape while all the polls still wait (a scrape queued
    behind them would wait their two minutes), the typical one within 1 s even at load 15."""
    clusters = 400
    port = _free_port()
    with _silent_broker() as bootstrap:
        config = tmp_path / "silent.yaml"
        config.write_text(
            f"web: {{listen_address: 127.0.0.1, port: {port}}}\nclusters:\n" + "".join(
                f"  - {{name: c{i}, bootstrap_servers: ['{bootstrap}'], "
                "poll_interval_seconds: 3600, request_timeout_seconds: 120}\n"
                for i in range(clusters)))
        with _serve(config) as proc:
            wait_for(f"{clusters} polls waiting on their broker",
                     lambda: proc.poll() is None and _sockets(proc.pid) > clusters,
                     timeout_seconds=120)
            threads = _threads(proc.pid)
            took = []
            for _ in range(5):
                began = time.monotonic()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=10) as response:
                    assert response.status == 200
                    response.read()
                took.append(time.monotonic() - began)
            assert _sockets(proc.pid) > clusters  # still waiting, all of them
    assert threads < 24, threads
    assert sorted(took)[len(took) // 2] < 1.0, took


def _descriptors_once_polled(tmp_path: Path, clusters: int, bootstrap: str) -> int:
    port = _free_port()
    with _serve(_config(tmp_path, clusters, bootstrap, port)) as proc:
        wait_for(f"{clusters} clusters up",
                 lambda: proc.poll() is None and _clusters_up(port) == clusters,
                 timeout_seconds=180)
        return _descriptors(proc.pid)


def test_a_cluster_costs_one_descriptor_per_broker_connection(tmp_path: Path) -> None:
    clusters = 120
    with _simulator(brokers=1) as bootstrap:
        one = _descriptors_once_polled(tmp_path, 1, bootstrap)
        many = _descriptors_once_polled(tmp_path, clusters, bootstrap)
    # One broker: one connection per cluster (an event loop per cluster made it 4).
    per_cluster = (many - one) / (clusters - 1)
    assert per_cluster <= 1.1, (one, many, per_cluster)


def _stderr_after_exit(proc: subprocess.Popen[str], timeout: float = 180) -> str:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"serve did not exit: {err[-2000:]}") from None
    return err


def test_more_clusters_than_the_descriptor_limit_start_when_they_hold_no_connection(
    tmp_path: Path,
) -> None:
    """300 clusters under a limit of 256 descriptors: their first polls all start at once, but
    connects are bounded (a quarter of the limit in progress), and a refused connect holds
    nothing, so they all poll (up 0); the shortfall is said once at start-up."""
    port = _free_port()
    config = _config(tmp_path, 300, "127.0.0.1:1", port)
    with _serve(config, limit=256) as proc:
        wait_for("300 clusters polled", lambda: proc.poll() is None and _clusters_polled(port)
                 == 300, timeout_seconds=180)
        # Nothing held: connects still finishing (and scrapes' sockets) are let go.
        wait_for("descriptors released", lambda: _descriptors(proc.pid) < 64,
                 timeout_seconds=60)
        proc.send_signal(signal.SIGTERM)
        err = _stderr_after_exit(proc, timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "descriptor_limit_reached" not in err
    low = [line for line in err.splitlines() if "descriptor_limit_low" in line]
    assert len(low) == 1, err[-3000:]
    assert "300 clusters need a descriptor per broker connection" in low[0]
    assert "descriptor limit (RLIMIT_NOFILE) is 256" in low[0]


def _clusters_polled(port: int) -> int:
    """Clusters whose `up` series is exposed (polled at least once, whatever the outcome)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    except OSError:
        return 0
    return sum(1 for line in body.splitlines() if line.startswith("kafka_txn_exporter_up{"))


def test_running_out_of_descriptors_while_polling_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """120 clusters pass the start-up check under 330 descriptors (120 <= 330 - 82 - 64), but
    each connects to 3 brokers: the connects run out, and the daemon stops instead of calling
    brokers down."""
    with _simulator(brokers=3) as bootstrap:
        config = _config(tmp_path, 120, bootstrap, _free_port())
        started = time.monotonic()
        with _serve(config, limit=330) as proc:
            err = _stderr_after_exit(proc)
    assert proc.returncode == 2, err[-2000:]
    assert "Traceback" not in err
    reached = [line for line in err.splitlines() if "descriptor_limit_reached" in line]
    assert len(reached) == 1, err[-3000:]
    assert "Too many open files" in reached[0] and '"nofile_limit": 330' in reached[0]
    assert time.monotonic() - started < 180
