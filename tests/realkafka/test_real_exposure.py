"""Exposure on a real broker (docs/kafka-semantics.md#exposure): the exporter's
`partition_verification` follows `transaction.partition.verification.enable` changed at runtime
with `kafka-configs.sh`; its `finalized_transaction_version` follows `kafka-features.sh`; a late
transaction on a compacted topic is marked compacted, on a normal one not.

These tests change the shared session broker and put every change back before they end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.client import KafkaProtocolError
from kafka_sim.producer import hanging_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import LATE_BACKDATE_MS, create_topic, poll_env, unique
from realtools import (
    VERIFICATION_CONFIG,
    alter_broker_config,
    exposed_samples,
    finalized_feature_levels,
    poll_until,
    set_transaction_version,
)

from exporter.model import PartitionVerification
from exporter.scan import exposure_note

REFRESH = {"config_refresh_seconds": 0.5}
"""Broker config and features are cached for config_refresh_seconds: small, so a change shows
within a few polls."""
FEW_POLLS = 6
"""Polls 0.5 s apart within which a change must show (the cache is at most 0.5 s old)."""
TRANSACTION_VERSION = "transaction.version"
TRANSACTION_ABORTABLE = 120


def _verification(snapshot: object) -> PartitionVerification | None:
    (broker,) = snapshot.brokers  # type: ignore[attr-defined]
    verification: PartitionVerification | None = broker.partition_verification
    return verification


class VerificationOverrides:
    """Dynamic `transaction.partition.verification.enable` overrides set with kafka-configs,
    remembered so the fixture can drop the ones a failing test left behind."""

    def __init__(self, cluster: RealKafkaCluster) -> None:
        self.cluster = cluster
        self.set_on: set[str | None] = set()  # None: the cluster-wide default

    def add(self, entity: str | None, value: bool) -> None:
        alter_broker_config(self.cluster, entity, add=f"{VERIFICATION_CONFIG}={str(value).lower()}")
        self.set_on.add(entity)

    def delete(self, entity: str | None) -> None:
        alter_broker_config(self.cluster, entity, delete=VERIFICATION_CONFIG)
        self.set_on.discard(entity)


@pytest.fixture
def verification_overrides(real_kafka: RealKafkaCluster) -> Iterator[VerificationOverrides]:
    """The session broker runs with verification off (static config), as the other tests need:
    whatever happens, no dynamic override outlives the test."""
    overrides = VerificationOverrides(real_kafka)
    yield overrides
    for entity in list(overrides.set_on):
        overrides.delete(entity)


def test_partition_verification_follows_runtime_config_changes(
    real_kafka: RealKafkaCluster, verification_overrides: VerificationOverrides
) -> None:
    topic = create_topic(real_kafka, unique("verify"), partitions=1)
    enabled = PartitionVerification.ENABLED
    disabled = PartitionVerification.DISABLED
    overrides = verification_overrides
    with poll_env(real_kafka, **REFRESH) as env:
        # The static server.properties value.
        _, snapshot = env.poll()
        assert _verification(snapshot) is disabled

        # Cluster-wide dynamic default: overrides the static value on every broker.
        overrides.add(None, True)
        _, snapshot, _ = poll_until(
            env, lambda _o, s: _verification(s) is enabled, max_polls=FEW_POLLS
        )
        samples = exposed_samples(env, snapshot)
        assert [
            value
            for name, _, value in samples
            if name == "kafka_transaction_partition_verification_enabled"
        ] == [1.0]
        # What "enabled" means: the broker now refuses a batch for a partition never added.
        with pytest.raises(KafkaProtocolError) as refused:
            hanging_transaction(real_kafka.bootstrap, unique("verify-txn"), topic, 0)
        # Produce v11 is refused with TRANSACTION_ABORTABLE (KIP-890), not INVALID_TXN_STATE.
        assert refused.value.error_code == TRANSACTION_ABORTABLE, refused.value

        # A per-broker dynamic value overrides the cluster default.
        overrides.add("1", False)
        poll_until(env, lambda _o, s: _verification(s) is disabled, max_polls=FEW_POLLS)
        overrides.delete("1")
        poll_until(env, lambda _o, s: _verification(s) is enabled, max_polls=FEW_POLLS)

        # Without overrides the static value is back, and the broker appends again.
        overrides.delete(None)
        poll_until(env, lambda _o, s: _verification(s) is disabled, max_polls=FEW_POLLS)
    hanging_transaction(real_kafka.bootstrap, unique("verify-txn"), topic, 0)


def test_finalized_transaction_version_follows_the_features_tool(
    real_kafka: RealKafkaCluster,
) -> None:
    # kafka-features.sh's finalized level; 0 when it lists none (a feature the release does
    # not know is not finalized: level 0, KIP-1022).
    listed = finalized_feature_levels(real_kafka)
    initial = int(listed.get(TRANSACTION_VERSION, "0"))
    with poll_env(real_kafka, **REFRESH) as env:
        _, snapshot = env.poll()
        assert snapshot.finalized_transaction_version == initial
        exposed = [
            value
            for name, _, value in exposed_samples(env, snapshot)
            if name == "kafka_finalized_transaction_version"
        ]
        assert exposed == [float(initial)]
        if real_kafka.install.major_minor < (4, 0):
            # 3.9 finalizes metadata.version but knows no transaction.version: the brokers
            # report finalized features without it, which is level 0, not unknown.
            assert TRANSACTION_VERSION not in listed
            assert initial == 0
            refused = set_transaction_version(real_kafka, 1, upgrade=True)
            assert refused.startswith("rc=1") and "does not support" in refused, refused
            _, snapshot = env.poll()
            assert snapshot.finalized_transaction_version == 0
            # Its ApiVersions v4 lists no transaction.version among the supported features:
            # scan says the Kafka version lacks level 2, not to raise the feature.
            assert snapshot.supported_transaction_version == 0
            note = exposure_note(snapshot)
            assert note is not None and "transaction.version 2 is not supported by the " \
                "brokers' Kafka version" in note
            return
        # 4.x formats new clusters at transaction.version 2 (KIP-890 part 2).
        assert initial == 2
        assert snapshot.supported_transaction_version == 2
        current = initial
        try:
            for level in (1, 0, 2):
                upgrade = level > current
                out = set_transaction_version(real_kafka, level, upgrade)
                verb = "upgraded" if upgrade else "downgraded"
                assert out.startswith("rc=0") and f"was {verb} to {level}" in out, out
                current = level
                _, polled, _ = poll_until(
                    env,
                    lambda _o, s, level=level: s.finalized_transaction_version == level,
                    max_polls=FEW_POLLS,
                )
                if level < 2:  # supported, just not finalized: the note says how to raise it
                    note = exposure_note(polled)
                    assert note is not None and "the brokers support 2: kafka-features.sh " \
                        "upgrade --feature transaction.version=2" in note, note
        finally:
            if current != initial:
                set_transaction_version(real_kafka, initial, upgrade=True)


def test_a_late_transaction_on_a_compacted_topic_is_marked_compacted(
    real_kafka: RealKafkaCluster,
) -> None:
    compacted = create_topic(
        real_kafka, unique("compacted"), partitions=1, configs={"cleanup.policy": "compact"}
    )
    normal = create_topic(real_kafka, unique("not-compacted"), partitions=1)
    for topic in (compacted, normal):
        hanging_transaction(
            real_kafka.bootstrap, unique("compact-txn"), topic, 0, backdate_ms=LATE_BACKDATE_MS
        )
    with poll_env(real_kafka) as env:
        _, snapshot = env.poll()
    late = {t.transaction.topic: t for t in snapshot.late_transactions}
    assert late[compacted].topic_compacted is True
    assert late[normal].topic_compacted is False
    assert snapshot.compacted_topics[compacted] is True
    assert snapshot.compacted_topics[normal] is False
    series = {
        labels["topic"]: value
        for name, labels, value in exposed_samples(env, snapshot)
        if name == "kafka_topic_compacted"
    }
    assert (series[compacted], series[normal]) == (1.0, 0.0)
