"""DescribeTransactions (Kafka 3.0+, KIP-664) at each transactional id's coordinator: its
state, timeout, start time, producer and partitions (reference find-hanging step 4).

Asked each poll for every transaction seen open, so its answer is read by a lean codec of its
own that reuses the previous poll's reading of a transaction state whose bytes did not
change (a hanging transaction answers the same, poll after poll)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)

from exporter.collect.client import ClusterClient
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    NONE,
    NOT_COORDINATOR,
    TRANSACTIONAL_ID_NOT_FOUND,
    error_name,
)
from exporter.collect.fastdecode import (
    check_end,
    compact_array,
    compact_length,
    compact_string,
    decode_response,
    skip_tags,
)
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState
from exporter.collect.shapes import ShapeError
from exporter.model import TopicPartition, TransactionDescription

Described = tuple[list[TransactionDescription], list[tuple[str, int]]]
"""(descriptions, [(transactional_id, error_code)])."""


def describe_transactions_request(
    transactional_ids: Sequence[str],
) -> Callable[[BrokerConnection], Any]:
    def build(connection: BrokerConnection) -> Any:
        return DescribeTransactionsRequest(
            transactional_ids=list(transactional_ids),
            version=connection.version_for(DescribeTransactionsRequest),
        )

    return build


Entry = TransactionDescription | tuple[str, int]
"""One transaction state of an answer: its description, or (transactional_id, error_code)."""

Known = dict[bytes, tuple[bytes, Entry]]
"""Transaction states read, by their transactional id's bytes: (the state's bytes, its entry)."""

LEAN_VERSIONS = range(0, 1)
_ERROR_CODE = struct.Struct(">h")
_FIXED = struct.Struct(">iqqh")  # timeout, start time, producer id, producer epoch


def decode_describe_transactions(
    payload: bytes, version: int, known: Mapping[bytes, tuple[bytes, Entry]], seen: Known
) -> Described:
    """DescribeTransactions response v0 (with its header) -> (descriptions, errors), read
    straight from the bytes with Kafka's nullability enforced (a null string is a
    `ShapeError`, as `shapes.check_response` makes it for kafka-python's decoding).

    Why lean: the poll asks every transaction it saw open last poll, each poll, and most of
    them answer the same bytes again. A transaction state that starts with the same bytes as
    that id's state in `known` (the previous poll's) is that state: an encoding is read
    front to back, so those bytes end where they ended before. It is not read again. Every
    state goes into `seen`."""
    if version not in LEAN_VERSIONS:
        raise ValueError(f"lean DescribeTransactions decoder handles v0, not v{version}")
    data = bytes(payload)
    pos = skip_tags(data, 4) + 4  # header (correlation id, tags), throttle_time_ms
    count, pos = compact_array(data, pos, "transaction_states")
    descriptions: list[TransactionDescription] = []
    errors: list[tuple[str, int]] = []
    for _ in range(count):
        size, id_at = compact_length(data, pos + 2)  # after the error code
        if size < 0:
            raise ShapeError("transactional_id: null where Kafka's schema allows none")
        key = data[id_at:id_at + size]
        before = known.get(key)
        if before is not None and data.startswith(before[0], pos):
            raw, entry = before
            pos += len(raw)
        else:
            start = pos
            entry, pos = _read_state(data, pos)
            raw = data[start:pos]
        seen[key] = (raw, entry)
        if isinstance(entry, TransactionDescription):
            descriptions.append(entry)
        else:
            errors.append(entry)
    check_end(data, skip_tags(data, pos))
    return descriptions, errors


def _read_state(data: bytes, pos: int) -> tuple[Entry, int]:
    """The transaction state at `pos`, and where it ends."""
    (error_code,) = _ERROR_CODE.unpack_from(data, pos)
    transactional_id, pos = compact_string(data, pos + 2, "transactional_id")
    state, pos = compact_string(data, pos, "transaction_state")
    timeout_ms, start_time_ms, producer_id, producer_epoch = _FIXED.unpack_from(data, pos)
    topics, pos = compact_array(data, pos + _FIXED.size, "topics")
    topic_partitions: list[TopicPartition] = []
    for _ in range(topics):
        topic, pos = compact_string(data, pos, "topics[].topic")
        partitions, pos = compact_array(data, pos, "topics[].partitions")
        indexes = struct.unpack_from(f">{partitions}i", data, pos)
        topic_partitions.extend(TopicPartition(topic, index) for index in indexes)
        pos = skip_tags(data, pos + 4 * partitions)
    pos = skip_tags(data, pos)
    check_end(data, pos)
    if error_code != NONE:
        return (transactional_id, error_code), pos
    description = TransactionDescription(
        transactional_id=transactional_id,
        state=state,
        transaction_timeout_ms=timeout_ms,
        transaction_start_time_ms=start_time_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        topic_partitions=frozenset(topic_partitions),
    )
    return description, pos


def decode_described(
    response_class: Any,
    known: Mapping[bytes, tuple[bytes, Entry]],
    seen: Known,
    payload: bytes,
    version: int,
) -> Described:
    """The decoder a request passes to its connection (bind the first three arguments): lean
    for the versions above, kafka-python's (checked by `shapes`) for any other."""
    if version in LEAN_VERSIONS:
        return decode_describe_transactions(payload, version, known, seen)
    return parse_describe_transactions(decode_response(response_class, payload, version))


