"""Pure response parsers shared by `serve`, `scan` and `abort` (kafka-python's habit: the
request builders live in `collect.client`, the parsers here; neither does I/O).

Each takes a decoded response (kafka-python's or the lean one from `collect.fastdecode`, same
field names) and returns the exporter's records (`model.ProducerEntry` for DescribeProducers).
Error codes stay codes; the caller decides what each means for its poll. The APIs in
`collect.apis` keep their parsers in their own module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.errors import NONE
from exporter.model import (
    FinalizedFeatures,
    ProducerEntry,
    TopicPartition,
)

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
