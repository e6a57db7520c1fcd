"""Run the exporter for resilience/security tests and read what it reports over HTTP.

Two ways, both with the real code: `ServeProcess` (the `serve` CLI as a subprocess; every byte
of stdout/stderr is kept, for SIGTERM and secret-leak checks) and `InProcessExporter`
(`exporter.app.serve` on a thread; faster, same scheduler + ClusterPoller + HTTP server).
Parsing helpers come from tests/test_e2e_serve.py.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from kafka_sim.cluster import SimCluster
from test_e2e_serve import http_get, samples

from exporter.app import serve
from exporter.expose.http import MetricsServer
from exporter.scheduler import ClusterJob, make_cluster_job
from exporter.settings import ClusterSettings, ExporterSettings, WebSettings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Scraper:
    base: str

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.base + path)

    def samples(self) -> Samples:
        status, text = self.get("/metrics")
        assert status == 200, text
        return samples(text)

    def value(self, name: str, **labels: str) -> float | None:
        """The sample whose labels include `labels` (None when absent); sums several."""
        found = [v for (n, ls), v in self.samples().items()
                 if n == name and set(labels.items()) <= set(ls)]
        return sum(found) if found else None

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)


def cluster_settings(sim: SimCluster, **overrides: object) -> ClusterSettings:
    values: dict[str, object] = {
        "name": "sim",
        "bootstrap_servers": tuple(sim.bootstrap_servers.split(",")),
        "poll_interval_seconds": 0.3,
        "request_timeout_seconds": 1.0,
        "late_buffer_seconds": 10.0,
        "min_reported_duration_seconds": 0.0,
    }
    values.update(overrides)
    return ClusterSettings(**values)  # type: ignore[arg-type]


@contextmanager
def in_process_exporter(
    *clusters: ClusterSettings,
    job_factory: Callable[[ClusterSettings], ClusterJob] = make_cluster_job,
) -> Iterator[Scraper]:
    """`serve()` on a thread, HTTP on 127.0.0.1:0; stopped (and joined) on exit."""
    settings = ExporterSettings(clusters=clusters,
                                web=WebSettings(listen_address="127.0.0.1", port=0))
    stop = threading.Event()
    started: queue.Queue[MetricsServer] = queue.Queue()
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(serve(settings, stop=stop, on_started=started.put,
                                          job_factory=job_factory)),
        name="serve", daemon=True)
    thread.start()
    server = started.get(timeout=15)
    try:
        yield Scraper(f"http://127.0.0.1:{server.port}")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive(), "serve() did not stop"
    assert codes == [0]


@dataclass
class ServeProcess:
    """`python -m exporter <args>` with stdout and stderr drained into `output` by threads."""

    args: list[str]
    env: Mapping[str, str]
    proc: subprocess.Popen[str] = field(init=False)
    lines: list[str] = field(default_factory=list)
    _started: threading.Event = field(default_factory=threading.Event)
    base: str = ""

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", *self.args], env=dict(self.env),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._threads = [threading.Thread(target=self._drain, args=(s,), daemon=True)
                         for s in (self.proc.stdout, self.proc.stderr)]
        for t in self._threads:
            t.start()

    def _drain(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)
            if '"exporter_started"' in line:
                # Not json.loads(line): at debug level another thread's log line can land on
                # the same line (exporter/logs.py: structlog's print and logging's handler
                # write under different locks), so pick the field out.
                match = re.search(r'"listen": "([^"]+)"', line)
                if match:
                    self.base = match.group(1).removesuffix("/metrics")
                    self._started.set()

    def wait_started(self, timeout: float = 15.0) -> Scraper:
        assert self._started.wait(timeout), "no exporter_started:\n" + self.output
        return Scraper(self.base)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> tuple[int, float]:
        """Send `sig`; return (exit code, seconds until exit)."""
        began = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        elapsed = time.monotonic() - began
        for t in self._threads:
            t.join(timeout=5)
        return code, elapsed

    def wait(self, timeout: float = 60.0) -> int:
        code = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env.update(KTE_LOG_FORMAT="json")
    env.update(extra)
    return env
