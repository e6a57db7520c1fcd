"""Last stable offset lag: high watermark - LSO (ListOffsets READ_UNCOMMITTED and
READ_COMMITTED) for the partitions with an open transaction, per leader. The two offsets are
kept too: the blocked-group check (collect.groups, analyze) compares committed offsets with
them, so no partition is asked twice."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kafka.protocol.consumer.offsets import ListOffsetsResponse

from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    gather_settled,
    list_offsets_request,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import MISSING_FROM_ANSWER, error_name
from exporter.collect.fastdecode import lean
from exporter.collect.parse import parse_list_offsets
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

_DECODE = lean(ListOffsetsResponse)  # index, error and offset per partition: all it reads


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


class LastStableOffsetReader:
    def __init__(self, client: ClusterClient) -> None:
        self._client = client

    async def read(self, state: PollState) -> StableOffsets:
        by_leader: dict[int, dict[str, list[int]]] = {}
        seen: set[tuple[str, int]] = set()
        for t in state.open_entries:
            if (t.topic, t.partition) in seen:
                continue
            seen.add((t.topic, t.partition))
            by_leader.setdefault(t.leader_id, {}).setdefault(t.topic, []).append(t.partition)
        offsets = StableOffsets()
        await asyncio.gather(*(
            read_stable_offsets(self._client, b, ps, offsets, state)
            for b, ps in by_leader.items()
        ))
        return offsets


async def read_stable_offsets(
    client: ClusterClient,
    broker_id: int,
    partitions: dict[str, list[int]],
    offsets: StableOffsets,
    state: PollState,
) -> None:
    """Both latest offsets of `partitions` from their leader `broker_id` into `offsets`;
    what could not be read goes to `offsets.failed`, its errors counted on `state`."""
    results = await gather_settled(
        client.send(
            broker_id, list_offsets_request(partitions, READ_UNCOMMITTED), _DECODE
        ),
        client.send(
            broker_id, list_offsets_request(partitions, READ_COMMITTED), _DECODE
        ),
    )
    answers: list[dict[TopicPartition, int]] = []
    for result in results:
        if isinstance(result, CollectError):
            state.error(broker_id, "ListOffsets", result.kind)
            for topic, indexes in partitions.items():
                for p in indexes:
                    offsets.failed[TopicPartition(topic, p)] = result.kind
            return
        if isinstance(result, BaseException):
            raise result
        found, errors = parse_list_offsets(result)
        for _tp, code in errors:
            state.error(broker_id, "ListOffsets", error_name(code))
        for tp, code in errors:
            offsets.failed.setdefault(tp, error_name(code))
        answers.append(found)
    high_watermarks, stable_offsets = answers
    for topic, indexes in partitions.items():
        for p in indexes:
            tp = TopicPartition(topic, p)
            high_watermark = high_watermarks.get(tp)
            stable = stable_offsets.get(tp)
            if high_watermark is None or stable is None:
                if tp not in offsets.failed:  # left out of an answer: counted
                    state.error(broker_id, "ListOffsets", MISSING_FROM_ANSWER)
                offsets.failed.setdefault(tp, MISSING_FROM_ANSWER)
            elif not 0 <= stable <= high_watermark:
                # Impossible (an LSO is never past the high watermark): never used as true.
                offsets.failed[tp] = "INVALID_OFFSET"
            else:
                offsets.high_watermarks[tp] = high_watermark
                offsets.last_stable_offsets[tp] = stable
