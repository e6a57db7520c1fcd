"""Last stable offset lag: high watermark - LSO (ListOffsets READ_UNCOMMITTED and
READ_COMMITTED) for the partitions with an open transaction, per leader."""

from __future__ import annotations

import asyncio

from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    gather_settled,
    list_offsets_request,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import error_name
from exporter.collect.parse import parse_list_offsets
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition


class LastStableOffsetReader:
    def __init__(self, client: ClusterClient) -> None:
        self._client = client

    async def lag(self, state: PollState) -> dict[TopicPartition, int]:
        by_leader: dict[int, dict[str, list[int]]] = {}
        seen: set[tuple[str, int]] = set()
        for t in state.open_entries:
            if (t.topic, t.partition) in seen:
                continue
            seen.add((t.topic, t.partition))
            by_leader.setdefault(t.leader_id, {}).setdefault(t.topic, []).append(t.partition)
        lag: dict[TopicPartition, int] = {}
        await asyncio.gather(*(self._lag_at(b, ps, lag, state) for b, ps in by_leader.items()))
        return lag

    async def _lag_at(
        self,
        broker_id: int,
        partitions: dict[str, list[int]],
        lag: dict[TopicPartition, int],
        state: PollState,
    ) -> None:
        results = await gather_settled(
            self._client.send(broker_id, list_offsets_request(partitions, READ_UNCOMMITTED)),
            self._client.send(broker_id, list_offsets_request(partitions, READ_COMMITTED)),
        )
        offsets: list[dict[TopicPartition, int]] = []
        for result in results:
            if isinstance(result, CollectError):
                state.error(broker_id, "ListOffsets", result.kind)
                return
            if isinstance(result, BaseException):
                raise result
            found, errors = parse_list_offsets(result)
            for code in errors:
                state.error(broker_id, "ListOffsets", error_name(code))
            offsets.append(found)
        high_watermarks, stable_offsets = offsets
        for tp, high_watermark in high_watermarks.items():
            stable = stable_offsets.get(tp)
            if stable is not None:
                lag[tp] = max(0, high_watermark - stable)
