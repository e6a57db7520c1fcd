"""The partitions the producer reader screens, each with the producer states its last
DescribeProducers answer held (`collect.producers`). Kept per topic in an array indexed by
partition: a screened partition costs four bytes, not a dict entry and a `TopicPartition`
of its own, so every partition of a cluster of a million can be screened."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence

from exporter.model import TopicPartition

_ABSENT = -1
_NONE: array[int] = array("i")
_DENSE_BELOW = 1 << 20
"""Partition indexes kept in the topic's array; a larger one (no real topic has that many
partitions, a garbage answer might name one) is kept in a dict instead of growing the array."""


def _dense(partition: int) -> bool:
    return 0 <= partition < _DENSE_BELOW


class ScreenedPartitions:
    """Screened partitions and their producer-state counts."""

    def __init__(self) -> None:
        self._topics: dict[str, array[int]] = {}
        self._sparse: dict[TopicPartition, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def get(self, topic: str, partition: int) -> int | None:
        """Its count, or None when it is not screened."""
        if not _dense(partition):
            return self._sparse.get(TopicPartition(topic, partition))
        counts = self._topics.get(topic, _NONE)
        if partition >= len(counts) or counts[partition] == _ABSENT:
            return None
        return counts[partition]

    def __contains__(self, tp: TopicPartition) -> bool:
        return self.get(tp.topic, tp.partition) is not None

    def set(self, topic: str, partition: int, count: int) -> bool:
        """Screened with `count`; True when it was not screened before."""
        added = self.get(topic, partition) is None
        if not _dense(partition):
            self._sparse[TopicPartition(topic, partition)] = count
        else:
            counts = self._topics.setdefault(topic, array("i"))
            if partition >= len(counts):
                counts.extend(array("i", [_ABSENT]) * (partition + 1 - len(counts)))
            counts[partition] = count
        self._size += added
        return added

    def discard(self, topic: str, partition: int) -> bool:
        """No longer screened; True when it was."""
        if self.get(topic, partition) is None:
            return False
        if _dense(partition):
            self._topics[topic][partition] = _ABSENT
        else:
            del self._sparse[TopicPartition(topic, partition)]
        self._size -= 1
        return True

    def states(self, topic: str, indexes: Sequence[int]) -> int:
        """The states counted for `indexes` of `topic` in all."""
        counts = self._topics.get(topic, _NONE)
        size = len(counts)
        total = sum(counts[p] for p in indexes if 0 <= p < size and counts[p] > 0)
        if self._sparse:
            total += sum(
                self._sparse.get(TopicPartition(topic, p), 0) for p in indexes
                if not 0 <= p < size
            )
        return total

    def split(self, topic: str, indexes: Sequence[int]) -> tuple[Sequence[int], Sequence[int]]:
        """(`indexes` not screened, `indexes` screened): `indexes` itself where it is all one
        or the other, so a topic wholly screened costs no second list."""
        counts = self._topics.get(topic, _NONE)
        size, sparse = len(counts), self._sparse
        screened = [
            p for p in indexes
            if (counts[p] != _ABSENT if 0 <= p < size
                else bool(sparse) and TopicPartition(topic, p) in sparse)
        ]
        if not screened:
            return indexes, ()
        if len(screened) == len(indexes):
            return (), indexes
        kept = set(screened)
        return [p for p in indexes if p not in kept], screened

    def __iter__(self) -> Iterator[TopicPartition]:
        for topic, counts in self._topics.items():
            for partition, count in enumerate(counts):
                if count != _ABSENT:
                    yield TopicPartition(topic, partition)
        yield from self._sparse

    def keep_only(self, listed: Callable[[TopicPartition], bool]) -> bool:
        """Forget every partition `listed` says no; True when one was."""
        gone = [tp for tp in self if not listed(tp)]
        for tp in gone:
            self.discard(tp.topic, tp.partition)
        empty = [t for t, counts in self._topics.items() if counts.count(_ABSENT) == len(counts)]
        for topic in empty:
            del self._topics[topic]
        return bool(gone)
