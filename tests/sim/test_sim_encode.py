"""The simulator's lean encoders (kafka_sim/encode.py) against kafka-python's encoder.

Differential: random answers are encoded by the lean encoder and, built as kafka-python
messages by the handlers' own builders, by kafka-python; the bytes must be identical, for every
version each encoder writes. Then the real handlers on a seeded state, through a socket.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka_sim.api import RequestContext
from kafka_sim.encode import (
    LeanResponse,
    MetadataTopic,
    encode_describe_producers,
    encode_list_offsets,
    encode_metadata,
    uvarint,
)
from kafka_sim.handlers import (
    _describe_producers_message,
    _list_offsets_message,
    _metadata_message,
)
from kafka_sim.router import BrokerRouter
from kafka_sim.seed import seed_hanging_transaction
from kafka_sim.state import ClusterState

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAME = st.text(max_size=12)
BROKER_IDS = st.lists(INT32, max_size=4).map(tuple)
UUIDS = st.none() | st.uuids()

METADATA_PARTITION = st.tuples(INT16, INT32, INT32, INT32, BROKER_IDS, BROKER_IDS, BROKER_IDS)


@st.composite
def metadata_topics(draw: Any, version: int) -> list[MetadataTopic]:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        # A null name only where the schema allows one (v12+: topics asked for by id).
        name = draw(st.none() | NAME) if version >= 12 else draw(NAME)
        partitions = draw(st.lists(METADATA_PARTITION, max_size=4))
        topics.append(MetadataTopic(draw(INT16), name, draw(UUIDS), draw(st.booleans()),
                                    partitions, draw(st.none() | st.just({}))))
    return topics


@settings(max_examples=60, deadline=None)
@given(data=st.data(), version=st.integers(0, 13))
def test_metadata_bytes_equal_kafka_python(data: Any, version: int) -> None:
    brokers = data.draw(st.lists(st.tuples(INT32, NAME, INT32, st.none() | NAME), max_size=3))
    cluster_id = data.draw(st.none() | NAME) if version >= 2 else None
    controller_id, error_code = data.draw(INT32), data.draw(INT16)
    topics = data.draw(metadata_topics(version))
    ours = encode_metadata(version, brokers, cluster_id, controller_id, topics, error_code)
    message = _metadata_message(version, brokers, cluster_id, controller_id, topics, error_code)
    assert ours == bytes(message.encode(version=version))
    # The encoded partitions are cached per layout: a second encode gives the same bytes.
    assert encode_metadata(version, brokers, cluster_id, controller_id, topics,
                           error_code) == ours


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(0, 11),
    topics=st.lists(st.tuples(NAME, st.lists(st.tuples(INT32, INT16, INT64, INT64, INT32),
                                             max_size=4)), max_size=3),
)
def test_list_offsets_bytes_equal_kafka_python(version: int, topics: Any) -> None:
    message = _list_offsets_message(version, topics)
    ours = LeanResponse(type(message), lambda v: encode_list_offsets(v, topics),
                        lambda: message).encode(version)
    assert ours == bytes(message.encode(version=version))
    assert (encode_list_offsets(version, topics) is None) == (version == 0)  # v0: kafka-python


PRODUCER = st.tuples(INT64, INT32, INT32, INT64, INT32, INT64)


@settings(max_examples=60, deadline=None)
@given(topics=st.lists(st.tuples(NAME, st.lists(st.tuples(
    INT32, INT16, st.none() | st.text(max_size=30), st.lists(PRODUCER, max_size=3),
) | INT32, max_size=5)), max_size=3))  # a bare index: error 0, no message, no producers
def test_describe_producers_bytes_equal_kafka_python(topics: Any) -> None:
    ours = encode_describe_producers(0, topics)
    assert ours == bytes(_describe_producers_message(0, topics).encode(version=0))


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**31 - 1])
def test_uvarint_matches_kafka_unsigned_varint(value: int) -> None:
    from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32

    assert uvarint(value) == bytes(UnsignedVarInt32.encode(value))


# -- the real handlers ----------------------------------------------------------------------------


@pytest.fixture
def state() -> ClusterState:
    s = ClusterState(node_ids=[1, 2, 3])
    s.create_topic("t", 7, 3)
    s.create_topic("u", 3, 2)
    s.endpoints = {b: ("127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    seed_hanging_transaction(s, "hang", "t", 2, last_timestamp_ms=s.now_ms() - 3_600_000)
    return s


def answer(state: ClusterState, api_key: int, version: int, request: Any,
           broker: int = 1) -> LeanResponse:
    ctx = RequestContext(broker, api_key, version, 1, "t", "User:ANONYMOUS")
    response = BrokerRouter(state).handle(ctx, request)
    assert isinstance(response, LeanResponse)
    return response


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_handler_wire_bytes_equal_kafka_python(state: ClusterState,
                                                        version: int) -> None:
    T = MetadataRequest.MetadataRequestTopic
    for topics in (None, [T(name="t"), T(name="missing")]):
        request = MetadataRequest(version=version, topics=topics,
                                  allow_auto_topic_creation=False)
        response = answer(state, 3, version, request)
        assert response.encode(version) == bytes(response.message.encode(version=version))
    state.set_broker_alive(2, False)  # new leaders, offline replicas: new rows, cache dropped
    response = answer(state, 3, version, MetadataRequest(version=version, topics=None))
    assert response.encode(version) == bytes(response.message.encode(version=version))
    assert any(p.offline_replicas == [2] or p.offline_replicas == (2,)
               for t in response.topics for p in t.partitions) or version < 5


@pytest.mark.parametrize("version", range(0, 11))
def test_list_offsets_handler_wire_bytes_equal_kafka_python(state: ClusterState,
                                                            version: int) -> None:
    T = ListOffsetsRequest.ListOffsetsTopic
    P = T.ListOffsetsPartition
    request = ListOffsetsRequest(version=version, replica_id=-1, isolation_level=1, topics=[
        T(name="t", partitions=[P(partition_index=i, timestamp=-1, current_leader_epoch=-1,
                                  max_num_offsets=1) for i in range(7)]),
        T(name="nope", partitions=[P(partition_index=0, timestamp=-2, current_leader_epoch=-1,
                                     max_num_offsets=1)]),
    ])
    response = answer(state, 2, version, request)
    assert response.encode(version) == bytes(response.message.encode(version=version))


def test_describe_producers_handler_wire_bytes_equal_kafka_python(state: ClusterState) -> None:
    T = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest(version=0, topics=[
        T(name="t", partition_indexes=list(range(8))), T(name="nope", partition_indexes=[0])])
    response = answer(state, 61, 0, request, broker=state.partition("t", 2).leader_id)
    assert response.encode(0) == bytes(response.message.encode(version=0))
    (hanging,) = [p for p in response.topics[0].partitions if p.partition_index == 2]
    assert len(hanging.active_producers) == 1  # a real producer row went through both paths
    assert [p.error_code for p in response.topics[1].partitions] == [3]


def test_lean_response_reads_like_the_kafka_python_message(state: ClusterState) -> None:
    response = answer(state, 3, 12, MetadataRequest(version=12, topics=None))
    assert sorted(t.name for t in response.topics) == ["__transaction_state", "t", "u"]
    assert response.flexible_version_q(12) and not response.flexible_version_q(8)
    assert uuid.UUID(int=0) != response.topics[0].topic_id


def test_metadata_rows_keep_kafkas_hash_set_order(state: ClusterState) -> None:
    """The rows' order computed with the expanded hash equals the generic helpers' order."""
    from kafka_sim.handlers import _metadata_partition_rows
    from kafka_sim.jvm_order import java_fields_hash, java_list_hash, scala_mutable_hash_order

    state.create_topic("big", 300, 3)
    state.move_partition_leader("big", 7, 3)
    state.set_broker_alive(2, False)  # leaderless or moved partitions, offline replicas
    rows = _metadata_partition_rows(state, state.topics["big"])
    in_index_order = sorted(rows, key=lambda r: r[1])
    expected = scala_mutable_hash_order(in_index_order, lambda r: java_fields_hash(
        (r[0], r[1], r[2], r[3], java_list_hash(r[4]), java_list_hash(r[5]),
         java_list_hash(r[6]))))
    assert rows == expected
    assert [r[1] for r in rows] != list(range(300))  # hash order, not index order
    assert any(r[6] == (2,) for r in rows)


@settings(max_examples=50, deadline=None)
@given(hashes=st.lists(INT32, max_size=40))
def test_hash_set_order_of_given_hashes(hashes: list[int]) -> None:
    from kafka_sim.jvm_order import _capacity, scala_mutable_hash_order_of

    capacity = _capacity(len(hashes))

    def key(i: int) -> tuple[int, int]:  # Scala 2.13 mutable.HashSet: bucket, then improved hash
        h = hashes[i] & 0xFFFFFFFF
        improved = h ^ (h >> 16)
        return improved & (capacity - 1), improved

    items = list(range(len(hashes)))
    assert scala_mutable_hash_order_of(hashes, items) == sorted(items, key=key)


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 80), st.booleans(), INT16), max_size=6))
def test_describe_producers_long_runs_of_empty_partitions(runs: Any) -> None:
    """Runs of empty partitions long enough to be written column by column, between others."""
    partitions: list[Any] = []
    for length, with_producer, error in runs:
        partitions.extend((len(partitions) + i, 0, None, ()) for i in range(length))
        partitions.append((len(partitions), error, None,
                           [(7, 1, 2, 3, 4, 5)] if with_producer else ()))
    topics = [("t", partitions)]
    assert encode_describe_producers(0, topics) == bytes(
        _describe_producers_message(0, topics).encode(version=0))


def test_describe_producers_common_case_answers_as_the_checked_path(state: ClusterState) -> None:
    """The shortcut taken without injected errors gives the bytes of the per-partition checks
    (forced here by an injected error that matches no partition of the request)."""
    T = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest(version=0, topics=[
        T(name="t", partition_indexes=[*range(7), 99]), T(name="nope", partition_indexes=[0])])
    leader = state.partition("t", 2).leader_id
    fast = answer(state, 61, 0, request, broker=leader).encode(0)
    state.inject_error(61, 3, broker_id=leader, topic="u", partition=0)  # matches nothing asked
    checked = answer(state, 61, 0, request, broker=leader).encode(0)
    assert fast == checked
    assert len(fast) > 60


# -- the lean DescribeProducers request decoder ---------------------------------------------------

REQUESTS = st.tuples(
    st.text(max_size=15),  # client id
    INT32,  # correlation id
    st.lists(st.tuples(st.text(max_size=12), st.lists(INT32, max_size=30)), max_size=5),
)


def kafka_python_request(client_id: str, correlation_id: int, topics: Any) -> bytes:
    T = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest(
        version=0, topics=[T(name=n, partition_indexes=i) for n, i in topics])
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


@settings(max_examples=80, deadline=None)
@given(request=REQUESTS)
def test_lean_request_decoder_reads_what_kafka_python_reads(request: Any) -> None:
    from kafka_sim.encode import decode_describe_producers_request

    raw = kafka_python_request(*request)
    ours = decode_describe_producers_request(raw)
    theirs = DescribeProducersRequest.decode(raw, version=0, header=True)
    assert ours is not None
    assert ours.header.client_id == theirs.header.client_id
    assert ours.header.correlation_id == theirs.header.correlation_id
    assert [(t.name, t.partition_indexes) for t in ours.topics] == [
        (t.name, list(t.partition_indexes)) for t in theirs.topics]


@settings(max_examples=40, deadline=None)
@given(request=REQUESTS, data=st.data())
def test_lean_request_decoder_leaves_anything_unusual_to_kafka_python(
    request: Any, data: Any
) -> None:
    """Cut short, extended or with a byte changed: either the same reading as kafka-python's,
    or None (then kafka-python decodes or refuses it, as before)."""
    from kafka_sim.encode import decode_describe_producers_request

    raw = kafka_python_request(*request)
    assert decode_describe_producers_request(raw + b"\x00") is None  # bytes left over
    assert decode_describe_producers_request(raw[:data.draw(st.integers(0, len(raw) - 1))]) is None
    at = data.draw(st.integers(0, len(raw) - 1))
    changed = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    ours = decode_describe_producers_request(changed)
    if ours is not None:
        theirs = DescribeProducersRequest.decode(changed, version=0, header=True)
        assert ours.header.client_id == theirs.header.client_id
        assert [(t.name, t.partition_indexes) for t in ours.topics] == [
            (t.name, list(t.partition_indexes)) for t in theirs.topics]


def test_describe_producers_sees_new_logs_and_moved_replicas(state: ClusterState) -> None:
    """The per-topic lists the common case reads follow the state: a log created after a first
    answer, and a reassignment."""
    from kafka_sim.seed import seed_cluster

    T = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest(version=0, topics=[T(name="u", partition_indexes=[0])])
    leader = state.partition("u", 0).leader_id
    before = answer(state, 61, 0, request, broker=leader)
    assert before.topics[0].partitions[0].active_producers == []
    seed_cluster(state, now_ms=state.now_ms(), idempotent_partitions={"u": 1}, rng_seed=3)
    after = answer(state, 61, 0, request, broker=leader)
    assert len(after.topics[0].partitions[0].active_producers) == 1
    outsider = next(b for b in state.node_ids if b not in state.partition("u", 0).replicas)
    state.move_partition_leader("u", 0, outsider)  # reassigned: the old leader may drop out
    replicas = state.partition("u", 0).replicas
    for broker in state.node_ids:
        (p,) = answer(state, 61, 0, request, broker=broker).topics[0].partitions
        assert (p.error_code == 0) == (broker in replicas)
