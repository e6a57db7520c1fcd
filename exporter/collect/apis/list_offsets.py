"""ListOffsets at each partition's leader, latest offset in both isolation levels: the high
watermark (READ_UNCOMMITTED) and the last stable offset (READ_COMMITTED), for the partitions
with an open transaction (LastStableOffsetLag from outside the broker, and what the
blocked-group check compares committed offsets with)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    gather_settled,
)
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import LEADER_NOT_AVAILABLE, MISSING_FROM_ANSWER, NONE, error_name
from exporter.collect.fastdecode import lean
from exporter.collect.fastencode import (
    LIST_OFFSETS,
    LIST_OFFSETS_FIRST_FLEXIBLE,
    LIST_OFFSETS_VERSIONS,
    LeanRequest,
    encode_list_offsets,
)
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

LATEST_OFFSET = -1
"""The timestamp that asks for the latest offset (isolation level decides which)."""
INVALID_OFFSET = "INVALID_OFFSET"
"""Why a partition whose answered offsets are impossible (an LSO past the high watermark, or
negative) has none: never used as true."""
_DECODE = lean(ListOffsetsResponse)  # index, error and offset per partition: all it reads

PartitionOffsets = tuple[dict[TopicPartition, int], list[tuple[TopicPartition, int]]]
"""(offset per partition answered without error, [(partition, error code)])."""


class UnsupportedApiForLag(CollectError):
    kind = "UNSUPPORTED_VERSION"


def list_offsets_request(
    partitions: dict[str, list[int]], isolation_level: int
) -> Callable[[BrokerConnection], LeanRequest]:
    """Latest offset per partition: READ_UNCOMMITTED gives the high watermark, READ_COMMITTED
    the last stable offset (reference: LastStableOffsetLag from outside the broker). Written by
    `fastencode` (kafka-python's bytes)."""

    def build(connection: BrokerConnection) -> LeanRequest:
        # isolation_level exists from v2; an older answer would silently be the high watermark.
        version = connection.version_for(
            ListOffsetsRequest, max_version=LIST_OFFSETS_VERSIONS[-1]
        )
        if version < 2:
            raise UnsupportedApiForLag("ListOffsets v2+ needed for isolation_level")
        return LeanRequest(
            api_key=LIST_OFFSETS,
            version=version,
            flexible=version >= LIST_OFFSETS_FIRST_FLEXIBLE,
            name=ListOffsetsRequest.name,
            response_class=ListOffsetsResponse,
            encode_body=functools.partial(
                encode_list_offsets,
                version,
                -1,  # replica id: a consumer
                isolation_level,
                partitions.items(),
                LATEST_OFFSET,
            ),
        )

    return build


def parse_list_offsets(response: Any) -> PartitionOffsets:
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


@dataclass(slots=True)
class StableOffsets:
    """Both latest offsets of each partition answered without error in both requests."""

    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    last_stable_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    """Partitions asked about without both offsets: Kafka error name or collect error kind."""

    @property
    def lag(self) -> dict[TopicPartition, int]:
        return {
            tp: max(0, hw - self.last_stable_offsets[tp])
            for tp, hw in self.high_watermarks.items()
        }


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """topic -> partition indexes, in the order given (a request's shape)."""
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


Both = tuple[PartitionOffsets, PartitionOffsets]
"""(READ_UNCOMMITTED answer, READ_COMMITTED answer), each parsed."""


class ListOffsets(Handler[TopicPartition, Both]):
    """Keys are partitions, asked of their leader (`PartitionLeaderStrategy`) in both isolation
    levels at once; a partition gets its two offsets into `offsets` only when both answers
    hold it without error and they are possible (0 <= LSO <= high watermark). Otherwise its
    reason goes to `offsets.failed`: the partition's error (NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION, ...: counted, not asked again this poll), the failed
    request's kind, MISSING_FROM_ANSWER, or INVALID_OFFSET (not counted: the answer came)."""

    api = "ListOffsets"

    def __init__(self, offsets: StableOffsets) -> None:
        self.offsets = offsets
        self._read_before_failure: dict[int, PartitionOffsets] = {}
        """A broker's READ_UNCOMMITTED answer when its READ_COMMITTED request failed: its
        partition errors are still counted."""

    async def ask(
        self, client: ClusterClient, broker_id: int, keys: list[TopicPartition]
    ) -> Both:
        partitions = by_topic(keys)
        uncommitted, committed = await gather_settled(
            client.send(broker_id, list_offsets_request(partitions, READ_UNCOMMITTED), _DECODE),
            client.send(broker_id, list_offsets_request(partitions, READ_COMMITTED), _DECODE),
        )
        # The first request that failed is the batch's failure (counted once); an answer
        # after it is not read.
        if isinstance(uncommitted, BaseException):
            raise uncommitted
        high = parse_list_offsets(uncommitted)
        if isinstance(committed, BaseException):
            if isinstance(committed, CollectError):
                self._read_before_failure[broker_id] = high
            raise committed
        return high, parse_list_offsets(committed)

    def parse(
        self, keys: list[TopicPartition], response: Both
    ) -> tuple[Both, Collection[TopicPartition]]:
        (high, high_errors), (stable, stable_errors) = response
        erred = {tp for tp, _ in high_errors} | {tp for tp, _ in stable_errors}
        failed = self.offsets.failed
        # Answered: both offsets, or a reason (an error in either answer) for the partition.
        answered = {
            tp for tp in keys
            if (tp in high and tp in stable) or tp in erred or tp in failed
        }
        return response, answered

    def left_out(
        self, broker_id: int, keys: list[TopicPartition], state: PollState
    ) -> Outcome[TopicPartition]:
        # The driver counted the answer once; each partition left out is counted.
        for _ in keys[1:]:
            state.error(broker_id, self.api, MISSING_FROM_ANSWER)
        for tp in keys:
            self.offsets.failed.setdefault(tp, MISSING_FROM_ANSWER)
        return Outcome()

    def handle(
        self, broker_id: int, keys: list[TopicPartition], answer: Both, state: PollState,
        *, last: bool,
    ) -> Outcome[TopicPartition]:
        (high_watermarks, high_errors), (stable_offsets, stable_errors) = answer
        self._count(broker_id, high_errors, state)
        self._count(broker_id, stable_errors, state)
        offsets = self.offsets
        for topic, indexes in by_topic(keys).items():
            for p in indexes:
                tp = TopicPartition(topic, p)
                high_watermark = high_watermarks.get(tp)
                stable = stable_offsets.get(tp)
                if high_watermark is None or stable is None:
                    continue  # its error or MISSING_FROM_ANSWER is in `failed` already
                if not 0 <= stable <= high_watermark:
                    # Impossible (an LSO is never past the high watermark): never used as true.
                    offsets.failed[tp] = INVALID_OFFSET
                else:
                    offsets.high_watermarks[tp] = high_watermark
                    offsets.last_stable_offsets[tp] = stable
        return Outcome()

    def _count(
        self, broker_id: int, errors: list[tuple[TopicPartition, int]], state: PollState
    ) -> None:
        for _tp, code in errors:
            state.error(broker_id, self.api, error_name(code))
        for tp, code in errors:
            self.offsets.failed.setdefault(tp, error_name(code))

    def failed(
        self, broker_id: int, keys: list[TopicPartition], error: CollectError, state: PollState
    ) -> Outcome[TopicPartition]:
        high = self._read_before_failure.pop(broker_id, None)
        if high is not None:
            self._count(broker_id, high[1], state)
        for tp in keys:
            self.offsets.failed[tp] = error.kind
        return Outcome()

    def unrouted(self, keys: list[TopicPartition]) -> None:
        for tp in keys:
            self.offsets.failed.setdefault(tp, error_name(LEADER_NOT_AVAILABLE))
