"""The scheduler's own behaviour, with fake poll callables (real functions that block/sleep)."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from exporter_factories import broker, in_thread, observation, snapshot

from exporter.analyze import analyze
from exporter.expose.http import MetricsServer
from exporter.expose.registry import build_registry
from exporter.logs import configure_logging
from exporter.model import ClusterObservation, ClusterSnapshot, TopicPartition
from exporter.scheduler import (
    ClusterJob,
    PhasedIntervalTrigger,
    PollScheduler,
    phase_offset_seconds,
)
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore

pytestmark = pytest.mark.usefixtures("reset_logging")  # tests/conftest.py


def settings(name: str = "c1", interval: float = 0.05) -> ClusterSettings:
    return ClusterSettings(name=name, bootstrap_servers=("h:1",), poll_interval_seconds=interval)


def job(
    poll: Callable[[], ClusterObservation],
    analyze: Callable[[ClusterObservation], ClusterSnapshot] | None = None,
    name: str = "c1",
    interval: float = 0.05,
    close: Callable[[], None] | None = None,
) -> ClusterJob:
    return ClusterJob(
        settings=settings(name, interval),
        poll=in_thread(poll),
        analyze=analyze or (lambda obs: snapshot(obs.cluster, brokers=[broker(1)])),
        close=close or (lambda: None),
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_first_poll_runs_immediately() -> None:
    store = SnapshotStore([settings(interval=3600)])
    sched = PollScheduler([job(lambda: observation("c1"), interval=3600)], store)
    started = time.monotonic()
    sched.start()
    try:
        wait_for(lambda: store.states()["c1"].up, timeout=3)
        assert time.monotonic() - started < 2
    finally:
        sched.shutdown(1.0)


def test_slow_poll_never_overlaps_itself() -> None:
    """max_instances=1: with a 50 ms interval and a 300 ms poll, runs are strictly serial."""
    lock = threading.Lock()
    active = 0
    max_active = 0
    runs = 0

    def slow_poll() -> ClusterObservation:
        nonlocal active, max_active, runs
        with lock:
            active += 1
            max_active = max(max_active, active)
        time.sleep(0.3)
        with lock:
            active -= 1
            runs += 1
        return observation("c1")

    store = SnapshotStore([settings()])
    sched = PollScheduler([job(slow_poll)], store)
    sched.start()
    try:
        wait_for(lambda: runs >= 3)
    finally:
        sched.shutdown(2.0)
    assert max_active == 1
    assert store.states()["c1"].poll_count >= 3


def test_scrape_during_slow_poll_returns_previous_snapshot() -> None:
    release = threading.Event()
    second_started = threading.Event()
    calls = 0

    def poll() -> ClusterObservation:
        nonlocal calls
        calls += 1
        if calls >= 2:
            second_started.set()
            release.wait(10)
        return observation("c1")

    def analyze(obs: ClusterObservation) -> ClusterSnapshot:
        return snapshot("c1", brokers=[broker(1)],
                        durations={TopicPartition("t", 0): float(calls)})

    store = SnapshotStore([settings()])
    server = MetricsServer(WebSettings("127.0.0.1", 0), build_registry(store), store)
    server.start()
    sched = PollScheduler([job(poll, analyze)], store)
    sched.start()
    try:
        assert second_started.wait(5)
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert time.monotonic() - began < 1.0  # the scrape did not wait for the poll
        assert ('kafka_partition_max_active_transaction_duration_seconds'
                '{cluster="c1",partition="0",topic="t"} 1.0') in text
        release.set()
        wait_for(lambda: store.states()["c1"].poll_count >= 2)
        durations = store.states()["c1"].snapshot
        assert durations is not None
        assert durations.max_active_transaction_duration_seconds[TopicPartition("t", 0)] >= 2
    finally:
        release.set()
        sched.shutdown(2.0)
        server.stop()


def test_poll_exception_is_caught_and_up_0_then_recovers() -> None:
    calls = 0

    def flaky() -> ClusterObservation:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("all brokers down")
        return observation("c1")

    store = SnapshotStore([settings()])
    failures: list[bool] = []
    original = store.record_failure

    def spy(cluster: str, error: str, duration_seconds: float) -> None:
        failures.append(True)
        assert "ConnectionError: all brokers down" in error
        original(cluster, error, duration_seconds)

    store.record_failure = spy  # type: ignore[method-assign]
    sched = PollScheduler([job(flaky)], store)
    sched.start()
    try:
        wait_for(lambda: store.states()["c1"].up)
    finally:
        sched.shutdown(1.0)
    assert failures == [True]
    assert store.states()["c1"].poll_count >= 2


def test_clusters_poll_independently() -> None:
    """A stuck cluster does not delay another cluster's polls (each poll is its own task)."""
    release = threading.Event()

    def stuck() -> ClusterObservation:
        release.wait(10)
        return observation("slow")

    store = SnapshotStore([settings("slow"), settings("fast")])
    sched = PollScheduler([job(stuck, name="slow"), job(lambda: observation("fast"),
                                                        name="fast")], store)
    sched.start()
    try:
        wait_for(lambda: store.states()["fast"].poll_count >= 3)
        assert store.states()["slow"].poll_count == 0
    finally:
        release.set()
        sched.shutdown(2.0)


