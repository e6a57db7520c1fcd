"""Version profiles: which API versions and features a simulated broker advertises.

The "4.0" profile is a verbatim copy of what a real Apache Kafka 4.0.0 broker answered
(tests/data/real-kafka-4.0/01-apiversions-v3.json `api_keys`, 03 `supported_features`,
01/03 `finalized_features`).

The release profiles "2.7", "2.8", "3.0", "3.8" and "4.1" take their `api_keys` from kafka-python
3.0.12's `kafka/protocol/broker_version_data.py` `BROKER_API_VERSIONS`, which that project
recorded from real brokers' ApiVersions answers ("copied from brokers via api_versions_response").
Its (4, 0) row is identical to our 4.0 capture, which is why those rows are trusted. The
2.7-3.8 rows come from ZooKeeper-mode brokers (they list the inter-broker APIs 4-7).
What matters for transactions, per release (the JSON schemas' validVersions history):
- DescribeProducers (61) v0 from 2.8 (KIP-664); absent in 2.7.
- DescribeTransactions (65) v0 and ListTransactions (66) v0 from 3.0 (KIP-664).
- ListTransactions v1 (DurationFilter, KIP-994) from 3.8; v2 (TransactionalIdPattern) from
  4.1.
- WriteTxnMarkers (27) v1 (flexible) from 2.8; 4.0 removed v0 (KIP-896); v2 in 4.2.
- AddPartitionsToTxn (24) v4 (broker-side verification, KIP-890 part 1) from 3.6: older brokers
  have no `transaction.partition.verification.enable` and append any transactional batch.
Features (KIP-584) are only filled in where known: the ZooKeeper-mode 2.x/3.x brokers
advertise none; live 2.8.2 and 3.0.2 brokers report finalized features epoch 0 with an empty
list (so the "2.8" and "3.0" profiles do), 2.7 and 3.8 keep -1 (the schema default: none
reported), not checked against a live broker; 4.1 reuses the 4.0 capture's
feature levels, which are not verified for 4.1 (only `transaction.version` affects the
simulator, and 2 is the default finalized level of new 4.x clusters).
The "3.5" and "3.6" profiles are the ApiVersions v3 answers of live ZooKeeper-mode 3.5.2 and
3.6.2 brokers (scripts/kafka-zk-versions), verbatim; those of 2.8 and 3.0 equal the live 2.8.2
and 3.0.2 answers row for row, and all four answer the live comparison
(tests/realkafka/test_live_conformance_zookeeper.py) as their brokers do.
The "3.9", "4.0.2" and "4.4" profiles are the ApiVersions v4 answers of live KRaft brokers of
the matrix (scripts/kafka-versions), verbatim, with the behaviours the live comparison
(tests/realkafka/test_live_conformance.py) found different from 4.0.0 as flags.
The remaining profiles are derived from 4.0 by changing only rows
docs/kafka-semantics.md#versions-by-release documents, so the exporter's fallbacks can be
exercised; they are labelled synthetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class SupportedFeature:
    name: str
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class FinalizedFeature:
    name: str
    min_version_level: int
    max_version_level: int


@dataclass(frozen=True, slots=True)
class VersionProfile:
    name: str
    api_versions: Mapping[int, tuple[int, int]]
    """api_key -> (min, max), in the order the broker lists them."""
    supported_features: tuple[SupportedFeature, ...]
    finalized_features_epoch: int
    finalized_features: tuple[FinalizedFeature, ...]
    synthetic: bool = False
    metadata_partitions_in_index_order: bool = False
    list_offsets_in_request_order: bool = False
    """ListOffsets answers a topic's partitions in request order (a live 3.9.2 broker) instead of
    the 4.x hash order (groups capture 05: 1, 0, 2)."""
    timeout_abort_fences_under_tv2: bool = True
    """A timed-out transaction under transaction.version 2: the 4.0.0 coordinator fences (epoch
    + 1) and the abort bumps again (captures 47/48: 0 -> 2); live 4.0.2 and 4.4.0 brokers end
    at 1 (the fence is not added)."""
    describe_producers_error_messages: bool = True
    """DescribeProducers names UNKNOWN_TOPIC_OR_PARTITION for a topic the broker does not know
    in error_message; a live 2.8.2 broker leaves it null (3.0.2 on fill it in). Not-leader
    answers cannot be seen on the one-node live brokers and keep their message."""
    offset_fetch_groups_in_hash_order: bool = False
    """Batched OffsetFetch (v8+) answers its groups in the Scala mutable.HashMap order of their
    ids (a live 3.0.2 broker) instead of in request order (3.9 and 4.x)."""
    classic_group_coordinator: bool = False
    """The pre-4.0 group coordinator (3.9's default): ListGroups walks one ConcurrentHashMap of
    every group (GroupMetadataManager.groupMetadataCache), not per-shard TimelineHashMaps."""
    """Metadata lists a topic's partitions by index (a live 4.4.0 broker) instead of in the
    hash order of the Scala mutable.HashSet the 4.0 broker builds them in (capture 04: 1, 2, 0)."""

    def supported_features_for(self, api_versions_version: int) -> tuple[SupportedFeature, ...]:
        """ApiVersions v3 leaves out features whose min version is 0; v4+ lists all (01 vs 03)."""
        if api_versions_version >= 4:
            return self.supported_features
        return tuple(f for f in self.supported_features if f.min_version > 0)

    def finalized_level(self, feature: str) -> int:
        """Finalized max version level of a feature, 0 when not finalized."""
        for f in self.finalized_features:
            if f.name == feature:
                return f.max_version_level
        return 0

    def transaction_version(self) -> int:
        return self.finalized_level("transaction.version")

    @property
    def supports_partition_verification(self) -> bool:
        """KIP-890 part 1 (3.6+): the leader verifies a transactional Produce with the
        coordinator through AddPartitionsToTxn v4 (verify_only); only then does the broker have
        `transaction.partition.verification.enable`. Older brokers append the batch as is."""
        add_partitions = self.api_versions.get(24)
        return add_partitions is not None and add_partitions[1] >= 4


# 01-apiversions-v3.json, `api_keys`, in the broker's order.
_KAFKA_4_0_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 1),
    69: (0, 1), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}

# 03-apiversions-v4.json `supported_features` (v3 shows only those with min_version > 0).
_KAFKA_4_0_SUPPORTED_FEATURES = (
    SupportedFeature("group.version", 0, 1),
    SupportedFeature("kraft.version", 0, 1),
    SupportedFeature("metadata.version", 7, 25),
    SupportedFeature("transaction.version", 0, 2),
    SupportedFeature("eligible.leader.replicas.version", 0, 1),
)

# 01/03 `finalized_features` and `finalized_features_epoch`.
_KAFKA_4_0_FINALIZED_FEATURES = (
    FinalizedFeature("group.version", 1, 1),
    FinalizedFeature("transaction.version", 2, 2),
    FinalizedFeature("metadata.version", 25, 25),
)
_KAFKA_4_0_FINALIZED_EPOCH = 10


def _derive(name: str, changes: Mapping[int, tuple[int, int] | None]) -> VersionProfile:
    apis = dict(_KAFKA_4_0_API_VERSIONS)
    for key, rng in changes.items():
        if rng is None:
            apis.pop(key, None)
        else:
            apis[key] = rng
    return VersionProfile(
        name=name,
        api_versions=MappingProxyType(apis),
        supported_features=_KAFKA_4_0_SUPPORTED_FEATURES,
        finalized_features_epoch=_KAFKA_4_0_FINALIZED_EPOCH,
        finalized_features=_KAFKA_4_0_FINALIZED_FEATURES,
        synthetic=True,
    )


# kafka-python 3.0.12 kafka/protocol/broker_version_data.py, BROKER_API_VERSIONS[(2, 7)]:
# no DescribeProducers (61) yet; WriteTxnMarkers v0 only.
_KAFKA_2_7_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 8), 1: (0, 12), 2: (0, 5), 3: (0, 9), 4: (0, 4), 5: (0, 3), 6: (0, 6), 7: (0, 3),
    8: (0, 8), 9: (0, 7), 10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5),
    15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (0, 6), 20: (0, 5), 21: (0, 2),
    22: (0, 4), 23: (0, 3), 24: (0, 2), 25: (0, 2), 26: (0, 2), 27: (0, 0), 28: (0, 3),
    29: (0, 2), 30: (0, 2), 31: (0, 2), 32: (0, 3), 33: (0, 1), 34: (0, 1), 35: (0, 2),
    36: (0, 2), 37: (0, 3), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 0), 49: (0, 0),
    50: (0, 0), 51: (0, 0), 56: (0, 0), 57: (0, 0),
}

# BROKER_API_VERSIONS[(2, 8)]: DescribeProducers v0 (61) appears; no List/DescribeTransactions.
_KAFKA_2_8_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 9), 1: (0, 12), 2: (0, 6), 3: (0, 11), 4: (0, 5), 5: (0, 3), 6: (0, 7), 7: (0, 3),
    8: (0, 8), 9: (0, 7), 10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5),
    15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3),
    29: (0, 2), 30: (0, 2), 31: (0, 2), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 2),
    36: (0, 2), 37: (0, 3), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1),
    50: (0, 0), 51: (0, 0), 56: (0, 0), 57: (0, 0), 60: (0, 0), 61: (0, 0),
}

# BROKER_API_VERSIONS[(3, 0)]: DescribeTransactions v0 (65), ListTransactions v0 (66).
_KAFKA_3_0_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 9), 1: (0, 12), 2: (0, 7), 3: (0, 11), 4: (0, 5), 5: (0, 3), 6: (0, 7), 7: (0, 3),
    8: (0, 8), 9: (0, 8), 10: (0, 4), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5),
    15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3),
    29: (0, 2), 30: (0, 2), 31: (0, 2), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 2),
    36: (0, 2), 37: (0, 3), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1),
    50: (0, 0), 51: (0, 0), 56: (0, 0), 57: (0, 0), 60: (0, 0), 61: (0, 0), 65: (0, 0),
    66: (0, 0), 67: (0, 0),
}

# Live ZooKeeper-mode 3.5.2 and 3.6.2 brokers' ApiVersions v3 answers (api_keys, in their order);
# the two differ only in AddPartitionsToTxn (24): v4 (broker-side verification) from 3.6.
_KAFKA_3_5_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 9), 1: (0, 15), 2: (0, 8), 3: (0, 12), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3),
    8: (0, 8), 9: (0, 8), 10: (0, 4), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
    15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3),
    29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4),
    36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1),
    50: (0, 0), 51: (0, 0), 56: (0, 3), 57: (0, 1), 58: (0, 0), 60: (0, 0), 61: (0, 0),
    65: (0, 0), 66: (0, 0), 67: (0, 0),
}
_KAFKA_3_6_API_VERSIONS: dict[int, tuple[int, int]] = {**_KAFKA_3_5_API_VERSIONS, 24: (0, 4)}

# BROKER_API_VERSIONS[(3, 8)]: ListTransactions v1 (DurationFilter); AddPartitionsToTxn v4-5.
_KAFKA_3_8_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 11), 1: (0, 16), 2: (0, 8), 3: (0, 12), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3),
    8: (0, 9), 9: (0, 9), 10: (0, 5), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
    15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4),
    29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4),
    36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1),
    50: (0, 0), 51: (0, 0), 56: (0, 3), 57: (0, 1), 58: (0, 0), 60: (0, 1), 61: (0, 0),
    65: (0, 0), 66: (0, 1), 67: (0, 0), 68: (0, 0), 69: (0, 0),
}

# BROKER_API_VERSIONS[(4, 1)] (KRaft): ListTransactions v2 (TransactionalIdPattern); WriteTxnMarkers
# still 1-1 (v2 arrives in 4.2).
_KAFKA_4_1_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1),
    80: (0, 0), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 0), 86: (0, 0), 87: (0, 0),
    90: (0, 0), 91: (0, 0), 92: (0, 0),
}

# Live real brokers (tests/realkafka/test_live_conformance.py): the ApiVersions v4 answers of
# a fresh single-node KRaft Apache Kafka 3.9.2 and 4.4.0 (scripts/kafka-versions), verbatim:
# `api_keys` in the broker's order, `supported_features`, `finalized_features` (the epoch is
# the metadata offset of the last feature change, so it differs between clusters).
_KAFKA_3_9_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9),
    12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7),
    20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1),
    28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4),
    36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2),
    44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
    55: (0, 2), 57: (0, 1), 60: (0, 1), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 0),
    69: (0, 0), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}
_KAFKA_3_9_SUPPORTED_FEATURES = (
    SupportedFeature("kraft.version", 0, 1),
    SupportedFeature("metadata.version", 1, 21),
)
_KAFKA_3_9_FINALIZED_FEATURES = (
    FinalizedFeature("metadata.version", 21, 21),
)
_KAFKA_3_9_FINALIZED_EPOCH = 31
_KAFKA_4_4_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9),
    12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1), 18: (0, 5), 19: (2, 7),
    20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2),
    28: (0, 6), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5),
    36: (0, 2), 37: (0, 3), 38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 3), 43: (0, 2),
    44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
    55: (0, 2), 57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 80: (0, 1),
    81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1), 88: (0, 1), 89: (0, 1),
    90: (0, 1), 91: (0, 0), 92: (0, 0), 93: (0, 0), 94: (0, 0),
}
_KAFKA_4_4_SUPPORTED_FEATURES = (
    SupportedFeature("group.version", 0, 1),
    SupportedFeature("kraft.version", 0, 1),
    SupportedFeature("metadata.version", 7, 33),
    SupportedFeature("share.version", 0, 2),
    SupportedFeature("streams.version", 0, 1),
    SupportedFeature("transaction.version", 0, 2),
    SupportedFeature("eligible.leader.replicas.version", 0, 1),
)
_KAFKA_4_4_FINALIZED_FEATURES = (
    FinalizedFeature("group.version", 1, 1),
    FinalizedFeature("streams.version", 1, 1),
    FinalizedFeature("transaction.version", 2, 2),
    FinalizedFeature("eligible.leader.replicas.version", 1, 1),
    FinalizedFeature("share.version", 2, 2),
    FinalizedFeature("metadata.version", 33, 33),
)
_KAFKA_4_4_FINALIZED_EPOCH = 40


# ApiVersionsResponse.json: FinalizedFeaturesEpoch defaults to -1 (no finalized features).
_NO_FINALIZED_FEATURES_EPOCH = -1
# Live ZooKeeper-mode 2.8.2 and 3.0.2 brokers answer ApiVersions v3 with epoch 0 and empty
# supported and finalized feature lists (tests/realkafka/test_real_zookeeper.py): finalized
# features are reported, none of them transaction.version (level 0).
_ZOOKEEPER_FINALIZED_EPOCH = 0


def _release(
    name: str,
    api_versions: Mapping[int, tuple[int, int]],
    *,
    features_of_4_0: bool = False,
    finalized_features_epoch: int = _NO_FINALIZED_FEATURES_EPOCH,
    live_zookeeper_broker: bool = False,
    describe_producers_error_messages: bool = True,
    offset_fetch_groups_in_hash_order: bool = False,
) -> VersionProfile:
    """A release profile; without `features_of_4_0` it advertises no features (ZK mode), with
    the given finalized features epoch (-1: none reported). `live_zookeeper_broker`: the
    answers' orders and details a live ZooKeeper-mode broker of the release showed
    (tests/realkafka/test_live_conformance_zookeeper.py)."""
    if features_of_4_0:
        return VersionProfile(
            name=name,
            api_versions=MappingProxyType(dict(api_versions)),
            supported_features=_KAFKA_4_0_SUPPORTED_FEATURES,
            finalized_features_epoch=_KAFKA_4_0_FINALIZED_EPOCH,
            finalized_features=_KAFKA_4_0_FINALIZED_FEATURES,
        )
    return VersionProfile(
        name=name,
        api_versions=MappingProxyType(dict(api_versions)),
        supported_features=(),
        finalized_features_epoch=finalized_features_epoch,
        finalized_features=(),
        classic_group_coordinator=live_zookeeper_broker,
        describe_producers_error_messages=describe_producers_error_messages,
        offset_fetch_groups_in_hash_order=offset_fetch_groups_in_hash_order,
    )


KAFKA_4_0 = VersionProfile(
    name="4.0",
    api_versions=MappingProxyType(dict(_KAFKA_4_0_API_VERSIONS)),
    supported_features=_KAFKA_4_0_SUPPORTED_FEATURES,
    finalized_features_epoch=_KAFKA_4_0_FINALIZED_EPOCH,
    finalized_features=_KAFKA_4_0_FINALIZED_FEATURES,
)

PROFILES: Mapping[str, VersionProfile] = MappingProxyType(
    {
        "2.7": _release("2.7", _KAFKA_2_7_API_VERSIONS),
        # 2.8 and 3.0: checked against live ZooKeeper-mode 2.8.2 and 3.0.2 brokers (ApiVersions
        # row for row, features, and every answer of the live comparison,
        # tests/realkafka/test_live_conformance_zookeeper.py); 2.7 and 3.8 are not (no real
        # broker of theirs runs).
        "2.8": _release(
            "2.8", _KAFKA_2_8_API_VERSIONS, finalized_features_epoch=_ZOOKEEPER_FINALIZED_EPOCH,
            live_zookeeper_broker=True, describe_producers_error_messages=False,
        ),
        "3.0": _release(
            "3.0", _KAFKA_3_0_API_VERSIONS, finalized_features_epoch=_ZOOKEEPER_FINALIZED_EPOCH,
            live_zookeeper_broker=True, offset_fetch_groups_in_hash_order=True,
        ),
        # 3.5 and 3.6: the live ZooKeeper-mode 3.5.2 and 3.6.2 brokers' answers.
        "3.5": _release(
            "3.5", _KAFKA_3_5_API_VERSIONS, finalized_features_epoch=_ZOOKEEPER_FINALIZED_EPOCH,
            live_zookeeper_broker=True,
        ),
        "3.6": _release(
            "3.6", _KAFKA_3_6_API_VERSIONS, finalized_features_epoch=_ZOOKEEPER_FINALIZED_EPOCH,
            live_zookeeper_broker=True,
        ),
        "3.8": _release("3.8", _KAFKA_3_8_API_VERSIONS),
        "4.0": KAFKA_4_0,
        "4.1": _release("4.1", _KAFKA_4_1_API_VERSIONS, features_of_4_0=True),
        # Live real brokers, verbatim (see _KAFKA_3_9_API_VERSIONS): a KRaft 3.9.2; a 4.0.2,
        # which is 4.0.0 but for JoinGroup (11) v0-v1, listed again from 4.0.1 on; a 4.4.0.
        "3.9": VersionProfile(
            name="3.9",
            api_versions=MappingProxyType(dict(_KAFKA_3_9_API_VERSIONS)),
            supported_features=_KAFKA_3_9_SUPPORTED_FEATURES,
            finalized_features_epoch=_KAFKA_3_9_FINALIZED_EPOCH,
            finalized_features=_KAFKA_3_9_FINALIZED_FEATURES,
            list_offsets_in_request_order=True,
            classic_group_coordinator=True,
        ),
        "4.0.2": VersionProfile(
            name="4.0.2",
            api_versions=MappingProxyType({**_KAFKA_4_0_API_VERSIONS, 11: (0, 9)}),
            supported_features=_KAFKA_4_0_SUPPORTED_FEATURES,
            finalized_features_epoch=_KAFKA_4_0_FINALIZED_EPOCH,
            finalized_features=_KAFKA_4_0_FINALIZED_FEATURES,
            timeout_abort_fences_under_tv2=False,
        ),
        "4.4": VersionProfile(
            name="4.4",
            api_versions=MappingProxyType(dict(_KAFKA_4_4_API_VERSIONS)),
            supported_features=_KAFKA_4_4_SUPPORTED_FEATURES,
            finalized_features_epoch=_KAFKA_4_4_FINALIZED_EPOCH,
            finalized_features=_KAFKA_4_4_FINALIZED_FEATURES,
            metadata_partitions_in_index_order=True,
            timeout_abort_fences_under_tv2=False,
        ),
        # Synthetic: 4.0 plus the trunk ranges docs/kafka-semantics.md lists for
        # ListTransactions (0-2, v2 adds TransactionalIdPattern) and WriteTxnMarkers (1-2).
        "trunk-transactions": _derive("trunk-transactions", {66: (0, 2), 27: (1, 2)}),
        # Synthetic: Kafka 4.4 with unstable.api.versions.enable=true, the only way it offers
        # InitProducerId v6 (Enable2Pc, KIP-939; v6 is latestVersionUnstable there). Whether
        # 2PC is allowed is the broker setting transaction.two.phase.commit.enable.
        "4.4-two-phase": _derive("4.4-two-phase", {22: (0, 6)}),
        # Synthetic: a broker without the transaction admin APIs (DescribeProducers,
        # DescribeTransactions, ListTransactions), to exercise the exporter's UNKNOWN path.
        "no-transaction-admin": _derive("no-transaction-admin", {61: None, 65: None, 66: None}),
    }
)
