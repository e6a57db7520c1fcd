"""One partition's log: record batches, high watermark, last stable offset and producer state.

Producer state follows Kafka's `ProducerStateManager` / `ProducerAppendInfo` / `ProducerStateEntry`
(storage/src/main/java/org/apache/kafka/storage/internals/log/): per producer id the epoch, the
last sequences of up to five retained batches, the last timestamp (a data batch's max timestamp;
after a marker, the marker's timestamp), the coordinator epoch (-1 until a marker arrives) and the
first offset of the open transaction (-1 when none). LSO = lowest first offset of the open
transactions, else the high watermark.

The simulator keeps every replica identical, so the high watermark is the log end offset.
A log object is only created for a partition on its first write; seeded batches keep no bytes
until a Fetch asks for them (see `StoredBatch.raw_bytes`). Idle idempotent producer states seeded
in bulk live in an `IdleProducerBlock` (two arrays, no object per state or batch).
"""

from __future__ import annotations

import bisect
import itertools
import struct
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from kafka_sim.errors import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
)
from kafka_sim.jvm_order import java_hash_map_capacity, java_hash_map_order

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
# ProducerStateEntry.NUM_BATCHES_TO_RETAIN: duplicates are detected among the last five batches.
NUM_BATCHES_TO_RETAIN = 5

# Record batch v2 header (DefaultRecordBatch): base offset, length, partition leader epoch, magic,
# crc, attributes, last offset delta, base timestamp, max timestamp, producer id, producer epoch,
# base sequence, record count.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
ATTRIBUTES_OFFSET = 21
CRC_OFFSET = 17
MAX_TIMESTAMP_OFFSET = 35
LOG_OVERHEAD = 12

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20



@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fields of a record batch v2 header that the broker looks at."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)


def split_batches(records: bytes) -> list[tuple[BatchHeader, bytes]] | None:
    """Split a Produce partition's `records` into v2 batches; None if malformed or not v2."""
    out: list[tuple[BatchHeader, bytes]] = []
    pos = 0
    n = len(records)
    while pos < n:
        if n - pos < BATCH_HEADER.size:
            return None
        fields = BATCH_HEADER.unpack_from(records, pos)
        size = LOG_OVERHEAD + fields[1]
        if fields[3] != 2 or fields[1] < BATCH_HEADER.size - LOG_OVERHEAD or pos + size > n:
            return None
        out.append((BatchHeader(*fields), bytes(records[pos : pos + size])))
        pos += size
    return out


def crc_ok(raw: bytes) -> bool:
    crc: int = struct.unpack_from(">I", raw, CRC_OFFSET)[0]
    return bool(calc_crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]) == crc)


