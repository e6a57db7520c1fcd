"""Start times of open transactions: the max timestamp of the record batch at
CurrentTxnStartOffset, read with Fetch once per transaction and cached until it ends, with
when the exporter first saw it open; `rules.start_time` picks the earliest trustworthy one."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.consumer.fetch import FetchResponse

from exporter.collect.client import (
    BatchHeader,
    ClusterClient,
    MetadataView,
    fetch_batch_request,
    fetch_request,
    first_batch_header,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import (
    OFFSET_OUT_OF_RANGE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_name,
)
from exporter.collect.fastdecode import lean
from exporter.collect.pollstate import PollState
from exporter.model import OpenTransaction, ProducerEntry, TopicPartition, TxnKey
from exporter.rules import start_time

FETCH_BATCH_PARTITIONS = 100
"""Start-time reads per Fetch request (distinct partitions of one leader)."""
# Fetch errors after which re-reading the batch will not help: fall back for good.
_PERMANENT_FETCH_ERRORS = frozenset(
    {OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED}
)
_DECODE_FETCH = lean(FetchResponse)  # v12-v17: only errors and raw records (fastdecode)


class StartTimeResolver:
    """Reads and caches batch timestamps and first sightings; forgets a transaction once it
    is seen ended."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client
        self._batch_timestamps: dict[TxnKey, int | None] = {}
        """The batch's max timestamp; None: no readable batch at that offset (read no more)."""
        self._first_seen_ms: dict[TxnKey, int] = {}
        self._resolved: dict[TxnKey, tuple[ProducerEntry, int | None, OpenTransaction]] = {}
        """Last poll's result per transaction, with the entry and batch timestamp it came
        from: a reused DescribeProducers answer (the same entry) gets the same record."""

    def cache_sizes(self) -> dict[str, int]:
        return {
            "batch_timestamps": len(self._batch_timestamps),
            "first_seen": len(self._first_seen_ms),
        }

    async def resolve(self, meta: MetadataView, state: PollState) -> list[OpenTransaction]:
        """Each open entry with its start time; the batch is read once per transaction."""
        first_seen = self._first_seen_ms
        batch_timestamps = self._batch_timestamps
        keyed = [(t.key, t) for t in state.open_entries]
        to_read: list[ProducerEntry] = []
        for key, t in keyed:
            first_seen.setdefault(key, state.now_ms)
            if key not in batch_timestamps:
                to_read.append(t)
        if to_read:
            await self._read(to_read, meta, state)
        result: list[OpenTransaction] = []
        last = self._resolved
        resolved: dict[TxnKey, tuple[ProducerEntry, int | None, OpenTransaction]] = {}
        for key, t in keyed:
            batch_ms = batch_timestamps.get(key)
            before = last.get(key)
            if before is not None and before[0] is t and before[1] == batch_ms:
                open_txn = before[2]
            else:
                start_ms, source = start_time(batch_ms, t.last_timestamp_ms, first_seen[key])
                open_txn = OpenTransaction(
                    t.topic,
                    t.partition,
                    t.leader_id,
                    t.producer_id,
                    t.producer_epoch,
                    t.coordinator_epoch,
                    t.current_txn_start_offset,
                    t.last_timestamp_ms,
                    start_ms,
                    source,
                )
            resolved[key] = (t, batch_ms, open_txn)
            result.append(open_txn)
        self._resolved = resolved
        return result

    def evict_closed(self, state: PollState, meta: MetadataView) -> None:
        """Forget transactions no longer open on partitions observed this poll (or gone)."""
        seen = {t.key for t in state.open_entries}
        unobserved = state.unobserved
        caches: tuple[dict[TxnKey, int | None], dict[TxnKey, int]] = (
            self._batch_timestamps,
            self._first_seen_ms,
        )
        for cache in caches:
            stale = [
                k
                for k in cache
                if k not in seen
                and (
                    TopicPartition(k[0], k[1]) not in unobserved
                    or TopicPartition(k[0], k[1]) not in meta.leaders
                )
            ]
            for k in stale:
                del cache[k]

    async def _read(
        self, to_read: list[ProducerEntry], meta: MetadataView, state: PollState
    ) -> None:
        """Batch the reads: per leader, Fetches of up to FETCH_BATCH_PARTITIONS distinct
        partitions (a second open txn on a partition goes in another request: one offset per
        partition and request). A cold poll has one read per open txn (~2,000 at 200k)."""
        batches: dict[int, list[dict[tuple[str, int], ProducerEntry]]] = {}
        for txn in to_read:
            per_leader = batches.setdefault(txn.leader_id, [])
            key = (txn.topic, txn.partition)
            for batch in per_leader:
                if key not in batch and len(batch) < FETCH_BATCH_PARTITIONS:
                    batch[key] = txn
                    break
            else:
                per_leader.append({key: txn})
        await asyncio.gather(
            *(
                self._read_batch(leader, list(batch.values()), meta, state)
                for leader, per_leader in batches.items()
                for batch in per_leader
            )
        )

    async def _read_batch(
        self, leader_id: int, txns: list[ProducerEntry], meta: MetadataView, state: PollState
    ) -> None:
        if len(txns) == 1:
            await self._read_one(txns[0], meta, state)
            return
        build = fetch_batch_request(
            [
                (t.topic, meta.topic_ids.get(t.topic), t.partition, t.current_txn_start_offset)
                for t in txns
            ]
        )
        try:
            response = await self._client.send(leader_id, build, _DECODE_FETCH)
        except CollectError as exc:
            for _ in txns:
                state.error(leader_id, "Fetch", exc.kind)  # as many as unbatched reads
            return
        if response.error_code != 0:
            for txn in txns:
                self._fetch_failed(txn, response.error_code, state)
            return
        names_by_id = {meta.topic_ids.get(t.topic): t.topic for t in txns}
        answered: dict[tuple[str | None, int], Any] = {}
        for topic in response.responses:
            name = topic.topic if response.API_VERSION < 13 else names_by_id.get(topic.topic_id)
            for p in topic.partitions:
                answered[(name, p.partition_index)] = p
        alone: list[ProducerEntry] = []
        for txn in txns:
            partition = answered.get((txn.topic, txn.partition))
            if partition is None:
                alone.append(txn)
            elif partition.error_code != 0:
                self._fetch_failed(txn, partition.error_code, state)
            elif not self._take_batch_header(txn, first_batch_header(partition.records)):
                # No records: the response's byte budget ran out before this partition's
                # batch (only the first partition is promised a whole batch, KIP-74).
                alone.append(txn)
        if alone:
            await asyncio.gather(*(self._read_one(t, meta, state) for t in alone))

    async def _read_one(self, txn: ProducerEntry, meta: MetadataView, state: PollState) -> None:
        build = fetch_request(
            txn.topic, meta.topic_ids.get(txn.topic), txn.partition, txn.current_txn_start_offset
        )
        try:
            response = await self._client.send(txn.leader_id, build, _DECODE_FETCH)
        except CollectError as exc:
            state.error(txn.leader_id, "Fetch", exc.kind)
            return  # transient: fall back this poll, try again next poll
        partitions = [p for topic in response.responses for p in topic.partitions]
        code = response.error_code or (partitions[0].error_code if partitions else 0)
        if code != 0:
            self._fetch_failed(txn, code, state)
            return
        records = partitions[0].records if partitions else None
        self._take_batch_header(txn, first_batch_header(records))

    def _fetch_failed(self, txn: ProducerEntry, code: int, state: PollState) -> None:
        state.error(txn.leader_id, "Fetch", error_name(code))
        if code in _PERMANENT_FETCH_ERRORS:
            self._batch_timestamps[txn.key] = None

    def _take_batch_header(self, txn: ProducerEntry, header: BatchHeader | None) -> bool:
        """Cache the start time from the batch at the txn's first offset; False: no batch."""
        if header is None:
            return False
        if (
            header.base_offset == txn.current_txn_start_offset
            and header.producer_id == txn.producer_id
        ):
            self._batch_timestamps[txn.key] = header.max_timestamp
        else:
            # Another batch sits at that offset (log cleaned/truncated): do not guess again.
            self._batch_timestamps[txn.key] = None
        return True
