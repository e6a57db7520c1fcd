"""What the poller asks of DescribeProducers and ListOffsets, counted for the screening
tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from exporter.collect import producers
from exporter.collect.apis import list_offsets


def describe_producers_asked(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, int]]:
    """Every partition put in a DescribeProducers request sent, counted (at each send: the
    reader keeps built batches between polls)."""
    counts: Counter[tuple[str, int]] = Counter()
    make = producers.describe_producers_request

    def counting(batch: Sequence[tuple[str, Sequence[int]]]) -> Any:
        build = make(batch)

        def sent(connection: Any) -> Any:
            for topic, indexes in batch:
                counts.update((topic, p) for p in indexes)
            return build(connection)

        return sent

    monkeypatch.setattr(producers, "describe_producers_request", counting)
    return counts


def list_offsets_asked(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, int]]:
    """Every partition put in a ListOffsets request built, counted (twice per read: one
    request per isolation level)."""
    counts: Counter[tuple[str, int]] = Counter()
    make = list_offsets.list_offsets_request

    def counting(partitions: dict[str, list[int]], isolation_level: int) -> Any:
        for topic, indexes in partitions.items():
            counts.update((topic, p) for p in indexes)
        return make(partitions, isolation_level)

    monkeypatch.setattr(list_offsets, "list_offsets_request", counting)
    return counts
