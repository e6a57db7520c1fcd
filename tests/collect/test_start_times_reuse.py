"""A start time is worked out again whenever what it comes from changed: the record of a
transaction is reused only for the very DescribeProducers entry it was made from (an answer
reused while its partition stood still) with the same batch timestamp."""

from __future__ import annotations

import asyncio
from typing import Any

from exporter.collect.pollstate import PollState
from exporter.collect.start_times import StartTimeResolver
from exporter.model import OpenTransaction, ProducerEntry, StartTimeSource

NOW_MS = 1_800_000_000_000
STARTED_MS = NOW_MS - 600_000
LAST_WRITE_MS = NOW_MS - 60_000


def _entry(last_timestamp_ms: int = LAST_WRITE_MS) -> ProducerEntry:
    return ProducerEntry("t", 0, 1, 7, 0, 3, 42, last_timestamp_ms)


def _resolve(resolver: StartTimeResolver, entry: ProducerEntry) -> OpenTransaction:
    state = PollState(now_ms=NOW_MS)
    state.open_entries.append(entry)
    (txn,) = asyncio.run(resolver.resolve(meta=None, state=state))  # type: ignore[arg-type]
    return txn


def test_a_record_is_reused_only_for_the_same_entry_and_batch_timestamp() -> None:
    resolver = StartTimeResolver(client=None)  # type: ignore[arg-type]
    readable = False

    async def read(to_read: list[ProducerEntry], meta: Any, state: PollState) -> None:
        # The first poll's read fails for now (nothing cached: read again); then it succeeds.
        if readable:
            resolver._batch_timestamps[to_read[0].key] = STARTED_MS

    resolver._read = read  # type: ignore[method-assign]
    entry = _entry()
    first = _resolve(resolver, entry)
    assert (first.start_time_ms, first.start_time_source) == (
        LAST_WRITE_MS, StartTimeSource.LAST_TIMESTAMP)

    readable = True  # the same entry (a reused answer), and now the batch is read
    second = _resolve(resolver, entry)
    assert (second.start_time_ms, second.start_time_source) == (
        STARTED_MS, StartTimeSource.BATCH_TIMESTAMP)

    assert _resolve(resolver, entry) is second  # nothing changed: the same record

    moved = _resolve(resolver, _entry(last_timestamp_ms=LAST_WRITE_MS + 1000))  # asked again
    assert moved is not second
    assert moved.last_timestamp_ms == LAST_WRITE_MS + 1000
    assert (moved.start_time_ms, moved.start_time_source) == (
        STARTED_MS, StartTimeSource.BATCH_TIMESTAMP)
