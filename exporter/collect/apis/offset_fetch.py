"""OffsetFetch v8+ (Kafka 3.0, KIP-709): the committed offsets of many groups in one request,
each group asked only about the affected partitions, at the groups' coordinator."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.connection import BrokerConnection, CollectError, UnsupportedApi
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    MISSING_FROM_ANSWER,
    NONE,
    NOT_COORDINATOR,
    error_name,
)
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

OFFSET_FETCH_MIN_VERSION = 8
"""OffsetFetch v8 (Kafka 3.0, KIP-709) is the first to carry many groups in one request."""
OFFSET_FETCH_MAX_VERSION = 9
"""v10 names topics by id only; the exporter names them (v9 is Kafka 4.0's newest)."""
OFFSET_FETCH_MAX_ENTRIES = 10_000
"""Group x partition entries per OffsetFetch request: keeps each request and answer to a few
hundred KB however many groups and late partitions there are."""
_RETRIABLE = frozenset({NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS})
_ZERO_UUID = uuid.UUID(int=0)


def offset_fetch_request(
    group_ids: Sequence[str], partitions: Sequence[tuple[str, Sequence[int]]]
) -> Callable[[BrokerConnection], Any]:
    """OffsetFetch v8+ for many groups, each asked only about `partitions` (topic, indexes);
    require_stable false: the last committed offset, even with a transactional commit pending.
    kafka-python's group module is imported here, not at start-up: it also holds the consumer
    group client's messages, and only a poll with a late transaction needs it."""

    def build(connection: BrokerConnection) -> Any:
        from kafka.protocol.consumer.group import OffsetFetchRequest

        version = connection.version_for(OffsetFetchRequest, max_version=OFFSET_FETCH_MAX_VERSION)
        if version < OFFSET_FETCH_MIN_VERSION:
            raise UnsupportedApi("OffsetFetch v8+ needed for many groups per request")
        group_cls = OffsetFetchRequest.OffsetFetchRequestGroup
        topic_cls = group_cls.OffsetFetchRequestTopics
        return OffsetFetchRequest(
            groups=[
                group_cls(
                    group_id=g,
                    member_id=None,
                    member_epoch=-1,
                    topics=[
                        topic_cls(name=t, topic_id=_ZERO_UUID, partition_indexes=list(ps))
                        for t, ps in partitions
                    ],
                )
                for g in group_ids
            ],
            require_stable=False,
            version=version,
        )

    return build


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


class OffsetFetch(Handler[str, list[GroupOffsetsAnswer]]):
    """Keys are group ids. Writes committed offsets (>= 0) into `offsets`, keyed (group, topic,
    partition), and partitions whose groups cannot be told into `unknown`; `all_unknown` marks
    every affected partition (a group not read may have committed on any of them). A group
    whose coordinator moved or is loading is looked up and asked once more."""

    api = "OffsetFetch"
    unsupported_name = "OffsetFetch v8"

    def __init__(
        self,
        partitions: list[tuple[str, list[int]]],
        offsets: dict[tuple[str, str, int], int],
        unknown: dict[TopicPartition, str],
        all_unknown: Callable[[str], None],
    ) -> None:
        self.partitions = partitions
        self.offsets = offsets
        self.unknown = unknown
        self.all_unknown = all_unknown

    def batches(self, keys: list[str], connection: BrokerConnection | None) -> list[list[str]]:
        size = sum(len(indexes) for _, indexes in self.partitions)
        per_request = max(1, OFFSET_FETCH_MAX_ENTRIES // max(1, size))
        return [keys[i : i + per_request] for i in range(0, len(keys), per_request)]

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return offset_fetch_request(keys, self.partitions)

    def parse(
        self, keys: list[str], response: Any
    ) -> tuple[list[GroupOffsetsAnswer], Collection[str]]:
        answers = parse_offset_fetch_groups(response)
        return answers, {a.group_id for a in answers}

    def left_out(self, broker_id: int, keys: list[str], state: PollState) -> Outcome[str]:
        self.all_unknown(MISSING_FROM_ANSWER)
        return Outcome()

    def handle(
        self, broker_id: int, keys: list[str], answer: list[GroupOffsetsAnswer],
        state: PollState, *, last: bool,
    ) -> Outcome[str]:
        if {a.group_id for a in answer}.issuperset(keys):
            self._check_partitions(broker_id, answer, state)
        outcome: Outcome[str] = Outcome()
        for group in answer:
            if group.error_code != NONE:
                state.error(broker_id, self.api, error_name(group.error_code))
                if group.error_code in _RETRIABLE and not last:
                    outcome.retry.append(group.group_id)
                    outcome.forget.append(group.group_id)
                else:
                    self.all_unknown(error_name(group.error_code))
                continue
            for tp, code in group.errors:
                state.error(broker_id, self.api, error_name(code))
                self.unknown.setdefault(tp, error_name(code))
            group_id = group.group_id
            for topic, partition, offset in group.offsets:
                if offset >= 0:  # -1: nothing committed on that partition
                    self.offsets[(group_id, topic, partition)] = offset
        return outcome

    def _check_partitions(
        self, broker_id: int, answer: list[GroupOffsetsAnswer], state: PollState
    ) -> None:
        """A partition of a group that the answer leaves out is not "nothing committed": its
        groups are unknown there."""
        wanted = {(topic, p) for topic, indexes in self.partitions for p in indexes}
        for group in answer:
            if group.error_code != NONE:
                continue
            got = {(topic, p) for topic, p, _ in group.offsets}
            got.update((tp.topic, tp.partition) for tp, _ in group.errors)
            left_out = wanted - got
            if left_out:
                state.error(broker_id, self.api, MISSING_FROM_ANSWER)
                for topic, p in left_out:
                    self.unknown.setdefault(TopicPartition(topic, p), MISSING_FROM_ANSWER)

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        self.all_unknown(error.kind)
        return Outcome()
