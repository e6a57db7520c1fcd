"""ListTransactions (Kafka 3.0+, KIP-664): every broker lists the transactions it coordinates
(transactional id, producer id, state); the cluster's listing is all of them together."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kafka.protocol.admin.transactions import ListTransactionsRequest

from exporter.collect.client import MetadataView
from exporter.collect.connection import BrokerConnection
from exporter.collect.driver import Driver, EveryBroker, Outcome, WholeAnswer
from exporter.collect.errors import COORDINATOR_LOAD_IN_PROGRESS, NONE
from exporter.collect.pollstate import PollState

Listed = list[tuple[str, int, str]]
"""[(transactional_id, producer_id, state)]."""


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


def parse_list_transactions(response: Any) -> Listed:
    """ListTransactions answer -> [(transactional_id, producer_id, state)] (error code 0)."""
    return [
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    ]


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

    def handle(
        self, broker_id: int, keys: list[int], answer: Any, state: PollState, *, last: bool
    ) -> Outcome[int]:
        code = answer.error_code
        if code == NONE:
            self.listings[broker_id] = parse_list_transactions(answer)
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
