"""ListTransactions (Kafka 3.0+, KIP-664): every broker lists the transactions it coordinates
(transactional id, producer id, state); the cluster's listing is all of them together. Its
answer is read by a lean codec of its own: each poll lists every transactional id."""

from __future__ import annotations

import functools
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from kafka.protocol.admin.transactions import ListTransactionsRequest, ListTransactionsResponse

from exporter.collect.client import ClusterClient, MetadataView
from exporter.collect.connection import BrokerConnection
from exporter.collect.driver import Driver, EveryBroker, Outcome, WholeAnswer
from exporter.collect.errors import COORDINATOR_LOAD_IN_PROGRESS, NONE
from exporter.collect.fastdecode import (
    check_end,
    compact_array,
    compact_string,
    decode_response,
    skip_tags,
)
from exporter.collect.pollstate import PollState

Listed = list[tuple[str, int, str]]
"""[(transactional_id, producer_id, state)]."""

LEAN_VERSIONS = range(0, 3)
_HEAD = struct.Struct(">ih")  # throttle_time_ms, error_code
_PRODUCER_ID = struct.Struct(">q")


class ListingAnswer(NamedTuple):
    """One broker's ListTransactions answer: its error code, and what it lists."""

    error_code: int
    listed: Listed


def list_transactions_request(
    producer_ids: Sequence[int] = (),
) -> Callable[[BrokerConnection], Any]:
    def build(connection: BrokerConnection) -> Any:
        return ListTransactionsRequest(
            state_filters=[],
            producer_id_filters=list(producer_ids),
            version=connection.version_for(ListTransactionsRequest),
        )

    return build


def decode_list_transactions(payload: bytes, version: int) -> ListingAnswer:
    """ListTransactions response v0-v2 (with its header), read straight from the bytes with
    Kafka's nullability enforced (a null string is a `ShapeError`). Why lean: every broker
    lists every transactional id it coordinates, each poll."""
    if version not in LEAN_VERSIONS:
        raise ValueError(f"lean ListTransactions decoder handles v0-v2, not v{version}")
    data = bytes(payload)
    pos = skip_tags(data, 4)  # header: correlation id, tags
    _, error_code = _HEAD.unpack_from(data, pos)
    pos += _HEAD.size
    filters, pos = compact_array(data, pos, "unknown_state_filters")
    for _ in range(filters):
        _, pos = compact_string(data, pos, "unknown_state_filters[]")
    count, pos = compact_array(data, pos, "transaction_states")
    listed: Listed = []
    for _ in range(count):
        transactional_id, pos = compact_string(data, pos, "transactional_id")
        (producer_id,) = _PRODUCER_ID.unpack_from(data, pos)
        state, pos = compact_string(data, pos + 8, "transaction_state")
        pos = skip_tags(data, pos)
        listed.append((transactional_id, producer_id, state))
    check_end(data, skip_tags(data, pos))
    return ListingAnswer(error_code, listed)


def decode_listing(response_class: Any, payload: bytes, version: int) -> ListingAnswer:
    """The decoder a request passes to its connection (bind `response_class`): lean for the
    versions above, kafka-python's (checked by `shapes`) for any other."""
    if version in LEAN_VERSIONS:
        return decode_list_transactions(payload, version)
    response = decode_response(response_class, payload, version)
    return ListingAnswer(response.error_code, parse_list_transactions(response))


def parse_list_transactions(response: Any) -> Listed:
    """kafka-python's ListTransactions answer -> [(transactional_id, producer_id, state)]."""
    return [
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    ]


_DECODE = functools.partial(decode_listing, ListTransactionsResponse)


class ListTransactions(WholeAnswer[int]):
    """Keys are broker ids. A coordinator still loading is asked once more; a broker before
    Kafka 3.0 has no ListTransactions: its slice is missing, so unmapped producers classify
    as unknown, never hanging."""

    api = unsupported_name = "ListTransactions"
    view_needs_it = True

    def __init__(self) -> None:
        self.listings: dict[int, Listed] = {}

    def request(self, keys: list[int]) -> Callable[[BrokerConnection], Any]:
        return list_transactions_request()

    def ask(self, client: ClusterClient, broker_id: int, keys: list[int]) -> Awaitable[Any]:
        return client.send(broker_id, self.request(keys), _DECODE)

    def handle(
        self, broker_id: int, keys: list[int], answer: Any, state: PollState, *, last: bool
    ) -> Outcome[int]:
        code = answer.error_code
        if code == NONE:
            self.listings[broker_id] = answer.listed
        elif code == COORDINATOR_LOAD_IN_PROGRESS and not last:
            return Outcome(retry=[broker_id])
        return Outcome()


async def list_transactions(
    driver: Driver, brokers: list[int], meta: MetadataView, state: PollState
) -> tuple[Listed, bool]:
    """The listings of `brokers` (each coordinates a slice), and whether every one answered."""
    handler = ListTransactions()
    await driver.run(handler, EveryBroker(), brokers, meta, state, attempts=2)
    listing = [entry for b in brokers for entry in handler.listings.get(b, ())]
    return listing, len(handler.listings) == len(brokers)
