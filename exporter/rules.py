"""The lateness rules, shared by collect (which transactions to ask the coordinator about)
and analyze (what to report). Pure: no I/O, no state.

"Late" is the broker's `PartitionsWithLateTransactionsCount` rule (now - T >
transaction.max.timeout.ms + buffer) with T = the transaction's start; see
docs/kafka-semantics.md#late-transactions.
"""

from __future__ import annotations

from exporter.model import OpenTransaction
from exporter.settings import ClusterSettings

DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000
"""Kafka's default transaction.max.timeout.ms (15 min), used when a broker's value is unknown."""


def transaction_age_ms(open_txn: OpenTransaction, now_ms: int) -> int:
    """How long the transaction has been open; never negative (clock skew)."""
    return max(0, now_ms - open_txn.start_time_ms)


def is_late(
    open_txn: OpenTransaction, now_ms: int, max_timeout_ms: int, late_buffer_ms: int
) -> bool:
    """Late when age > transaction.max.timeout.ms + buffer (strict, like the broker's rule)."""
    return now_ms - open_txn.start_time_ms > max_timeout_ms + late_buffer_ms


def late_buffer_ms(settings: ClusterSettings) -> int:
    return round(settings.late_buffer_seconds * 1000)


def effective_max_timeout_ms(settings: ClusterSettings, broker_max_timeout_ms: int | None) -> int:
    """The override, else the leader's transaction.max.timeout.ms, else Kafka's default."""
    if settings.transaction_max_timeout_ms is not None:
        return settings.transaction_max_timeout_ms
    if broker_max_timeout_ms is not None:
        return broker_max_timeout_ms
    return DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
