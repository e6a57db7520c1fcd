"""The lateness rules and find-hanging's step 5 (`classify`), shared by collect (which
transactions to ask the coordinator about), the orphan tracker and analyze (what to report).
Pure: no I/O, no state.

"Late" is the broker's `PartitionsWithLateTransactionsCount` rule (now - T >
transaction.max.timeout.ms + buffer) with T = the transaction's start; see
docs/kafka-semantics.md#late-transactions.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.model import (
    Classification,
    OpenTransaction,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
)
from exporter.settings import ClusterSettings

DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000
"""Kafka's default transaction.max.timeout.ms (15 min), used when a broker's value is unknown."""

ORPHANED_AFTER_POLLS = 2
"""Consecutive polls on which the coordinator must not track an open transaction (same
producer id, epoch and start offset) before it is orphaned (docs/kafka-semantics.md#orphaned)."""


TWO_PHASE_TRANSACTION_TIMEOUT_MS = 2_147_483_647
"""The timeout the coordinator gives a KIP-939 two-phase-commit producer (Integer.MAX_VALUE);
`TransactionMetadata.isDistributedTwoPhaseCommitTxn` is exactly "timeout == this"
(docs/kafka-semantics.md#two-phase-commit)."""


def is_two_phase_timeout(transaction_timeout_ms: int) -> bool:
    """The coordinator's own test for a 2PC transaction, on DescribeTransactions' timeout."""
    return transaction_timeout_ms == TWO_PHASE_TRANSACTION_TIMEOUT_MS


def is_orphaned(untracked_polls: int) -> bool:
    """Orphaned once not tracked on `ORPHANED_AFTER_POLLS` consecutive polls: one answer can
    be a race with the transaction's own end, two with the same key cannot."""
    return untracked_polls >= ORPHANED_AFTER_POLLS


def transaction_age_ms(open_txn: OpenTransaction, now_ms: int) -> int:
    """How long the transaction has been open; never negative (clock skew)."""
    return max(0, now_ms - open_txn.start_time_ms)


def is_late(
    open_txn: OpenTransaction, now_ms: int, max_timeout_ms: int, late_buffer_ms: int
) -> bool:
    """Late when age > transaction.max.timeout.ms + buffer (strict, like the broker's rule)."""
    return now_ms - open_txn.start_time_ms > max_timeout_ms + late_buffer_ms


def blocked_groups_min_age_ms(settings: ClusterSettings) -> int:
    return round(settings.blocked_groups_min_age_seconds * 1000)


def is_old_enough_for_groups(open_txn: OpenTransaction, now_ms: int, min_age_ms: int) -> bool:
    """Old enough that the consumer groups it may block are read, late or not: a transaction
    that ends within a poll or two costs nothing (docs/kafka-semantics.md#blocked-before-late)."""
    return transaction_age_ms(open_txn, now_ms) >= min_age_ms


def late_buffer_ms(settings: ClusterSettings) -> int:
    return round(settings.late_buffer_seconds * 1000)


def effective_max_timeout_ms(settings: ClusterSettings, broker_max_timeout_ms: int | None) -> int:
    """The override, else the leader's transaction.max.timeout.ms, else Kafka's default."""
    if settings.transaction_max_timeout_ms is not None:
        return settings.transaction_max_timeout_ms
    if broker_max_timeout_ms is not None:
        return broker_max_timeout_ms
    return DEFAULT_TRANSACTION_MAX_TIMEOUT_MS


def start_time(
    batch_timestamp_ms: int | None, last_timestamp_ms: int, first_seen_ms: int
) -> tuple[int, StartTimeSource]:
    """The earliest trustworthy evidence of when a transaction began.

    The batch timestamp at CurrentTxnStartOffset (None: not read), else DescribeProducers'
    LastTimestamp, each only when possible: not negative (-1 is Kafka's "no timestamp") and
    not later than `first_seen_ms`, when the exporter first saw the transaction open (a
    transaction cannot begin after it was seen open; a producer clock running fast would
    otherwise hide a hanging transaction for as long as it is fast). Failing both, that
    moment itself: an upper bound on the start, never a made-up age."""
    if batch_timestamp_ms is not None and 0 <= batch_timestamp_ms <= first_seen_ms:
        return batch_timestamp_ms, StartTimeSource.BATCH_TIMESTAMP
    if 0 <= last_timestamp_ms <= first_seen_ms:
        return last_timestamp_ms, StartTimeSource.LAST_TIMESTAMP
    return first_seen_ms, StartTimeSource.FIRST_SEEN


def classify(
    open_txn: OpenTransaction,
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
    coordinator_view_complete: bool,
) -> Classification:
    """Reference find-hanging step 5 for one (late) open transaction.

    Hanging when the producer id maps to no transactional id, or the id has no description
    (TRANSACTIONAL_ID_NOT_FOUND, stored as None), or the partition is not among the
    description's topic partitions; otherwise the coordinator still tracks it.
    Unknown where the answer is missing rather than "no": an unmapped producer while some
    coordinator's listing is missing (`coordinator_view_complete` False: its id may live
    there), or a mapped id whose description could not be obtained (absent from
    `descriptions`).
    """
    transactional_id = transactional_ids.get(open_txn.producer_id)
    if transactional_id is None:
        return Classification.HANGING if coordinator_view_complete else Classification.UNKNOWN
    if transactional_id not in descriptions:
        return Classification.UNKNOWN
    description = descriptions[transactional_id]
    if description is None:
        return Classification.HANGING
    if TopicPartition(open_txn.topic, open_txn.partition) not in description.topic_partitions:
        return Classification.HANGING
    return Classification.COORDINATOR_TRACKED
