"""What the real-broker tests share: the version matrix, topics, Kafka's own tools as the oracle
(`kafka-transactions.sh find-hanging`, JmxTool), and the exporter's poller against the broker."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_sim.client import KafkaProtocolError
from kafka_sim.producer import (
    HANGING_PRODUCE_VERSIONS,
    ProducedBatch,
    RawProducer,
    idempotent_producer_write,
)
from kafka_sim.realkafka import RealKafkaCluster
from waits import wait_for

from exporter.analyze import analyze
from exporter.model import ClusterObservation, ClusterSnapshot
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

REPO = Path(__file__).resolve().parents[2]
MINUTE_MS = 60_000
DEFAULT_MAX_TIMEOUT_MS = 900_000
"""transaction.max.timeout.ms at its default (15 min), as the test brokers run."""
LATE_BACKDATE_MS = DEFAULT_MAX_TIMEOUT_MS + 5 * MINUTE_MS + 2 * MINUTE_MS
"""Older than the broker's own lateness rule (max timeout + 5 min) with 2 minutes to spare."""

VERIFICATION_OFF = {"transaction.partition.verification.enable": "false"}
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"

_names = itertools.count()


def kafka_versions() -> list[str]:
    """The matrix: KTE_KAFKA_VERSIONS (space-separated) or scripts/kafka-versions."""
    chosen = os.environ.get("KTE_KAFKA_VERSIONS", "").split()
    if chosen:
        return chosen
    lines = (REPO / "scripts" / "kafka-versions").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def focused_kafka_versions() -> list[str]:
    """Where the slowest real-broker suites run -- the real clients (librdkafka, Kafka Streams,
    Flink), OAUTHBEARER, Kerberos and SASL session lifetimes, each with brokers, a KDC or an
    OIDC provider of its own: KTE_FOCUSED_KAFKA_VERSIONS (space-separated), or the newest
    version of the matrix. They take minutes per version, so the suite runs them on one version
    to stay inside its time budget; every version of the matrix passed them
    (docs/compatibility.md#tested-against-real-brokers)."""
    chosen = os.environ.get("KTE_FOCUSED_KAFKA_VERSIONS", "").split()
    return chosen or kafka_versions()[-1:]


def kafka_zk_versions() -> list[str]:
    """The ZooKeeper-mode set: KTE_KAFKA_ZK_VERSIONS (space-separated) or
    scripts/kafka-zk-versions (a focused set per version, not the whole matrix)."""
    chosen = os.environ.get("KTE_KAFKA_ZK_VERSIONS", "").split()
    if chosen:
        return chosen
    lines = (REPO / "scripts" / "kafka-zk-versions").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def unique(prefix: str) -> str:
    """A topic or transactional id no other test of the session uses."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


COORDINATOR_LOAD_IN_PROGRESS = 14


def idempotent_write(bootstrap: str, topic: str, partition: int, **write: Any) -> None:
    """One short-lived idempotent producer's write; a fresh broker answers InitProducerId
    with COORDINATOR_LOAD_IN_PROGRESS until it has a block of producer ids: asked again."""

    def attempt() -> bool:
        try:
            idempotent_producer_write(bootstrap, topic, partition, **write)
        except KafkaProtocolError as exc:
            if exc.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                raise
            return False
        return True

    wait_for("an idempotent producer id", attempt, 60.0)


def create_topic(
    cluster: RealKafkaCluster,
    name: str,
    partitions: int = 1,
    replication: int = 1,
    configs: Mapping[str, str] | None = None,
) -> str:
    """A topic every partition of which answers at its leader (RealKafkaCluster.create_topic)."""
    return cluster.create_topic(name, partitions, replication, configs)


@dataclass(frozen=True)
class StalledWrite:
    """A transaction whose first batch is old and whose producer still writes to it now."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    first: ProducedBatch
    second: ProducedBatch

    @property
    def start_offset(self) -> int:
        return self.first.base_offset


