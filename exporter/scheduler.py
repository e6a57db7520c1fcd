"""Runs each cluster's poll -> analyze -> publish on a fixed interval (APScheduler 3.x).

The scheduler runs on the shared polling loop (`exporter.collect.loop`): each poll is a task
there, so a poll waiting on a slow broker holds no thread, and 20,000 clusters cost one loop,
not 20,000 threads competing with the web server for the interpreter. What follows a poll
(analyze, publish, its log line, the history) is plain computation and file writes: it runs
on a small thread pool, off the loop, so one cluster's analysis never delays another's I/O.

One job per cluster with `max_instances=1` (a slow poll is never overlapped by the next one)
and `coalesce=True` (runs missed while it was slow collapse into one). The first poll starts
immediately, so /metrics has data soon; after it each cluster polls at its own phase within
the interval (`phase_offset_seconds`), so that clusters do not all poll at the same instant
and stay in step, which would load the exporter (and the brokers) in bursts. A poll that
raises is logged and recorded as up=0; the scheduler keeps going. A poll still running when
its next run is due (it overran its interval) is counted
(`kafka_txn_exporter_poll_overruns_total`) and logged once (`poll_overran`), instead of
APScheduler's warning at every run it skips.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger

from exporter.collect.loop import run as run_on_loop
from exporter.collect.loop import shared_loop
from exporter.logs import count_dropped_log_message, get_logger
from exporter.model import Classification, ClusterObservation, ClusterSnapshot
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore


def _noop() -> None:
    return None


_JOB_ID_PREFIX = "poll:"

AFTER_POLL_THREADS = 2
"""Threads that analyze and publish finished polls. Analysis holds the interpreter, so more
would not run faster; a few keep one slow history write from holding up the rest."""

_after_poll_lock = threading.Lock()
_after_poll: ThreadPoolExecutor | None = None


def _after_poll_pool() -> ThreadPoolExecutor:
    """The process's pool for what follows a poll, shared by every scheduler (a reload makes a
    new one) like the polling loop itself."""
    global _after_poll
    with _after_poll_lock:
        if _after_poll is None:
            _after_poll = ThreadPoolExecutor(
                max_workers=AFTER_POLL_THREADS, thread_name_prefix="after-poll"
            )
        return _after_poll


class _SkippedRunFilter(logging.Filter):
    """Drops APScheduler's warning for a run skipped because the previous one still runs:
    `PollScheduler` counts those and logs one `poll_overran` line per poll instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            isinstance(record.msg, str)
            and "maximum number of running instances reached" in record.msg
        )


_SKIPPED_RUN_FILTER = _SkippedRunFilter()


def _quiet_skipped_run_warnings() -> None:
    logger = logging.getLogger("apscheduler.scheduler")
    if _SKIPPED_RUN_FILTER not in logger.filters:
        logger.addFilter(_SKIPPED_RUN_FILTER)


