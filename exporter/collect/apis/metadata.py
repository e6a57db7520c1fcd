"""Metadata: the request for every topic (or some), and its answer parsed into a
`MetadataView` (brokers, the leader of each partition, topic ids). Not on the admin driver:
Metadata is asked of the first broker that answers, bootstrap servers included, and the
cluster client keeps the last full answer's parse (`ClusterClient.metadata`); the brokers and
leaders it finds are what every strategy of the driver routes by."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from exporter.collect.fastdecode import LeanMetadataResponse, lean
from exporter.model import TopicPartition

_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class MetadataView:
    """What Metadata said: brokers, the leader of each partition, topic ids.

    Its mappings may be shared with the client's parse of the previous answer and with the
    observations built from it (read-only types, so mypy catches a write): a poll that must
    change one (NOT_LEADER_OR_FOLLOWER re-routing) puts a new mapping on its own view."""

    brokers: Mapping[int, tuple[str, int]]
    leaders: Mapping[TopicPartition, int]
    by_leader: Mapping[int, Mapping[str, Sequence[int]]]
    """leader id -> topic -> partition indexes (grouped for batching)."""
    topic_ids: Mapping[str, uuid.UUID]
    leaderless: Mapping[TopicPartition, str] = field(default_factory=dict)
    replica_ids: AbstractSet[int] = field(default_factory=frozenset)
    """Every broker named as a replica: a dead broker leaves `brokers` but stays here."""
    unlisted_leader_topics: AbstractSet[str] | None = None
    """Topics with a partition led by a broker `brokers` does not list, found while parsing
    (once per Metadata answer, not once per poll and reader: a walk over every partition);
    None: not known for this view's mappings (`collect.groups.unlisted_leader` walks then)."""


_decode_metadata_response = lean(MetadataResponse)


def decode_metadata(payload: bytes, version: int) -> MetadataView:
    """Decode and parse with the cyclic GC paused: at 200k partitions this allocates ~200k
    TopicPartition keys (no cycles among them), and every 700 allocations would otherwise
    start a collection over a heap that grows as they pile up (~25% of the parse's CPU)."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return parse_metadata(_decode_metadata_response(payload, version))
    finally:
        if paused:
            gc.enable()


def build_metadata_request(topics: Sequence[str] | None, version: int) -> Any:
    """Metadata for `topics` (None: every topic), never creating a topic, without the
    authorized operations (the exporter does not read them)."""
    topic_list = (
        None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=t, topic_id=_ZERO_UUID) for t in topics]
    )
    return MetadataRequest(
        topics=topic_list,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
        version=version,
    )


def parse_metadata(response: Any) -> MetadataView:
    """Metadata answer (kafka-python's or the lean one) -> `MetadataView`; a topic with an
    error and no partitions is left out, a partition without a leader is `leaderless`."""
    if isinstance(response, LeanMetadataResponse):
        return _parse_lean_metadata(response)
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    leaders: dict[TopicPartition, int] = {}
    by_leader: dict[int, dict[str, list[int]]] = {}
    topic_ids: dict[str, uuid.UUID] = {}
    leaderless: dict[TopicPartition, str] = {}
    replica_ids: set[int] = set()
    add_replicas = replica_ids.update
    for topic in response.topics:
        name = topic.name
        if topic.error_code != 0 and not topic.partitions:
            continue
        if topic.topic_id is not None:
            topic_ids[name] = topic.topic_id
        for p in topic.partitions:
            tp = TopicPartition(name, p.partition_index)
            leader = p.leader_id
            leaders[tp] = leader
            add_replicas(p.replica_nodes)
            if leader < 0:
                leaderless[tp] = "LEADER_NOT_AVAILABLE"
                continue
            per_topic = by_leader.get(leader)
            if per_topic is None:
                per_topic = by_leader[leader] = {}
            partitions = per_topic.get(name)
            if partitions is None:
                per_topic[name] = [p.partition_index]
            else:
                partitions.append(p.partition_index)
    unlisted = {
        name for leader, per_topic in by_leader.items() if leader not in brokers
        for name in per_topic
    }
    return MetadataView(
        brokers, leaders, by_leader, topic_ids, leaderless, replica_ids, unlisted
    )


def _parse_lean_metadata(response: LeanMetadataResponse) -> MetadataView:
    """`parse_metadata` for the lean decoder's answer (parallel lists, replica ids done).
    Same result; grouped per topic so the per-partition work is one key and one append."""
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    leaders: dict[TopicPartition, int] = {}
    by_leader: dict[int, dict[str, list[int]]] = {}
    topic_ids: dict[str, uuid.UUID] = {}
    leaderless: dict[TopicPartition, str] = {}
    for topic in response.topics:
        name: Any = topic.name  # null only from a broker breaking the schema; kept as is
        indexes = topic.partition_indexes
        if topic.error_code != 0 and not indexes:
            continue
        if topic.topic_id is not None:
            topic_ids[name] = topic.topic_id
        leader_ids = topic.leader_ids
        leaders.update(zip(map(TopicPartition, repeat(name), indexes), leader_ids, strict=True))
        groups: dict[int, list[int]] = {}
        for index, leader in zip(indexes, leader_ids, strict=True):
            group = groups.get(leader)
            if group is None:
                groups[leader] = [index]
            else:
                group.append(index)
        for leader, partitions in groups.items():
            if leader < 0:
                for index in partitions:
                    leaderless[TopicPartition(name, index)] = "LEADER_NOT_AVAILABLE"
                continue
            per_topic = by_leader.get(leader)
            if per_topic is None:
                per_topic = by_leader[leader] = {}
            known = per_topic.get(name)  # a topic named twice: as parse_metadata, append
            if known is None:
                per_topic[name] = partitions
            else:
                known.extend(partitions)
    unlisted = {
        name for leader, per_topic in by_leader.items() if leader not in brokers
        for name in per_topic
    }
    return MetadataView(
        brokers, leaders, by_leader, topic_ids, leaderless, set(response.replica_ids),
        unlisted,
    )
