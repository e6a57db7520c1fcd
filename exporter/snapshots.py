"""The latest analyzed state of each cluster, shared by the scheduler (writer) and /metrics.

Polls publish into a `SnapshotStore`; every publish builds a new immutable `ClusterState` and
swaps one reference, so a reader sees one consistent state without taking a lock, never waits
for a poll and never sees half of one. A publish costs the same however many clusters there
are: the read-only copy of every cluster's state that `states()` hands out is made when it is
read after a change, not at each publish (with 20,000 clusters, a copy per publish was most of
the exporter's CPU). It sits below `expose` (which reads it) and beside the
scheduler (which writes it), so neither imports the other.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from exporter.model import ClusterSnapshot, PollPhase
from exporter.settings import ClusterSettings

POLL_DURATION_BUCKETS_SECONDS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything exposed for one cluster; replaced as a whole on every poll."""

    name: str
    labels: Mapping[str, str]
    snapshot: ClusterSnapshot | None = None
    """Latest analyzed snapshot; None before the first poll and after a failed poll."""
    up: bool = False
    last_successful_poll_timestamp_seconds: float | None = None
    last_error: str | None = None
    poll_bucket_counts: tuple[int, ...] = (0,) * (len(POLL_DURATION_BUCKETS_SECONDS) + 1)
    """Non-cumulative counts per bucket; the last one is +Inf."""
    poll_duration_sum_seconds: float = 0.0
    poll_count: int = 0
    request_errors_total: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    """(broker, api, error) -> count, accumulated over polls."""
    poll_interval_seconds: float | None = None
    """The cluster's configured poll interval (None when the store was built without one)."""
    poll_overruns: int = 0
    """Polls still running when their next run was due (or longer than the interval)."""
    poll_phase_seconds: Mapping[str, float] = field(default_factory=dict)
    metadata_refreshes_total: Mapping[str, int] = field(default_factory=dict)
    """Full Metadata requests answered, by why they were asked, accumulated over polls."""
    """The last poll's seconds per `PollPhase` value (its analysis included when measured);
    empty after a poll that raised: no phase is known then."""

    @property
    def ever_succeeded(self) -> bool:
        return self.last_successful_poll_timestamp_seconds is not None


def _observe(state: ClusterState, duration_seconds: float) -> ClusterState:
    counts = list(state.poll_bucket_counts)
    counts[bisect.bisect_left(POLL_DURATION_BUCKETS_SECONDS, duration_seconds)] += 1
    return replace(
        state,
        poll_bucket_counts=tuple(counts),
        poll_duration_sum_seconds=state.poll_duration_sum_seconds + duration_seconds,
        poll_count=state.poll_count + 1,
    )


