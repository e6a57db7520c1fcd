"""The registry /metrics renders: the snapshot collector first, then the process metrics.

`ExporterRegistry` keeps its collectors in registration order where the render cache can read
them (prometheus_client's `CollectorRegistry` has no public accessor), so /metrics renders the
snapshot families once per published state and only the others on every scrape.
"""

from __future__ import annotations

import threading

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.expose.collector import SnapshotCollector
from exporter.snapshots import SnapshotStore


class ExporterRegistry(CollectorRegistry):
    """A CollectorRegistry that keeps its collectors in registration order where we can read
    them (prometheus_client has no public accessor), so /metrics can render each one apart."""

    def __init__(self) -> None:
        super().__init__()
        self._ordered: list[Collector] = []
        self._ordered_lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        super().register(collector)
        with self._ordered_lock:
            self._ordered.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        with self._ordered_lock:
            self._ordered.remove(collector)

    def collectors(self) -> list[Collector]:
        """The registered collectors in registration order."""
        with self._ordered_lock:
            return list(self._ordered)


def build_registry(store: SnapshotStore) -> ExporterRegistry:
    """A private registry: the snapshot collector plus the usual process metrics."""
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(store))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