def build_control_batch(
    *,
    base_offset: int,
    leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """An end-transaction marker batch, byte for byte as Kafka writes it (captures 26, 49)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)  # version 0, type COMMIT=1 / ABORT=0
    value = struct.pack(">hi", 0, coordinator_epoch)
    # record: length, attributes, timestamp delta, offset delta, key, value, header count
    body = bytes([0, 0, 0, len(key) << 1]) + key + bytes([len(value) << 1]) + value + b"\x00"
    record = bytes([len(body) << 1]) + body
    attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL
    header = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            BATCH_HEADER.size - LOG_OVERHEAD + len(record),
            leader_epoch,
            2,
            0,
            attributes,
            0,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            NO_SEQUENCE,
            1,
        )
    )
    raw = header + record
    struct.pack_into(">I", raw, CRC_OFFSET, calc_crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]))
    return bytes(raw)


class ProducerStateEntry:
    """Kafka's ProducerStateEntry: what DescribeProducers reports for one producer id."""

    __slots__ = (
        "_batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
        "serial",
    )

    def __init__(self, producer_id: int, serial: int = 0) -> None:
        self.producer_id = producer_id
        # Rank of its insertion into the log's producer map (the HashMap's order within a bin).
        self.serial = serial
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.coordinator_epoch = -1
        self.current_txn_first_offset = -1
        self.last_timestamp = -1
        # (first_seq, last_seq, last_offset, offset_delta), oldest first; None when empty.
        self._batches: list[tuple[int, int, int, int]] | None = None

    @property
    def last_sequence(self) -> int:
        return self._batches[-1][1] if self._batches else NO_SEQUENCE

    @property
    def is_empty(self) -> bool:
        return not self._batches

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        """A new epoch drops the retained batch metadata (so LastSequence reads -1, capture 47)."""
        if self.producer_epoch != producer_epoch:
            self._batches = None
            self.producer_epoch = producer_epoch

    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
        timestamp_ms: int,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        first_seq = last_seq - offset_delta if last_seq >= offset_delta else (
            last_seq - offset_delta + INT32_MAX + 1
        )
        if self._batches is None:
            self._batches = []
        self._batches.append((first_seq, last_seq, last_offset, offset_delta))
        if len(self._batches) > NUM_BATCHES_TO_RETAIN:
            del self._batches[0]
        self.last_timestamp = timestamp_ms

    def find_duplicate(self, header: BatchHeader) -> tuple[int, int] | None:
        """(first offset, last offset) of a retained batch with the same sequence range."""
        if header.producer_epoch != self.producer_epoch or not self._batches:
            return None
        for first_seq, last_seq, last_offset, delta in self._batches:
            if first_seq == header.base_sequence and last_seq == header.last_sequence:
                return last_offset - delta, last_offset
        return None


class StoredBatch:
    """A batch in the log. `raw` is None for seeded batches: bytes are made when fetched."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "last_offset",
        "leader_epoch",
        "max_timestamp",
        "producer_epoch",
        "producer_id",
        "raw",
    )

    def __init__(
        self, base_offset: int, last_offset: int, attributes: int, base_timestamp: int,
        max_timestamp: int, producer_id: int, producer_epoch: int, base_sequence: int,
        leader_epoch: int, raw: bytes | None,
    ) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.attributes = attributes
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.leader_epoch = leader_epoch
        self.raw = raw

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    def raw_bytes(self) -> bytes:
        if self.raw is None:
            self.raw = self._synthesize()
        return self.raw

    def _synthesize(self) -> bytes:
        """Bytes for a seeded data batch: one small record per offset, header fields as stored."""
        count = self.last_offset - self.base_offset + 1
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=self.is_transactional,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence, batch_size=1 << 30,
        )
        for i in range(count):
            ts = self.max_timestamp if i == count - 1 else self.base_timestamp
            builder.append(i, timestamp=ts, key=None, value=b"seed-%d" % (self.base_offset + i),
                           headers=[])
        raw = bytearray(builder.build())
        struct.pack_into(">q", raw, 0, self.base_offset)
        struct.pack_into(">i", raw, 12, self.leader_epoch)
        if self.attributes & ATTR_LOG_APPEND_TIME:
            _set_log_append_time(raw, self.max_timestamp)
        return bytes(raw)


NO_TIMESTAMP = -(2**63)


class IdleProducerBlock:
    """`count` idle idempotent producer states seeded at once (`seed.seed_idle_producer_states`)
    with the one single-record batch each wrote, at consecutive offsets: state i is producer id
    `pid_at(i)` (epoch 0, last sequence 0, coordinator epoch -1, no transaction) last written at
    `now_ms - ages[i]`, its batch at `base_offset + i`, as `PartitionLog.append_seeded_batch`
    would have left them. Ids as runs, timestamps as one array: a few bytes per state instead of
    a ProducerStateEntry and a StoredBatch (~512 bytes), so that millions fit.

    In `PartitionLog.batches` it stands for its batches (made on demand by `batch_at`, bytes as a
    seeded StoredBatch's); its states stay in the producer map until expired (`expire`) or
    written to again (then moved to `PartitionLog.producers`: `PartitionLog.producer_entry`).
    """

    __slots__ = ("_starts", "ages", "base_offset", "expired_through", "last_offset",
                 "leader_epoch", "live", "log_append_time", "min_live_timestamp", "now_ms",
                 "promoted", "runs", "serial")

    is_control = False
    is_transactional = False

    def __init__(self, base_offset: int, runs: Sequence[range], ages: array[int], now_ms: int,
                 leader_epoch: int, log_append_time: bool, serial: int) -> None:
        count = len(ages)
        if sum(len(r) for r in runs) != count or count == 0:
            raise ValueError("one producer id per timestamp, at least one")
        self.base_offset = base_offset
        self.last_offset = base_offset + count - 1
        self.runs = list(runs)
        starts = [0]
        for r in self.runs[:-1]:
            starts.append(starts[-1] + len(r))
        self._starts = starts
        self.ages = ages
        self.now_ms = now_ms
        self.leader_epoch = leader_epoch
        self.log_append_time = log_append_time
        self.serial = serial  # serials serial .. serial + count - 1, in state order
        self.expired_through = NO_TIMESTAMP  # states last written at or before it are gone
        self.promoted: set[int] | None = None  # states moved to PartitionLog.producers
        self.live = count
        self.min_live_timestamp = now_ms - max(ages)

    @property
    def count(self) -> int:
        return len(self.ages)

    @property
    def attributes(self) -> int:
        return ATTR_LOG_APPEND_TIME if self.log_append_time else 0

    @property
    def max_timestamp(self) -> int:
        return self.now_ms - min(self.ages)

    def pid_at(self, i: int) -> int:
        k = bisect.bisect_right(self._starts, i) - 1
        return self.runs[k][i - self._starts[k]]

    def index_of(self, pid: int) -> int | None:
        for start, r in zip(self._starts, self.runs, strict=True):
            if pid in r:
                return start + pid - r.start
        return None

    def timestamp_at(self, i: int) -> int:
        return self.now_ms - self.ages[i]

    def is_live(self, i: int) -> bool:
        return (self.timestamp_at(i) > self.expired_through
                and (self.promoted is None or i not in self.promoted))

    def live_states(self) -> Iterator[tuple[int, int, int]]:
        """(index, producer id, last timestamp) of the states still in the producer map."""
        now, through, promoted = self.now_ms, self.expired_through, self.promoted
        pids = itertools.chain.from_iterable(self.runs)
        for i, (pid, age) in enumerate(zip(pids, self.ages, strict=True)):
            ts = now - age
            if ts > through and (promoted is None or i not in promoted):
                yield i, pid, ts

    def add_rows(self, mask: int, keys: list[int],
                 rows: list[tuple[int, int, int, int, int, int]]) -> None:
        """Append the live states' DescribeProducers rows and their HashMap order keys
        (`PartitionLog.producer_rows`), in bulk: most of a block's states are live."""
        pids: Iterable[int] = itertools.chain.from_iterable(self.runs)
        serials: Iterable[int] = range(self.serial, self.serial + self.count)
        now = self.now_ms
        stamps: Iterable[int] = (now - age for age in self.ages)
        if self.live != self.count:
            live = [i for i, (pid, ts) in enumerate(zip(
                itertools.chain.from_iterable(self.runs), stamps, strict=True))
                if ts > self.expired_through and (self.promoted is None or i not in self.promoted)]
            pids = [self.pid_at(i) for i in live]
            serials = [self.serial + i for i in live]
            stamps = [now - self.ages[i] for i in live]
        pid_list = list(pids)
        if all(r.start >= 0 and r.stop <= 1 << 32 for r in self.runs):
            keys.extend(((p ^ (p >> 16)) & mask) << 64 | s for p, s in zip(
                pid_list, serials, strict=True))  # Long.hashCode(p) == p below 2**32
        else:
            for p, s in zip(pid_list, serials, strict=True):
                h = _java_long_hash(p)
                keys.append(((h ^ (h >> 16)) & mask) << 64 | s)
        n = len(pid_list)
        rows.extend(zip(pid_list, itertools.repeat(0, n), itertools.repeat(0, n), stamps,
                        itertools.repeat(-1, n), itertools.repeat(-1, n), strict=True))

    def batch_at(self, i: int) -> StoredBatch:
        """The batch state i wrote, as `PartitionLog.append_seeded_batch` stores it."""
        ts = self.timestamp_at(i)
        return StoredBatch(self.base_offset + i, self.base_offset + i, self.attributes, ts, ts,
                           self.pid_at(i), 0, 0, self.leader_epoch, None)

    def promote(self, i: int) -> ProducerStateEntry:
        """State i as the ProducerStateEntry the explicit seeding made, out of the block."""
        entry = ProducerStateEntry(self.pid_at(i), self.serial + i)
        entry.add_batch(0, 0, self.base_offset + i, 0, self.timestamp_at(i))
        if self.promoted is None:
            self.promoted = set()
        self.promoted.add(i)
        self.live -= 1
        return entry

    def expire(self, cutoff_ms: int) -> int:
        """Drop the states last written at or before `cutoff_ms`; returns how many remain."""
        if cutoff_ms < self.min_live_timestamp or not self.live:
            return self.live
        self.expired_through = max(self.expired_through, cutoff_ms)
        live = [ts for _, _, ts in self.live_states()]
        self.live = len(live)
        self.min_live_timestamp = min(live) if live else NO_TIMESTAMP
        return self.live


def _set_log_append_time(raw: bytearray, now_ms: int) -> None:
    """LogValidator for v2 with LogAppendTime: flag the batch, set max timestamp, re-CRC."""
    attrs: int = struct.unpack_from(">h", raw, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", raw, ATTRIBUTES_OFFSET, attrs | ATTR_LOG_APPEND_TIME)
    struct.pack_into(">q", raw, MAX_TIMESTAMP_OFFSET, now_ms)
    struct.pack_into(">I", raw, CRC_OFFSET, calc_crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]))


@dataclass(slots=True)
class AppendResult:
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


def _java_long_hash(producer_id: int) -> int:
    """java.lang.Long.hashCode."""
    return (producer_id ^ (producer_id >> 32)) & 0xFFFFFFFF


class PartitionLog:
    """Batches, offsets and producer state of one partition."""

    __slots__ = ("_base_offsets", "_map_capacity", "_next_serial", "_ongoing", "aborted_txns",
                 "batches", "idle_blocks", "log_end_offset", "log_start_offset", "producers")

    def __init__(self) -> None:
        self.batches: list[StoredBatch | IdleProducerBlock] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        # The producer map is `producers` plus the live states of `idle_blocks` (None: none).
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}
        """Producer id -> first offset of its open transaction (Kafka's `ongoingTxns`): the
        first unstable offset without visiting every producer state."""
        self.idle_blocks: list[IdleProducerBlock] | None = None
        self._next_serial = 0
        # Table size of Kafka's HashMap<Long, ProducerStateEntry>: grows, never shrinks (the
        # order DescribeProducers lists the states in after expirations depends on it).
        self._map_capacity = 16
        self.aborted_txns: list[AbortedTxn] | None = None

    # -- offsets ---------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    def first_unstable_offset(self) -> int | None:
        if not self._ongoing:
            return None
        producers = self.producers
        firsts = [first for pid, first in self._ongoing.items()
                  if (e := producers.get(pid)) is not None and e.current_txn_first_offset == first]
        return min(firsts) if firsts else None

    @property
    def last_stable_offset(self) -> int:
        first = self.first_unstable_offset()
        return self.high_watermark if first is None else first

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        # Idle block states have no transaction: only `producers` can answer yes.
        entry = self.producers.get(producer_id)
        return (entry is not None and entry.current_txn_first_offset >= 0
                and entry.producer_epoch == producer_epoch)

    # -- the producer map ------------------------------------------------------------------
    @property
    def has_producer_states(self) -> bool:
        return bool(self.producers) or self.idle_blocks is not None

    def producer_state_count(self) -> int:
        return len(self.producers) + sum(b.live for b in self.idle_blocks or ())

    def producer_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry, for a write by it: a state of an idle block moves to
        `producers` first (same place in the map's order), so writes see one kind of entry."""
        entry = self.producers.get(producer_id)
        if entry is not None or self.idle_blocks is None:
            return entry
        for block in self.idle_blocks:
            i = block.index_of(producer_id)
            if i is not None and block.is_live(i):
                entry = self.producers[producer_id] = block.promote(i)
                if not block.live:
                    self._drop_idle_block(block)
                return entry
        return None

    def _new_entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self.producers[producer_id] = ProducerStateEntry(producer_id, self._next_serial)
        self._next_serial += 1
        self._grown()
        return entry

    def _grown(self) -> None:
        self._map_capacity = java_hash_map_capacity(self.producer_state_count(),
                                                    self._map_capacity)

    def _drop_idle_block(self, block: IdleProducerBlock) -> None:
        """Its states are all gone; its batches stay in `batches`."""
        if self.idle_blocks is not None:
            self.idle_blocks.remove(block)
            if not self.idle_blocks:
                self.idle_blocks = None

    def active_producers(self) -> list[ProducerStateEntry]:
        """`producers` in the order Kafka's HashMap<Long, ProducerStateEntry> iterates them
        (within a bin, insertion order; see `producer_rows` for the whole map)."""
        entries = list(self.producers.values())
        if len(entries) <= 1:
            return entries
        # Insertion order is the dict's, except for states moved out of an idle block.
        entries.sort(key=lambda e: e.serial)
        return java_hash_map_order(entries, lambda e: _java_long_hash(e.producer_id),
                                   capacity=self._map_capacity)

    def producer_rows(self) -> list[tuple[int, int, int, int, int, int]]:
        """DescribeProducers' rows (id, epoch, last sequence, last timestamp, coordinator epoch,
        txn start offset) for the whole map, explicit entries and idle blocks' states, in the
        HashMap's order: bin = spread(Long.hashCode(id)) & (capacity - 1), then insertion."""
        if self.idle_blocks is None:
            return [(e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp,
                     e.coordinator_epoch, e.current_txn_first_offset)
                    for e in self.active_producers()]
        mask = self._map_capacity - 1
        keys: list[int] = []  # bin << 64 | insertion serial
        rows: list[tuple[int, int, int, int, int, int]] = []
        for e in self.producers.values():
            h = _java_long_hash(e.producer_id)
            keys.append(((h ^ (h >> 16)) & mask) << 64 | e.serial)
            rows.append((e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp,
                         e.coordinator_epoch, e.current_txn_first_offset))
        for block in self.idle_blocks:
            block.add_rows(mask, keys, rows)
        return list(map(rows.__getitem__, sorted(range(len(keys)), key=keys.__getitem__)))

    # -- appends ---------------------------------------------------------------------------
    def _append(self, batch: StoredBatch | IdleProducerBlock) -> None:
        self.batches.append(batch)
        self._base_offsets.append(batch.base_offset)
        self.log_end_offset = batch.last_offset + 1

    def validate_producer_batch(self, header: BatchHeader) -> AppendResult | None:
        """ProducerAppendInfo checks for a client batch: epoch, sequence, transaction state.

        Returns an error result, a duplicate's result, or None when the batch may be appended.
        """
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producer_entry(pid)
        if entry is not None:
            dup = entry.find_duplicate(header)
            if dup is not None:
                return AppendResult(NONE, base_offset=dup[0])
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if header.producer_epoch < current_epoch:
            return AppendResult(
                INVALID_PRODUCER_EPOCH,
                error_message=(f"Epoch of producer {pid} at offset {self.log_end_offset} in "
                               f"is {header.producer_epoch}, which is smaller than the last seen "
                               f"epoch {current_epoch}"),
            )
        first_seq = header.base_sequence
        if header.producer_epoch != current_epoch:
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                return AppendResult(OUT_OF_ORDER_SEQUENCE_NUMBER)
        else:
            last_seq = entry.last_sequence if entry is not None else NO_SEQUENCE
            in_sequence = first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX)
            if not in_sequence:
                return AppendResult(OUT_OF_ORDER_SEQUENCE_NUMBER)
        if (entry is not None and entry.current_txn_first_offset >= 0
                and not header.is_transactional):
            # "Expected transactional write from producer ..." (InvalidTxnStateException)
            return AppendResult(INVALID_TXN_STATE)
        return None

    def append_client_batch(
        self, header: BatchHeader, raw: bytes, *, leader_epoch: int, now_ms: int,
        log_append_time: bool,
    ) -> AppendResult:
        """Append a validated client batch: assign offsets, stamp it, update producer state."""
        base = self.log_end_offset
        last = base + header.last_offset_delta
        buf = bytearray(raw)
        struct.pack_into(">q", buf, 0, base)
        struct.pack_into(">i", buf, 12, leader_epoch)
        max_ts = header.max_timestamp
        attributes = header.attributes
        append_time = -1
        if log_append_time:
            _set_log_append_time(buf, now_ms)
            max_ts = now_ms
            attributes |= ATTR_LOG_APPEND_TIME
            append_time = now_ms
        self._append(StoredBatch(
            base, last, attributes, header.base_timestamp, max_ts, header.producer_id,
            header.producer_epoch, header.base_sequence, leader_epoch, bytes(buf),
        ))
        if header.producer_id != NO_PRODUCER_ID:
            self._update_producer(header.producer_id, header.producer_epoch, header.last_sequence,
                                  base, last, max_ts, header.is_transactional)
        return AppendResult(NONE, base_offset=base, log_append_time_ms=append_time)

    def _update_producer(
        self, pid: int, epoch: int, last_seq: int, first_offset: int, last_offset: int,
        max_timestamp: int, transactional: bool,
    ) -> None:
        entry = self.producer_entry(pid)
        if entry is None:
            entry = self._new_entry(pid)
        entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, max_timestamp)
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[pid] = first_offset

    def append_seeded_batch(
        self, *, producer_id: int, producer_epoch: int, base_sequence: int, record_count: int,
        base_timestamp: int, max_timestamp: int, transactional: bool, leader_epoch: int,
        log_append_time: bool = False,
    ) -> int:
        """Append a data batch without bytes (seed.py). Same producer-state effects as Produce."""
        base = self.log_end_offset
        last = base + record_count - 1
        attributes = (ATTR_TRANSACTIONAL if transactional else 0) | (
            ATTR_LOG_APPEND_TIME if log_append_time else 0)
        self._append(StoredBatch(base, last, attributes, base_timestamp, max_timestamp,
                                 producer_id, producer_epoch, base_sequence, leader_epoch, None))
        if producer_id != NO_PRODUCER_ID:
            last_seq = (base_sequence + record_count - 1) % (INT32_MAX + 1)
            self._update_producer(producer_id, producer_epoch, last_seq, base, last,
                                  max_timestamp, transactional)
        return base

    def append_idle_producer_states(
        self, *, runs: Sequence[range], ages: array[int], now_ms: int, leader_epoch: int,
        log_append_time: bool = False,
    ) -> int:
        """What `append_seeded_batch` does for each of `len(ages)` new idempotent producers
        (ids `runs` in order, none of them in the map yet; one single-record batch each, last
        timestamp now_ms - age), as one IdleProducerBlock. Returns its first offset."""
        block = IdleProducerBlock(self.log_end_offset, runs, ages, now_ms, leader_epoch,
                                  log_append_time, self._next_serial)
        self._next_serial += block.count
        self._append(block)
        if self.idle_blocks is None:
            self.idle_blocks = []
        self.idle_blocks.append(block)
        self._grown()
        return block.base_offset

    def append_marker(
        self, *, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        timestamp_ms: int, leader_epoch: int, transaction_version: int,
    ) -> int:
        """ProducerAppendInfo.appendEndTxnMarker; returns an error code."""
        entry = self.producer_entry(producer_id)
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        # TV2 markers carry a bumped epoch, so an equal epoch is stale (checkProducerEpoch).
        stale = (producer_epoch <= current_epoch if transaction_version >= 2
                 else producer_epoch < current_epoch)
        if stale:
            return INVALID_PRODUCER_EPOCH
        if entry is not None and entry.coordinator_epoch > coordinator_epoch:
            return TRANSACTION_COORDINATOR_FENCED
        offset = self.log_end_offset
        raw = build_control_batch(
            base_offset=offset, leader_epoch=leader_epoch, producer_id=producer_id,
            producer_epoch=producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch,
            timestamp_ms=timestamp_ms,
        )
        self._append(StoredBatch(offset, offset, ATTR_TRANSACTIONAL | ATTR_CONTROL, timestamp_ms,
                                 timestamp_ms, producer_id, producer_epoch, NO_SEQUENCE,
                                 leader_epoch, raw))
        if entry is None:
            entry = self._new_entry(producer_id)
        if entry.current_txn_first_offset >= 0 and not commit:
            if self.aborted_txns is None:
                self.aborted_txns = []
            self.aborted_txns.append(
                AbortedTxn(producer_id, entry.current_txn_first_offset, offset))
        entry.maybe_update_producer_epoch(producer_epoch)
        entry.current_txn_first_offset = -1
        self._ongoing.pop(producer_id, None)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp_ms
        return NONE

    def expire_producers(self, now_ms: int, producer_id_expiration_ms: int) -> None:
        """ProducerStateManager.removeExpiredProducers: idle producers without an open txn."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0
                   and now_ms - e.last_timestamp >= producer_id_expiration_ms]
        for pid in expired:
            del self.producers[pid]
        if self.idle_blocks is not None:
            cutoff = now_ms - producer_id_expiration_ms
            for block in list(self.idle_blocks):
                if not block.expire(cutoff):
                    self._drop_idle_block(block)

    # -- reads -----------------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, upper_offset: int,
             min_one: bool = True) -> tuple[bytes, int]:
        """Whole batches from the one holding `fetch_offset`, below `upper_offset`.

        Returns (bytes, end offset of the last batch read + 1, or fetch_offset if none).
        """
        idx = bisect.bisect_right(self._base_offsets, fetch_offset) - 1
        if idx < 0:
            idx = 0
        if idx < len(self.batches) and self.batches[idx].last_offset < fetch_offset:
            idx += 1
        chunks: list[bytes] = []
        size = 0
        end = fetch_offset
        for batch in self._stored_batches(idx, fetch_offset):
            if batch.base_offset >= upper_offset:
                break
            raw = batch.raw_bytes()
            if size + len(raw) > max_bytes and not (min_one and not chunks):
                break
            chunks.append(raw)
            size += len(raw)
            end = batch.last_offset + 1
        return b"".join(chunks), end

    def _stored_batches(self, idx: int, fetch_offset: int) -> Iterator[StoredBatch]:
        """The batches from `self.batches[idx]` on, an idle block's made one by one from the
        one holding `fetch_offset`."""
        batches = self.batches
        for j in range(idx, len(batches)):
            item = batches[j]
            if isinstance(item, IdleProducerBlock):
                for i in range(max(0, fetch_offset - item.base_offset), item.count):
                    yield item.batch_at(i)
            else:
                yield item

    def aborted_between(self, fetch_offset: int, end_offset: int) -> list[AbortedTxn]:
        if not self.aborted_txns:
            return []
        return [t for t in self.aborted_txns
                if t.last_offset >= fetch_offset and t.first_offset < end_offset]

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """First (offset, timestamp) of a record with timestamp >= target (ListOffsets)."""
        from kafka.record.default_records import DefaultRecordBatch

        for batch in self.batches:
            if isinstance(batch, IdleProducerBlock):
                # One record per batch, its timestamp the batch's max timestamp.
                for i, age in enumerate(batch.ages):
                    if batch.now_ms - age >= timestamp_ms:
                        return batch.base_offset + i, batch.now_ms - age
                continue
            if batch.is_control or batch.max_timestamp < timestamp_ms:
                continue
            record_batch: Any = DefaultRecordBatch(batch.raw_bytes())
            for record in record_batch:
                ts = batch.max_timestamp if batch.attributes & ATTR_LOG_APPEND_TIME else (
                    record.timestamp)
                if ts >= timestamp_ms:
                    return int(record.offset), int(ts)
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp."""
        from kafka.record.default_records import DefaultRecordBatch

        best: tuple[int, int] | None = None
        for batch in self.batches:
            if isinstance(batch, IdleProducerBlock):
                youngest = min(batch.ages)  # first record holding the block's largest timestamp
                if best is None or batch.now_ms - youngest > best[1]:
                    best = (batch.base_offset + batch.ages.index(youngest),
                            batch.now_ms - youngest)
                continue
            if batch.is_control or (best is not None and batch.max_timestamp <= best[1]):
                continue
            if batch.attributes & ATTR_LOG_APPEND_TIME:
                best = (batch.base_offset, batch.max_timestamp)
                continue
            record_batch: Any = DefaultRecordBatch(batch.raw_bytes())
            for record in record_batch:
                if best is None or record.timestamp > best[1]:
                    best = (int(record.offset), int(record.timestamp))
        return best
