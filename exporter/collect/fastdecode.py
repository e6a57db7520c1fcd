"""Lean decoders for the big answers of a poll: Metadata (v9-v13), DescribeProducers (v0) and
ListOffsets (v1-v11, every partition with an open transaction), and for the many small Fetch
answers (v12-v17) of a cold poll's start-time reads.

Why: at 200,000 partitions kafka-python's generic decoder builds a DataContainer per partition
(plus one per replica/ISR list), about a million objects per poll, and the cyclic GC then walks
them again and again (benchmarks/RESULTS.md, "Simulator and poller"). These decoders read the
same bytes but keep only the fields the exporter reads, with as few objects as possible:

- Metadata: per topic, parallel lists of partition indexes and leader ids; replica ids as one
  set for the whole answer (the exporter only needs "every broker named as a replica");
- DescribeProducers: partitions that answered error 0 with no active producer (~90% of them
  on a typical cluster) are skipped: for every reader they mean "nothing here";
- ListOffsets: per partition its index, error and offset.

They enforce Kafka's nullability themselves (a null where the schema allows none raises
`ShapeError`), so `shapes.check_response` is not needed on their output. Other versions (the
non-flexible Metadata v0-v8) still go through kafka-python. Equivalence with kafka-python's
decoding is tested on random responses in tests/collect/test_collect_fastdecode.py. Pure.

The primitives below are public: ListTransactions and DescribeTransactions keep their lean
decoders in their own modules (`collect/apis/`) and read with them.
"""

from __future__ import annotations

import functools
import struct
import uuid
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.shapes import ShapeError, check_response

FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
DESCRIBE_PRODUCERS = 61

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_METADATA_PARTITION_HEAD = struct.Struct(">hiii")  # error_code, index, leader, leader_epoch
# index, error_code, then 3 bytes that are 0, 1, 0 for an empty partition: null error_message,
# empty active_producers, no tagged fields.
_DP_PARTITION_HEAD = struct.Struct(">ihBBB")
_PRODUCER = struct.Struct(">qiiqiq")
# A partition with error 0, null error_message and one producer, from its CurrentTxnStartOffset
# (36 bytes after the partition index): that offset, the producer's and the partition's tags.
_DP_ONE_PRODUCER_TAIL = struct.Struct(">qBB")
_ZERO_UUID_BYTES = bytes(16)
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_FETCH_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_FETCH_PARTITION_HEAD = struct.Struct(">ihqqq")
_LIST_OFFSETS_PARTITION = struct.Struct(">ihqq")  # index, error_code, timestamp, offset
_I16_LENGTH = struct.Struct(">h")


@dataclass(slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partition_indexes: list[int]
    leader_ids: list[int]
    """leader_ids[i] leads partition partition_indexes[i] (-1: no leader)."""


@dataclass(slots=True)
class LeanMetadataResponse:
    API_KEY = METADATA
    API_VERSION: int
    brokers: list[MetadataBroker]
    topics: list[MetadataTopic]
    replica_ids: set[int]
    """Every node id in any partition's ReplicaNodes."""


@dataclass(slots=True)
class ActiveProducer:
    """The wire struct DescribeProducersResponse.ActiveProducers (kafka-python's field names);
    `collect.apis.describe_producers` turns it into the exporter's one record,
    `model.ProducerEntry`."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(slots=True)
class DescribeProducersPartition:
    partition_index: int
    error_code: int
    error_message: str | None
    active_producers: list[ActiveProducer]


@dataclass(slots=True)
class DescribeProducersTopic:
    name: str
    partitions: list[DescribeProducersPartition]
    """Only partitions with an error or at least one active producer."""
    answered_indexes: array[int]
    """Every partition index the answer holds, empty ones included: a requested partition
    missing here was not observed (an int32 array: no object per partition)."""
    state_counts: list[tuple[int, int]] = field(default_factory=list)
    """(partition index, producer states) of the partitions answered with two or more
    producer states, open or not: the poller sizes its batches by them and screens crowded
    partitions at once."""


@dataclass(slots=True)
class LeanDescribeProducersResponse:
    API_KEY = DESCRIBE_PRODUCERS
    API_VERSION: int
    throttle_time_ms: int
    topics: list[DescribeProducersTopic]


@dataclass(slots=True)
class FetchPartition:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | None


@dataclass(slots=True)
class FetchTopic:
    topic: str | None
    """The topic's name up to v12, None from v13 (named by id)."""
    topic_id: uuid.UUID | None
    """From v13; None before, and for the zero id (as kafka-python decodes it)."""
    partitions: list[FetchPartition]


@dataclass(slots=True)
class LeanFetchResponse:
    """Fetch answer: per partition the error, the three offsets and the raw records (the
    start-time read parses the first batch header itself); names as kafka-python's."""

    API_KEY = FETCH
    API_VERSION: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchTopic]