class SnapshotStore:
    """Latest state per cluster. Writers serialise on a lock; readers just read `states()`."""

    def __init__(self, clusters: Sequence[ClusterSettings]) -> None:
        self._write_lock = threading.Lock()
        self._live: dict[str, ClusterState] = {
            c.name: ClusterState(name=c.name, labels=dict(c.labels),
                                 poll_interval_seconds=c.poll_interval_seconds)
            for c in clusters
        }
        """Written under the lock, a value at a time; its keys change only by replacing it."""
        self._version = 0
        self._view: tuple[int, Mapping[str, ClusterState]] | None = None
        self._listeners: list[Callable[[str | None], None]] = []
        self._retired: set[str] = set()
        """Clusters dropped by a reload: a poll of theirs still finishing is discarded."""

    def set_clusters(self, clusters: Sequence[ClusterSettings]) -> None:
        """A reloaded configuration: keep the state of clusters still configured (with their
        new static labels and poll interval), add new ones, drop removed ones (their series
        disappear)."""
        with self._write_lock:
            old = self._live
            states: dict[str, ClusterState] = {}
            for c in clusters:
                kept = old.get(c.name)
                states[c.name] = (
                    replace(kept, labels=dict(c.labels),
                            poll_interval_seconds=c.poll_interval_seconds)
                    if kept is not None
                    else ClusterState(name=c.name, labels=dict(c.labels),
                                      poll_interval_seconds=c.poll_interval_seconds)
                )
            self._retired = (self._retired | set(old)) - set(states)
            self._live = states
            self._version += 1
        self._changed(None)

    def on_change(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener` on the writer's thread after every publish or recorded failure, with
        the cluster it changed (None: the set of clusters changed, a reload)."""
        self._listeners.append(listener)

    def _changed(self, cluster: str | None) -> None:
        for listener in self._listeners:
            listener(cluster)

    def states(self) -> Mapping[str, ClusterState]:
        """Every cluster's state as of one moment: a read-only copy, which later publishes
        leave unchanged (made once per change, in one step under the GIL)."""
        version = self._version
        view = self._view
        if view is not None and view[0] == version:
            return view[1]
        copy: Mapping[str, ClusterState] = MappingProxyType(dict(self._live))
        if self._version == version:
            self._view = (version, copy)
        return copy

    def state(self, name: str) -> ClusterState | None:
        """One cluster's current state (None: not configured), without copying the rest."""
        return self._live.get(name)

    def _swap(self, name: str, new: ClusterState) -> None:
        self._live[name] = new
        self._version += 1

    def _get(self, name: str) -> ClusterState:
        try:
            return self._live[name]
        except KeyError:
            raise KeyError(f"unknown cluster {name!r}") from None

    def publish(
        self,
        snapshot: ClusterSnapshot,
        duration_seconds: float | None = None,
        now_seconds: float | None = None,
        analyze_seconds: float | None = None,
    ) -> None:
        """Make `snapshot` the cluster's current one (and count its poll and errors);
        `analyze_seconds`: how long its analysis took (the `analyze` phase), when measured."""
        duration = snapshot.poll_duration_seconds if duration_seconds is None else duration_seconds
        with self._write_lock:
            if snapshot.cluster in self._retired:
                return
            old = self._get(snapshot.cluster)
            errors = dict(old.request_errors_total)
            for err in snapshot.request_errors:
                key = (str(err.broker_id), err.api, err.error)
                errors[key] = errors.get(key, 0) + 1
            refreshes = old.metadata_refreshes_total
            if snapshot.metadata_refresh is not None:
                refreshes = MappingProxyType({
                    **refreshes,
                    snapshot.metadata_refresh: refreshes.get(snapshot.metadata_refresh, 0) + 1,
                })
            phases = dict(snapshot.poll_phase_seconds)
            if analyze_seconds is not None:
                phases[PollPhase.ANALYZE.value] = analyze_seconds
            last_ok = old.last_successful_poll_timestamp_seconds
            if snapshot.up:
                last_ok = time.time() if now_seconds is None else now_seconds
            new = replace(
                _observe(old, duration),
                snapshot=snapshot,
                up=snapshot.up,
                last_successful_poll_timestamp_seconds=last_ok,
                last_error=None if snapshot.up else "cluster not reachable",
                request_errors_total=MappingProxyType(errors),
                poll_phase_seconds=MappingProxyType(phases),
                metadata_refreshes_total=refreshes,
            )
            self._swap(snapshot.cluster, new)
        self._changed(snapshot.cluster)

    def record_failure(self, cluster: str, error: str, duration_seconds: float) -> None:
        """A poll raised: drop the data series (stale data misleads), keep up=0 visible."""
        with self._write_lock:
            if cluster in self._retired:
                return
            old = self._get(cluster)
            new = replace(_observe(old, duration_seconds), snapshot=None, up=False,
                          last_error=error, poll_phase_seconds=MappingProxyType({}))
            self._swap(cluster, new)
        self._changed(cluster)

    def record_overrun(self, cluster: str) -> None:
        """A poll overran its interval (counted; the data it published stands)."""
        with self._write_lock:
            if cluster in self._retired:
                return
            old = self._get(cluster)
            self._swap(cluster, replace(old, poll_overruns=old.poll_overruns + 1))
        self._changed(cluster)

    def not_ready(self) -> list[str]:
        """Clusters that have not had one successful poll yet (for /readyz)."""
        return [name for name, st in self.states().items() if not st.ever_succeeded]
