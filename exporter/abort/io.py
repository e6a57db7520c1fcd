"""The abort command's I/O: an admin session on its own event loop that reads a partition's
state (Metadata, DescribeProducers, ListOffsets) and writes the ABORT marker. Answers are read
by the same pure parsers as the daemon's (`exporter.collect.apis`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from exporter.abort.decide import WRITE_TXN_MARKERS_VERSION, marker_coordinator_epoch
from exporter.collect.apis.describe_producers import (
    describe_producers_request,
    parse_describe_producers,
)
from exporter.collect.apis.list_offsets import list_offsets_request, parse_list_offsets
from exporter.collect.client import READ_COMMITTED, READ_UNCOMMITTED, ClusterClient
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.errors import TOPIC_AUTHORIZATION_FAILED, error_name
from exporter.model import ProducerEntry, TopicPartition
from exporter.settings import ClusterSettings


def write_txn_markers_request(
    tp: TopicPartition, producer: ProducerEntry
) -> Callable[[BrokerConnection], Any]:
    """WriteTxnMarkers v1, ABORT, one partition, with the reported producer and epochs."""

    def build(connection: BrokerConnection) -> Any:
        marker_class = WriteTxnMarkersRequest.WritableTxnMarker
        topic_class = marker_class.WritableTxnMarkerTopic
        return WriteTxnMarkersRequest(
            markers=[
                marker_class(
                    producer_id=producer.producer_id,
                    producer_epoch=producer.producer_epoch,
                    transaction_result=False,  # false = ABORT
                    topics=[topic_class(name=tp.topic, partition_indexes=[tp.partition])],
                    coordinator_epoch=marker_coordinator_epoch(producer.coordinator_epoch),
                )
            ],
            version=connection.version_for(
                WriteTxnMarkersRequest, max_version=WRITE_TXN_MARKERS_VERSION
            ),
        )

    return build


def parse_write_txn_markers(response: Any, tp: TopicPartition) -> tuple[int, ...]:
    """WriteTxnMarkers answer -> the error code of every copy of the partition in it (one
    for a sound answer; none when it is not mentioned)."""
    return tuple(
        int(p.error_code)
        for marker in response.markers
        for topic in marker.topics
        if topic.name == tp.topic
        for p in topic.partitions
        if p.partition_index == tp.partition
    )


class AbortFailed(Exception):
    """An error (exit 2); the message is for the operator."""


@dataclass(slots=True)
class PartitionState:
    leader_id: int
    leader_address: tuple[str, int] | None
    producers: list[ProducerEntry]
    last_stable_offset: int | None
    high_watermark: int | None

    def open_at(self, start_offset: int) -> ProducerEntry | None:
        return next(
            (p for p in self.producers if p.current_txn_start_offset == start_offset), None
        )


class AdminSession:
    """A ClusterClient on a private event loop, one step at a time.

    The loop is driven with run_until_complete per step so that `ClusterObserver.poll()`, which
    waits for the shared polling loop (`collect.loop`), can be called between steps on the
    same thread."""

    def __init__(self, settings: ClusterSettings) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = ClusterClient(settings)

    def run(self, step: Any) -> Any:
        return self._loop.run_until_complete(step)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._client.close())
        self._loop.close()

    async def partition_state(self, tp: TopicPartition) -> PartitionState:
        client = self._client
        client.begin_poll()
        try:
            meta = await client.metadata([tp.topic])
        except CollectError as exc:
            raise AbortFailed(f"Metadata failed: {exc.kind}: {exc}") from exc
        if tp in meta.leaderless:
            raise AbortFailed(f"{tp.topic}-{tp.partition} has no leader: {meta.leaderless[tp]}")
        leader = meta.leaders.get(tp)
        if leader is None:
            raise AbortFailed(f"unknown topic or partition: {tp.topic}-{tp.partition}")
        try:
            response = await client.send(
                leader, describe_producers_request([(tp.topic, [tp.partition])])
            )
        except CollectError as exc:
            raise AbortFailed(f"DescribeProducers to broker {leader}: {exc.kind}: {exc}") from exc
        answer = parse_describe_producers(response, leader, [(tp.topic, [tp.partition])])
        for _, code in answer.errors:
            hint = (
                " (DescribeProducers needs READ on the topic)"
                if code == TOPIC_AUTHORIZATION_FAILED
                else ""
            )
            raise AbortFailed(
                f"DescribeProducers {tp.topic}-{tp.partition} on broker {leader}: "
                f"{error_name(code)}{hint}"
            )
        if answer.missing:
            raise AbortFailed(
                f"DescribeProducers on broker {leader}: the answer left out "
                f"{tp.topic}-{tp.partition}"
            )
        producers = answer.entries
        lso, hw = await self._offsets(leader, tp)
        return PartitionState(leader, meta.brokers.get(leader), producers, lso, hw)

    async def _offsets(self, leader: int, tp: TopicPartition) -> tuple[int | None, int | None]:
        """(LSO, high watermark) by ListOffsets latest READ_COMMITTED / READ_UNCOMMITTED."""
        found: list[int | None] = []
        for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
            try:
                response = await self._client.send(
                    leader, list_offsets_request({tp.topic: [tp.partition]}, isolation)
                )
            except CollectError:
                found.append(None)
                continue
            offsets, _ = parse_list_offsets(response)
            found.append(offsets.get(tp))
        return found[0], found[1]

    async def write_abort_marker(
        self, leader: int, tp: TopicPartition, producer: ProducerEntry
    ) -> tuple[int, ...]:
        """Send the marker; the partition's error codes (one, 0 = written, from a sound
        answer; several when the answer lists the partition more than once)."""
        try:
            response = await self._client.send(leader, write_txn_markers_request(tp, producer))
        except CollectError as exc:
            raise AbortFailed(
                f"WriteTxnMarkers to broker {leader}: {exc.kind}: {exc} (the marker may or may "
                "not have been written: run the command again to check)"
            ) from exc
        codes = parse_write_txn_markers(response, tp)
        if codes:
            return codes
        raise AbortFailed("WriteTxnMarkers answer did not mention the partition")


