"""The hand-written request encoders (exporter/collect/fastencode.py) against kafka-python's.

Differential: random requests of every version the encoders handle are framed by both, and the
bytes must be identical (frame size, request header, body). The builders the poller uses are
also checked against requests a real Kafka 4.0 client sent (tests/data/real-kafka-4.0).
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from simhelpers import CAPTURES

from exporter.collect.apis.describe_producers import describe_producers_request
from exporter.collect.apis.list_offsets import UnsupportedApiForLag, list_offsets_request
from exporter.collect.client import READ_COMMITTED, READ_UNCOMMITTED
from exporter.collect.connection import BrokerConnection, ConnectionOptions, DecodeError
from exporter.collect.fastencode import (
    DESCRIBE_PRODUCERS_VERSIONS,
    LIST_OFFSETS_VERSIONS,
    LeanRequest,
    encode_describe_producers,
    encode_list_offsets,
)

INT8 = st.integers(-(2**7), 2**7 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Names: any text (multi-byte UTF-8 too), and some long enough for a two-byte varint length.
NAME = st.one_of(st.text(max_size=20), st.text(min_size=127, max_size=300))
CLIENT_ID = st.one_of(st.none(), st.text(max_size=20), st.text(min_size=127, max_size=200))
# Partition lists: short ones, and some past 127 entries (two-byte compact array length).
INDEXES = st.one_of(st.lists(INT32, max_size=8), st.lists(st.integers(0, 5000), min_size=127,
                                                         max_size=300))
TOPICS = st.lists(st.tuples(NAME, INDEXES), max_size=4)

LOP = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition


def kafka_python_frame(request: Any, version: int, correlation_id: int, client_id: Any) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def lean_request(api_key: int, version: int, flexible: bool, body: bytes) -> LeanRequest:
    return LeanRequest(api_key, version, flexible, "Test", None, lambda: body)


@settings(max_examples=300, deadline=None)
@given(TOPICS, INT32, CLIENT_ID)
def test_describe_producers_encodes_what_kafka_python_encodes(
    topics: list[tuple[str, list[int]]], correlation_id: int, client_id: str | None
) -> None:
    for version in DESCRIBE_PRODUCERS_VERSIONS:
        expected = kafka_python_frame(
            DescribeProducersRequest(
                topics=[
                    DescribeProducersRequest.TopicRequest(name=t, partition_indexes=ps)
                    for t, ps in topics
                ]
            ),
            version, correlation_id, client_id,
        )
        body = encode_describe_producers(topics, version)
        assert lean_request(61, version, True, body).frame(correlation_id, client_id) == expected


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LIST_OFFSETS_VERSIONS), TOPICS, INT32, INT8, INT64, INT32, INT32,
       INT32, CLIENT_ID)
def test_list_offsets_encodes_what_kafka_python_encodes(
    version: int,
    topics: list[tuple[str, list[int]]],
    replica_id: int,
    isolation_level: int,
    timestamp: int,
    current_leader_epoch: int,
    timeout_ms: int,
    correlation_id: int,
    client_id: str | None,
) -> None:
    request = ListOffsetsRequest(
        replica_id=replica_id,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=t,
                partitions=[
                    LOP(partition_index=p, current_leader_epoch=current_leader_epoch,
                        timestamp=timestamp)
                    for p in ps
                ],
            )
            for t, ps in topics
        ],
        timeout_ms=timeout_ms,
    )
    expected = kafka_python_frame(request, version, correlation_id, client_id)
    body = encode_list_offsets(version, replica_id, isolation_level, topics, timestamp,
                               current_leader_epoch, timeout_ms)
    flexible = ListOffsetsRequest.flexible_version_q(version)
    assert lean_request(2, version, flexible, body).frame(correlation_id, client_id) == expected


def test_every_version_kafka_python_can_send_is_covered() -> None:
    """A kafka-python upgrade adding a version must not silently go unencoded: the builders
    cap at these ranges, and this says when the ranges fall behind."""
    assert DESCRIBE_PRODUCERS_VERSIONS[-1] == DescribeProducersRequest.max_version
    assert LIST_OFFSETS_VERSIONS[-1] == ListOffsetsRequest.max_version


def test_versions_outside_the_encoders_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="v1"):
        encode_describe_producers([("t", [0])], 1)
    with pytest.raises(ValueError, match="v0"):
        encode_list_offsets(0, -1, 0, [("t", [0])], -1)
    with pytest.raises(ValueError, match="v12"):
        encode_list_offsets(12, -1, 0, [("t", [0])], -1)


class _Connection:
    """Offers exactly the versions a real Kafka 4.0 broker did (reference capture 01)."""

    def __init__(self, versions: dict[Any, int]) -> None:
        self.versions = versions

    def version_for(self, request_class: Any, max_version: int | None = None) -> int:
        version = self.versions[request_class]
        return version if max_version is None else min(version, max_version)


def _capture_requests(api_name: str, versions: range) -> list[dict[str, Any]]:
    """The captured requests of `api_name` in `versions` (capture 40 asks for an unsupported
    DescribeProducers v5 on purpose)."""
    found = [json.loads(path.read_text()) for path in sorted(CAPTURES.glob("*.json"))]
    return [g for g in found if g.get("api_name") == api_name and g["request_version"] in versions]


def _framed(golden: dict[str, Any]) -> bytes:
    raw = bytes.fromhex(golden["request_hex"])
    return struct.pack(">i", len(raw)) + raw


@pytest.mark.parametrize(
    "golden", _capture_requests("DescribeProducers", DESCRIBE_PRODUCERS_VERSIONS),
    ids=lambda g: g["file"][:2],
)
def test_describe_producers_builder_sends_the_bytes_of_a_real_client(
    golden: dict[str, Any],
) -> None:
    topics = [(t["name"], t["partition_indexes"]) for t in golden["request"]["topics"]]
    request = describe_producers_request(topics)(
        _Connection({DescribeProducersRequest: 0})  # type: ignore[arg-type]
    )
    header = golden["request_header"]
    assert request.frame(header["correlation_id"], header["client_id"]) == _framed(golden)


@pytest.mark.parametrize(
    "golden", _capture_requests("ListOffsets", LIST_OFFSETS_VERSIONS), ids=lambda g: g["file"][:2]
)
def test_list_offsets_builder_sends_the_bytes_of_a_real_client(golden: dict[str, Any]) -> None:
    sent = golden["request"]
    partitions = {t["name"]: [p["partition_index"] for p in t["partitions"]]
                  for t in sent["topics"]}
    # The poller asks the broker not to wait (timeout_ms 0); the capture's client asked 30 s.
    assert sent["timeout_ms"] == 30000
    request = list_offsets_request(partitions, sent["isolation_level"])(
        _Connection({ListOffsetsRequest: golden["request_version"]})  # type: ignore[arg-type]
    )
    header = golden["request_header"]
    ours = request.frame(header["correlation_id"], header["client_id"])
    expected = _framed(golden)
    timeout_at = len(expected) - 5  # timeout_ms, then the request's empty tagged fields
    assert expected[timeout_at:] == struct.pack(">i", 30000) + b"\x00"
    assert ours == expected[:timeout_at] + struct.pack(">i", 0) + b"\x00"
    assert sent["isolation_level"] in (READ_UNCOMMITTED, READ_COMMITTED)


def test_list_offsets_below_v2_is_refused_not_sent_without_isolation_level() -> None:
    build = list_offsets_request({"t": [0]}, READ_COMMITTED)
    with pytest.raises(UnsupportedApiForLag):
        build(_Connection({ListOffsetsRequest: 1}))  # type: ignore[arg-type]


def test_an_unencodable_lean_request_fails_that_request_as_a_decode_error() -> None:
    """Like kafka-python's encoder errors: a typed CollectError, not a crash of the poll."""
    connection = BrokerConnection("127.0.0.1", 9, ConnectionOptions(client_id="t"))
    connection._writer = object()  # type: ignore[assignment]  # never written to
    request = describe_producers_request([("t", [2**31])])(
        _Connection({DescribeProducersRequest: 0})  # type: ignore[arg-type]
    )
    with pytest.raises(DecodeError, match="cannot encode DescribeProducersRequest v0"):
        asyncio.run(connection.request(request, 1.0))
