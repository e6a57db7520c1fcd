"""Lean encoders for the answers that grow with the partition count: Metadata, ListOffsets,
DescribeProducers; and a lean decoder for the request that does, DescribeProducers.

kafka-python's generic encoder builds a DataContainer per partition and walks the schema field
by field; at a million partitions that alone kept the simulator's one thread busy longer than a
client's request timeout. These functions write the same bytes straight from plain rows, and
`tests/sim/test_sim_encode.py` checks them byte for byte against kafka-python's encoder.

The handlers return a `LeanResponse`: the wire gets the lean bytes, while a Python caller (a test
reading `.topics`) gets the kafka-python message, built from the same rows on first use.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

_OPERATIONS_NOT_REQUESTED = struct.pack(">i", -2147483648)
"""Authorized operations (topic and cluster) as the simulator answers them: not filled in."""

_ZERO_UUID = bytes(16)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TAGS = b"\x00"  # an empty tagged-field section


class LeanResponse:
    """A response encoded by a lean encoder; attributes come from the kafka-python message."""

    __slots__ = ("_build", "_encode", "_message", "_message_class")

    def __init__(
        self, message_class: Any, encode: Callable[[int], bytes | None],
        build: Callable[[], Any],
    ) -> None:
        self._message_class = message_class
        self._encode = encode
        self._build = build
        self._message: Any = None

    @property
    def message(self) -> Any:
        """The same answer as kafka-python's message object (built once, on first use)."""
        if self._message is None:
            self._message = self._build()
        return self._message

    def encode(self, version: int) -> bytes:
        body = self._encode(version)
        if body is None:  # a version the lean encoder does not write
            return bytes(self.message.encode(version=version))
        return body

    def flexible_version_q(self, version: int) -> bool:
        return bool(self._message_class.flexible_version_q(version))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


# -- primitives ---------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def array_length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I32.pack(n)


def string(value: str | None, flexible: bool) -> bytes:
    """A (nullable) string; None writes the null length."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode("utf-8")
    return (uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def int32_array(values: Sequence[int], flexible: bool) -> bytes:
    return array_length(len(values), flexible) + struct.pack(f">{len(values)}i", *values)


def _uuid(value: uuid.UUID | None) -> bytes:
    return _ZERO_UUID if value is None else value.bytes


# -- Metadata (3) -------------------------------------------------------------------------------

MetadataPartitionRow = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""(error, partition index, leader, leader epoch, replicas, isr, offline replicas)."""


def metadata_partitions_layout(version: int) -> int:
    """Which of the four partition layouts `version` uses (the key of an encoded-bytes cache)."""
    if version >= 9:
        return 3  # + compact arrays and tagged fields
    if version >= 7:
        return 2  # + leader epoch
    if version >= 5:
        return 1  # + offline replicas
    return 0


def encode_metadata_partitions(rows: Sequence[MetadataPartitionRow], version: int) -> bytes:
    """One topic's partitions array (its length included)."""
    layout = metadata_partitions_layout(version)
    flexible = layout == 3
    arrays: dict[tuple[int, ...], bytes] = {}

    def array(values: tuple[int, ...]) -> bytes:
        encoded = arrays.get(values)
        if encoded is None:
            encoded = arrays[values] = int32_array(values, flexible)
        return encoded

    head = struct.Struct(">hiii" if layout >= 2 else ">hii").pack
    parts = [array_length(len(rows), flexible)]
    append = parts.append
    for error, index, leader, epoch, replicas, isr, offline in rows:
        if layout >= 2:
            append(head(error, index, leader, epoch))
        else:
            append(head(error, index, leader))
        append(array(replicas))
        append(array(isr))
        if layout >= 1:
            append(array(offline))
        if flexible:
            append(_TAGS)
    return b"".join(parts)


MetadataBroker = tuple[int, str, int, str | None]
"""(node id, host, port, rack)."""


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[MetadataPartitionRow]
    encoded_partitions: dict[int, bytes] | None = None
    """Cache of the encoded partitions array by layout, owned by the topic while its rows hold."""


