"""Screening of crowded partitions (issue 28): the two latest offsets of a partition, high
watermark (ListOffsets READ_UNCOMMITTED) and last stable offset (READ_COMMITTED), tell
whether it holds an open transaction below the high watermark without DescribeProducers,
whose answer grows with every producer state the partition keeps (idempotent ones
included, for `producer.id.expiration.ms`). Kafka's LSO is the first offset of the earliest
open transaction, capped at the high watermark (`UnifiedLog.lastStableOffset`,
`ProducerStateManager.firstUnstableOffset`): LSO == HW means none below the HW.

A partition is "clear" only when both answers gave it without error and LSO == HW; every
other partition asked about (LSO < HW, an error, left out of an answer, a failed request,
an impossible pair) must be asked DescribeProducers: never "no transaction" by default."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from kafka.protocol.consumer.offsets import ListOffsetsResponse

from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    gather_settled,
    list_offsets_request,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import error_name
from exporter.collect.fastdecode import lean
from exporter.collect.pollstate import PollState

_DECODE = lean(ListOffsetsResponse)

ByLeader = Mapping[int, Mapping[str, Sequence[int]]]


async def screen(
    client: ClusterClient, by_leader: ByLeader, state: PollState
) -> dict[int, dict[str, list[int]]]:
    """The partitions of `by_leader` that still need DescribeProducers, by leader: those
    whose last stable offset is below their high watermark, and those whose two offsets
    could not both be read (their request errors are counted on `state`)."""
    results = await asyncio.gather(
        *(_screen_at(client, leader, per_topic, state) for leader, per_topic in by_leader.items())
    )
    return {leader: ask for leader, ask in zip(by_leader, results, strict=True) if ask}


async def _screen_at(
    client: ClusterClient,
    leader: int,
    per_topic: Mapping[str, Sequence[int]],
    state: PollState,
) -> dict[str, list[int]]:
    partitions = {topic: list(indexes) for topic, indexes in per_topic.items()}
    results = await gather_settled(
        client.send(leader, list_offsets_request(partitions, READ_UNCOMMITTED), _DECODE),
        client.send(leader, list_offsets_request(partitions, READ_COMMITTED), _DECODE),
    )
    answers: list[dict[str, list[Any]]] = []
    for result in results:
        if isinstance(result, CollectError):
            state.error(leader, "ListOffsets", result.kind)
            return partitions  # all of them to DescribeProducers
        if isinstance(result, BaseException):
            raise result
        by_topic: dict[str, list[Any]] = {}
        for topic in result.topics:
            by_topic.setdefault(topic.name, []).extend(topic.partitions)
        answers.append(by_topic)
    high_watermarks, stable_offsets = answers
    ask: dict[str, list[int]] = {}
    for topic, indexes in partitions.items():
        hw_parts = high_watermarks.get(topic, [])
        lso_parts = stable_offsets.get(topic, [])
        # Per-partition work without objects; an answer in another order than asked (or with
        # partitions left out) is aligned to the order asked first, once per topic.
        if [part.partition_index for part in hw_parts] != indexes:
            hw_parts = _aligned(hw_parts, indexes)
        if [part.partition_index for part in lso_parts] != indexes:
            lso_parts = _aligned(lso_parts, indexes)
        for p, a, b in zip(indexes, hw_parts, lso_parts, strict=True):
            if (
                a is not None and b is not None
                and a.error_code == 0 == b.error_code
                and a.offset == b.offset >= 0
            ):
                continue  # clear: no open transaction below the high watermark
            for answer in (a, b):
                if answer is None:  # left out of an answer: counted (issue 30)
                    state.error(leader, "ListOffsets", "MISSING_FROM_ANSWER")
                elif answer.error_code:
                    state.error(leader, "ListOffsets", error_name(answer.error_code))
            ask.setdefault(topic, []).append(p)
    return ask


def _aligned(parts: list[Any], indexes: list[int]) -> list[Any]:
    """`parts` in the order of `indexes`, None where one is missing (first answer kept)."""
    by_index: dict[int, Any] = {}
    for part in parts:
        by_index.setdefault(part.partition_index, part)
    return [by_index.get(p) for p in indexes]

