"""The lean codecs of DescribeTransactions and ListTransactions read what kafka-python reads
and reject what it rejects; DescribeTransactions' reuses the previous poll's reading only for
a transaction state whose bytes are the same."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.transactions import (
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from test_collect_fastdecode import INT16, INT32, INT64, NAME, TAGS, with_header, with_tags

from exporter.collect.apis.describe_transactions import (
    Known,
    decode_describe_transactions,
    parse_describe_transactions,
)
from exporter.collect.apis.list_transactions import (
    ListingAnswer,
    decode_list_transactions,
    parse_list_transactions,
)
from exporter.collect.fastdecode import decode_response
from exporter.collect.shapes import ShapeError

TS = DescribeTransactionsResponse.TransactionState

transaction_states = st.builds(
    TS,
    error_code=st.one_of(st.just(0), INT16),
    transactional_id=NAME,
    transaction_state=st.sampled_from(["Ongoing", "PrepareCommit", "CompleteAbort", "Empty"]),
    transaction_timeout_ms=INT32,
    transaction_start_time_ms=INT64,
    producer_id=INT64,
    producer_epoch=INT16,
    topics=st.lists(
        st.builds(TS.TopicData, topic=NAME, partitions=st.lists(INT32, max_size=4)),
        max_size=3,
    ),
)


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    response = DescribeTransactionsResponse(
        throttle_time_ms=draw(INT32),
        transaction_states=draw(st.lists(transaction_states, max_size=6)),
    )
    return with_header(with_tags(bytes(response.encode(version=0)), draw(TAGS)))


def _generic(payload: bytes) -> tuple[list[object], list[tuple[str, int]]]:
    descriptions, errors = parse_describe_transactions(
        decode_response(DescribeTransactionsResponse, payload, 0)
    )
    return list(descriptions), errors


@settings(max_examples=300, deadline=None)
@given(responses())
def test_lean_reads_what_kafka_python_reads(payload: bytes) -> None:
    seen: Known = {}
    assert decode_describe_transactions(payload, 0, {}, seen) == _generic(payload)
    # Read again with that memory: the same answer, and (each id once) no state rebuilt.
    descriptions, errors = decode_describe_transactions(payload, 0, seen, {})
    assert (descriptions, errors) == _generic(payload)
    ids = [d.transactional_id for d in descriptions] + [t for t, _ in errors]
    if len(set(ids)) == len(ids):
        reused = {id(entry) for _, entry in seen.values()}
        assert all(id(d) in reused for d in descriptions)


def test_a_changed_state_is_read_again_and_the_unchanged_one_reused() -> None:
    def answer(start_time_ms: int) -> bytes:
        states = [
            TS(error_code=0, transactional_id=tid, transaction_state="Ongoing",
               transaction_timeout_ms=60000, transaction_start_time_ms=start, producer_id=pid,
               producer_epoch=0, topics=[TS.TopicData(topic="t", partitions=[pid])])
            for tid, pid, start in (("a", 1, 1000), ("b", 2, start_time_ms))
        ]
        response = DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
        return with_header(bytes(response.encode(version=0)))

    first: Known = {}
    (a1, b1), _ = decode_describe_transactions(answer(2000), 0, {}, first)
    second: Known = {}
    (a2, b2), _ = decode_describe_transactions(answer(3000), 0, first, second)
    assert a2 is a1  # same bytes: the same record
    assert b2 is not b1 and b2.transaction_start_time_ms == 3000  # a new transaction: read
    assert len(second) == 2  # the memory holds this answer's states only


@settings(max_examples=200, deadline=None)
@given(responses(), st.data())
def test_truncated_answer_raises_never_returns_partial(payload: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(4, len(payload) - 1))
    with pytest.raises(Exception):  # noqa: B017 - any error becomes the request's DecodeError
        decode_describe_transactions(payload[:cut], 0, {}, {})


@pytest.mark.parametrize("null_field", ["transactional_id", "transaction_state", "topic"])
def test_a_null_string_is_a_shape_error_like_the_generic_path(null_field: str) -> None:
    def compact(value: str | None) -> bytes:
        return b"\x00" if value is None else bytes([len(value) + 1]) + value.encode()

    state = (
        struct.pack(">h", 0)
        + compact(None if null_field == "transactional_id" else "id")
        + compact(None if null_field == "transaction_state" else "Ongoing")
        + struct.pack(">iqqh", 60000, 1000, 7, 0)
        + b"\x02" + compact(None if null_field == "topic" else "t") + b"\x02" + struct.pack(">i", 0)
        + b"\x00"  # topic tags
        + b"\x00"  # state tags
    )
    payload = with_header(struct.pack(">i", 0) + b"\x02" + state + b"\x00")
    with pytest.raises(ShapeError):
        decode_describe_transactions(payload, 0, {}, {})
    with pytest.raises(ShapeError):
        decode_response(DescribeTransactionsResponse, payload, 0)


def test_the_lean_decoder_refuses_a_version_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="v0, not v1"):
        decode_describe_transactions(b"", 1, {}, {})


LS = ListTransactionsResponse.TransactionState


@st.composite
def listings(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(0, 2))
    response = ListTransactionsResponse(
        throttle_time_ms=draw(INT32),
        error_code=draw(st.one_of(st.just(0), INT16)),
        unknown_state_filters=draw(st.lists(NAME, max_size=2)),
        transaction_states=draw(st.lists(
            st.builds(LS, transactional_id=NAME, producer_id=INT64,
                      transaction_state=st.sampled_from(["Ongoing", "Empty", "CompleteCommit"])),
            max_size=8,
        )),
    )
    return version, with_header(with_tags(bytes(response.encode(version=version)), draw(TAGS)))


@settings(max_examples=300, deadline=None)
@given(listings())
def test_lean_listing_reads_what_kafka_python_reads(case: tuple[int, bytes]) -> None:
    version, payload = case
    generic = decode_response(ListTransactionsResponse, payload, version)
    assert decode_list_transactions(payload, version) == ListingAnswer(
        generic.error_code, parse_list_transactions(generic)
    )


@settings(max_examples=200, deadline=None)
@given(listings(), st.data())
def test_truncated_listing_raises_never_returns_partial(
    case: tuple[int, bytes], data: st.DataObject
) -> None:
    version, payload = case
    cut = data.draw(st.integers(4, len(payload) - 1))
    with pytest.raises(Exception):  # noqa: B017 - any error becomes the request's DecodeError
        decode_list_transactions(payload[:cut], version)


def test_a_null_listed_id_is_a_shape_error_like_the_generic_path() -> None:
    state = b"\x00" + struct.pack(">q", 7) + b"\x08Ongoing" + b"\x00"
    payload = with_header(struct.pack(">ih", 0, 0) + b"\x01" + b"\x02" + state + b"\x00")
    with pytest.raises(ShapeError):
        decode_list_transactions(payload, 1)
    with pytest.raises(ShapeError):
        decode_response(ListTransactionsResponse, payload, 1)
