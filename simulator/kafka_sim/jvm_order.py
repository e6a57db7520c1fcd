"""Iteration orders of the JVM collections a Kafka 4.0 broker builds its answers from.

Kafka answers several lists in hash order, not sorted; the captures show it (04: Metadata lists
partitions 1,2,0; 07: DescribeConfigs with keys lists them in neither request nor 06 order).
These helpers reproduce the orders of java.util.HashMap / ConcurrentHashMap and Scala 2.13's
mutable.HashSet / mutable.HashMap / immutable.Set, from the element hash codes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
_M = 0xFFFFFFFF


@functools.lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode as a signed int32 (UTF-16 code units, overflow).

    Cached: the same topic names are hashed for every partition of every answer."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _M
    return h - (1 << 32) if h >= 1 << 31 else h


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode: 31 * (31 + partition) + topic.hashCode."""
    return 31 * (31 + tp[1]) + java_string_hash(tp[0])


def java_list_hash(values: Sequence[int]) -> int:
    """java.util.List.hashCode of Integers (unsigned 32-bit form)."""
    h = 1
    for v in values:
        h = (31 * h + v) & _M
    return h


def java_fields_hash(values: Sequence[int]) -> int:
    """hashCode of a generated Kafka message class: 31 * h + field, starting at 0."""
    h = 0
    for v in values:
        h = (31 * h + v) & _M
    return h


def _capacity(n: int) -> int:
    """Table size after n insertions from the default 16 at load factor 0.75."""
    capacity = 16
    while n >= capacity * 3 // 4:
        capacity *= 2
    return capacity


def scala_mutable_hash_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """Scala 2.13 mutable.HashSet/HashMap built by adding `items` one by one.

    Bucket = improveHash(h) & (capacity - 1), improveHash(h) = h ^ (h >>> 16); a bucket's nodes
    are kept sorted by improved hash.
    """
    return scala_mutable_hash_order_of([hash_of(item) for item in items], items)


def scala_mutable_hash_order_of(hashes: Sequence[int], items: Sequence[T]) -> list[T]:
    """`scala_mutable_hash_order` with each item's hash code given (same index)."""
    mask = _capacity(len(items)) - 1
    keys = []
    for h in hashes:
        h &= _M
        improved = h ^ (h >> 16)
        keys.append(((improved & mask) << 32) | improved)  # (bucket, improved) as one int
    order = sorted(range(len(items)), key=keys.__getitem__)
    return [items[i] for i in order]


def java_hash_map_order(items: Sequence[T], hash_of: Callable[[T], int],
                        concurrent: bool = False, capacity: int | None = None) -> list[T]:
    """java.util.HashMap / ConcurrentHashMap: bin = spread(h) & (n - 1), insertion order in a bin.

    HashMap resizes once size exceeds 0.75 n; ConcurrentHashMap once it reaches it. Neither
    shrinks when entries are removed: `capacity`, when given, is the table size the map grew
    to (`java_hash_map_capacity` of the most entries it ever held).
    """
    n = len(items)
    if capacity is not None:
        mask = capacity - 1
    elif concurrent:
        size = 16
        while n >= size * 3 // 4:
            size *= 2
        mask = size - 1
    else:
        mask = java_hash_map_capacity(n) - 1

    def bin_of(item: T) -> int:
        h = hash_of(item) & _M
        spread = h ^ (h >> 16)
        if concurrent:
            spread &= 0x7FFFFFFF
        return spread & mask

    indexed = sorted(enumerate(items), key=lambda ix: (bin_of(ix[1]), ix[0]))
    return [item for _, item in indexed]


def java_hash_map_capacity(most_entries: int, capacity: int = 16) -> int:
    """The table size of a java.util.HashMap that has held `most_entries` at once (at least
    `capacity`, what it had before): it doubles once the size exceeds 0.75 of it."""
    while most_entries > capacity * 3 // 4:
        capacity *= 2
    return capacity


def _scala_improve(hcode: int) -> int:
    """scala.collection.Hashing.improve (immutable HashSet/HashMap)."""
    h = (hcode + (~(hcode << 9))) & _M
    h ^= h >> 14
    h = (h + (h << 4)) & _M
    return h ^ (h >> 10)


def scala_immutable_set_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """Scala 2.13 immutable.Set: Set1..Set4 keep insertion order; larger sets are CHAMP tries.

    CHAMP iteration: at each node, its single entries in 5-bit-fragment order, then its
    sub-nodes in fragment order, depth first.
    """
    unique: list[T] = []
    seen: set[int] = set()
    for item in items:
        marker = id(item) if not isinstance(item, str | int) else hash(item)
        if marker not in seen:
            seen.add(marker)
            unique.append(item)
    if len(unique) <= 4:
        return unique

    def walk(group: list[tuple[int, T]], shift: int) -> list[T]:
        if shift >= 32:
            return [item for _, item in group]  # full collision: insertion order
        by_fragment: dict[int, list[tuple[int, T]]] = {}
        for h, item in group:
            by_fragment.setdefault((h >> shift) & 31, []).append((h, item))
        singles = [g[0][1] for f, g in sorted(by_fragment.items()) if len(g) == 1]
        nodes: list[T] = []
        for _, g in sorted(by_fragment.items()):
            if len(g) > 1:
                nodes.extend(walk(g, shift + 5))
        return singles + nodes

    return walk([(_scala_improve(hash_of(i) & _M), i) for i in unique], 0)


_FIBONACCI = -7046029254386353131
"""Knuth's multiplicative constant of org.apache.kafka.timeline.BaseHashTable.findSlot."""


def timeline_hash_map_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """org.apache.kafka.timeline.TimelineHashMap (BaseHashTable) built by adding `items` one by
    one from an expected size of 0, iterated: slots in index order, a slot's elements in the
    order they were added (separate chaining in an array that grows at the end).

    Capacity starts at 2 and doubles before an insert when (size + 1) * 0.75 > capacity; a
    rehash walks the old slots in order. slot = (hashCode * C as a 64-bit product) >>> (65 -
    log2size), log2size = 32 - numberOfLeadingZeros(capacity).
    """

    def slot(item: T, capacity: int) -> int:
        h = hash_of(item)
        h = h - (1 << 32) if h >= 1 << 31 else h  # the int hashCode, sign-extended
        shift = 65 - capacity.bit_length()
        return ((h * _FIBONACCI) & 0xFFFFFFFFFFFFFFFF) >> shift

    table: list[list[T]] = [[], []]
    for size, item in enumerate(items):
        if (size + 1) * 0.75 > len(table):
            old = table
            table = [[] for _ in range(len(old) * 2)]
            for chain in old:
                for moved in chain:
                    table[slot(moved, len(table))].append(moved)
        table[slot(item, len(table))].append(item)
    return [item for chain in table for item in chain]
