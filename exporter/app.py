"""The exporter application: wires settings, pollers, scheduler and HTTP server, and runs them.

`serve()` is what `kafka-txn-exporter serve` and `demo` run; the CLI only parses arguments
and loads settings. Signals (main thread only):
- SIGTERM, SIGINT: stop within 5 s (a poll stuck in a request is abandoned).
- SIGHUP: reload the configuration, as Prometheus does. A bad new configuration keeps the old
  one running; either way the outcome is logged and counted
  (`kafka_txn_exporter_config_reload_total{result}`,
  `kafka_txn_exporter_config_last_reload_successful`,
  `kafka_txn_exporter_config_last_reload_success_timestamp_seconds`). Clusters, their
  settings and logging take effect at once; `web` and `history` changes need a restart
  (the reload says so in its log line).
- SIGUSR1, SIGUSR2: logged and otherwise ignored (their default action would kill the daemon).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.collect.loop import set_descriptors_exhausted_handler
from exporter.errors import EXIT_CONFIG_ERROR, ConfigError, say
from exporter.expose.collector import new_family
from exporter.expose.http import (
    MAX_HTTP_CONNECTIONS,
    MetricsServer,
    connection_cap,
    raise_nofile_limit,
)
from exporter.expose.registry import ExporterRegistry
from exporter.expose.registry import build_registry as build_exporter_registry
from exporter.logs import configure_logging, dropped_log_messages, get_logger
from exporter.metrics import spec
from exporter.scheduler import ClusterJob, PollScheduler, make_cluster_job
from exporter.settings import ClusterSettings, ExporterSettings
from exporter.snapshots import SnapshotStore

if TYPE_CHECKING:
    from exporter.history import HistoryWriter

SHUTDOWN_POLL_WAIT_SECONDS = 2.5
"""How long a stop waits for a running poll; with HTTP shutdown it stays under 5 s."""
RELOAD_POLL_WAIT_SECONDS = SHUTDOWN_POLL_WAIT_SECONDS
"""How long a reload waits for the old configuration's running polls; a poll still running
then is abandoned (its result is discarded for a removed cluster), so a SIGTERM right after a
SIGHUP is still honoured within 5 s."""
RESERVED_DESCRIPTORS = 64
"""Descriptors kept for the process itself (standard streams, the listening socket, files
read at start or on reload, the history's Parquet files), beyond the web connections."""
IGNORED_SIGNALS = ("SIGUSR1", "SIGUSR2")
SIGNAL_CHECK_SECONDS = 0.2
"""How often the main loop acts on the signals received (handlers only note them)."""


class ReloadStatus:
    """Outcome of SIGHUP reloads, exposed like Prometheus' own reload metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.successes = 0
        self.failures = 0
        self.last_successful = True
        self.last_success_timestamp_seconds = time.time()
        """The start-up load counts as the first successful one."""

    def record(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.successes += 1
                self.last_success_timestamp_seconds = time.time()
            else:
                self.failures += 1
            self.last_successful = ok


class ProcessHealthCollector(Collector):
    """The daemon's own health that is not per cluster: reloads and dropped log lines."""

    def __init__(self, reloads: ReloadStatus) -> None:
        self._reloads = reloads

    def collect(self) -> Iterable[Metric]:
        reloads = self._reloads
        total = new_family(spec("kafka_txn_exporter_config_reload_total"))
        assert isinstance(total, CounterMetricFamily)
        total.add_metric(["success"], reloads.successes)
        total.add_metric(["failure"], reloads.failures)
        yield total
        last_ok = new_family(spec("kafka_txn_exporter_config_last_reload_successful"))
        assert isinstance(last_ok, GaugeMetricFamily)
        last_ok.add_metric([], 1.0 if reloads.last_successful else 0.0)
        yield last_ok
        last_ts = new_family(
            spec("kafka_txn_exporter_config_last_reload_success_timestamp_seconds"))
        assert isinstance(last_ts, GaugeMetricFamily)
        last_ts.add_metric([], reloads.last_success_timestamp_seconds)
        yield last_ts
        dropped = new_family(spec("kafka_txn_exporter_log_messages_dropped_total"))
        assert isinstance(dropped, CounterMetricFamily)
        dropped.add_metric([], dropped_log_messages())
        yield dropped


def build_registry(store: SnapshotStore, reloads: ReloadStatus) -> ExporterRegistry:
    """The /metrics registry (exporter.expose.registry) plus the daemon's own health."""
    registry = build_exporter_registry(store)
    registry.register(ProcessHealthCollector(reloads))
    return registry


def _open_history(settings: ExporterSettings) -> HistoryWriter | None:
    """The Parquet history writer when `history.directory` is set (needs pyarrow)."""
    if settings.history.directory is None:
        return None
    try:
        from exporter.history import HistoryWriter
    except ImportError as exc:
        raise ConfigError(
            f"history.directory: writing history needs pyarrow "
            f"(pip install 'kafka-txn-exporter[history]'): {exc}"
        ) from exc
    _check_history_directory(str(settings.history.directory))
    return HistoryWriter(settings.history.directory, settings.history.retention_days)


def _check_history_directory(directory: str) -> None:
    """A history.directory that is a file, or that cannot be created or written, stops
    start-up with exit 2 instead of a `history_append_failed` every poll."""
    path = os.fspath(directory)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"history.directory: {path!r} exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"history.directory: cannot create {path!r}: {exc.strerror or exc}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"history.directory: {path!r} is not writable")


