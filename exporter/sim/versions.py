"""Version profiles: which API versions and features a simulated broker advertises.

The "4.0" profile is a verbatim copy of what a real Apache Kafka 4.0.0 broker answered
(/work/shared/reference/real-kafka-4.0/01-apiversions-v3.json `api_keys`, 03 `supported_features`,
01/03 `finalized_features`). The other profiles are derived from it by changing only the rows
the reference (kafka-transactions.md, "Wire APIs" table) documents, so the exporter's fallbacks
can be exercised; they are labelled synthetic.
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


KAFKA_4_0 = VersionProfile(
    name="4.0",
    api_versions=MappingProxyType(dict(_KAFKA_4_0_API_VERSIONS)),
    supported_features=_KAFKA_4_0_SUPPORTED_FEATURES,
    finalized_features_epoch=_KAFKA_4_0_FINALIZED_EPOCH,
    finalized_features=_KAFKA_4_0_FINALIZED_FEATURES,
)

PROFILES: Mapping[str, VersionProfile] = MappingProxyType(
    {
        "4.0": KAFKA_4_0,
        # Synthetic: 4.0 plus the trunk ranges the reference lists for ListTransactions (0-2,
        # v2 adds TransactionalIdPattern) and WriteTxnMarkers (1-2).
        "trunk-transactions": _derive("trunk-transactions", {66: (0, 2), 27: (1, 2)}),
        # Synthetic: a broker without the transaction admin APIs (DescribeProducers,
        # DescribeTransactions, ListTransactions), to exercise the exporter's UNKNOWN path.
        "no-transaction-admin": _derive("no-transaction-admin", {61: None, 65: None, 66: None}),
    }
)