@dataclass(slots=True)
class ListOffsetsPartition:
    partition_index: int
    error_code: int
    offset: int


@dataclass(slots=True)
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@dataclass(slots=True)
class LeanListOffsetsResponse:
    """ListOffsets answer: per partition its error and offset (names as kafka-python's; the
    timestamp and leader epoch are skipped)."""

    API_KEY = LIST_OFFSETS
    API_VERSION: int
    throttle_time_ms: int
    topics: list[ListOffsetsTopic]


# -- primitives (flexible versions: unsigned varints, compact strings/arrays, tagged fields) --


def uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def skip_tags(data: bytes, pos: int) -> int:
    if data[pos] == 0:
        return pos + 1
    count, pos = uvarint(data, pos)
    for _ in range(count):
        _, pos = uvarint(data, pos)
        size, pos = uvarint(data, pos)
        pos += size
    return pos


def compact_length(data: bytes, pos: int) -> tuple[int, int]:
    """Compact array/string length (-1: null)."""
    byte = data[pos]
    if byte < 0x80:
        return byte - 1, pos + 1
    value, pos = uvarint(data, pos)
    return value - 1, pos


def compact_array(data: bytes, pos: int, what: str) -> tuple[int, int]:
    count, pos = compact_length(data, pos)
    if count < 0:
        raise ShapeError(f"{what}: null where Kafka's schema allows none")
    return count, pos


def _nullable_string(data: bytes, pos: int) -> tuple[str | None, int]:
    size, pos = compact_length(data, pos)
    if size < 0:
        return None, pos
    end = pos + size
    if end > len(data):
        raise ValueError("string past the end of the response")
    return data[pos:end].decode("utf-8"), end


def compact_string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    value, pos = _nullable_string(data, pos)
    if value is None:
        raise ShapeError(f"{what}: null where Kafka's schema allows none")
    return value, pos


