"""Real Apache Kafka brokers for the tests under tests/realkafka (marker `real_kafka`).

Each test runs once per version of the matrix (scripts/kafka-versions, or the versions in
KTE_KAFKA_VERSIONS); the tests of the ZooKeeper-mode brokers (`real_zk_kafka`) once per version
of scripts/kafka-zk-versions (or KTE_KAFKA_ZK_VERSIONS); against brokers started from the jars
scripts/install-kafka resolved from Maven Central. A version that is not installed fails its
tests with the command that installs it; nothing is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from kafka_sim.realkafka import RealKafkaCluster, start_cluster
from realhelpers import VERIFICATION_OFF, focused_kafka_versions, kafka_versions, kafka_zk_versions

_HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def reset_logging() -> Iterator[None]:
    """Commands run in-process here (`abort`, `scan`) configure logging onto the stream pytest
    captured for that test; later tests must not log into it."""
    yield
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real_kafka)


@pytest.fixture(scope="session", params=kafka_versions())
def kafka_version(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    return version


@pytest.fixture(scope="session")
def real_kafka(
    kafka_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKafkaCluster]:
    """One single-node KRaft broker per version, shared by the tests of that version: partition
    verification off, so the raw producer can leave a hanging transaction (each test makes its
    own topics and transactional ids)."""
    workdir = tmp_path_factory.mktemp(f"kafka-{kafka_version}")
    cluster = start_cluster(kafka_version, workdir, broker_config=VERIFICATION_OFF)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session", params=focused_kafka_versions())
def focused_kafka_version(request: pytest.FixtureRequest) -> str:
    """A version of the focused set (realhelpers.focused_kafka_versions)."""
    version: str = request.param
    return version


@pytest.fixture(scope="session")
def clients_kafka(
    focused_kafka_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKafkaCluster]:
    """A broker of the real-client tests' own (librdkafka, Kafka Streams, Flink): they restart
    it and wipe its transaction log, which the shared broker's tests must not see. Partition
    verification stays at its default (on): real clients add their partitions first."""
    from clienthelpers import CLIENTS_BROKER_CONFIG

    workdir = tmp_path_factory.mktemp(f"kafka-clients-{focused_kafka_version}")
    cluster = start_cluster(focused_kafka_version, workdir, broker_config=CLIENTS_BROKER_CONFIG)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session", params=kafka_zk_versions())
def kafka_zk_version(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    return version


@pytest.fixture(scope="session")
def real_zk_kafka(
    kafka_zk_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKafkaCluster]:
    """One ZooKeeper-mode broker (with its own ZooKeeper) per version of the ZooKeeper set;
    partition verification off where the setting exists (3.6+; older brokers never verify)."""
    workdir = tmp_path_factory.mktemp(f"kafka-zk-{kafka_zk_version}")
    major, minor = (int(part) for part in kafka_zk_version.split(".")[:2])
    config = VERIFICATION_OFF if (major, minor) >= (3, 6) else {}
    cluster = start_cluster(kafka_zk_version, workdir, broker_config=config, zookeeper=True)
    try:
        yield cluster
    finally:
        cluster.stop()