def phase_offset_seconds(cluster_name: str, interval_seconds: float) -> float:
    """Where in each poll interval this cluster's polls fall, in [0, interval).

    From a hash of the name: deterministic (the same phase after a restart or a config edit
    that adds other clusters), and spread evenly over the interval across many clusters.
    """
    digest = hashlib.sha256(cluster_name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval_seconds


class PhasedIntervalTrigger(BaseTrigger):  # type: ignore[misc]  # untyped base
    """Fires at `first + k * interval`: a fixed grid, so a cluster keeps its phase.

    APScheduler's IntervalTrigger counts each interval from the previous run, so a prompt
    first poll would fix every cluster's phase at start-up, all the same. Here the run after
    a previous one is the next grid point at least half an interval later: the prompt first
    poll is followed by the cluster's own phase, never by a second poll right away.
    """

    __slots__ = ("first", "interval")

    def __init__(self, interval_seconds: float, first: datetime) -> None:
        self.interval = timedelta(seconds=interval_seconds)
        self.first = first

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime:
        earliest = now if previous_fire_time is None else previous_fire_time + self.interval / 2
        steps = max(0, math.ceil((earliest - self.first) / self.interval))
        return self.first + steps * self.interval

    def __str__(self) -> str:
        return f"phased interval[{self.interval}, first {self.first.isoformat()}]"


@dataclass(frozen=True)
class ClusterJob:
    """What the scheduler runs for one cluster; the real wiring is `make_cluster_job`."""

    settings: ClusterSettings
    poll: Callable[[], Awaitable[ClusterObservation]]
    """Started on the polling loop; waits for the brokers there."""
    analyze: Callable[[ClusterObservation], ClusterSnapshot]
    close: Callable[[], None] = field(default=_noop)
    record: Callable[[ClusterObservation, ClusterSnapshot], None] | None = None
    """Called after each publish (the Parquet history); its failure never fails the poll."""


def make_cluster_job(
    settings: ClusterSettings,
    record: Callable[[ClusterObservation, ClusterSnapshot], None] | None = None,
) -> ClusterJob:
    """Wire the real ClusterPoller, the orphan tracker and analyze for one cluster."""
    from exporter.analyze import analyze
    from exporter.observe import ClusterObserver

    # Poll, then the orphan tracker (on the polling loop), then analyze (on the pool).
    observer = ClusterObserver(settings)
    return ClusterJob(
        settings=settings,
        poll=observer.poll_async,
        analyze=lambda obs: analyze(obs, settings),
        close=observer.close,
        record=record,
    )


def _known_sum(values: Sequence[int | None]) -> int | None:
    """The sum of the known per-broker counts (the sum of their series); None when none is
    known (all absent, never 0)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


UNKNOWN_BECAUSE_UNOBSERVED = "unobserved_partitions"
UNKNOWN_BECAUSE_UNREACHABLE = "cluster_unreachable"
UNKNOWN_BECAUSE_UNCLASSIFIED = "unclassified_late_transactions"


def summarize(
    snapshot: ClusterSnapshot, observation: ClusterObservation | None = None
) -> dict[str, Any]:
    """Counts for the one summary log event per poll: every count the metrics carry, so that
    the log alone tells what /metrics showed (absent metric -> None here, never 0).

    A cluster-wide count is known only when every partition was observed: otherwise it is
    None, what was seen is `<count>_observed` (a lower bound) and `unknown_counts` names the
    reason, never a 0 that means "not looked at"."""
    hanging = sum(1 for t in snapshot.late_transactions
                  if t.classification is Classification.HANGING)
    brokers = snapshot.brokers
    blocked = {
        (g.group_id, g.topic, g.partition)
        for groups in (*(t.blocked_groups for t in snapshot.late_transactions),
                       *(o.blocked_groups for o in snapshot.orphaned_transactions))
        for g in groups
    }
    # Per-broker counts are exposed only for brokers that answered (exporter.expose.collector).
    counted = [b for b in snapshot.brokers if b.up and b.observable]
    summary: dict[str, Any] = {
        "cluster": snapshot.cluster,
        "up": snapshot.up,
        "brokers": len(brokers),
        "brokers_up": sum(1 for b in brokers if b.up),
        "late_transactions": len(snapshot.late_transactions),
        "hanging_transactions": hanging,
        "orphaned_transactions": len(snapshot.orphaned_transactions),
        "partitions_with_open_transactions": _known_sum(
            [b.partitions_with_open_transactions for b in counted]),
        "partitions_with_late_transactions": _known_sum(
            [b.partitions_with_late_transactions for b in counted]),
        "partitions_with_hanging_transactions": _known_sum(
            [b.partitions_with_hanging_transactions for b in counted]),
        "partitions_with_orphaned_transactions": _known_sum(
            [b.partitions_with_orphaned_transactions for b in counted]),
        "blocked_consumer_groups": len(blocked),
        "blocked_consumer_groups_unknown": dict(snapshot.blocked_groups_unknown_by_reason),
        "unclassified_transactions": dict(snapshot.unclassified_by_reason),
        "max_active_transaction_duration_seconds": (
            None if (oldest := snapshot.cluster_max_active_transaction_duration_seconds) is None
            else round(oldest, 3)
        ),
        "unobserved_partitions": snapshot.unobserved_partitions,
        "unobserved_partitions_by_reason": dict(snapshot.unobserved_by_reason),
        "request_errors": len(snapshot.request_errors),
    }
    if observation is not None:
        summary["partitions"] = len(observation.leaders)
        summary["open_transactions"] = len(observation.open_transactions)
    incomplete = (
        UNKNOWN_BECAUSE_UNREACHABLE if not snapshot.up
        else UNKNOWN_BECAUSE_UNOBSERVED if snapshot.unobserved_partitions
        else None
    )
    unknown: dict[str, str] = {}
    if incomplete is not None:
        unknown = {key: incomplete for key in _CLUSTER_WIDE_COUNTS if key in summary}
    elif any(t.classification is Classification.UNKNOWN for t in snapshot.late_transactions):
        unknown = {"hanging_transactions": UNKNOWN_BECAUSE_UNCLASSIFIED}
    for key in unknown:
        summary[f"{key}_observed"] = summary[key]
        summary[key] = None
    summary["unknown_counts"] = unknown
    return summary


_CLUSTER_WIDE_COUNTS = (
    "late_transactions", "hanging_transactions", "orphaned_transactions",
    "blocked_consumer_groups", "open_transactions",
)
"""Counts over every partition of the cluster: lower bounds while some are unobserved."""


class PollScheduler:
    """Owns the BackgroundScheduler and the per-cluster jobs."""

    def __init__(
        self,
        jobs: Sequence[ClusterJob],
        store: SnapshotStore,
        *,
        misfire_grace_time_seconds: float | None = None,
    ) -> None:
        self._jobs = list(jobs)
        self._store = store
        self._misfire_grace = misfire_grace_time_seconds
        self._log = get_logger("exporter.scheduler")
        self._running_lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._stopping = False
        self._idle = threading.Condition(self._running_lock)
        self._skipped: dict[str, int] = {}
        """Runs skipped while the cluster's poll was still running, since it started."""
        self._loop = shared_loop()
        self._scheduler = AsyncIOScheduler(
            timezone=UTC, event_loop=self._loop, executors={"default": AsyncIOExecutor()}
        )
        _quiet_skipped_run_warnings()
        self._scheduler.add_listener(self._run_skipped, EVENT_JOB_MAX_INSTANCES)

    def _run_skipped(self, event: JobSubmissionEvent) -> None:
        """On the polling loop: a run was due while the previous one ran."""
        name = str(event.job_id).removeprefix(_JOB_ID_PREFIX)
        with self._running_lock:
            self._skipped[name] = self._skipped.get(name, 0) + 1

    def skipped_runs(self, cluster: str) -> int:
        """Runs skipped so far while the cluster's current (or last) poll ran."""
        with self._running_lock:
            return self._skipped.get(cluster, 0)

    def start(self) -> None:
        now = datetime.now(UTC)
        for job in self._jobs:
            interval = job.settings.poll_interval_seconds
            grace = self._misfire_grace
            if grace is None:
                grace = max(1.0, interval)
            offset = phase_offset_seconds(job.settings.name, interval)
            self._scheduler.add_job(
                self._run,
                trigger=PhasedIntervalTrigger(interval, now + timedelta(seconds=offset)),
                args=[job],
                id=f"{_JOB_ID_PREFIX}{job.settings.name}",
                name=f"poll {job.settings.name}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(grace)),
                next_run_time=now,  # first poll immediately, then at the cluster's phase
            )
        self._scheduler.start()
        self._log.info("scheduler_started", clusters=[j.settings.name for j in self._jobs])

    def run_once(self, job: ClusterJob) -> None:
        """One poll of one cluster, waited for (from any thread but the polling loop's)."""
        run_on_loop(self._run(job))

    async def _run(self, job: ClusterJob) -> None:
        """One poll of one cluster, on the polling loop; never raises (a crash here would
        only be logged by APScheduler)."""
        name = job.settings.name
        with self._running_lock:
            if self._stopping:  # dispatched just before shutdown: its poller may be closed
                return
            self._running[name] = self._running.get(name, 0) + 1
            self._skipped[name] = 0
        started = time.monotonic()
        try:
            try:
                observation: ClusterObservation | Exception = await job.poll()
            except Exception as exc:
                observation = exc
            polled = time.monotonic()
            await self._loop.run_in_executor(
                _after_poll_pool(), self._after, job, observation, started, polled
            )
        except asyncio.CancelledError:
            return  # stopped at shutdown, its deadline passed: nothing to publish
        finally:
            with self._running_lock:
                self._running[name] -= 1
                self._idle.notify_all()

    def _after(
        self,
        job: ClusterJob,
        observation: ClusterObservation | Exception,
        started: float,
        polled: float,
    ) -> None:
        """Analyze, publish, log and record one poll (or its failure); never raises."""
        name = job.settings.name
        try:
            if isinstance(observation, Exception):
                raise observation
            analyzing = time.monotonic()
            snapshot = job.analyze(observation)
            finished = time.monotonic()
            duration = finished - started
            self._store.publish(
                snapshot, duration_seconds=duration, analyze_seconds=finished - analyzing
            )
        except Exception as exc:
            duration = time.monotonic() - started
            error = f"{type(exc).__name__}: {exc}"
            self._store.record_failure(name, error, duration)
            self._log_quietly(
                "error", "poll_failed", cluster=name, error=error,
                duration_seconds=round(duration, 3), exc_info=True,
            )
            self._check_overrun(job, duration)
            return
        # Published: from here on nothing may turn this poll into a failed one.
        self._log_quietly(
            "info", "poll_completed",
            **summarize(snapshot, observation),
            poll_seconds=round(polled - started, 3),
            analyze_seconds=round(finished - polled, 3),
            duration_seconds=round(duration, 3),
        )
        self._check_overrun(job, duration)
        if job.record is not None:
            self._record(job, observation, snapshot)

    def _check_overrun(self, job: ClusterJob, duration: float) -> None:
        """Count and log a poll that outlasted its interval or made a run be skipped."""
        name = job.settings.name
        interval = job.settings.poll_interval_seconds
        with self._running_lock:
            skipped = self._skipped.get(name, 0)
        if skipped == 0 and duration <= interval:
            return
        self._store.record_overrun(name)
        self._log_quietly(
            "warning", "poll_overran", cluster=name, duration_seconds=round(duration, 3),
            interval_seconds=interval, skipped_runs=skipped,
            hint="raise poll_interval_seconds, or lower request_timeout_seconds so that a "
                 "slow broker cannot hold a poll up",
        )

    def _log_quietly(self, level: str, event: str, **fields: Any) -> None:
        """A log line that can never fail the poll (exporter.logs drops and counts failed
        writes; this also covers a failing processor or renderer)."""
        try:
            getattr(self._log, level)(event, **fields)
        except Exception:
            count_dropped_log_message()

    def _record(
        self, job: ClusterJob, observation: ClusterObservation, snapshot: ClusterSnapshot
    ) -> None:
        assert job.record is not None
        try:
            job.record(observation, snapshot)
        except Exception as exc:
            self._log.error("history_append_failed", cluster=job.settings.name,
                            error=f"{type(exc).__name__}: {exc}")

    def next_poll_times(self) -> dict[str, datetime | None]:
        """Cluster name -> when its next poll is scheduled (None once stopped)."""
        return {
            job.settings.name: getattr(
                self._scheduler.get_job(f"{_JOB_ID_PREFIX}{job.settings.name}"),
                "next_run_time", None)
            for job in self._jobs
        }

    def in_flight(self) -> int:
        with self._running_lock:
            return sum(self._running.values())

    def shutdown(self, timeout_seconds: float = 3.0) -> bool:
        """Stop scheduling; wait up to `timeout_seconds` for running polls, then close pollers.

        Returns False when a poll was still running at the deadline (its poller is left
        open: closing a kafka-python client under a running request is not safe). The
        caller then exits the process anyway so shutdown stays bounded.
        """
        with self._running_lock:
            first = not self._stopping
            self._stopping = True
        if first and self._scheduler.running:
            self._scheduler.pause()  # no new runs; the running ones go on
        deadline = time.monotonic() + timeout_seconds
        with self._idle:
            while any(self._running.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._idle.wait(remaining)
            busy = {n for n, c in self._running.items() if c}
        if first and self._scheduler.running:
            # On the loop, later: its executor cancels the polls still running.
            self._scheduler.shutdown(wait=False)
        for job in self._jobs:
            if job.settings.name in busy:
                continue
            try:
                job.close()
            except Exception:
                self._log.warning("poller_close_failed", cluster=job.settings.name,
                                  exc_info=True)
        if busy:
            self._log.warning("shutdown_timed_out", clusters_still_polling=sorted(busy))
        return not busy
