"""What the tests that run the simulated cluster (simulator/kafka_sim) over TCP share: the capture's
broker settings, an environment around a SimCluster, pollers, and small raw requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka_sim.cluster import SimCluster

from exporter.analyze import analyze
from exporter.model import ClusterObservation, ClusterSnapshot
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

CAPTURE_BROKER_CONFIG = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
}
"""As the real-broker capture's broker (tests/data/real-kafka-4.0/README.md): a 60 s maximum
transaction timeout, and partition verification off so that a hanging transaction can be made."""

MINUTE_MS = 60_000
CAPTURES = Path(__file__).resolve().parent / "data" / "real-kafka-4.0"


def capture(prefix: str) -> dict[str, Any]:
    """The real-broker capture file whose name starts with `prefix` ("04", "41", ...)."""
    path = next(CAPTURES.glob(f"{prefix}-*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@dataclass
class SimEnv:
    """A running SimCluster, with the simulator's clock as the tests' "now"."""

    sim: SimCluster

    @property
    def bootstrap(self) -> str:
        return self.sim.bootstrap_servers

    def now_ms(self) -> int:
        return int(self.sim.clock.now_ms())

    def leader(self, topic: str, partition: int) -> int:
        return int(self.sim.call(lambda: self.sim.state.partition(topic, partition).leader_id))


def cluster_settings(sim: SimCluster, name: str, **settings: Any) -> ClusterSettings:
    """Settings for one cluster whose bootstrap servers are the simulator's brokers."""
    return ClusterSettings(
        name=name, bootstrap_servers=tuple(sim.bootstrap_servers.split(",")), **settings
    )


@contextmanager
def cluster_poller(sim: SimCluster, settings: ClusterSettings) -> Iterator[ClusterObserver]:
    """A ClusterObserver (poller and orphan tracker) on the simulator's clock, closed
    afterwards."""
    poller = ClusterObserver(settings, clock_ms=sim.clock.now_ms)
    try:
        yield poller
    finally:
        poller.close()


def poll_once(sim: SimCluster, settings: ClusterSettings) -> ClusterObservation:
    """One poll by a fresh poller (new connections, nothing cached)."""
    with cluster_poller(sim, settings) as poller:
        return poller.poll()


@dataclass
class PollEnv(SimEnv):
    """A SimCluster with one long-lived poller (its connections and caches persist)."""

    poller: ClusterObserver
    settings: ClusterSettings

    def poll(self) -> tuple[ClusterObservation, ClusterSnapshot]:
        obs = self.poller.poll()
        return obs, analyze(obs, self.settings)


@contextmanager
def poll_env(sim: SimCluster, name: str, **settings: Any) -> Iterator[PollEnv]:
    """PollEnv whose settings are `cluster_settings(sim, name, **settings)`."""
    cluster = cluster_settings(sim, name, **settings)
    with cluster_poller(sim, cluster) as poller:
        yield PollEnv(sim, poller, cluster)


def latest_offsets_request(
    topic: str, partition: int, isolation_level: int, timeout_ms: int, version: int = 10
) -> Any:
    """ListOffsets v10 for the latest offset (timestamp -1): the high watermark with
    READ_UNCOMMITTED (0), the last stable offset with READ_COMMITTED (1), as captures 31/32
    (`version`: lower for an older broker)."""
    part_cls = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    return ListOffsetsRequest[version](
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    part_cls(partition_index=partition, current_leader_epoch=-1, timestamp=-1)
                ],
            )
        ],
        timeout_ms=timeout_ms,
    )
