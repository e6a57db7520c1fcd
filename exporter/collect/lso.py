"""Last stable offset lag: high watermark - LSO (ListOffsets READ_UNCOMMITTED and
READ_COMMITTED, `collect.apis.list_offsets` on the admin driver) for the partitions with an
open transaction, asked of their leaders. The two offsets are kept too: the blocked-group
check (collect.groups, analyze) compares committed offsets with them, so no partition is asked
twice."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.collect.apis.list_offsets import ListOffsets, StableOffsets
from exporter.collect.client import MetadataView
from exporter.collect.driver import Driver, KnownBroker, PartitionLeaderStrategy
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

__all__ = ["LastStableOffsetReader", "StableOffsets", "read_stable_offsets"]

_NO_VIEW = MetadataView(brokers={}, leaders={}, by_leader={}, topic_ids={})
"""The screening names the leader itself (KnownBroker): no Metadata is read."""


class LastStableOffsetReader:
    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def read(self, meta: MetadataView, state: PollState) -> StableOffsets:
        """Both offsets of every partition with an open transaction, each asked once."""
        partitions = list(dict.fromkeys(
            TopicPartition(t.topic, t.partition) for t in state.open_entries
        ))
        offsets = StableOffsets()
        await self._driver.run(
            ListOffsets(offsets), PartitionLeaderStrategy(), partitions, meta, state
        )
        return offsets


async def read_stable_offsets(
    driver: Driver,
    broker_id: int,
    partitions: Mapping[str, list[int]],
    offsets: StableOffsets,
    state: PollState,
) -> None:
    """Both latest offsets of `partitions` from their leader `broker_id` (the caller knows it)
    into `offsets`; what could not be read goes to `offsets.failed`, its errors counted on
    `state`."""
    keys = [TopicPartition(topic, p) for topic, indexes in partitions.items() for p in indexes]
    await driver.run(ListOffsets(offsets), KnownBroker(broker_id), keys, _NO_VIEW, state)
