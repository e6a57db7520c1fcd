"""Exposure end to end against the simulated cluster over TCP: the verification flag, the
finalized transaction.version and the compacted flag of late transactions' topics, through
the poller, analyze and the /metrics collector; unknown cases are absent
(docs/kafka-semantics.md#exposure)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, PollEnv, poll_env

from exporter.expose.collector import SnapshotCollector
from exporter.model import ClusterSnapshot, PartitionVerification, RequestError
from exporter.snapshots import SnapshotStore

DESCRIBE_CONFIGS = 32
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(env: PollEnv, snap: ClusterSnapshot) -> Samples:
    store = SnapshotStore([env.settings])
    store.publish(snap)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    out: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def values(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels).get(label, ""): v for (n, labels), v in samples.items() if n == name}


SETTINGS = {"request_timeout_seconds": 2.0, "late_buffer_seconds": 10.0,
            "min_reported_duration_seconds": 0.0}


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    # As the demo's and the captures' brokers: verification off, so transactions can hang.
    with SimCluster(brokers=3, topics={"plain": 2, "quiet": 1},
                    broker_config=CAPTURE_BROKER_CONFIG) as cluster:
        cluster.create_topic("changelog", 1, configs={"cleanup.policy": "compact,delete"})
        yield cluster


@pytest.fixture
def env(sim: SimCluster) -> Iterator[PollEnv]:
    with poll_env(sim, "sim", **SETTINGS) as env:
        yield env


def test_flags_of_a_4_0_cluster_with_verification_off(env: PollEnv) -> None:
    for topic in ("plain", "changelog"):
        hanging_transaction(env.bootstrap, f"hang-{topic}", topic, 0,
                            backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms)
    fresh = open_transaction(env.bootstrap, "fresh", "quiet", [0], now_ms=env.now_ms)
    try:
        obs, snap = env.poll()
    finally:
        fresh.close_quietly()
    assert [b.partition_verification for b in obs.brokers] == [PartitionVerification.DISABLED] * 3
    assert obs.finalized_features is not None and obs.finalized_features.epoch == 10
    assert snap.finalized_transaction_version == 2  # as the captured 4.0 broker (capture 01)
    # Only topics with a late transaction are read: "quiet" holds a fresh one.
    assert obs.compacted_topics == {"changelog": True, "plain": False}
    assert {lt.transaction.topic: lt.topic_compacted for lt in snap.late_transactions} == {
        "changelog": True, "plain": False}

    samples = scrape(env, snap)
    assert values(samples, "kafka_transaction_partition_verification_enabled", "broker") == {
        "1": 0.0, "2": 0.0, "3": 0.0}
    assert values(samples, "kafka_finalized_transaction_version", "cluster") == {"sim": 2.0}
    assert values(samples, "kafka_topic_compacted", "topic") == {"changelog": 1.0, "plain": 0.0}


def test_verification_enabled_broker_reports_1() -> None:
    with SimCluster(brokers=1, topics={"t": 1},
                    broker_config={"transaction.max.timeout.ms": "60000"}) as sim:
        with poll_env(sim, "sim", **SETTINGS) as env:  # verification: default true
            obs, snap = env.poll()
        assert [b.partition_verification for b in obs.brokers] == [PartitionVerification.ENABLED]
        assert values(scrape(env, snap), "kafka_transaction_partition_verification_enabled",
                      "broker") == {"1": 1.0}


def test_no_late_transaction_reads_no_topic_config(sim: SimCluster, env: PollEnv) -> None:
    # Any TOPIC DescribeConfigs for "quiet" would be refused and counted: none is sent.
    sim.inject_error(DESCRIBE_CONFIGS, TOPIC_AUTHORIZATION_FAILED, topic="quiet")
    fresh = open_transaction(env.bootstrap, "fresh", "quiet", [0], now_ms=env.now_ms)
    try:
        obs, snap = env.poll()
        env.sim.clock.advance(MINUTE_MS // 2)  # still below 60 s + 10 s
        obs2, _ = env.poll()
    finally:
        fresh.close_quietly()
    assert len(obs.open_transactions) == 1 and snap.late_transactions == ()
    assert obs.compacted_topics == {} and obs2.compacted_topics == {}
    assert [e for e in (*obs.request_errors, *obs2.request_errors)
            if e.api == "DescribeConfigs"] == []
    assert env.poller.cache_sizes()["compacted_topics"] == 0


def test_refused_topic_config_is_unknown_and_counted(sim: SimCluster, env: PollEnv) -> None:
    sim.inject_error(DESCRIBE_CONFIGS, TOPIC_AUTHORIZATION_FAILED, topic="changelog")
    for topic in ("plain", "changelog"):
        hanging_transaction(env.bootstrap, f"hang-{topic}", topic, 0,
                            backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms)
    obs, snap = env.poll()
    assert obs.compacted_topics == {"plain": False}
    assert {lt.transaction.topic: lt.topic_compacted for lt in snap.late_transactions} == {
        "changelog": None, "plain": False}
    assert [e for e in obs.request_errors if e.api == "DescribeConfigs"] == [
        RequestError(1, "DescribeConfigs", "TOPIC_AUTHORIZATION_FAILED")]
    assert values(scrape(env, snap), "kafka_topic_compacted", "topic") == {"plain": 0.0}
    # Asked again next poll (an error is not cached); allowed now, it is known.
    sim.clear_errors()
    obs, snap = env.poll()
    assert obs.compacted_topics == {"changelog": True, "plain": False}


def test_compacted_cache_follows_the_late_topics(sim: SimCluster, env: PollEnv) -> None:
    hanging_transaction(env.bootstrap, "hang-c", "changelog", 0,
                        backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms)
    env.poll()
    assert env.poller.cache_sizes()["compacted_topics"] == 1
    # A cached answer is reused: a refusal now is not even asked for until the refresh.
    sim.inject_error(DESCRIBE_CONFIGS, TOPIC_AUTHORIZATION_FAILED, topic="changelog")
    obs, _ = env.poll()
    assert obs.compacted_topics == {"changelog": True}
    assert [e for e in obs.request_errors if e.api == "DescribeConfigs"] == []


def test_refused_or_down_broker_has_no_verification_flag(sim: SimCluster, env: PollEnv) -> None:
    sim.inject_error(DESCRIBE_CONFIGS, CLUSTER_AUTHORIZATION_FAILED, broker_id=1)
    sim.stop_broker(3)
    obs, snap = env.poll()
    flags = {b.broker_id: b.partition_verification for b in snap.brokers}
    assert flags == {1: None, 2: PartitionVerification.DISABLED, 3: None}
    assert RequestError(1, "DescribeConfigs", "CLUSTER_AUTHORIZATION_FAILED") in obs.request_errors
    # A refused or absent broker is not asked for its features again (nothing more counted).
    assert [e for e in obs.request_errors if e.api == "ApiVersions"] == []
    samples = scrape(env, snap)
    assert values(samples, "kafka_transaction_partition_verification_enabled", "broker") == {
        "2": 0.0}
    # Features still come from the brokers that answer.
    assert values(samples, "kafka_finalized_transaction_version", "cluster") == {"sim": 2.0}


def test_old_brokers_report_no_verification_flag_and_transaction_version_0() -> None:
    # Kafka 3.0 has no transaction.partition.verification.enable (3.6+): absent, never 0. Like
    # a live ZooKeeper-mode 3.0.2 broker, the 3.0 profile reports finalized features (epoch 0)
    # without transaction.version: level 0, known.
    with SimCluster(brokers=2, topics={"t": 1}, broker_config={
            "transaction.max.timeout.ms": "60000"}, profile="3.0") as sim:
        with poll_env(sim, "sim", **SETTINGS) as env:
            obs, snap = env.poll()
        assert [b.partition_verification for b in obs.brokers] == [
            PartitionVerification.NOT_OFFERED] * 2
        assert [b.transaction_max_timeout_ms for b in obs.brokers] == [60000, 60000]
        assert obs.finalized_features is not None and obs.finalized_features.epoch == 0
        assert snap.finalized_transaction_version == 0
        samples = scrape(env, snap)
        assert values(samples, "kafka_transaction_partition_verification_enabled", "b") == {}
        assert values(samples, "kafka_finalized_transaction_version", "cluster") == {"sim": 0.0}


def test_brokers_that_report_no_finalized_features_leave_the_version_absent() -> None:
    # The 3.8 profile's ApiVersions carries no finalized features (epoch -1, the schema
    # default): the transaction version is unknown, absent, never 0.
    with SimCluster(brokers=2, topics={"t": 1}, broker_config={
            "transaction.max.timeout.ms": "60000"}, profile="3.8") as sim:
        with poll_env(sim, "sim", **SETTINGS) as env:
            obs, snap = env.poll()
        assert obs.finalized_features is None and snap.finalized_transaction_version is None
        samples = scrape(env, snap)
        assert values(samples, "kafka_finalized_transaction_version", "cluster") == {}


def test_rolling_upgrade_takes_the_features_of_the_newest_epoch() -> None:
    # Broker 2 runs the 3.8 profile, whose ApiVersions carries no finalized features (epoch
    # -1): the cluster's level comes from the answers that have them.
    with SimCluster(brokers=3, topics={"t": 1}, broker_config=CAPTURE_BROKER_CONFIG,
                    profiles={2: "3.8"}) as sim:
        with poll_env(sim, "sim", **SETTINGS) as env:
            obs, snap = env.poll()
        assert snap.finalized_transaction_version == 2
        flags = [b.partition_verification for b in obs.brokers]
        assert flags == [PartitionVerification.DISABLED] * 3  # 3.8 has the setting (3.6+)


def test_override_still_reads_the_verification_flag() -> None:
    with SimCluster(brokers=1, topics={"t": 1}, broker_config=CAPTURE_BROKER_CONFIG) as sim, \
            poll_env(sim, "sim", transaction_max_timeout_ms=120_000) as env:
        obs, _ = env.poll()
        assert [(b.transaction_max_timeout_ms, b.partition_verification) for b in obs.brokers] \
            == [(120_000, PartitionVerification.DISABLED)]
        assert env.poller.cache_sizes()["max_timeouts"] == 0


def _open_connections(env: PollEnv) -> list[Any]:
    client: Any = env.poller.poller._client  # the poller's own connections, as a poll leaves them
    return [c for address in client.brokers.values()
            if (c := client.pool.open_connection(*address)) is not None]


def test_finalized_features_are_asked_again_only_once_stale(env: PollEnv) -> None:
    env.poll()
    connections = _open_connections(env)
    assert len(connections) == 3
    # Forget what the answers said: a fresh answer is not asked again (no extra ApiVersions)...
    for connection in connections:
        connection.finalized_features = None
    obs, _ = env.poll()
    assert obs.finalized_features is None
    # ... an answer older than config_refresh_seconds is, with the broker's configs.
    reader: Any = env.poller.poller._broker_config
    for connection in connections:
        connection.finalized_features_read_at -= env.settings.config_refresh_seconds
    reader._read_at = {b: t - env.settings.config_refresh_seconds
                       for b, t in reader._read_at.items()}
    obs, snap = env.poll()
    assert obs.finalized_features is not None and snap.finalized_transaction_version == 2
    assert all(c.finalized_features is not None for c in connections)