def _metadata_topic(topic: MetadataTopic, version: int) -> bytes:
    flexible = version >= 9
    cache = topic.encoded_partitions
    layout = metadata_partitions_layout(version)
    partitions = cache.get(layout) if cache is not None else None
    if partitions is None:
        partitions = encode_metadata_partitions(topic.partitions, version)
        if cache is not None:
            cache[layout] = partitions
    out = [_I16.pack(topic.error_code), string(topic.name, flexible)]
    if version >= 10:
        out.append(_uuid(topic.topic_id))
    if version >= 1:
        out.append(b"\x01" if topic.is_internal else b"\x00")
    out.append(partitions)
    if version >= 8:
        out.append(_OPERATIONS_NOT_REQUESTED)
    if flexible:
        out.append(_TAGS)
    return b"".join(out)


def encode_metadata(
    version: int, brokers: Sequence[MetadataBroker], cluster_id: str | None,
    controller_id: int, topics: Sequence[MetadataTopic], error_code: int,
    throttle_time_ms: int = 0,
) -> bytes:
    flexible = version >= 9
    out = []
    if version >= 3:
        out.append(_I32.pack(throttle_time_ms))
    out.append(array_length(len(brokers), flexible))
    for node_id, host, port, rack in brokers:
        out.append(_I32.pack(node_id) + string(host, flexible) + _I32.pack(port))
        if version >= 1:
            out.append(string(rack, flexible))
        if flexible:
            out.append(_TAGS)
    if version >= 2:
        out.append(string(cluster_id, flexible))
    if version >= 1:
        out.append(_I32.pack(controller_id))
    out.append(array_length(len(topics), flexible))
    out.extend(_metadata_topic(t, version) for t in topics)
    if 8 <= version <= 10:
        out.append(_OPERATIONS_NOT_REQUESTED)
    if version >= 13:
        out.append(_I16.pack(error_code))
    if flexible:
        out.append(_TAGS)
    return b"".join(out)


# -- ListOffsets (2) ----------------------------------------------------------------------------

ListOffsetsPartitionRow = tuple[int, int, int, int, int]
"""(partition index, error, timestamp, offset, leader epoch)."""


def encode_list_offsets(
    version: int, topics: Sequence[tuple[str, Sequence[ListOffsetsPartitionRow]]],
    throttle_time_ms: int = 0,
) -> bytes | None:
    """v1+; None for v0 (its old-style offsets array is left to kafka-python)."""
    if version < 1:
        return None
    flexible = version >= 6
    row = struct.Struct(">ihqqi" if version >= 4 else ">ihqq").pack
    out = [_I32.pack(throttle_time_ms)] if version >= 2 else []
    out.append(array_length(len(topics), flexible))
    for name, partitions in topics:
        out.append(string(name, flexible))
        out.append(array_length(len(partitions), flexible))
        for index, error, timestamp, offset, epoch in partitions:
            out.append(row(index, error, timestamp, offset, epoch) if version >= 4
                       else row(index, error, timestamp, offset))
            if flexible:
                out.append(_TAGS)
        if flexible:
            out.append(_TAGS)
    if flexible:
        out.append(_TAGS)
    return b"".join(out)


# -- DescribeProducers (61) ---------------------------------------------------------------------

ProducerRow = tuple[int, int, int, int, int, int]
"""(producer id, epoch, last sequence, last timestamp, coordinator epoch, txn start offset)."""
DescribeProducersPartitionRow = tuple[int, int, str | None, Sequence[ProducerRow]] | int
"""(partition index, error, error message, active producers); or only the partition index
for the common answer: error 0, no message, no active producer."""

_PRODUCER = struct.Struct(">qiiqiqB").pack  # ... and the empty tagged-field section
_PARTITION_HEAD = struct.Struct(">ih").pack
_PARTITION_HEAD_NULL_MESSAGE = struct.Struct(">ihBB").pack
_EMPTY_PARTITION = struct.Struct(">i5s").pack
_EMPTY_PARTITION_TAIL = b"\x00\x00\x00\x01\x00"  # error 0, null message, no producers, no tags
_EMPTY_PARTITION_SIZE = 9
_LONG_RUN = 32
"""From this many empty partitions in a row, writing them column by column is cheaper."""