def parse_describe_transactions(response: Any) -> Described:
    """kafka-python's DescribeTransactions answer -> (descriptions, [(transactional_id,
    error_code)])."""
    descriptions: list[TransactionDescription] = []
    errors: list[tuple[str, int]] = []
    for d in response.transaction_states:
        if d.error_code != NONE:
            errors.append((d.transactional_id, d.error_code))
            continue
        descriptions.append(
            TransactionDescription(
                transactional_id=d.transactional_id,
                state=d.transaction_state,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topic_partitions=frozenset(
                    TopicPartition(t.topic, p) for t in d.topics for p in t.partitions
                ),
            )
        )
    return descriptions, errors


class DescribeTransactions(Handler[str, Described]):
    """Writes into `descriptions`: a description, or None for TRANSACTIONAL_ID_NOT_FOUND ("no
    description": hanging). An id left undescribed (left out, failed) is absent: unknown."""

    api = unsupported_name = "DescribeTransactions"
    view_needs_it = True

    def __init__(
        self,
        descriptions: dict[str, TransactionDescription | None],
        known: Mapping[bytes, tuple[bytes, Entry]],
        seen: Known,
    ) -> None:
        self.descriptions = descriptions
        self.complete = True
        """False when a coordinator has no DescribeTransactions (Kafka < 3.0, mixed cluster):
        its ids classify as unknown; the other coordinators' answers still count."""
        # The previous call's transaction states are reused from `known`; this call's go
        # into `seen` (the next call's `known`).
        self._decode = functools.partial(
            decode_described, DescribeTransactionsResponse, known, seen
        )

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return describe_transactions_request(keys)

    def ask(self, client: ClusterClient, broker_id: int, keys: list[str]) -> Awaitable[Any]:
        return client.send(broker_id, self.request(keys), self._decode)

    def parse(self, keys: list[str], response: Any) -> tuple[Described, Collection[str]]:
        descriptions, errors = response
        answered = {d.transactional_id for d in descriptions} | {t for t, _ in errors}
        return (descriptions, errors), answered

    def handle(
        self, broker_id: int, keys: list[str], answer: Described, state: PollState,
        *, last: bool,
    ) -> Outcome[str]:
        descriptions, errors = answer
        for description in descriptions:
            self.descriptions[description.transactional_id] = description
        outcome: Outcome[str] = Outcome()
        for transactional_id, code in errors:
            state.error(broker_id, self.api, error_name(code))
            if code == TRANSACTIONAL_ID_NOT_FOUND:
                self.descriptions[transactional_id] = None
            elif code == NOT_COORDINATOR:  # moved: looked up again
                outcome.forget.append(transactional_id)
                outcome.retry.append(transactional_id)
            elif code == COORDINATOR_LOAD_IN_PROGRESS:
                outcome.retry.append(transactional_id)
        return outcome

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        if error.kind == UNSUPPORTED_API_KIND:
            self.complete = False
            return Outcome()
        return Outcome(forget=list(keys))  # undescribed: unknown; looked up again next poll
