"""The lean decoders (exporter/collect/fastdecode.py) against kafka-python's generic decoder.

Differential: random responses are encoded by kafka-python, decoded by both, and every field
the lean decoder keeps must equal kafka-python's (empty DescribeProducers partitions, which the
lean decoder skips by design, are dropped from kafka-python's side before comparing).
"""

from __future__ import annotations

import gc
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.transactions import DescribeProducersResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata import MetadataResponse

from exporter.collect.apis.describe_producers import parse_describe_producers
from exporter.collect.apis.list_offsets import parse_list_offsets
from exporter.collect.apis.metadata import parse_metadata
from exporter.collect.client import ClusterClient, first_batch_header
from exporter.collect.fastdecode import (
    LeanFetchResponse,
    decode_describe_producers,
    decode_fetch,
    decode_list_offsets,
    decode_metadata,
    decode_open_producers,
    decode_response,
    lean,
    metadata_identity,
)
from exporter.collect.shapes import ShapeError
from exporter.model import TopicPartition
from exporter.settings import ClusterSettings

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAME = st.text(min_size=0, max_size=20)
# Unknown tagged fields the decoders must skip, spliced in as the response's own (last) tags.
TAGS = st.lists(st.tuples(st.integers(100, 300), st.binary(max_size=5)), max_size=2)

MP = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
DP = DescribeProducersResponse.TopicResponse


def with_header(body: bytes, correlation_id: int = 7) -> bytes:
    return struct.pack(">i", correlation_id) + b"\x00" + body  # response header v1, no tags


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def with_tags(encoded: bytes, tags: list[tuple[int, bytes]]) -> bytes:
    """Replace the body's empty top-level tagged fields (its last byte) by `tags`."""
    assert encoded[-1] == 0
    fields = b"".join(uvarint(tag) + uvarint(len(value)) + value
                      for tag, value in sorted(dict(tags).items()))
    return encoded[:-1] + uvarint(len(dict(tags))) + fields


metadata_partitions = st.builds(
    MP,
    error_code=INT16,
    partition_index=INT32,
    leader_id=st.integers(-1, 60),
    leader_epoch=INT32,
    replica_nodes=st.lists(st.integers(0, 60), max_size=4),
    isr_nodes=st.lists(st.integers(0, 60), max_size=4),
    offline_replicas=st.lists(st.integers(0, 60), max_size=2),
)