def hanging_transaction_with_fresh_write(
    bootstrap: str, transactional_id: str, topic: str, partition: int, backdate_ms: int
) -> StalledWrite:
    """Like `hanging_transaction`, then one more transactional batch of the same transaction
    stamped now: same producer id and epoch, sequence continuing, partition still never added
    to the transaction. The partition's LastTimestamp for the producer becomes now, so Kafka's
    tools, which age a transaction by it, see a fresh one (docs/kafka-semantics.md
    #late-transactions)."""
    producer = RawProducer(bootstrap, transactional_id, transaction_timeout_ms=10000)
    try:
        producer.init_producer_id()
        old = int(time.time() * 1000) - backdate_ms
        first = producer.produce(
            topic, partition, [(b"k0", b"old", old)], transactional=True,
            versions=HANGING_PRODUCE_VERSIONS,
        )  # fmt: skip
        second = producer.produce(
            topic, partition, [(b"k1", b"fresh", None)], transactional=True,
            versions=HANGING_PRODUCE_VERSIONS,
        )  # fmt: skip
        return StalledWrite(
            topic, partition, producer.producer_id, producer.producer_epoch, first, second
        )
    finally:
        producer.close()


@dataclass(frozen=True)
class HangingRow:
    """One line of `kafka-transactions.sh find-hanging`."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int
    duration_minutes: int


def find_hanging(cluster: RealKafkaCluster, broker_id: int = 1) -> list[HangingRow]:
    """Kafka's own `kafka-transactions.sh find-hanging --broker-id N`, parsed."""
    result = cluster.tool(
        TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap,
        "find-hanging", "--broker-id", str(broker_id),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows: list[HangingRow] = []
    for line in result.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        rows.append(
            HangingRow(
                topic=fields[0],
                partition=int(fields[1]),
                producer_id=int(fields[2]),
                producer_epoch=int(fields[3]),
                coordinator_epoch=int(fields[4]),
                start_offset=int(fields[5]),
                last_timestamp_ms=int(fields[6]),
                duration_minutes=int(fields[7]),
            )
        )
    return rows


def describe_producers_tool(
    cluster: RealKafkaCluster, topic: str, partition: int
) -> list[dict[str, int]]:
    """Kafka's own `kafka-transactions.sh describe-producers` (3.0+), one dict per producer keyed
    by the tool's column names (ProducerId, LastTimestamp, CurrentTransactionStartOffset...)."""
    result = cluster.tool(
        TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap,
        "describe-producers", "--topic", topic, "--partition", str(partition),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    return [{name: int(value) for name, value in zip(header, row, strict=True)} for row in rows]


def jmx_late_transactions(cluster: RealKafkaCluster, broker_id: int = 1) -> int:
    """The broker's own PartitionsWithLateTransactionsCount gauge."""
    name = "kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount"
    values = cluster.jmx_values(name, node_id=broker_id)
    assert name in values, f"no {name} on broker {broker_id}: {values}"
    return int(values[name])


def jmx_last_stable_offset_lag(
    cluster: RealKafkaCluster, topic: str, partition: int, broker_id: int = 1
) -> int:
    """The broker's LastStableOffsetLag gauge of one partition (high watermark - LSO)."""
    name = (
        f"kafka.cluster:type=Partition,name=LastStableOffsetLag,topic={topic},partition={partition}"
    )
    values = cluster.jmx_values(name, node_id=broker_id)
    assert name in values, f"no {name} on broker {broker_id}: {values}"
    return int(values[name])


def cluster_settings(
    cluster: RealKafkaCluster, name: str = "real", **settings: Any
) -> ClusterSettings:
    return ClusterSettings(
        name=name, bootstrap_servers=tuple(cluster.bootstrap.split(",")), **settings
    )


@dataclass
class RealPollEnv:
    """One long-lived poller against a real cluster (connections and caches persist)."""

    cluster: RealKafkaCluster
    poller: ClusterObserver
    settings: ClusterSettings

    def poll(self) -> tuple[ClusterObservation, ClusterSnapshot]:
        observation = self.poller.poll()
        return observation, analyze(observation, self.settings)


@contextmanager
def poll_env(cluster: RealKafkaCluster, **settings: Any) -> Iterator[RealPollEnv]:
    cluster_config = cluster_settings(cluster, **settings)
    poller = ClusterObserver(cluster_config)
    try:
        yield RealPollEnv(cluster, poller, cluster_config)
    finally:
        poller.close()
