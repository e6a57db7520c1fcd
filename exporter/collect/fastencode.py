"""Hand-written encoders for the two requests of a poll that list partitions by the thousand:
DescribeProducers (v0, every partition of a cluster each poll) and ListOffsets (v1-v11, every
partition with an open transaction, twice).

Why: kafka-python's generic encoder needs a DataContainer per topic (DescribeProducers) or per
partition (ListOffsets) and walks them field by field; these write the same bytes straight
from (topic, partition indexes) with `struct`. Byte-for-byte equality with kafka-python's
encoder, request header and frame included, is tested on random requests of every version in
tests/collect/test_collect_fastencode.py, and against requests captured from a real broker.
Every other request still goes through kafka-python. Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

LIST_OFFSETS = 2
DESCRIBE_PRODUCERS = 61
DESCRIBE_PRODUCERS_VERSIONS = range(0, 1)
LIST_OFFSETS_VERSIONS = range(1, 12)
LIST_OFFSETS_FIRST_FLEXIBLE = 6

_HEADER = struct.Struct(">ihhih")  # frame size, api key, api version, correlation id, id length
_I32 = struct.Struct(">i")
_I32_I8 = struct.Struct(">ib")
_NULL_STRING = -1


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return struct.pack(">h", len(raw)) + raw


@dataclass(frozen=True, slots=True)
class LeanRequest:
    """A request whose body this module writes; `BrokerConnection` frames it with its header.

    `encode_body` runs when the request is sent (as kafka-python's `encode` does), so a value
    that cannot be encoded fails that request like any other encoding error."""

    api_key: int
    version: int
    flexible: bool
    """Request header v2 (tagged fields) when the API version is flexible, else v1."""
    name: str
    response_class: Any
    """kafka-python's response class: the default decoder of the answer."""
    encode_body: Callable[[], bytes]

    @property
    def API_VERSION(self) -> int:
        """kafka-python's name, which `BrokerConnection.request` reads."""
        return self.version

    def frame(self, correlation_id: int, client_id: str | None) -> bytes:
        """Size + request header + body, as kafka-python's `encode(header=True, framed=True)`."""
        body = self.encode_body()
        if client_id is None:
            client = b""
            client_length = _NULL_STRING
        else:
            client = client_id.encode("utf-8")
            client_length = len(client)
            if client_length > 0x7FFF:
                raise ValueError("client id does not fit an int16 length")
        tags = b"\x00" if self.flexible else b""  # header v2: no tagged fields
        size = 10 + len(client) + len(tags) + len(body)  # all but the size field itself
        return b"".join((
            _HEADER.pack(size, self.api_key, self.version, correlation_id, client_length),
            client,
            tags,
            body,
        ))


# -- DescribeProducers ------------------------------------------------------------------------


def encode_describe_producers(topics: Sequence[tuple[str, Sequence[int]]], version: int) -> bytes:
    """DescribeProducersRequest body: [(topic name, partition indexes)]; flexible (v0)."""
    if version not in DESCRIBE_PRODUCERS_VERSIONS:
        raise ValueError(f"lean DescribeProducers encoder handles v0, not v{version}")
    parts = [_uvarint(len(topics) + 1)]
    append = parts.append
    for name, indexes in topics:
        append(_compact_string(name))
        append(_uvarint(len(indexes) + 1))
        append(struct.pack(f">{len(indexes)}i", *indexes))
        append(b"\x00")  # the topic's tagged fields
    append(b"\x00")  # the request's tagged fields
    return b"".join(parts)


# -- ListOffsets ------------------------------------------------------------------------------


def encode_list_offsets(
    version: int,
    replica_id: int,
    isolation_level: int,
    topics: Iterable[tuple[str, Sequence[int]]],
    timestamp: int,
    current_leader_epoch: int = -1,
    timeout_ms: int = 0,
) -> bytes:
    """ListOffsetsRequest body, every partition asked for the same `timestamp` (-1: latest)
    and `current_leader_epoch`: the only requests the exporter sends."""
    if version not in LIST_OFFSETS_VERSIONS:
        raise ValueError(f"lean ListOffsets encoder handles v1-v11, not v{version}")
    flexible = version >= LIST_OFFSETS_FIRST_FLEXIBLE
    topic_list = list(topics)
    parts = [
        _I32_I8.pack(replica_id, isolation_level) if version >= 2 else _I32.pack(replica_id),
        _uvarint(len(topic_list) + 1) if flexible else _I32.pack(len(topic_list)),
    ]
    append = parts.append
    # What follows each partition index: the same bytes for every partition of the request.
    if version >= 4:
        tail = struct.pack(">iq", current_leader_epoch, timestamp)
    else:
        tail = struct.pack(">q", timestamp)
    if flexible:
        tail += b"\x00"  # the partition's tagged fields
    pack_index = _I32.pack
    for name, indexes in topic_list:
        if flexible:
            append(_compact_string(name))
            append(_uvarint(len(indexes) + 1))
        else:
            append(_string(name))
            append(_I32.pack(len(indexes)))
        for index in indexes:
            append(pack_index(index))
            append(tail)
        if flexible:
            append(b"\x00")  # the topic's tagged fields
    if version >= 10:
        append(_I32.pack(timeout_ms))
    if flexible:
        append(b"\x00")  # the request's tagged fields
    return b"".join(parts)
