"""Pure analysis: one `ClusterObservation` in, one `ClusterSnapshot` out.

No I/O and no engine assumptions, so the batch (Spark) path can reuse every function here.
Semantics follow docs/kafka-semantics.md (#late-transactions, #find-hanging; the lateness
rules themselves live in `exporter.rules`):

- "late" is the broker's `PartitionsWithLateTransactionsCount` rule (now - T >
  transaction.max.timeout.ms + buffer), but with T = the transaction's *start* (batch timestamp
  at CurrentTxnStartOffset) instead of the broker's LastTimestamp, so a stalled transaction cannot
  hide behind a later write; every open transaction on a partition counts, not only the lowest.
- "hanging" is step 5 of the reference `kafka-transactions.sh find-hanging` algorithm.
- "orphaned" (#orphaned) is the same step-5 answer, "not tracked", given by the coordinator on
  two consecutive polls for the same open transaction: the orphan tracker (`exporter.orphans`)
  keeps the count across polls, this module reports it.
- a consumer group is "blocked" by an open transaction when its committed offset on the
  partition equals the last stable offset (the transaction's start offset) while the high
  watermark is beyond it (#blocked-groups); read for late and orphaned transactions and for
  any other at least `blocked_groups_min_age_seconds` old (#blocked-before-late).
- the `application` of a reported transaction comes from its transactional id
  (`exporter.applications`, #applications).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field

from exporter.applications import applications_by_id
from exporter.model import (
    BlockedGroup,
    BlockingTransaction,
    BrokerSummary,
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    CommittedOffset,
    LateTransaction,
    OpenTransaction,
    OrphanedTransaction,
    TopicPartition,
    TransactionDescription,
    TwoPhaseTransaction,
    UnobservedReason,
)
from exporter.rules import (
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    blocked_groups_min_age_ms,
    effective_max_timeout_ms,
    is_late,
    is_old_enough_for_groups,
    is_orphaned,
    is_two_phase_timeout,
    transaction_age_ms,
)
from exporter.rules import classify as classify
from exporter.settings import ClusterSettings

TRANSACTION_VERSION_FEATURE = "transaction.version"

__all__ = [
    "DEFAULT_TRANSACTION_MAX_TIMEOUT_MS",
    "TRANSACTION_VERSION_FEATURE",
    "analyze",
    "blocked_groups",
    "blocking_classification",
    "classify",
    "committed_by_partition",
    "effective_max_timeout_ms",
    "finalized_transaction_version",
    "is_late",
    "is_two_phase",
    "late_transactions",
    "max_timeout_by_broker",
    "reported_applications",
    "transaction_age_ms",
    "unobserved_reason",
]


_UNOBSERVED_REASONS: dict[str, UnobservedReason] = {
    # collect error kinds (exporter.collect.connection) for a whole request
    "BROKER_UNREACHABLE": UnobservedReason.BROKER_DOWN,
    "REQUEST_TIMEOUT": UnobservedReason.BROKER_DOWN,
    "AUTHENTICATION_FAILED": UnobservedReason.BROKER_DOWN,
    "UNSUPPORTED_VERSION": UnobservedReason.UNSUPPORTED_API,
    # Kafka error names, per partition
    "TOPIC_AUTHORIZATION_FAILED": UnobservedReason.UNAUTHORIZED,
    "CLUSTER_AUTHORIZATION_FAILED": UnobservedReason.UNAUTHORIZED,
    "GROUP_AUTHORIZATION_FAILED": UnobservedReason.UNAUTHORIZED,
    "NOT_LEADER_OR_FOLLOWER": UnobservedReason.NOT_LEADER,
    "LEADER_NOT_AVAILABLE": UnobservedReason.NO_LEADER,
}


def unobserved_reason(detail: str) -> UnobservedReason:
    """The fixed-vocabulary reason for one `ClusterObservation.unobserved` detail, so the
    metric label stays small whatever error Kafka answered."""
    known = _UNOBSERVED_REASONS.get(detail)
    if known is not None:
        return known
    try:
        return UnobservedReason(detail)
    except ValueError:
        return UnobservedReason.ERROR


def is_two_phase(
    open_txn: OpenTransaction,
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
) -> bool:
    """A KIP-939 two-phase-commit transaction: its coordinator tracks it (find-hanging step 5
    says tracked) with the timeout 2147483647, the coordinator's own test
    (`TransactionMetadata.isDistributedTwoPhaseCommitTxn`). Its outcome belongs to an external
    coordinator; Kafka never times it out (docs/kafka-semantics.md#two-phase-commit)."""
    transactional_id = transactional_ids.get(open_txn.producer_id)
    if transactional_id is None:
        return False
    description = descriptions.get(transactional_id)
    return (
        description is not None
        and is_two_phase_timeout(description.transaction_timeout_ms)
        and TopicPartition(open_txn.topic, open_txn.partition) in description.topic_partitions
    )


CommittedByPartition = Mapping[TopicPartition, list[CommittedOffset]]


def committed_by_partition(obs: ClusterObservation) -> dict[TopicPartition, list[CommittedOffset]]:
    """The observation's committed offsets per partition (one pass, so that finding each
    transaction's groups stays linear in groups x late partitions)."""
    index: dict[TopicPartition, list[CommittedOffset]] = {}
    if obs.consumer_groups is not None:
        for c in obs.consumer_groups.committed:
            tp = TopicPartition(c.topic, c.partition)
            entries = index.get(tp)
            if entries is None:
                index[tp] = [c]
            else:
                entries.append(c)
    return index


def blocked_groups(
    txn: OpenTransaction,
    obs: ClusterObservation,
    committed: CommittedByPartition | None = None,
) -> tuple[tuple[BlockedGroup, ...], UnobservedReason | None]:
    """The consumer groups `txn` (late, orphaned, or old enough to be looked at) stops, or why
    they are unknown.

    Blocked: committed offset == the partition's last stable offset == the transaction's start
    offset, with the high watermark beyond it. A transaction that does not hold the LSO (an
    older one on the partition does) stops no group itself. Unknown (a reason, never an empty
    list) when the offsets or some group's committed offsets could not be read; when the group
    listing may be incomplete, the groups found blocked come with the reason."""
    tp = TopicPartition(txn.topic, txn.partition)
    stable = obs.last_stable_offsets.get(tp)
    high_watermark = obs.high_watermarks.get(tp)
    groups = obs.consumer_groups
    if stable is not None and high_watermark is not None and high_watermark <= stable:
        return (), None  # nothing past the LSO: nobody is waiting
    if groups is None or tp not in groups.partitions:
        return (), UnobservedReason.ERROR  # not looked up: should not happen, never "none"
    detail = groups.unknown.get(tp)
    if detail is not None or stable is None:
        return (), unobserved_reason(detail or "MISSING_FROM_ANSWER")
    if txn.current_txn_start_offset != stable:
        return (), None
    now_ms = obs.observed_at_ms
    if committed is None:
        committed = committed_by_partition(obs)
    found = tuple(
        BlockedGroup(
            group_id=c.group_id,
            topic=c.topic,
            partition=c.partition,
            committed_offset=c.offset,
            blocked_seconds=max(0, now_ms - c.first_seen_ms) / 1000.0,
        )
        for c in committed.get(tp, ())
        if c.offset == stable
    )
    # Groups left out of the listing (no Describe on the cluster): those found are blocked,
    # the count is not known.
    return found, None if groups.incomplete is None else unobserved_reason(groups.incomplete)


def late_transactions(
    open_transactions: Iterable[OpenTransaction],
    now_ms: int,
    max_timeout_by_broker: Mapping[int, int],
    settings: ClusterSettings,
) -> list[OpenTransaction]:
    """The open transactions that are late, each judged against its leader's threshold."""
    late_buffer_ms = round(settings.late_buffer_seconds * 1000)
    default_ms = effective_max_timeout_ms(settings, None)
    return [
        txn
        for txn in open_transactions
        if is_late(
            txn, now_ms, max_timeout_by_broker.get(txn.leader_id, default_ms), late_buffer_ms
        )
    ]


def max_timeout_by_broker(obs: ClusterObservation, settings: ClusterSettings) -> dict[int, int]:
    return {
        b.broker_id: effective_max_timeout_ms(settings, b.transaction_max_timeout_ms)
        for b in obs.brokers
    }


@dataclass
class TransactionVerdicts:
    """What judging each open transaction of one observation found: the reported records and
    the per-partition facts the broker counts are made of."""

    max_age_ms: dict[TopicPartition, int] = field(default_factory=dict)
    """Oldest open transaction per partition (KIP-664 MaxActiveTransactionDuration)."""
    leader_of: dict[TopicPartition, int] = field(default_factory=dict)
    late: list[LateTransaction] = field(default_factory=list)
    late_partitions: set[TopicPartition] = field(default_factory=set)
    hanging_partitions: set[TopicPartition] = field(default_factory=set)
    undecided_brokers: set[int] = field(default_factory=set)
    """Brokers leading a late transaction classified unknown."""
    orphaned: list[OrphanedTransaction] = field(default_factory=list)
    orphaned_partitions: set[TopicPartition] = field(default_factory=set)
    orphan_undecided_brokers: set[int] = field(default_factory=set)
    two_phase: list[TwoPhaseTransaction] = field(default_factory=list)
    blocking: list[BlockingTransaction] = field(default_factory=list)
    by_source: dict[str, int] = field(default_factory=dict)
    blocked_unknown_by_reason: dict[str, int] = field(default_factory=dict)
    applications_overflowed: int = 0
    """Distinct applications beyond `max_applications`, not reported by name."""


def analyze(obs: ClusterObservation, settings: ClusterSettings) -> ClusterSnapshot:
    """Judge every open transaction, count per broker, and assemble the snapshot."""
    v = judge_transactions(obs, settings)
    min_reported_ms = settings.min_reported_duration_seconds * 1000
    reported = {
        tp: age_ms / 1000.0 for tp, age_ms in v.max_age_ms.items() if age_ms >= min_reported_ms
    }
    v.late.sort(key=lambda lt: (-lt.age_seconds, lt.transaction.topic, lt.transaction.partition))
    v.orphaned.sort(key=lambda o: (-o.age_seconds, o.transaction.topic, o.transaction.partition))
    v.two_phase.sort(key=lambda t: (-t.age_seconds, t.transaction.topic, t.transaction.partition))
    v.blocking.sort(key=lambda b: (-b.age_seconds, b.transaction.topic, b.transaction.partition))
    up = any(b.up for b in obs.brokers)
    return ClusterSnapshot(
        cluster=obs.cluster,
        observed_at_ms=obs.observed_at_ms,
        up=up,
        brokers=broker_summaries(obs, v),
        max_active_transaction_duration_seconds=reported,
        cluster_max_active_transaction_duration_seconds=(
            max(v.max_age_ms.values()) / 1000.0
            if v.max_age_ms
            else (None if obs.unobserved or not up else 0.0)
        ),
        late_transactions=tuple(v.late),
        transaction_states=obs.transaction_states,
        last_stable_offset_lag=dict(obs.last_stable_offset_lag),
        unobserved_partitions=len(obs.unobserved),
        request_errors=obs.request_errors,
        poll_duration_seconds=obs.poll_duration_seconds,
        poll_phase_seconds=dict(obs.poll_phase_seconds),
        metadata_refresh=obs.metadata_refresh,
        unobserved_by_reason=unobserved_by_reason(obs),
        open_transactions_by_start_time_source=dict(sorted(v.by_source.items())),
        orphaned_transactions=tuple(v.orphaned),
        finalized_transaction_version=finalized_transaction_version(obs),
        supported_transaction_version=(
            None if obs.finalized_features is None
            else obs.finalized_features.supported_level(TRANSACTION_VERSION_FEATURE)),
        compacted_topics={
            topic: obs.compacted_topics[topic]
            for topic in sorted(
                {lt.transaction.topic for lt in v.late}
                | {o.transaction.topic for o in v.orphaned}
            )
            if topic in obs.compacted_topics
        },
        blocked_groups_unknown_by_reason=dict(sorted(v.blocked_unknown_by_reason.items())),
        orphan_detection_warm=obs.orphan_detection_warm and up,
        unclassified_by_reason=unclassified_by_reason(obs, v.late),
        two_phase_transactions=tuple(v.two_phase),
        blocking_transactions=tuple(v.blocking),
        applications_overflowed=v.applications_overflowed,
    )




@dataclass(frozen=True, slots=True)
class _Limits:
    """What every open transaction of one observation is judged against."""

    now_ms: int
    max_timeout_ms: Mapping[int, int]
    """transaction.max.timeout.ms per broker (the cluster's default for a broker not listed)."""
    default_max_timeout_ms: int
    late_buffer_ms: int
    two_phase_late_ms: float
    blocked_groups_min_age_ms: int

    def is_late(self, txn: OpenTransaction) -> bool:
        threshold_ms = self.max_timeout_ms.get(txn.leader_id, self.default_max_timeout_ms)
        return is_late(txn, self.now_ms, threshold_ms, self.late_buffer_ms)


@dataclass(frozen=True, slots=True)
class _Standing:
    """One open transaction's facts, before the records they make are written."""

    age_ms: int
    late: bool
    orphaned: bool
    two_phase: bool
    untracked_polls: int
    transactional_id: str
    application: str
    looked_at: bool
    """Its blocked groups are read: old enough, or late or orphaned (a two-phase transaction
    is never late or orphaned here: looked at by age alone)."""


def judge_transactions(obs: ClusterObservation, settings: ClusterSettings) -> TransactionVerdicts:
    """Each open transaction's age, lateness, classification, orphaned or two-phase standing,
    and the consumer groups it blocks, where it is old enough to be looked at."""
    v = TransactionVerdicts()
    limits = _Limits(
        now_ms=obs.observed_at_ms,
        max_timeout_ms=max_timeout_by_broker(obs, settings),
        default_max_timeout_ms=effective_max_timeout_ms(settings, None),
        late_buffer_ms=round(settings.late_buffer_seconds * 1000),
        two_phase_late_ms=settings.two_phase_late_seconds * 1000,
        blocked_groups_min_age_ms=blocked_groups_min_age_ms(settings),
    )
    applications, v.applications_overflowed = reported_applications(
        obs, settings, limits.is_late
    )
    committed_index: CommittedByPartition | None = None
    for txn in obs.open_transactions:
        standing = _standing(txn, obs, limits, applications)
        _count_partition(v, txn, standing.age_ms)
        blocked: tuple[BlockedGroup, ...] = ()
        blocked_unknown: str | None = None
        if standing.looked_at:
            if committed_index is None:
                committed_index = committed_by_partition(obs)
            blocked, blocked_unknown = _read_blocked_groups(v, txn, obs, committed_index)
        classification = (
            classify(txn, obs.transactional_ids, obs.descriptions, obs.coordinator_view_complete)
            if standing.late or standing.looked_at
            else None
        )
        _record(v, txn, obs, limits, standing, classification, blocked, blocked_unknown)
    return v


def _standing(
    txn: OpenTransaction,
    obs: ClusterObservation,
    limits: _Limits,
    applications: Mapping[str, str],
) -> _Standing:
    untracked_polls = obs.untracked_polls.get(txn.key, 0)
    orphaned = is_orphaned(untracked_polls)
    two_phase = not orphaned and is_two_phase(txn, obs.transactional_ids, obs.descriptions)
    late = limits.is_late(txn)
    transactional_id = obs.transactional_ids.get(txn.producer_id, "")
    old_enough = is_old_enough_for_groups(txn, limits.now_ms, limits.blocked_groups_min_age_ms)
    return _Standing(
        age_ms=transaction_age_ms(txn, limits.now_ms),
        late=late,
        orphaned=orphaned,
        two_phase=two_phase,
        untracked_polls=untracked_polls,
        transactional_id=transactional_id,
        application=applications.get(transactional_id, ""),
        looked_at=old_enough or (not two_phase and (late or orphaned)),
    )


def _count_partition(v: TransactionVerdicts, txn: OpenTransaction, age_ms: int) -> None:
    """The per-partition facts every open transaction feeds: its oldest age, its leader."""
    source = txn.start_time_source.value
    v.by_source[source] = v.by_source.get(source, 0) + 1
    tp = TopicPartition(txn.topic, txn.partition)
    if age_ms > v.max_age_ms.get(tp, -1):
        v.max_age_ms[tp] = age_ms
    v.leader_of.setdefault(tp, txn.leader_id)


def _read_blocked_groups(
    v: TransactionVerdicts,
    txn: OpenTransaction,
    obs: ClusterObservation,
    committed_index: CommittedByPartition,
) -> tuple[tuple[BlockedGroup, ...], str | None]:
    """The groups `txn` blocks, or why they are unknown (counted by reason)."""
    blocked, why = blocked_groups(txn, obs, committed_index)
    if why is None:
        return blocked, None
    reason = why.value
    v.blocked_unknown_by_reason[reason] = v.blocked_unknown_by_reason.get(reason, 0) + 1
    return blocked, reason


def _record(
    v: TransactionVerdicts,
    txn: OpenTransaction,
    obs: ClusterObservation,
    limits: _Limits,
    s: _Standing,
    classification: Classification | None,
    blocked: tuple[BlockedGroup, ...],
    blocked_unknown: str | None,
) -> None:
    """The records one transaction makes: blocking where looked at; then two-phase (its own
    kind: never late or hanging by Kafka's timeout, an external coordinator owns it; stuck
    only past the cluster's two_phase_late_seconds), or orphaned and late. `classification`
    is given where the transaction is late or looked at."""
    age_seconds = s.age_ms / 1000.0
    tp = TopicPartition(txn.topic, txn.partition)
    late = s.late and not s.two_phase
    if s.looked_at:
        assert classification is not None
        v.blocking.append(
            BlockingTransaction(
                transaction=txn,
                age_seconds=age_seconds,
                transactional_id=s.transactional_id,
                classification=blocking_classification(
                    classification, late=late, orphaned=s.orphaned, two_phase=s.two_phase
                ),
                late=late,
                blocked_groups=blocked,
                blocked_groups_unknown=blocked_unknown,
                application=s.application,
            )
        )
    if s.two_phase:
        v.two_phase.append(
            TwoPhaseTransaction(
                transaction=txn,
                age_seconds=age_seconds,
                transactional_id=s.transactional_id,
                stuck=s.age_ms > limits.two_phase_late_ms,
                application=s.application,
            )
        )
        return
    if s.orphaned:
        v.orphaned.append(
            OrphanedTransaction(
                transaction=txn,
                age_seconds=age_seconds,
                transactional_id=s.transactional_id,
                untracked_polls=s.untracked_polls,
                late=s.late,
                topic_compacted=obs.compacted_topics.get(txn.topic),
                blocked_groups=blocked,
                blocked_groups_unknown=blocked_unknown,
                application=s.application,
            )
        )
        v.orphaned_partitions.add(tp)
    elif txn.key in obs.untracked_unknown:
        v.orphan_undecided_brokers.add(txn.leader_id)
    if not s.late:
        return
    assert classification is not None
    v.late.append(
        LateTransaction(
            transaction=txn,
            age_seconds=age_seconds,
            classification=classification,
            transactional_id=s.transactional_id,
            topic_compacted=obs.compacted_topics.get(txn.topic),
            blocked_groups=blocked,
            blocked_groups_unknown=blocked_unknown,
            application=s.application,
        )
    )
    v.late_partitions.add(tp)
    if classification is Classification.HANGING:
        v.hanging_partitions.add(tp)
    elif classification is Classification.UNKNOWN:
        v.undecided_brokers.add(txn.leader_id)


def broker_summaries(
    obs: ClusterObservation, v: TransactionVerdicts
) -> tuple[BrokerSummary, ...]:
    """Per broker: partitions with open, late, hanging and orphaned transactions."""
    open_count: dict[int, int] = {}
    late_count: dict[int, int] = {}
    hanging_count: dict[int, int] = {}
    orphaned_count: dict[int, int] = {}
    for tp, leader in v.leader_of.items():
        open_count[leader] = open_count.get(leader, 0) + 1
        if tp in v.late_partitions:
            late_count[leader] = late_count.get(leader, 0) + 1
        if tp in v.hanging_partitions:
            hanging_count[leader] = hanging_count.get(leader, 0) + 1
        if tp in v.orphaned_partitions:
            orphaned_count[leader] = orphaned_count.get(leader, 0) + 1

    # A broker's counts are known only when every partition it leads was observed (it is up,
    # offers DescribeProducers, and answered for each of them); otherwise they are None
    # (absent), never 0. The hanging count is also unknown while a late transaction on the
    # broker could not be classified.
    partial_brokers = {
        leader for tp in obs.unobserved if (leader := obs.leaders.get(tp, -1)) >= 0
    }
    return tuple(
        BrokerSummary(
            broker_id=b.broker_id,
            up=b.up,
            partitions_with_open_transactions=open_count.get(b.broker_id, 0) if known else None,
            partitions_with_late_transactions=late_count.get(b.broker_id, 0) if known else None,
            partitions_with_hanging_transactions=(
                hanging_count.get(b.broker_id, 0)
                if known and b.broker_id not in v.undecided_brokers
                else None
            ),
            transaction_max_timeout_ms=b.transaction_max_timeout_ms,
            partitions_with_orphaned_transactions=_known_count(
                orphaned_count, b.broker_id, known, v.orphan_undecided_brokers
            ),
            observable=b.observable,
            partition_verification=b.partition_verification if b.up else None,
        )
        for b in sorted(obs.brokers, key=lambda b: b.broker_id)
        for known in (b.up and b.observable and b.broker_id not in partial_brokers,)
    )


def unobserved_by_reason(obs: ClusterObservation) -> dict[str, int]:
    """Unobserved partitions per reason (the metric's small fixed vocabulary)."""
    by_reason: dict[str, int] = {}
    for detail in obs.unobserved.values():
        reason = unobserved_reason(detail).value
        by_reason[reason] = by_reason.get(reason, 0) + 1
    return dict(sorted(by_reason.items()))


def blocking_classification(
    classification: Classification, *, late: bool, orphaned: bool, two_phase: bool
) -> Classification:
    """What a transaction whose blocked groups were read is, from the coordinator's answer
    (`classify`): a late one keeps its late classification; otherwise orphaned, two-phase,
    coordinator_tracked (lingering: its transaction.timeout.ms ends it) or unknown. One
    "not tracked" answer is not yet evidence (#orphaned), so it is unknown, never hanging."""
    if late:
        return classification
    if orphaned:
        return Classification.ORPHANED
    if two_phase:
        return Classification.TWO_PHASE
    if classification is Classification.COORDINATOR_TRACKED:
        return classification
    return Classification.UNKNOWN


def reported_applications(
    obs: ClusterObservation,
    settings: ClusterSettings,
    late: Callable[[OpenTransaction], bool],
) -> tuple[Mapping[str, str], int]:
    """transactional id -> `application` label value for the transactions this poll reports
    by id (late, orphaned, two-phase, or old enough for the blocked-group look: `analyze`'s
    own predicates, so no other id takes a slot), capped at `max_applications` distinct
    values; and how many overflowed. A producer without a known transactional id has the
    unknown application ("")."""
    if not obs.transactional_ids:
        return {}, 0
    now_ms = obs.observed_at_ms
    min_age_ms = blocked_groups_min_age_ms(settings)
    ids: set[str] = set()
    for txn in obs.open_transactions:
        tid = obs.transactional_ids.get(txn.producer_id)
        if tid is None or tid in ids:
            continue
        if (
            is_old_enough_for_groups(txn, now_ms, min_age_ms)
            or late(txn)
            or is_orphaned(obs.untracked_polls.get(txn.key, 0))
            or is_two_phase(txn, obs.transactional_ids, obs.descriptions)
        ):
            ids.add(tid)
    return applications_by_id(ids, settings.application_patterns, settings.max_applications)


def unclassified_by_reason(
    obs: ClusterObservation, late: Sequence[LateTransaction]
) -> dict[str, int]:
    """Late transactions classified unknown, per reason: the brokers' release lacks the
    coordinator APIs (`unsupported_api`), or a coordinator's answer is missing (`error`)."""
    unknown = sum(1 for lt in late if lt.classification is Classification.UNKNOWN)
    if not unknown:
        return {}
    reason = (
        UnobservedReason.UNSUPPORTED_API
        if obs.coordinator_view_unsupported
        else UnobservedReason.ERROR
    )
    return {reason.value: unknown}


def finalized_transaction_version(obs: ClusterObservation) -> int | None:
    """The cluster's finalized `transaction.version`: 0 when the brokers report finalized
    features without it (KIP-1022 never lists a level-0 feature; the cluster runs the
    pre-KIP-890-part-2 protocol), None when no broker reported finalized features at all
    (docs/kafka-semantics.md#exposure)."""
    if obs.finalized_features is None:
        return None
    return obs.finalized_features.level(TRANSACTION_VERSION_FEATURE)


def _known_count(
    counts: Mapping[int, int], broker_id: int, known: bool, undecided: Set[int]
) -> int | None:
    return counts.get(broker_id, 0) if known and broker_id not in undecided else None