@st.composite
def metadata_responses(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(9, 13))
    topics = [
        MetadataResponse.MetadataResponseTopic(
            error_code=draw(INT16),
            name=draw(st.one_of(st.none(), NAME) if version >= 12 else NAME),
            topic_id=draw(st.one_of(st.just(uuid.UUID(int=0)), st.uuids())),
            is_internal=draw(st.booleans()),
            partitions=draw(st.lists(metadata_partitions, max_size=6)),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    brokers = [
        MetadataResponse.MetadataResponseBroker(
            node_id=draw(INT32), host=draw(NAME), port=draw(INT32),
            rack=draw(st.one_of(st.none(), NAME)),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    response = MetadataResponse(
        throttle_time_ms=draw(INT32),
        brokers=brokers,
        cluster_id=draw(st.one_of(st.none(), NAME)),
        controller_id=draw(INT32),
        topics=topics,
        error_code=draw(INT16),
    )
    return version, with_header(with_tags(bytes(response.encode(version=version)), draw(TAGS)))


producer_states = st.builds(
    DP.PartitionResponse.ProducerState,
    producer_id=INT64,
    producer_epoch=INT32,
    last_sequence=INT32,
    last_timestamp=INT64,
    coordinator_epoch=INT32,
    current_txn_start_offset=INT64,
)


@st.composite
def describe_producers_responses(draw: st.DrawFn) -> bytes:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = []
        for _ in range(draw(st.integers(0, 8))):
            empty = draw(st.booleans())  # most real partitions: error 0, no producer
            partitions.append(
                DP.PartitionResponse(
                    partition_index=draw(INT32),
                    # error 0 with producers is the common non-empty case (fast paths)
                    error_code=0 if empty else draw(st.one_of(st.just(0), INT16)),
                    error_message=None if empty else draw(st.one_of(st.none(), NAME)),
                    active_producers=[] if empty else draw(st.lists(producer_states, max_size=3)),
                )
            )
        topics.append(DP(name=draw(NAME), partitions=partitions))
    response = DescribeProducersResponse(throttle_time_ms=draw(INT32), topics=topics)
    return with_header(with_tags(bytes(response.encode(version=0)), draw(TAGS)))


def _producer_fields(s: Any) -> tuple[int, ...]:
    return (s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
            s.coordinator_epoch, s.current_txn_start_offset)


@settings(max_examples=300, deadline=None)
@given(metadata_responses())
def test_lean_metadata_decodes_what_kafka_python_decodes(case: tuple[int, bytes]) -> None:
    version, payload = case
    ours = decode_metadata(payload, version)
    theirs = MetadataResponse.decode(payload, version=version, header=True)
    assert [(b.node_id, b.host, b.port, b.rack) for b in ours.brokers] == [
        (b.node_id, b.host, b.port, b.rack) for b in theirs.brokers
    ]
    assert [
        (t.error_code, t.name, t.topic_id, t.is_internal, t.partition_indexes, t.leader_ids)
        for t in ours.topics
    ] == [
        (t.error_code, t.name, t.topic_id, t.is_internal,
         [p.partition_index for p in t.partitions], [p.leader_id for p in t.partitions])
        for t in theirs.topics
    ]
    assert ours.replica_ids == {r for t in theirs.topics for p in t.partitions
                                for r in p.replica_nodes}
    # And what the poller builds from either is the same.
    assert parse_metadata(ours) == parse_metadata(theirs)


@settings(max_examples=300, deadline=None)
@given(describe_producers_responses(), st.lists(st.integers(0, 40), max_size=6))
def test_the_shared_parser_reads_the_same_answer_from_either_decoder(
    payload: bytes, extra_partitions: list[int]
) -> None:
    """The parser gives the same producer entries, errors and left-out partitions from
    the lean decoder (which keeps empty partitions only as answered indexes) as from
    kafka-python's; a partition asked for and not answered is reported missing."""
    ours = decode_describe_producers(payload, 0)
    theirs = DescribeProducersResponse.decode(payload, version=0, header=True)
    requested: dict[str, list[int]] = {}
    for topic in theirs.topics:
        requested.setdefault(topic.name, []).extend(p.partition_index for p in topic.partitions)
    requested.setdefault("never-answered", []).extend(extra_partitions)
    batch = list(requested.items())
    for open_only in (True, False):
        lean_answer = parse_describe_producers(ours, 7, batch, open_only=open_only)
        full_answer = parse_describe_producers(theirs, 7, batch, open_only=open_only)
        assert lean_answer == full_answer
    # The poller's decoder keeps only open transactions' producers: the same open answer.
    open_answer = parse_describe_producers(decode_open_producers(DescribeProducersResponse,
                                                                 payload, 0), 7, batch)
    assert open_answer == parse_describe_producers(theirs, 7, batch, open_only=True)
    assert sorted(p.partition for p in full_answer.missing) == sorted(extra_partitions)
    assert all(e.leader_id == 7 for e in full_answer.entries)


@settings(max_examples=300, deadline=None)
@given(describe_producers_responses())
def test_lean_describe_producers_decodes_what_kafka_python_decodes(payload: bytes) -> None:
    ours = decode_describe_producers(payload, 0)
    theirs = DescribeProducersResponse.decode(payload, version=0, header=True)
    assert ours.throttle_time_ms == theirs.throttle_time_ms
    assert [
        (t.name, [(p.partition_index, p.error_code, p.error_message,
                   [_producer_fields(s) for s in p.active_producers]) for p in t.partitions])
        for t in ours.topics
    ] == [
        (t.name, [(p.partition_index, p.error_code, p.error_message,
                   [_producer_fields(s) for s in p.active_producers])
                  for p in t.partitions if p.error_code != 0 or p.active_producers])
        for t in theirs.topics
    ]


@settings(max_examples=300, deadline=None)
@given(describe_producers_responses())
def test_open_only_keeps_exactly_the_producers_with_an_open_transaction(payload: bytes) -> None:
    ours = decode_describe_producers(payload, 0, open_only=True)
    theirs = DescribeProducersResponse.decode(payload, version=0, header=True)
    expected = []
    for t in theirs.topics:
        kept = []
        for p in t.partitions:
            open_producers = [_producer_fields(s) for s in p.active_producers
                              if s.current_txn_start_offset >= 0]
            if p.error_code != 0 or open_producers:
                kept.append((p.partition_index, p.error_code, p.error_message, open_producers))
        expected.append((t.name, kept, [p.partition_index for p in t.partitions]))
    assert [
        (t.name, [(p.partition_index, p.error_code, p.error_message,
                   [_producer_fields(s) for s in p.active_producers]) for p in t.partitions],
         t.answered_indexes.tolist())
        for t in ours.topics
    ] == expected


@settings(max_examples=200, deadline=None)
@given(describe_producers_responses(), st.data())
def test_truncated_describe_producers_raises_never_returns_partial(
    payload: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(4, len(payload) - 1))
    with pytest.raises(Exception):  # noqa: B017 - any error becomes the request's DecodeError
        decode_describe_producers(payload[:cut], 0)


def test_null_topics_array_is_a_shape_error_like_the_generic_path() -> None:
    # throttle_time_ms then a compact array length 0 = null, which Kafka's schema forbids.
    payload = with_header(struct.pack(">i", 0) + b"\x00" + b"\x00")
    with pytest.raises(ShapeError):
        decode_describe_producers(payload, 0)
    with pytest.raises(ShapeError):
        decode_response(DescribeProducersResponse, payload, 0, lean=True)
    with pytest.raises(ShapeError):
        decode_response(DescribeProducersResponse, payload, 0)


def test_old_metadata_versions_still_use_kafka_python() -> None:
    response = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None,
                                controller_id=1, topics=[])
    payload = struct.pack(">i", 7) + bytes(response.encode(version=8))
    decoded = lean(MetadataResponse)(payload, 8)
    assert isinstance(decoded, MetadataResponse)


def _metadata_payload(controller_id: int, throttle_time_ms: int, leader_of_p1: int) -> bytes:
    partitions = [
        MP(error_code=0, partition_index=p, leader_id=leader, leader_epoch=3,
           replica_nodes=[1, 2], isr_nodes=[1, 2], offline_replicas=[])
        for p, leader in ((0, 1), (1, leader_of_p1))
    ]
    response = MetadataResponse(
        throttle_time_ms=throttle_time_ms,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="h", port=9092 + n,
                                                         rack=None) for n in (1, 2)],
        cluster_id="c",
        controller_id=controller_id,
        topics=[MetadataResponse.MetadataResponseTopic(
            error_code=0, name="t", topic_id=uuid.UUID(int=5), is_internal=False,
            partitions=partitions)],
    )
    return with_header(bytes(response.encode(version=13)))


def test_metadata_identity_ignores_controller_and_throttle_but_not_a_leader() -> None:
    # KRaft names a random broker as controller in each answer: not a change of state.
    base = metadata_identity(_metadata_payload(1, 0, leader_of_p1=2), 13)
    assert metadata_identity(_metadata_payload(2, 50, leader_of_p1=2), 13) == base
    assert metadata_identity(_metadata_payload(1, 0, leader_of_p1=1), 13) != base


def test_client_reuses_an_unchanged_metadata_parse_and_sees_a_new_leader() -> None:
    client = ClusterClient(ClusterSettings(name="c", bootstrap_servers=("h:9092",)))
    first = client._decode_full_metadata(_metadata_payload(1, 0, leader_of_p1=2), 13)
    again = client._decode_full_metadata(_metadata_payload(2, 0, leader_of_p1=2), 13)
    # The same mappings, not a copy per poll, on a view of the poll's own...
    assert again == first and again is not first and again.leaders is first.leaders
    again.leaders = {TopicPartition("t", 1): 7}  # ...where re-routing puts a new mapping
    assert client._decode_full_metadata(_metadata_payload(1, 0, leader_of_p1=2), 13) == first
    moved = client._decode_full_metadata(_metadata_payload(2, 0, leader_of_p1=1), 13)
    assert moved.leaders == {TopicPartition("t", 0): 1, TopicPartition("t", 1): 1}
    assert client._decode_full_metadata(_metadata_payload(1, 0, leader_of_p1=1), 13) == moved


def test_metadata_parse_pauses_the_gc_and_restores_its_state() -> None:
    # The parse pauses the cyclic GC for its allocations; it must never leave it changed.
    client = ClusterClient(ClusterSettings(name="c", bootstrap_servers=("h:9092",)))
    assert gc.isenabled()
    client._decode_full_metadata(_metadata_payload(1, 0, leader_of_p1=2), 13)
    assert gc.isenabled()
    gc.disable()
    try:
        client._decode_full_metadata(_metadata_payload(1, 0, leader_of_p1=1), 13)
        assert not gc.isenabled()  # someone else's choice stays
    finally:
        gc.enable()


# -- Fetch (start-time reads) ----------------------------------------------------------------

FP = FetchResponse.FetchableTopicResponse.PartitionData
_BATCH_V2 = struct.Struct(">qiibIhiqqqhii")


@st.composite
def fetch_records(draw: st.DrawFn) -> bytes | None:
    """Null, random bytes, or a v2 batch header (whole or truncated) plus arbitrary tail."""
    kind = draw(st.sampled_from(["null", "random", "batch"]))
    if kind == "null":
        return None
    if kind == "random":
        return draw(st.binary(max_size=80))
    header = _BATCH_V2.pack(
        draw(INT64), draw(st.integers(49, 200)), draw(INT32), 2, draw(st.integers(0, 2**32 - 1)),
        draw(INT16), draw(INT32), draw(INT64), draw(INT64), draw(INT64), draw(INT16),
        draw(INT32), draw(st.integers(0, 3)),
    )
    return header[: draw(st.integers(0, len(header)))] + draw(st.binary(max_size=20))


@st.composite
def fetch_responses(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(7, 17))
    topics = []
    for _ in range(draw(st.integers(0, 2))):
        partitions = [
            FP(
                partition_index=draw(INT32),
                error_code=draw(INT16),
                high_watermark=draw(INT64),
                last_stable_offset=draw(INT64),
                log_start_offset=draw(INT64),
                aborted_transactions=draw(st.one_of(st.none(), st.lists(st.builds(
                    FP.AbortedTransaction, producer_id=INT64, first_offset=INT64), max_size=3))),
                preferred_read_replica=draw(INT32),
                records=draw(fetch_records()),
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        topics.append(FetchResponse.FetchableTopicResponse(
            topic=draw(NAME), topic_id=draw(st.one_of(st.just(uuid.UUID(int=0)), st.uuids())),
            partitions=partitions))
    response = FetchResponse(throttle_time_ms=draw(INT32), error_code=draw(INT16),
                             session_id=draw(INT32), responses=topics)
    body = bytes(response.encode(version=version))
    if version < 12:  # response header v0: the correlation id only
        return version, struct.pack(">i", draw(INT32)) + body
    return version, with_header(with_tags(body, draw(TAGS)))


@settings(max_examples=300, deadline=None)
@given(fetch_responses())
def test_lean_fetch_decodes_what_kafka_python_and_kafka_record_decode(
    case: tuple[int, bytes],
) -> None:
    version, payload = case
    ours = decode_fetch(payload, version)
    theirs = FetchResponse.decode(payload, version=version, header=True)
    assert (ours.throttle_time_ms, ours.error_code) == (theirs.throttle_time_ms, theirs.error_code)

    def fields(response: Any) -> list[list[tuple[Any, ...]]]:
        # Records compared raw and as the first batch header the poller reads (kafka.record).
        return [
            [(t.topic if version < 13 else t.topic_id)]
            + [(p.partition_index, p.error_code, None if p.records is None else bytes(p.records),
                first_batch_header(p.records)) for p in t.partitions]
            for t in response.responses
        ]

    assert fields(ours) == fields(theirs)


@settings(max_examples=100, deadline=None)
@given(fetch_responses(), st.data())
def test_truncated_fetch_raises_never_returns_partial(
    case: tuple[int, bytes], data: st.DataObject
) -> None:
    version, payload = case
    cut = data.draw(st.integers(5, len(payload) - 1))
    with pytest.raises((ValueError, IndexError, struct.error)):
        decode_fetch(payload[:cut], version)


def test_fetch_versions_outside_the_lean_range_use_kafka_python() -> None:
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[])
    payload = struct.pack(">i", 7) + bytes(response.encode(version=6))  # header v0
    assert type(decode_response(FetchResponse, payload, 6, lean=True)) is FetchResponse
    assert isinstance(lean(FetchResponse)(with_header(bytes(response.encode(version=17))), 17),
                      LeanFetchResponse)


# -- ListOffsets (LSO lag) ------------------------------------------------------------------

LOR = ListOffsetsResponse.ListOffsetsTopicResponse


@st.composite
def list_offsets_responses(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(1, 11))
    topics = [
        LOR(
            name=draw(NAME),
            partitions=[
                LOR.ListOffsetsPartitionResponse(
                    partition_index=draw(INT32), error_code=draw(st.one_of(st.just(0), INT16)),
                    timestamp=draw(INT64), offset=draw(INT64), leader_epoch=draw(INT32),
                )
                for _ in range(draw(st.integers(0, 5)))
            ],
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    body = bytes(ListOffsetsResponse(throttle_time_ms=draw(INT32), topics=topics)
                 .encode(version=version))
    if version >= 6:  # flexible: response header v1, tagged fields
        return version, with_header(with_tags(body, draw(TAGS)))
    return version, struct.pack(">i", 7) + body  # response header v0


@settings(max_examples=300, deadline=None)
@given(list_offsets_responses())
def test_lean_list_offsets_decodes_what_kafka_python_decodes(case: tuple[int, bytes]) -> None:
    version, payload = case
    ours = decode_list_offsets(payload, version)
    theirs = ListOffsetsResponse.decode(payload, version=version, header=True)
    assert ours.throttle_time_ms == (theirs.throttle_time_ms if version >= 2 else 0)
    assert [(t.name, [(p.partition_index, p.error_code, p.offset) for p in t.partitions])
            for t in ours.topics] == [
        (t.name, [(p.partition_index, p.error_code, p.offset) for p in t.partitions])
        for t in theirs.topics
    ]
    assert parse_list_offsets(ours) == parse_list_offsets(theirs)
    assert type(decode_response(ListOffsetsResponse, payload, version, lean=True)) is type(ours)


@settings(max_examples=200, deadline=None)
@given(list_offsets_responses(), st.data())
def test_truncated_list_offsets_raises_never_returns_partial(
    case: tuple[int, bytes], data: st.DataObject
) -> None:
    version, payload = case
    cut = data.draw(st.integers(4, len(payload) - 1))
    with pytest.raises((ValueError, IndexError, struct.error)):
        decode_list_offsets(payload[:cut], version)


def test_null_list_offsets_topic_name_is_a_shape_error_like_the_generic_path() -> None:
    payload = struct.pack(">iii", 7, 0, 1) + struct.pack(">h", -1) + struct.pack(">i", 0)  # v5
    with pytest.raises(ShapeError):
        decode_list_offsets(payload, 5)
    with pytest.raises(ShapeError):
        decode_response(ListOffsetsResponse, payload, 5)
