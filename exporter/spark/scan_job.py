"""`spark scan`: poll a fleet of clusters as one Spark job and write their metrics once.

One task per cluster runs the project's own `ClusterPoller` and `analyze` (via
`exporter.scan.scan_cluster`, with `scan`'s orphan check), so the numbers are the daemon's
numbers. The driver publishes
the snapshots into a `SnapshotStore` and renders them with the daemon's `SnapshotCollector`:
same metric names, help, labels. Output is a node_exporter textfile-collector file and/or a
Pushgateway push.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from prometheus_client import generate_latest, push_to_gateway
from prometheus_client.registry import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.analyze import analyze
from exporter.expose.collector import SnapshotCollector
from exporter.model import ClusterObservation, ClusterSnapshot
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

DEFAULT_PUSH_JOB = "kafka-txn-exporter"


@dataclass(frozen=True, slots=True)
class ClusterScan:
    """The outcome of one cluster's task; exactly one of snapshot/error is set."""

    cluster: str
    snapshot: ClusterSnapshot | None
    error: str | None
    duration_seconds: float


def poll_and_analyze(settings: ClusterSettings, orphan_check_seconds: float = 0.0) -> ClusterScan:
    """Runs inside a Spark task. A failure is data (up=0 for that cluster), not a job abort."""
    from exporter.scan import ClusterFailed, scan_cluster

    started = time.monotonic()
    try:
        snapshot = scan_cluster(settings, orphan_check_seconds)
    except ClusterFailed as exc:  # no broker answered: the cause, as `scan` names it
        return ClusterScan(settings.name, None, str(exc), time.monotonic() - started)
    except Exception as exc:  # any poll failure becomes kafka_txn_exporter_up 0
        return ClusterScan(settings.name, None, f"{type(exc).__name__}: {exc}",
                           time.monotonic() - started)
    return ClusterScan(settings.name, snapshot, None, time.monotonic() - started)


def scan_fleet(
    spark: SparkSession, clusters: Sequence[ClusterSettings], orphan_check_seconds: float = 0.0
) -> list[ClusterScan]:
    """One partition (one task) per cluster, so the clusters are polled in parallel. With
    `orphan_check_seconds` > 0 each task makes `scan`'s orphan check (exporter.scan)."""
    if not clusters:
        return []
    rdd = spark.sparkContext.parallelize(list(clusters), numSlices=len(clusters))
    task = partial(poll_and_analyze, orphan_check_seconds=orphan_check_seconds)
    results: list[ClusterScan] = rdd.map(task).collect()
    return sorted(results, key=lambda r: r.cluster)


def _analyze_partition(
    items: Iterable[tuple[ClusterObservation, ClusterSettings]],
) -> Iterator[ClusterSnapshot]:
    for observation, settings in items:
        yield analyze(observation, settings)


def analyze_on_spark(
    spark: SparkSession,
    items: Sequence[tuple[ClusterObservation, ClusterSettings]],
    partitions: int = 2,
) -> list[ClusterSnapshot]:
    """`analyze` run by Spark executors over given observations (order kept)."""
    if not items:
        return []
    rdd = spark.sparkContext.parallelize(list(items), numSlices=max(1, partitions))
    result: list[ClusterSnapshot] = rdd.mapPartitions(_analyze_partition).collect()
    return result


def registry_for(
    clusters: Sequence[ClusterSettings], scans: Iterable[ClusterScan]
) -> CollectorRegistry:
    store = SnapshotStore(clusters)
    for scan in scans:
        if scan.snapshot is not None:
            store.publish(scan.snapshot, duration_seconds=scan.duration_seconds)
        else:
            store.record_failure(scan.cluster, scan.error or "poll failed", scan.duration_seconds)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    return registry


def write_textfile(registry: CollectorRegistry, path: str | os.PathLike[str]) -> None:
    """Atomic write (temp file + rename) as the textfile collector requires."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(generate_latest(registry))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def push(registry: CollectorRegistry, gateway: str, job: str = DEFAULT_PUSH_JOB,
         timeout_seconds: float = 30.0) -> None:
    """PUT the whole group: series of finished transactions disappear from the gateway too."""
    push_to_gateway(gateway, job=job, registry=registry, timeout=timeout_seconds)