def _make_jobs(
    clusters: Iterable[ClusterSettings],
    job_factory: Callable[[ClusterSettings], ClusterJob],
    history: HistoryWriter | None,
) -> list[ClusterJob]:
    """One job per cluster; on a failure the jobs made so far are closed and it re-raises
    as ConfigError naming the cluster (e.g. an unreadable TLS key)."""
    jobs: list[ClusterJob] = []
    for cluster in clusters:
        try:
            jobs.append(job_factory(cluster))
        except Exception as exc:
            for job in jobs:
                job.close()
            raise ConfigError(f"cluster {cluster.name}: cannot create its client: {exc}") from exc
    if history is not None:
        jobs = [dataclasses.replace(job, record=history.append) for job in jobs]
    return jobs


class _Running:
    """The parts a reload swaps: the settings in force and the scheduler polling them."""

    def __init__(self, settings: ExporterSettings, scheduler: PollScheduler) -> None:
        self.settings = settings
        self.scheduler = scheduler


def _reload(
    running: _Running,
    load: Callable[[], ExporterSettings],
    store: SnapshotStore,
    job_factory: Callable[[ClusterSettings], ClusterJob],
    history: HistoryWriter | None,
    reloads: ReloadStatus,
) -> None:
    """Load the configuration again and apply it; on any error keep the old one running."""
    log = get_logger("exporter.reload")
    old = running.settings
    try:
        new = load()
        jobs = _make_jobs(new.clusters, job_factory, history) if new.clusters != old.clusters \
            else None
    except ConfigError as exc:
        reloads.record(False)
        log.error("config_reload_failed", error=str(exc), kept="previous configuration")
        return
    except Exception as exc:  # never let a reload kill the daemon
        reloads.record(False)
        log.error("config_reload_failed", error=f"{type(exc).__name__}: {exc}",
                  kept="previous configuration")
        return
    if (new.log_format, new.log_level) != (old.log_format, old.log_level):
        configure_logging(new.log_format, new.log_level)
        log = get_logger("exporter.reload")
    if jobs is not None:
        running.scheduler.shutdown(timeout_seconds=RELOAD_POLL_WAIT_SECONDS)
        store.set_clusters(new.clusters)
        running.scheduler = PollScheduler(jobs, store)
        running.scheduler.start()
    restart_needed = [name for name, changed in (
        ("web", new.web != old.web), ("history", new.history != old.history)) if changed]
    # What is not applied stays as it was, so `settings` keeps the old web and history.
    running.settings = dataclasses.replace(new, web=old.web, history=old.history)
    reloads.record(True)
    log.info("config_reloaded", clusters=[c.name for c in new.clusters],
             clusters_changed=jobs is not None,
             **({"not_applied_until_restart": restart_needed} if restart_needed else {}))


def descriptor_budget_warning(clusters: int, nofile_limit: int) -> str | None:
    """Every reachable cluster holds at least one broker connection (one descriptor per broker
    it polls; the polling loop is shared and costs none per cluster). More clusters than the
    limit leaves for them is said at start-up; it is not refused (clusters that refuse
    connections hold none), and if connects do run out, `serve` stops with exit 2."""
    web = connection_cap(MAX_HTTP_CONNECTIONS, nofile_limit)
    available = nofile_limit - web - RESERVED_DESCRIPTORS
    if clusters <= available:
        return None
    return (f"{clusters} clusters need a descriptor per broker connection, but the descriptor "
            f"limit (RLIMIT_NOFILE) is {nofile_limit}, of which {web + RESERVED_DESCRIPTORS} "
            "are kept for the web server and the process: if connects run out, serve stops "
            "with exit 2; raise the limit (ulimit -n, systemd LimitNOFILE, the container's "
            "nofile ulimit) or split the clusters across exporters")