def test_shutdown_is_bounded_when_a_poll_is_stuck() -> None:
    entered = threading.Event()
    release = threading.Event()
    closed: list[str] = []

    def stuck() -> ClusterObservation:
        entered.set()
        release.wait(10)
        return observation("c1")

    store = SnapshotStore([settings()])
    sched = PollScheduler([job(stuck, close=lambda: closed.append("c1"))], store)
    sched.start()
    assert entered.wait(5)
    began = time.monotonic()
    clean = sched.shutdown(timeout_seconds=0.3)
    elapsed = time.monotonic() - began
    release.set()
    assert clean is False
    assert elapsed < 1.0
    assert closed == []  # never close a client under a running request


def test_shutdown_closes_idle_pollers() -> None:
    closed: list[str] = []
    store = SnapshotStore([settings(interval=3600)])
    sched = PollScheduler([job(lambda: observation("c1"), interval=3600,
                               close=lambda: closed.append("c1"))], store)
    sched.start()
    wait_for(lambda: store.states()["c1"].up)
    assert sched.shutdown(1.0) is True
    assert closed == ["c1"]


def test_a_poll_dispatched_after_shutdown_never_touches_the_closed_poller() -> None:
    """APScheduler may hand a run to its executor as shutdown begins: it must not poll."""
    polls: list[int] = []
    closed = threading.Event()

    def poll() -> ClusterObservation:
        if closed.is_set():
            raise RuntimeError("poller is closed")
        polls.append(1)
        return observation("c1", brokers=[broker(1)])

    settings = ClusterSettings(name="c1", bootstrap_servers=("h:1",))
    store = SnapshotStore([settings])
    job = ClusterJob(settings=settings, poll=in_thread(poll),
                     analyze=lambda o: analyze(o, settings), close=closed.set)
    scheduler = PollScheduler([job], store)
    assert scheduler.shutdown(timeout_seconds=1.0)
    scheduler.run_once(job)  # the late run
    assert polls == []
    assert store.states()["c1"].last_error is None


def test_phase_offsets_are_deterministic_and_spread_over_the_interval() -> None:
    names = [f"cluster-{i}" for i in range(20)]
    offsets = [phase_offset_seconds(n, 10.0) for n in names]
    assert offsets == [phase_offset_seconds(n, 10.0) for n in names]  # same after a restart
    assert all(0 <= o < 10.0 for o in offsets)
    assert len(set(offsets)) == 20
    assert len({int(o) for o in offsets}) >= 7  # most one-second slots of the interval used
    assert phase_offset_seconds("cluster-0", 60.0) == offsets[0] * 6  # a fraction of it


