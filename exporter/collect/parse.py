"""Pure response parsers shared by `serve`, `scan` and `abort` (kafka-python's habit: the
request builders live in `collect.client`, the parsers here; neither does I/O).

Each takes a decoded response (kafka-python's or the lean one from `collect.fastdecode`, same
field names) and returns the exporter's records: `model.ProducerEntry` for DescribeProducers,
`model.TransactionDescription` for DescribeTransactions. Error codes stay codes; the caller
decides what each means for its poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.errors import NONE, error_name
from exporter.model import (
    FinalizedFeatures,
    PartitionVerification,
    ProducerEntry,
    TopicPartition,
    TransactionDescription,
)

PARTITION_VERIFICATION_CONFIG = "transaction.partition.verification.enable"
CLEANUP_POLICY_CONFIG = "cleanup.policy"
FIRST_API_VERSIONS_WITH_FEATURES = 3
FIRST_API_VERSIONS_LISTING_EVERY_FEATURE = 4
"""KIP-1022: v3 leaves out supported features whose lowest level is 0; v4 lists them all."""


@dataclass(slots=True)
class ProducersAnswer:
    """What one DescribeProducers answer says about the partitions it was asked for."""

    entries: list[ProducerEntry] = field(default_factory=list)
    errors: list[tuple[TopicPartition, int]] = field(default_factory=list)
    """Partitions answered with an error code (not observed)."""
    missing: list[TopicPartition] = field(default_factory=list)
    """Partitions asked for that the answer leaves out (not observed either)."""
    state_counts: list[tuple[TopicPartition, int]] = field(default_factory=list)
    """Partitions answered (error 0) with two or more producer states, open or not, and how
    many: what the poller learns to screen by."""


def parse_describe_producers(
    response: Any,
    leader_id: int,
    requested: Sequence[tuple[str, Sequence[int]]],
    *,
    open_only: bool = True,
) -> ProducersAnswer:
    """DescribeProducers answer from `leader_id` -> entries (with an open transaction only,
    unless `open_only` is False), per-partition errors and partitions left out."""
    answer = ProducersAnswer()
    append_entry = answer.entries.append
    answered: dict[str, list[int]] = {}
    for topic in response.topics:
        name = topic.name
        lean_indexes = getattr(topic, "answered_indexes", None)
        indexes = (
            [p.partition_index for p in topic.partitions]  # kafka-python keeps every partition
            if lean_indexes is None
            else lean_indexes.tolist()
        )
        answered[name] = answered[name] + indexes if name in answered else indexes
        lean_counts = getattr(topic, "state_counts", None)
        if lean_counts is not None:
            answer.state_counts.extend(
                (TopicPartition(name, index), count) for index, count in lean_counts
            )
        for p in topic.partitions:
            code = p.error_code
            if code != NONE:
                answer.errors.append((TopicPartition(name, p.partition_index), code))
                continue
            if lean_counts is None and len(p.active_producers) >= 2:
                answer.state_counts.append(
                    (TopicPartition(name, p.partition_index), len(p.active_producers))
                )
            for producer in p.active_producers:
                start_offset = producer.current_txn_start_offset
                if start_offset >= 0 or not open_only:
                    append_entry(
                        ProducerEntry(
                            name,
                            p.partition_index,
                            leader_id,
                            producer.producer_id,
                            producer.producer_epoch,
                            producer.coordinator_epoch,
                            start_offset,
                            producer.last_timestamp,
                        )
                    )
    for topic_name, partitions in requested:
        got = answered.get(topic_name)
        if got is not None and (got == list(partitions) or not set(partitions).difference(got)):
            continue  # brokers answer in the order asked: the list compare is the fast path
        got_set = set(got or ())
        answer.missing.extend(
            TopicPartition(topic_name, p) for p in partitions if p not in got_set
        )
    return answer


def parse_list_transactions(response: Any) -> list[tuple[str, int, str]]:
    """ListTransactions answer -> [(transactional_id, producer_id, state)] (error code 0)."""
    return [
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    ]


def parse_describe_transactions(
    response: Any,
) -> tuple[list[TransactionDescription], list[tuple[str, int]]]:
    """DescribeTransactions answer -> (descriptions, [(transactional_id, error_code)])."""
    descriptions: list[TransactionDescription] = []
    errors: list[tuple[str, int]] = []
    for d in response.transaction_states:
        if d.error_code != NONE:
            errors.append((d.transactional_id, d.error_code))
            continue
        descriptions.append(
            TransactionDescription(
                transactional_id=d.transactional_id,
                state=d.transaction_state,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topic_partitions=frozenset(
                    TopicPartition(t.topic, p) for t in d.topics for p in t.partitions
                ),
            )
        )
    return descriptions, errors


def parse_list_offsets(
    response: Any,
) -> tuple[dict[TopicPartition, int], list[tuple[TopicPartition, int]]]:
    """ListOffsets answer -> (offset per partition answered without error, [(partition, error
    code)])."""
    offsets: dict[TopicPartition, int] = {}
    errors: list[tuple[TopicPartition, int]] = []
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code == NONE:
                offsets[TopicPartition(topic.name, p.partition_index)] = p.offset
            else:
                errors.append((TopicPartition(topic.name, p.partition_index), p.error_code))
    return offsets, errors



def parse_partition_verification(response: Any) -> PartitionVerification | None:
    """DescribeConfigs (one BROKER resource) -> its `transaction.partition.verification.enable`.

    None when the resource failed or the value is not a boolean. An answer without the key is
    `NOT_OFFERED`: a broker lists only the requested keys it knows, and brokers before 3.6
    do not know this one (docs/kafka-semantics.md#exposure). The entries come in the
    broker's own order (reference capture 07), so the key is looked up by name.
    """
    for result in response.results:
        if result.error_code != NONE:
            return None
        for config in result.configs:
            if config.name != PARTITION_VERIFICATION_CONFIG:
                continue
            # Kafka's ConfigDef reads a boolean trimmed and case-insensitively.
            value = (config.value or "").strip().lower()
            if value == "true":
                return PartitionVerification.ENABLED
            if value == "false":
                return PartitionVerification.DISABLED
            return None
        return PartitionVerification.NOT_OFFERED
    return None


def is_compact_policy(value: str) -> bool:
    """`cleanup.policy` is a list ("delete", "compact", "compact,delete"): compacted when it
    names compact."""
    return "compact" in (item.strip() for item in value.split(","))


def parse_cleanup_policies(response: Any) -> tuple[dict[str, bool], list[tuple[str, int]]]:
    """DescribeConfigs over TOPIC resources -> (topic -> compacted, [(topic, error_code)]).

    A topic answered without a readable `cleanup.policy` (null value, key left out) is in
    neither: unknown, not "not compacted"."""
    compacted: dict[str, bool] = {}
    errors: list[tuple[str, int]] = []
    for result in response.results:
        if result.error_code != NONE:
            errors.append((result.resource_name, result.error_code))
            continue
        for config in result.configs:
            if config.name == CLEANUP_POLICY_CONFIG and config.value is not None:
                compacted[result.resource_name] = is_compact_policy(config.value)
    return compacted, errors


def parse_finalized_features(response: Any, version: int) -> FinalizedFeatures | None:
    """ApiVersions answer at `version` -> its finalized features; None when it carries none.

    They are tagged fields of v3+ (KIP-584, KIP-511); an answer below v3, or with epoch -1
    (the schema's default: the broker does not know them), reports nothing."""
    if version < FIRST_API_VERSIONS_WITH_FEATURES or response.error_code != NONE:
        return None
    epoch = response.finalized_features_epoch
    if epoch is None or epoch < 0:
        return None
    levels: dict[str, int] = {}
    for feature in response.finalized_features or ():
        if not 0 <= feature.min_version_level <= feature.max_version_level:
            return None  # impossible levels: the whole answer is not to be trusted
        levels[feature.name] = feature.max_version_level
    supported: dict[str, int] | None = None
    if version >= FIRST_API_VERSIONS_LISTING_EVERY_FEATURE:
        supported = {f.name: f.max_version for f in response.supported_features or ()}
    return FinalizedFeatures(epoch=epoch, levels=levels, supported=supported)


CONSUMER_PROTOCOL_TYPES = frozenset({"consumer", ""})
"""ListGroups protocol types of groups that commit offsets: "consumer" (subscribing
consumers) and "" (a "simple" group made by commits without membership). Connect workers'
groups ("connect") and other protocols keep no offsets."""
CONSUMER_GROUP_TYPES = frozenset({"classic", "consumer"})
"""ListGroups v5 `group_type` of consumer groups (KIP-848); share and streams groups differ."""


def parse_list_groups(response: Any) -> tuple[int, list[str]]:
    """ListGroups answer -> (error code, ids of the consumer groups it lists)."""
    groups: list[str] = []
    # group_type exists from v5; kafka-python fills it with "" below v5 (read as "not said").
    typed = getattr(response, "API_VERSION", 0) >= 5
    for g in response.groups:
        if g.protocol_type not in CONSUMER_PROTOCOL_TYPES:
            continue
        if typed and str(g.group_type).lower() not in CONSUMER_GROUP_TYPES:
            continue
        groups.append(g.group_id)
    return response.error_code, groups


DESCRIBE_OPERATION = 8
"""AclOperation DESCRIBE's code: its bit in DescribeCluster's ClusterAuthorizedOperations."""
INT32_MIN = -(2**31)
"""ClusterAuthorizedOperations when the broker did not report them ("not asked")."""
CLUSTER_DESCRIBE_DENIED = "CLUSTER_AUTHORIZATION_FAILED"
CLUSTER_OPERATIONS_UNKNOWN = "CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN"


def parse_cluster_describe(response: Any) -> str | None:
    """DescribeCluster answer (asked with IncludeClusterAuthorizedOperations) -> None when the
    principal may Describe the cluster (ListGroups then lists every group), else why the group
    list may be incomplete: CLUSTER_AUTHORIZATION_FAILED when bit 8 is unset (a broker answers 0
    without Describe on the cluster), the answer's error name, or
    CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN when the operations were not reported (Int32.MIN_VALUE;
    kafka-python decodes that as None). docs/kafka-semantics.md#describe-cluster"""
    if response.error_code != NONE:
        return error_name(response.error_code)
    operations = response.authorized_operations
    if operations is None:
        return CLUSTER_OPERATIONS_UNKNOWN
    if isinstance(operations, int):  # the raw 32-bit field
        if operations == INT32_MIN:
            return CLUSTER_OPERATIONS_UNKNOWN
        allowed = bool(operations & (1 << DESCRIBE_OPERATION))
    else:
        allowed = DESCRIBE_OPERATION in operations
    return None if allowed else CLUSTER_DESCRIBE_DENIED


@dataclass(slots=True)
class GroupOffsetsAnswer:
    """One group of an OffsetFetch (v8+) answer."""

    group_id: str
    error_code: int
    offsets: list[tuple[str, int, int]] = field(default_factory=list)
    """(topic, partition, committed offset) answered without error (-1: nothing committed).
    Plain tuples: an answer holds groups x late partitions entries."""
    errors: list[tuple[TopicPartition, int]] = field(default_factory=list)


def parse_offset_fetch_groups(response: Any) -> list[GroupOffsetsAnswer]:
    """OffsetFetch v8+ answer -> one record per group, per-group and per-partition errors kept."""
    answers: list[GroupOffsetsAnswer] = []
    for g in response.groups:
        answer = GroupOffsetsAnswer(g.group_id, g.error_code)
        append = answer.offsets.append
        for topic in g.topics:
            name = topic.name
            for p in topic.partitions:
                if p.error_code == NONE:
                    append((name, p.partition_index, p.committed_offset))
                else:
                    answer.errors.append(
                        (TopicPartition(name, p.partition_index), p.error_code)
                    )
        answers.append(answer)
    return answers
