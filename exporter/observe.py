"""A cluster observed over polls: its `ClusterPoller` (what Kafka answers in one poll) followed
by the orphan tracker (`exporter.orphans`: what the polls so far make of those answers).

Every command that analyzes polls goes through here (the daemon's job, `scan`, `abort`, `spark
scan`), so each asks and counts the same way. The tracker's state is a plain value kept here
between polls; a `ClusterObserver` runs one poll at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from exporter.collect.connection import CollectError
from exporter.collect.loop import run as run_on_loop
from exporter.collect.poll import ClusterPoller, wall_clock_ms
from exporter.model import ClusterObservation, OpenTransaction
from exporter.orphans import OrphanTracking, track
from exporter.settings import ClusterSettings

__all__ = ["ClusterObserver"]


class ClusterObserver:
    """Polls one cluster and tracks its orphans; the arguments are `ClusterPoller`'s."""

    def __init__(
        self,
        settings: ClusterSettings,
        clock_ms: Callable[[], int] = wall_clock_ms,
        also_ask: Callable[[OpenTransaction], bool] | None = None,
        screen_partitions: bool = True,
    ) -> None:
        self.settings = settings
        self.poller = ClusterPoller(
            settings, clock_ms=clock_ms, also_ask=also_ask,
            screen_partitions=screen_partitions,
        )
        self.tracking = OrphanTracking()
        """The orphan tracker's state after the last poll."""
        self._lock = threading.Lock()

    @property
    def metadata_error(self) -> CollectError | None:
        """`ClusterPoller.metadata_error` of the last poll."""
        return self.poller.metadata_error

    def poll(self) -> ClusterObservation:
        """One poll, from any thread but the polling loop's (the one-shot commands)."""
        with self._lock:
            return run_on_loop(self.poll_async())

    async def poll_async(self) -> ClusterObservation:
        """One poll on the polling loop, asked with the tracker's focus, then tracked. A poll
        that raises (or is cancelled) leaves the tracking as it was."""
        observation = await self.poller.poll_async(self.tracking.focus())
        self.tracking, observation = track(self.tracking, observation)
        return observation

    def close(self) -> None:
        self.poller.close()

    def cache_sizes(self) -> dict[str, int]:
        """Entries held between polls: the poller's caches and the tracker's."""
        return {**self.poller.cache_sizes(), **self.tracking.sizes()}