def _int32_array_bytes(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    count, pos = compact_array(data, pos, what)
    end = pos + 4 * count
    return data[pos:end], end


def _skip_int32s(data: bytes, pos: int, what: str) -> int:
    count, pos = compact_array(data, pos, what)
    return pos + 4 * count


def check_end(data: bytes, pos: int) -> None:
    if pos > len(data):
        raise ValueError("response shorter than its fields")


# -- Metadata ---------------------------------------------------------------------------------


def _metadata_brokers(data: bytes, version: int) -> tuple[list[MetadataBroker], int]:
    """The brokers array; returns them and the position of ClusterId."""
    if not 9 <= version <= 13:
        raise ValueError(f"lean Metadata decoder handles v9-v13, not v{version}")
    pos = skip_tags(data, 4) + 4  # correlation id, header tags; throttle_time_ms
    count, pos = compact_array(data, pos, "brokers")
    brokers: list[MetadataBroker] = []
    for _ in range(count):
        (node_id,) = _I32.unpack_from(data, pos)
        host, pos = compact_string(data, pos + 4, "brokers[].host")
        (port,) = _I32.unpack_from(data, pos)
        rack, pos = _nullable_string(data, pos + 4)
        pos = skip_tags(data, pos)
        brokers.append(MetadataBroker(node_id, host, port, rack))
    return brokers, pos


def metadata_identity(payload: bytes, version: int) -> bytes:
    """The bytes of a Metadata answer that can change what the exporter reads from it: all
    but the correlation id, ThrottleTimeMs and ControllerId (KRaft brokers name a random
    broker as controller in every answer, so it differs between identical states). Versions
    the lean decoder does not read: everything but the correlation id."""
    if not 9 <= version <= 13:
        return payload[4:]
    brokers_start = skip_tags(payload, 4) + 4
    _, pos = _metadata_brokers(payload, version)
    _, controller_at = _nullable_string(payload, pos)
    return payload[brokers_start:controller_at] + payload[controller_at + 4 :]


def decode_metadata(payload: bytes, version: int) -> LeanMetadataResponse:
    """Metadata response v9-v13 (with its v1 response header) -> `LeanMetadataResponse`."""
    data = bytes(payload)  # no copy for bytes; slices of a bytearray would stay bytearrays
    brokers, pos = _metadata_brokers(data, version)
    _, pos = _nullable_string(data, pos)  # cluster_id
    pos += 4  # controller_id
    count, pos = compact_array(data, pos, "topics")
    topics: list[MetadataTopic] = []
    replica_lists: set[bytes] = set()  # distinct raw ReplicaNodes arrays: few, decoded at the end
    add_replicas = replica_lists.add
    unpack_head = _METADATA_PARTITION_HEAD.unpack_from
    for _ in range(count):
        (error_code,) = _I16.unpack_from(data, pos)
        if version >= 12:
            name, pos = _nullable_string(data, pos + 2)
        else:
            name, pos = compact_string(data, pos + 2, "topics[].name")
        topic_id = None
        if version >= 10:
            raw_id = data[pos : pos + 16]
            if len(raw_id) != 16:
                raise ValueError("topic id past the end of the response")
            if raw_id != _ZERO_UUID_BYTES:  # kafka-python decodes the zero UUID as None
                topic_id = uuid.UUID(bytes=raw_id)
            pos += 16
        is_internal = data[pos] != 0
        partition_count, pos = compact_array(data, pos + 1, "topics[].partitions")
        indexes: list[int] = []
        leaders: list[int] = []
        for _ in range(partition_count):
            _, index, leader, _ = unpack_head(data, pos)
            pos += 14
            # Three int32 arrays (replicas, ISR, offline); a one-byte length is the fast path.
            size = data[pos]
            if 0 < size < 0x80:
                end = pos + 4 * size - 3
                add_replicas(data[pos + 1 : end])
                pos = end
            else:
                replicas, pos = _int32_array_bytes(data, pos, "replica_nodes")
                add_replicas(replicas)
            size = data[pos]
            pos = pos + 4 * size - 3 if 0 < size < 0x80 else _skip_int32s(data, pos, "isr")
            size = data[pos]
            pos = pos + 4 * size - 3 if 0 < size < 0x80 else _skip_int32s(data, pos, "offline")
            pos = pos + 1 if data[pos] == 0 else skip_tags(data, pos)
            indexes.append(index)
            leaders.append(leader)
        pos = skip_tags(data, pos + 4)  # topic_authorized_operations
        topics.append(MetadataTopic(error_code, name, topic_id, is_internal, indexes, leaders))
    if version <= 10:
        pos += 4  # cluster_authorized_operations (v8-v10)
    if version >= 13:
        pos += 2  # error_code
    pos = skip_tags(data, pos)
    check_end(data, pos)
    replica_ids: set[int] = set()
    for raw in replica_lists:
        replica_ids.update(struct.unpack(f">{len(raw) // 4}i", raw))
    return LeanMetadataResponse(version, brokers, topics, replica_ids)


# -- DescribeProducers ------------------------------------------------------------------------


def decode_describe_producers(
    payload: bytes, version: int, open_only: bool = False
) -> LeanDescribeProducersResponse:
    """DescribeProducers response v0 -> `LeanDescribeProducersResponse` (empty partitions
    skipped: error 0 and no active producer). With `open_only`, only producers with an open
    transaction (CurrentTxnStartOffset >= 0) are kept, so a partition with error 0 and none
    of those is skipped too: for a reader of open transactions (the poller) that is what
    `parse_describe_producers(open_only=True)` drops anyway, and the ~10x more idempotent
    producers of a typical cluster then cost neither objects nor the GC's time."""
    if version != 0:
        raise ValueError(f"lean DescribeProducers decoder handles v0, not v{version}")
    data = bytes(payload)  # no copy for bytes; slices of a bytearray would stay bytearrays
    pos = skip_tags(data, 4)
    (throttle_time_ms,) = _I32.unpack_from(data, pos)
    count, pos = compact_array(data, pos + 4, "topics")
    topics: list[DescribeProducersTopic] = []
    unpack_head = _DP_PARTITION_HEAD.unpack_from
    one_producer_tail = _DP_ONE_PRODUCER_TAIL.unpack_from
    for _ in range(count):
        name, pos = compact_string(data, pos, "topics[].name")
        partition_count, pos = compact_array(data, pos, "topics[].partitions")
        partitions: list[DescribeProducersPartition] = []
        answered: list[int] = []  # a list appends faster; packed below so it is not kept
        answer = answered.append
        state_counts: list[tuple[int, int]] = []
        for _ in range(partition_count):
            index, error_code, message_size, producer_count, tags = unpack_head(data, pos)
            answer(index)
            if error_code == 0 and message_size == 0:
                if producer_count == 1 and tags == 0:
                    pos += 9  # the common case: nothing to report
                    continue
                if producer_count == 2 and open_only:
                    # One producer (an idempotent one, most often): fixed-size; skipped
                    # without objects when its transaction is not open and no tags follow.
                    txn_start, producer_tags, partition_tags = one_producer_tail(data, pos + 36)
                    if txn_start < 0 and producer_tags == 0 and partition_tags == 0:
                        pos += 46
                        continue
            message, pos = _nullable_string(data, pos + 6)
            producer_count, pos = compact_array(data, pos, "active_producers")
            if producer_count >= 2 and error_code == 0:
                state_counts.append((index, producer_count))
            producers: list[ActiveProducer] = []
            for _ in range(producer_count):
                fields = _PRODUCER.unpack_from(data, pos)
                if fields[5] >= 0 or not open_only:
                    producers.append(ActiveProducer(*fields))
                pos = skip_tags(data, pos + _PRODUCER.size)
            pos = skip_tags(data, pos)
            if error_code != 0 or producers:
                partitions.append(
                    DescribeProducersPartition(index, error_code, message, producers)
                )
        pos = skip_tags(data, pos)
        topics.append(
            DescribeProducersTopic(name, partitions, array("i", answered), state_counts)
        )
    pos = skip_tags(data, pos)
    check_end(data, pos)
    return LeanDescribeProducersResponse(version, throttle_time_ms, topics)


# -- Fetch ----------------------------------------------------------------------------------


def decode_fetch(payload: bytes, version: int) -> LeanFetchResponse:
    """Fetch response v7-v17 -> `LeanFetchResponse` (flexible from v12: compact lengths and
    tagged fields, response header v1; v0 before); aborted transactions, the preferred
    replica (v11+) and tagged fields are skipped."""
    if not 7 <= version <= 17:
        raise ValueError(f"lean Fetch decoder handles v7-v17, not v{version}")
    data = bytes(payload)
    flexible = version >= 12
    pos = skip_tags(data, 4) if flexible else 4
    throttle_time_ms, error_code, session_id = _FETCH_TOP.unpack_from(data, pos)
    count, pos = _list_length(data, pos + _FETCH_TOP.size, flexible, "responses")
    replica_size = 4 if version >= 11 else 0
    topics: list[FetchTopic] = []
    for _ in range(count):
        topic: str | None = None
        topic_id: uuid.UUID | None = None
        if version >= 13:
            raw_id = data[pos : pos + 16]
            if raw_id != _ZERO_UUID_BYTES:
                topic_id = uuid.UUID(bytes=raw_id)
            pos += 16
        elif flexible:
            topic, pos = compact_string(data, pos, "responses[].topic")
        else:
            topic, pos = _int16_string(data, pos, "responses[].topic")
        partition_count, pos = _list_length(data, pos, flexible, "responses[].partitions")
        partitions: list[FetchPartition] = []
        for _ in range(partition_count):
            index, partition_error, hw, lso, log_start = _FETCH_PARTITION_HEAD.unpack_from(
                data, pos
            )
            pos += _FETCH_PARTITION_HEAD.size
            aborted, pos = _nullable_length(data, pos, flexible)
            if flexible:
                for _ in range(max(aborted, 0)):
                    pos = skip_tags(data, pos + 16)  # producer_id, first_offset
            else:
                pos += 16 * max(aborted, 0)
            size, pos = _nullable_length(data, pos + replica_size, flexible)
            records: bytes | None = None
            if size >= 0:
                records = data[pos : pos + size]
                pos += size
            if flexible:
                pos = skip_tags(data, pos)
            partitions.append(FetchPartition(index, partition_error, hw, lso, log_start, records))
        if flexible:
            pos = skip_tags(data, pos)
        topics.append(FetchTopic(topic, topic_id, partitions))
    if flexible:
        pos = skip_tags(data, pos)
    check_end(data, pos)
    return LeanFetchResponse(version, throttle_time_ms, error_code, session_id, topics)


# -- ListOffsets ------------------------------------------------------------------------------


def decode_list_offsets(payload: bytes, version: int) -> LeanListOffsetsResponse:
    """ListOffsets response v1-v11 -> `LeanListOffsetsResponse` (flexible from v6: compact
    lengths and tagged fields; response header v1 there, v0 before)."""
    if not 1 <= version <= 11:
        raise ValueError(f"lean ListOffsets decoder handles v1-v11, not v{version}")
    data = bytes(payload)
    flexible = version >= 6
    pos = skip_tags(data, 4) if flexible else 4
    throttle_time_ms = 0
    if version >= 2:
        (throttle_time_ms,) = _I32.unpack_from(data, pos)
        pos += 4
    count, pos = _list_length(data, pos, flexible, "topics")
    epoch_size = 4 if version >= 4 else 0
    unpack_partition = _LIST_OFFSETS_PARTITION.unpack_from
    topics: list[ListOffsetsTopic] = []
    for _ in range(count):
        if flexible:
            name, pos = compact_string(data, pos, "topics[].name")
        else:
            name, pos = _int16_string(data, pos, "topics[].name")
        partition_count, pos = _list_length(data, pos, flexible, "topics[].partitions")
        partitions: list[ListOffsetsPartition] = []
        for _ in range(partition_count):
            index, error_code, _timestamp, offset = unpack_partition(data, pos)
            pos += _LIST_OFFSETS_PARTITION.size + epoch_size
            if flexible:
                pos = skip_tags(data, pos)
            partitions.append(ListOffsetsPartition(index, error_code, offset))
        if flexible:
            pos = skip_tags(data, pos)
        topics.append(ListOffsetsTopic(name, partitions))
    if flexible:
        pos = skip_tags(data, pos)
    check_end(data, pos)
    return LeanListOffsetsResponse(version, throttle_time_ms, topics)


def _list_length(data: bytes, pos: int, flexible: bool, what: str) -> tuple[int, int]:
    """An array's length, compact (flexible versions) or int32; null is a shape error."""
    count, pos = _nullable_length(data, pos, flexible)
    if count < 0:
        raise ShapeError(f"{what}: null where Kafka's schema allows none")
    return count, pos


def _nullable_length(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """A nullable array's or bytes' length (-1: null), compact or int32."""
    if flexible:
        return compact_length(data, pos)
    (size,) = _I32.unpack_from(data, pos)
    return size, pos + 4


def _int16_string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    """A non-flexible string (int16 length); null is a shape error."""
    (size,) = _I16_LENGTH.unpack_from(data, pos)
    if size < 0:
        raise ShapeError(f"{what}: null where Kafka's schema allows none")
    pos += 2
    end = pos + size
    if end > len(data):
        raise ValueError("string past the end of the response")
    return data[pos:end].decode("utf-8"), end


# -- dispatch ---------------------------------------------------------------------------------

Decoder = Callable[[bytes, int], Any]
"""(payload with response header, version) -> decoded response."""

_LEAN: dict[int, tuple[Decoder, range]] = {
    FETCH: (decode_fetch, range(7, 18)),
    LIST_OFFSETS: (decode_list_offsets, range(1, 12)),
    METADATA: (decode_metadata, range(9, 14)),
    DESCRIBE_PRODUCERS: (decode_describe_producers, range(0, 1)),
}


def decode_response(response_class: Any, payload: bytes, version: int, lean: bool = False) -> Any:
    """kafka-python's decoder followed by the shape checks; with `lean`, the lean decoder where
    one exists for this API and version. Raises on a malformed answer."""
    if lean:
        decoder = _LEAN.get(response_class.API_KEY)
        if decoder is not None and version in decoder[1]:
            return decoder[0](payload, version)
    response = response_class.decode(payload, version=version, header=True)
    check_response(response, response_class.API_KEY, version)
    return response


def decode_open_producers(response_class: Any, payload: bytes, version: int) -> Any:
    """DescribeProducers for a reader of open transactions only (bind `response_class`,
    kafka-python's DescribeProducersResponse, with functools.partial): lean and `open_only`
    where this module has a decoder, else kafka-python's (whose every producer the parser's
    `open_only` then filters)."""
    if version in _LEAN[DESCRIBE_PRODUCERS][1]:
        return decode_describe_producers(payload, version, open_only=True)
    return decode_response(response_class, payload, version)


def lean(response_class: Any) -> Decoder:
    """The decoder to pass to `BrokerConnection.request` for a caller that reads only what the
    lean classes above keep (lean where this module has a decoder, kafka-python elsewhere)."""
    return functools.partial(decode_response, response_class, lean=True)