def test_phased_trigger_keeps_its_grid_and_never_fires_twice_in_a_row() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    early = PhasedIntervalTrigger(10.0, start + timedelta(seconds=2))
    late = PhasedIntervalTrigger(10.0, start + timedelta(seconds=7))
    # After the prompt first poll at `start`: the next grid point at least 5 s later.
    assert early.get_next_fire_time(start, start) == start + timedelta(seconds=12)
    assert late.get_next_fire_time(start, start) == start + timedelta(seconds=7)
    # Then every 10 s on the grid.
    fired = start + timedelta(seconds=7)
    assert late.get_next_fire_time(fired, fired) == start + timedelta(seconds=17)
    # A run that started late (slow previous poll) does not move the phase.
    assert late.get_next_fire_time(start + timedelta(seconds=9), start) == start + timedelta(
        seconds=17)
    # No previous run: the first grid point from now on.
    assert late.get_next_fire_time(None, start + timedelta(seconds=30)) == start + timedelta(
        seconds=37)


def test_clusters_poll_promptly_at_start_then_at_spread_phases() -> None:
    names = [f"c{i}" for i in range(8)]
    store = SnapshotStore([settings(n, interval=3600) for n in names])
    sched = PollScheduler(
        [job(lambda n=n: observation(n), name=n, interval=3600) for n in names], store)
    before = datetime.now(UTC)
    sched.start()
    try:
        # Every cluster's first poll runs without waiting for its phase (an hour here).
        wait_for(lambda: all(s.poll_count >= 1 for s in store.states().values()))
        planned = sched.next_poll_times()
    finally:
        sched.shutdown(1.0)
    assert set(planned) == set(names)
    offsets = {}
    for name, at in planned.items():
        assert at is not None
        phase = phase_offset_seconds(name, 3600)
        # The next poll is at the cluster's own phase, half an interval to 1.5 intervals on.
        assert timedelta(seconds=1800) <= at - before <= timedelta(seconds=5400 + 60)
        offsets[name] = (at - before).total_seconds() % 3600
        assert abs(offsets[name] - phase) < 60
    spread = sorted(offsets.values())
    assert spread[-1] - spread[0] > 1800  # not phase-locked: spread over the interval
    assert len({round(o) for o in spread}) == len(names)


def test_a_poll_that_overruns_its_interval_is_counted_and_logged_once() -> None:
    """A poll still running when its next run is due: counted in
    kafka_txn_exporter_poll_overruns_total and told by one `poll_overran` line (with how long
    it took and how many scheduled runs it made the scheduler skip), not by APScheduler's own
    "maximum number of running instances reached" warning at every skipped run."""
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    interval = 0.1
    store = SnapshotStore([settings(interval=interval)])
    release = threading.Event()
    started = threading.Event()
    calls: list[int] = []
    held: list[float] = []

    def poll() -> ClusterObservation:
        calls.append(1)
        if len(calls) == 2:  # the second poll overruns: held until runs were skipped
            held.append(time.monotonic())
            started.set()
            release.wait(timeout=30)
        return observation("c1")

    sched = PollScheduler([job(poll, interval=interval)], store)
    sched.start()
    try:
        assert started.wait(timeout=10)
        wait_for(lambda: sched.skipped_runs("c1") >= 3, timeout=10)
        held.append(time.monotonic())
        release.set()
        wait_for(lambda: len(calls) >= 4, timeout=10)  # back to normal polls
    finally:
        release.set()
        sched.shutdown()
    lines = [json.loads(raw) for raw in stream.getvalue().splitlines()]
    overran = [line for line in lines if line["event"] == "poll_overran"]
    assert len(overran) == 1, overran
    (line,) = overran
    assert line["cluster"] == "c1" and line["interval_seconds"] == interval
    # The logged duration holds at least the time the test held the poll (to its 3 decimals);
    # the skipped runs' due times alone do not bound it: the poll starts a little after its own.
    assert line["duration_seconds"] >= round(held[1] - held[0], 3) - 0.001
    assert line["skipped_runs"] >= 3
    assert "maximum number of running instances" not in stream.getvalue()
    assert store.states()["c1"].poll_overruns == 1
    registry = build_registry(store)
    assert registry.get_sample_value(
        "kafka_txn_exporter_poll_overruns_total", {"cluster": "c1"}) == 1.0
