"""DescribeTransactions (Kafka 3.0+, KIP-664) at each transactional id's coordinator: its
state, timeout, start time, producer and partitions (reference find-hanging step 4)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from kafka.protocol.admin.transactions import DescribeTransactionsRequest

from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    NONE,
    NOT_COORDINATOR,
    TRANSACTIONAL_ID_NOT_FOUND,
    error_name,
)
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState
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


def parse_describe_transactions(response: Any) -> Described:
    """DescribeTransactions answer -> (descriptions, [(transactional_id, error_code)])."""
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

    def __init__(self, descriptions: dict[str, TransactionDescription | None]) -> None:
        self.descriptions = descriptions
        self.complete = True
        """False when a coordinator has no DescribeTransactions (Kafka < 3.0, mixed cluster):
        its ids classify as unknown; the other coordinators' answers still count."""

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return describe_transactions_request(keys)

    def parse(self, keys: list[str], response: Any) -> tuple[Described, Collection[str]]:
        descriptions, errors = parse_describe_transactions(response)
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
