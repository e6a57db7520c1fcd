"""The group coordinator's committed offsets and the groups they create.

Only what a consumer needs that commits without group membership (`assign()` + `commit()`,
generation -1 and an empty member id, as kafka-python sends it) and what a monitoring tool
reads back: such a commit creates a "simple" classic group (state Empty, no protocol type) that
ListGroups lists and OffsetFetch answers from. Joining a group (JoinGroup/SyncGroup, KIP-848
heartbeats) is not simulated, so no group ever has members. The Kafka facts relied on are in
docs/kafka-semantics.md#consumer-groups.

All state is confined to the simulator's event-loop thread, like `ClusterState`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kafka_sim.errors import (
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_MEMBER_ID,
)
from kafka_sim.jvm_order import java_hash_map_order, java_string_hash, timeline_hash_map_order

CLASSIC_GROUP_TYPE = "classic"
EMPTY_STATE = "Empty"
DEAD_STATE = "Dead"
"""DescribeGroups' state of a group the coordinator does not know."""
NO_OFFSET = -1
NO_LEADER_EPOCH = -1
OFFSET_METADATA_MAX_BYTES = 4096
"""offset.metadata.max.bytes default: longer metadata is refused per partition."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    """-1 when the commit carried none."""
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True)
class ClassicGroup:
    """A group as the coordinator keeps it. Without members it is always Empty."""

    group_id: str
    protocol_type: str = ""
    """"" for a simple group (created by a commit, never joined)."""
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    """(topic, partition) -> last commit, in first-commit order."""

    @property
    def state(self) -> str:
        return EMPTY_STATE


class GroupCoordinator:
    """Groups and their committed offsets, for every __consumer_offsets partition at once.

    Which broker answers for a group is decided by the caller (`ClusterState.group_coordinator`),
    as for transactions; this class only keeps the data and applies Kafka's validation.
    """

    def __init__(self, partition_for: Callable[[str], int]) -> None:
        self._partition_for = partition_for
        self.groups: dict[str, ClassicGroup] = {}

    def commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        api_version: int,
        offsets: Sequence[tuple[str, int, int, int, str | None]],
        now_ms: int,
    ) -> tuple[int, list[int]]:
        """OffsetCommit: (request error, per-partition errors) for (topic, partition, offset,
        leader epoch, metadata) entries already known to name existing partitions.

        A commit with generation < 0 to an unknown group creates a simple group (Kafka's
        OffsetMetadataManager.validateOffsetCommit); with a generation >= 0 it is refused:
        GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION before. A known group has no
        members here, so only the no-membership commit (generation < 0, group Empty) is valid;
        one with a generation is from a member the group does not know: UNKNOWN_MEMBER_ID.
        """
        if not group_id:
            return INVALID_GROUP_ID, [INVALID_GROUP_ID] * len(offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                error = GROUP_ID_NOT_FOUND if api_version >= 9 else ILLEGAL_GENERATION
                return error, [error] * len(offsets)
            group = ClassicGroup(group_id)
            self.groups[group_id] = group
        elif generation_id >= 0:
            return UNKNOWN_MEMBER_ID, [UNKNOWN_MEMBER_ID] * len(offsets)
        errors: list[int] = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            text = metadata or ""
            if len(text) > OFFSET_METADATA_MAX_BYTES:
                errors.append(OFFSET_METADATA_TOO_LARGE)
                continue
            group.offsets[(topic, partition)] = CommittedOffset(offset, leader_epoch, text, now_ms)
            errors.append(NONE)
        return NONE, errors

    def committed(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        group = self.groups.get(group_id)
        return None if group is None else group.offsets.get((topic, partition))

    def committed_topics(self, group_id: str) -> dict[str, list[tuple[int, CommittedOffset]]]:
        """Every committed offset of a group, by topic (OffsetFetch with topics=null); empty
        for an unknown group."""
        group = self.groups.get(group_id)
        out: dict[str, list[tuple[int, CommittedOffset]]] = {}
        if group is not None:
            for (topic, partition), committed in group.offsets.items():
                out.setdefault(topic, []).append((partition, committed))
        return out

    def listed(
        self,
        owned_partitions: Sequence[int],
        partition_hash: Callable[[int], int],
        states_filter: Sequence[str],
        types_filter: Sequence[str],
        one_map: bool = False,
    ) -> list[ClassicGroup]:
        """ListGroups on one broker: the groups of the __consumer_offsets partitions it leads.

        Kafka asks every coordinator shard it has loaded (a ConcurrentHashMap keyed by
        TopicPartition, so the shards come in that map's iteration order) and concatenates
        their answers; filters match case-insensitively. The order of several groups of one
        shard come in the order of the shard's TimelineHashMap of groups (GroupMetadataManager
        `groups`), built in creation order: a live 4.0.2 broker with 4 __consumer_offsets
        partitions lists grp-lagging before grp-rc, both on partition 3.
        """
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        by_partition: dict[int, list[ClassicGroup]] = {}
        for group in self.groups.values():
            by_partition.setdefault(self._partition_for(group.group_id), []).append(group)
        shards = java_hash_map_order(list(owned_partitions), partition_hash, concurrent=True)
        ordered: list[ClassicGroup] = []
        if one_map:  # 3.9: one ConcurrentHashMap of all groups (a live 3.9.2 broker)
            owned = set(owned_partitions)
            ordered = java_hash_map_order(
                [g for g in self.groups.values() if self._partition_for(g.group_id) in owned],
                lambda g: java_string_hash(g.group_id), concurrent=True)
        else:
            for partition in shards:
                ordered.extend(timeline_hash_map_order(
                    by_partition.get(partition, []), lambda g: java_string_hash(g.group_id)))
        out: list[ClassicGroup] = []
        for group in ordered:
            if states and group.state.lower() not in states:
                continue
            if types and CLASSIC_GROUP_TYPE not in types:
                continue
            out.append(group)
        return out
