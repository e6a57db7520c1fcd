"""Last stable offset lag: high watermark - LSO for the partitions with an open transaction,
read at their leaders: by the screening's fetch session when it read them this poll (the
partitions with LSO < HW it screens), else with ListOffsets READ_UNCOMMITTED and
READ_COMMITTED (`collect.apis.list_offsets` on the admin driver). The two offsets are kept
too: the blocked-group check (collect.groups, analyze) compares committed offsets with them,
so no partition is asked twice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.collect.apis.list_offsets import ListOffsets, StableOffsets
from exporter.collect.client import MetadataView
from exporter.collect.driver import Driver, KnownBroker, PartitionLeaderStrategy
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

__all__ = ["LastStableOffsetReader", "Offsets", "StableOffsets", "read_stable_offsets"]

_NO_VIEW = MetadataView(brokers={}, leaders={}, by_leader={}, topic_ids={})
"""The screening names the leader itself (KnownBroker): no Metadata is read."""


@dataclass(frozen=True, slots=True)
class Offsets:
    """A partition's two offsets as its leader reported them."""

    high_watermark: int
    last_stable_offset: int

    @property
    def clear(self) -> bool:
        return self.last_stable_offset == self.high_watermark


class LastStableOffsetReader:
    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def read(
        self, meta: MetadataView, state: PollState, read: Mapping[TopicPartition, Offsets]
    ) -> StableOffsets:
        """Both offsets of every partition with an open transaction: from `read` (offsets
        its leader reported this poll), else asked, each once."""
        offsets = StableOffsets()
        high_watermarks, last_stable_offsets = offsets.high_watermarks, offsets.last_stable_offsets
        asked: list[TopicPartition] = []
        for tp in dict.fromkeys(TopicPartition(t.topic, t.partition) for t in state.open_entries):
            known = read.get(tp)
            if known is None:
                asked.append(tp)
            else:
                high_watermarks[tp] = known.high_watermark
                last_stable_offsets[tp] = known.last_stable_offset
        if asked:
            await self._driver.run(
                ListOffsets(offsets), PartitionLeaderStrategy(), asked, meta, state
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