def _empty_partitions(indexes: list[int]) -> bytes:
    """Partitions with error 0, no message and no producers (most of a big answer), written
    column by column: the index bytes interleaved with the constant tail 00 00 00 01 00."""
    n = len(indexes)
    if n < _LONG_RUN:
        return b"".join([_EMPTY_PARTITION(i, _EMPTY_PARTITION_TAIL) for i in indexes])
    packed = struct.pack(f">{n}i", *indexes)
    out = bytearray(_EMPTY_PARTITION_SIZE * n)
    for byte in range(4):
        out[byte::_EMPTY_PARTITION_SIZE] = packed[byte::4]
    out[7::_EMPTY_PARTITION_SIZE] = b"\x01" * n  # the empty producers array
    return bytes(out)


def encode_describe_producers(
    version: int,
    topics: Sequence[tuple[str, Sequence[DescribeProducersPartitionRow]]],
    throttle_time_ms: int = 0,
) -> bytes | None:
    """v0 (flexible); None for any later version."""
    if version != 0:
        return None
    out = [_I32.pack(throttle_time_ms), uvarint(len(topics) + 1)]
    append = out.append
    for name, partitions in topics:
        append(string(name, True))
        append(uvarint(len(partitions) + 1))
        empty: list[int] = []
        for row in partitions:
            if type(row) is int:
                empty.append(row)
                continue
            assert not isinstance(row, int)
            index, error, message, producers = row
            if not error and message is None and not producers:
                empty.append(index)
                continue
            if empty:
                append(_empty_partitions(empty))
                empty = []
            if message is None and len(producers) < 127:  # one-byte null and array length
                append(_PARTITION_HEAD_NULL_MESSAGE(index, error, 0, len(producers) + 1))
            else:
                append(_PARTITION_HEAD(index, error))
                append(string(message, True))
                append(uvarint(len(producers) + 1))
            for producer in producers:
                append(_PRODUCER(*producer, 0))
            append(_TAGS)
        if empty:
            append(_empty_partitions(empty))
        append(_TAGS)
    append(_TAGS)
    return b"".join(out)


# -- DescribeProducers request ------------------------------------------------------------------


class RequestHeader(NamedTuple):
    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str


class TopicRequest(NamedTuple):
    name: str
    partition_indexes: list[int]


class DescribeProducersRequest(NamedTuple):
    """What the DescribeProducers handler reads of kafka-python's decoded request."""

    header: RequestHeader
    topics: list[TopicRequest]


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint too long")


def decode_describe_producers_request(payload: bytes) -> DescribeProducersRequest | None:
    """A DescribeProducers v0 request (header v2) as the exporter and the reference tool send
    it; None for anything else (a null client id, name or array, tagged fields, bytes left
    over, truncation), which the caller then hands to kafka-python's decoder, so that what is
    accepted or refused stays kafka-python's decision."""
    try:
        api_key, api_version, correlation_id, size = struct.unpack_from(">hhih", payload)
        pos = 10
        if api_key != 61 or api_version != 0 or size < 0 or pos + size > len(payload):
            return None
        client_id = payload[pos:pos + size].decode("utf-8")
        pos += size
        if payload[pos] != 0:  # header tagged fields
            return None
        count, pos = _read_uvarint(payload, pos + 1)
        if count == 0:
            return None
        topics = []
        for _ in range(count - 1):
            size, pos = _read_uvarint(payload, pos)
            if size == 0 or pos + size - 1 > len(payload):
                return None
            name = payload[pos:pos + size - 1].decode("utf-8")
            pos += size - 1
            n, pos = _read_uvarint(payload, pos)
            if n == 0:
                return None
            indexes = list(struct.unpack_from(f">{n - 1}i", payload, pos))
            pos += 4 * (n - 1)
            if payload[pos] != 0:  # the topic's tagged fields
                return None
            pos += 1
            topics.append(TopicRequest(name, indexes))
        if payload[pos] != 0 or pos + 1 != len(payload):
            return None
    except (struct.error, IndexError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return DescribeProducersRequest(
        RequestHeader(api_key, api_version, correlation_id, client_id), topics)
