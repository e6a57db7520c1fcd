"""Builders of model records for the expose/scheduler/CLI tests (no I/O)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

from exporter.model import (
    BlockedGroup,
    BlockingTransaction,
    BrokerSummary,
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    LateTransaction,
    OpenTransaction,
    OrphanedTransaction,
    PartitionVerification,
    RequestError,
    StartTimeSource,
    TopicPartition,
)


def in_thread(fn: Callable[[], ClusterObservation]) -> Callable[[], Awaitable[ClusterObservation]]:
    """A blocking fake poll as the scheduler runs a poll (on the polling loop): in a thread,
    so that a poll that sleeps or waits blocks only itself, as a real one waiting on a broker
    does."""
    return lambda: asyncio.get_running_loop().run_in_executor(None, fn)


NOW_MS = 1_795_217_202_597  # the real-kafka capture's FINAL time, for realistic numbers


def open_txn(
    topic: str = "hang-test",
    partition: int = 0,
    *,
    leader_id: int = 1,
    producer_id: int = 3,
    producer_epoch: int = 0,
    coordinator_epoch: int = -1,
    start_offset: int = 0,
    age_ms: int = 400_000,
) -> OpenTransaction:
    start = NOW_MS - age_ms
    return OpenTransaction(
        topic=topic,
        partition=partition,
        leader_id=leader_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        current_txn_start_offset=start_offset,
        last_timestamp_ms=start,
        start_time_ms=start,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    )


def late(
    txn: OpenTransaction,
    classification: Classification = Classification.HANGING,
    transactional_id: str = "",
    topic_compacted: bool | None = None,
    *,
    blocked: Sequence[tuple[str, float]] = (),
    blocked_unknown: str | None = None,
    application: str = "",
) -> LateTransaction:
    """`blocked`: (group id, seconds) of the groups it stops at its start offset."""
    return LateTransaction(
        transaction=txn,
        age_seconds=(NOW_MS - txn.start_time_ms) / 1000.0,
        classification=classification,
        transactional_id=transactional_id,
        topic_compacted=topic_compacted,
        blocked_groups=blocked_groups(txn, blocked),
        blocked_groups_unknown=blocked_unknown,
        application=application,
    )


def blocking(
    txn: OpenTransaction,
    classification: Classification = Classification.COORDINATOR_TRACKED,
    transactional_id: str = "",
    *,
    late: bool = False,
    blocked: Sequence[tuple[str, float]] = (),
    blocked_unknown: str | None = None,
    application: str = "",
) -> BlockingTransaction:
    """A transaction whose blocked groups were read (by default a lingering one: tracked by
    its coordinator, not late)."""
    return BlockingTransaction(
        transaction=txn,
        age_seconds=(NOW_MS - txn.start_time_ms) / 1000.0,
        transactional_id=transactional_id,
        classification=classification,
        late=late,
        blocked_groups=blocked_groups(txn, blocked),
        blocked_groups_unknown=blocked_unknown,
        application=application,
    )


def blocked_groups(
    txn: OpenTransaction, blocked: Sequence[tuple[str, float]]
) -> tuple[BlockedGroup, ...]:
    return tuple(
        BlockedGroup(group, txn.topic, txn.partition, txn.current_txn_start_offset, seconds)
        for group, seconds in blocked
    )


def orphaned(
    txn: OpenTransaction,
    transactional_id: str = "",
    *,
    late: bool = False,
    blocked: Sequence[tuple[str, float]] = (),
    blocked_unknown: str | None = None,
    application: str = "",
) -> OrphanedTransaction:
    return OrphanedTransaction(
        transaction=txn,
        age_seconds=(NOW_MS - txn.start_time_ms) / 1000.0,
        transactional_id=transactional_id,
        untracked_polls=2,
        late=late,
        blocked_groups=blocked_groups(txn, blocked),
        blocked_groups_unknown=blocked_unknown,
        application=application,
    )


def broker(
    broker_id: int,
    *,
    up: bool = True,
    open_: int = 0,
    late_: int = 0,
    hanging: int = 0,
    orphaned_: int | None = 0,
    max_timeout_ms: int | None = 60_000,
    observable: bool = True,
    partition_verification: PartitionVerification | None = None,
) -> BrokerSummary:
    return BrokerSummary(
        broker_id=broker_id,
        up=up,
        partitions_with_open_transactions=open_,
        partitions_with_late_transactions=late_,
        partitions_with_hanging_transactions=hanging,
        transaction_max_timeout_ms=max_timeout_ms,
        partitions_with_orphaned_transactions=orphaned_,
        observable=observable,
        partition_verification=partition_verification,
    )


def snapshot(
    cluster: str = "c1",
    *,
    up: bool = True,
    brokers: Sequence[BrokerSummary] = (),
    durations: Mapping[TopicPartition, float] | None = None,
    late_transactions: Sequence[LateTransaction] = (),
    orphaned_transactions: Sequence[OrphanedTransaction] = (),
    transaction_states: Mapping[str, int] | None = None,
    lso_lag: Mapping[TopicPartition, int] | None = None,
    unobserved: int = 0,
    unobserved_by_reason: Mapping[str, int] | None = None,
    request_errors: Sequence[RequestError] = (),
    poll_duration_seconds: float = 0.2,
    poll_phase_seconds: Mapping[str, float] | None = None,
    by_start_time_source: Mapping[str, int] | None = None,
    finalized_transaction_version: int | None = None,
    compacted_topics: Mapping[str, bool] | None = None,
    blocked_groups_unknown_by_reason: Mapping[str, int] | None = None,
    orphan_detection_warm: bool = True,
    blocking_transactions: Sequence[BlockingTransaction] = (),
    applications_overflowed: int = 0,
) -> ClusterSnapshot:
    """Every late and orphaned transaction is also a blocking one (its groups were read), as
    `analyze` makes them, before the extra `blocking_transactions` (e.g. lingering ones)."""
    durations = dict(durations or {})
    derived: dict[tuple[str, int, int, int, int], BlockingTransaction] = {}
    for lt in late_transactions:
        derived[lt.transaction.key] = blocking(
            lt.transaction, lt.classification, lt.transactional_id, late=True,
            application=lt.application,
        )
        derived[lt.transaction.key] = _with_groups(derived[lt.transaction.key], lt)
    for o in orphaned_transactions:
        if o.transaction.key not in derived:
            derived[o.transaction.key] = _with_groups(
                blocking(o.transaction, Classification.ORPHANED, o.transactional_id,
                         application=o.application),
                o,
            )
    for b in blocking_transactions:
        derived[b.transaction.key] = b
    return ClusterSnapshot(
        cluster=cluster,
        observed_at_ms=NOW_MS,
        up=up,
        brokers=tuple(brokers),
        max_active_transaction_duration_seconds=durations,
        cluster_max_active_transaction_duration_seconds=max(durations.values(), default=0.0),
        late_transactions=tuple(late_transactions),
        transaction_states=transaction_states,
        last_stable_offset_lag=dict(lso_lag or {}),
        unobserved_partitions=unobserved,
        request_errors=tuple(request_errors),
        poll_duration_seconds=poll_duration_seconds,
        poll_phase_seconds=dict(poll_phase_seconds or {}),
        unobserved_by_reason=dict(unobserved_by_reason or {}),
        open_transactions_by_start_time_source=dict(by_start_time_source or {}),
        orphaned_transactions=tuple(orphaned_transactions),
        finalized_transaction_version=finalized_transaction_version,
        compacted_topics=dict(compacted_topics or {}),
        blocked_groups_unknown_by_reason=dict(blocked_groups_unknown_by_reason or {}),
        orphan_detection_warm=orphan_detection_warm and up,
        blocking_transactions=tuple(derived.values()),
        applications_overflowed=applications_overflowed,
    )


def _with_groups(
    b: BlockingTransaction, source: LateTransaction | OrphanedTransaction
) -> BlockingTransaction:
    return BlockingTransaction(
        transaction=b.transaction, age_seconds=b.age_seconds,
        transactional_id=b.transactional_id, classification=b.classification, late=b.late,
        blocked_groups=source.blocked_groups,
        blocked_groups_unknown=source.blocked_groups_unknown, application=b.application,
    )


def observation(cluster: str = "c1") -> ClusterObservation:
    return ClusterObservation(
        cluster=cluster,
        observed_at_ms=NOW_MS,
        brokers=(),
        leaders={},
        open_transactions=(),
    )