def _take_signals(received: collections.deque[int], log: Any) -> tuple[bool, bool]:
    """Log and empty the signals noted since the last call: (stop requested, reload requested)."""
    stop_requested = reload_requested = False
    while received:
        name = signal.Signals(received.popleft()).name
        if name in IGNORED_SIGNALS:
            log.info("signal_ignored", signal=name)
        elif name == "SIGHUP":
            log.info("signal_received", signal=name, action="reload configuration")
            reload_requested = True
        else:
            log.info("signal_received", signal=name)
            stop_requested = True
    return stop_requested, reload_requested


def serve(
    settings: ExporterSettings,
    *,
    stop: threading.Event | None = None,
    job_factory: Callable[[ClusterSettings], ClusterJob] = make_cluster_job,
    on_started: Callable[[MetricsServer], None] | None = None,
    config_file: str | None = None,
    reload: Callable[[], ExporterSettings] | None = None,
) -> int:
    """Run the exporter until `stop` is set or SIGTERM/SIGINT arrives; return the exit code.

    `config_file` only goes into the status page's abort command lines. `reload` loads the
    configuration again for SIGHUP (None: SIGHUP is logged and ignored).
    """
    log = get_logger("exporter.serve")
    stop = stop or threading.Event()
    store = SnapshotStore(settings.clusters)
    reloads = ReloadStatus()
    try:
        history = _open_history(settings)
        jobs = _make_jobs(settings.clusters, job_factory, history)
    except ConfigError as exc:
        say(f"config error: {exc}")
        return EXIT_CONFIG_ERROR
    try:
        server = MetricsServer(settings.web, build_registry(store, reloads), store, config_file)
    except ConfigError as exc:
        for job in jobs:
            job.close()
        say(f"config error: {exc}")
        return EXIT_CONFIG_ERROR
    except OSError as exc:
        for job in jobs:
            job.close()
        say(f"web: cannot listen on {settings.web.listen_address}:{settings.web.port}: "
            f"{exc.strerror or exc}")
        return EXIT_CONFIG_ERROR
    running = _Running(settings, PollScheduler(jobs, store))

    received: collections.deque[int] = collections.deque()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        # Only note it. A handler runs between two bytecodes of the main thread, which may be
        # holding a lock the handler would need (a log write, the stop Event's condition, the
        # first import of structlog): logging or setting an Event here can deadlock the stop.
        received.append(signum)

    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGINT", "SIGHUP", *IGNORED_SIGNALS):
            signal.signal(getattr(signal, name), _on_signal)

    out_of_descriptors: list[OSError] = []
    # Called on the polling loop's thread: only note it (the main loop stops the daemon).
    set_descriptors_exhausted_handler(out_of_descriptors.append)
    # Saying so needs descriptors too (the logger's lazy imports read files): one is kept
    # in reserve for that line, and the logger is loaded now.
    spare_descriptor = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    _ = log.error

    server.start()
    running.scheduler.start()
    log.info(
        "exporter_started",
        version=__version__,
        listen=f"{server.scheme}://{server.address}:{server.port}{settings.web.telemetry_path}",
        clusters=[c.name for c in settings.clusters],
    )
    budget = descriptor_budget_warning(len(settings.clusters), raise_nofile_limit())
    if budget is not None:
        log.warning("descriptor_limit_low", detail=budget)
    if on_started is not None:
        on_started(server)
    exit_code = 0
    while not stop.wait(SIGNAL_CHECK_SECONDS):
        if out_of_descriptors:
            # Polling on would report brokers as unreachable that are not: stop, and the
            # absence of the exporter pages someone (its `up` series go away).
            exit_code = EXIT_CONFIG_ERROR
            os.close(spare_descriptor)
            spare_descriptor = -1
            log.error("descriptor_limit_reached", error=str(out_of_descriptors[0]),
                      nofile_limit=raise_nofile_limit(), clusters=len(running.settings.clusters),
                      action="stopping: raise the descriptor limit (ulimit -n) or split the "
                             "clusters across exporters")
            break
        stop_requested, reload_requested = _take_signals(received, log)
        if stop_requested:
            break
        if reload_requested:
            if reload is None:
                log.warning("config_reload_unavailable", reason="no configuration to reload")
            else:
                _reload(running, reload, store, job_factory, history, reloads)
    set_descriptors_exhausted_handler(None)
    if spare_descriptor >= 0:
        os.close(spare_descriptor)
    log.info("exporter_stopping")
    clean = running.scheduler.shutdown(timeout_seconds=SHUTDOWN_POLL_WAIT_SECONDS)
    if history is not None and clean:
        history.close()
    server.stop()
    log.info("exporter_stopped", clean=clean)
    if not clean and threading.current_thread() is threading.main_thread():
        # A poll is stuck in a blocking request; its executor thread would keep the interpreter
        # alive at exit. Leave now so SIGTERM is honoured within the 5 s budget.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(exit_code)
    return exit_code
