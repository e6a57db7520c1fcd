"""Plain immutable records that flow collect -> analyze -> expose.

Field names follow Kafka's own vocabulary (DescribeProducers, DescribeTransactions); times are
epoch milliseconds (`_ms`) unless the name says otherwise. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition, the key of most per-partition maps. A named tuple: a poll hashes, compares
    and sorts these per partition and per open transaction, and a tuple does that in C."""

    topic: str
    partition: int


class StartTimeSource(StrEnum):
    """Where an open transaction's start time came from (reported as a label).

    The earliest trustworthy evidence wins (`rules.start_time`): a producer's timestamp is
    used only when it is possible (not negative) and not later than when the exporter first
    saw the transaction open; otherwise the next source is."""

    BATCH_TIMESTAMP = "batch_timestamp"
    """Max timestamp of the record batch at CurrentTxnStartOffset (read with Fetch)."""
    LAST_TIMESTAMP = "last_timestamp"
    """DescribeProducers LastTimestamp: when the batch cannot be read or is impossible."""
    FIRST_SEEN = "first_seen"
    """When the exporter first saw the transaction open: when neither producer timestamp is
    possible (e.g. -1, or later than that moment: a producer clock running fast)."""


class Classification(StrEnum):
    """Outcome of the reference find-hanging algorithm for one late open transaction, or
    `ORPHANED` for one not yet late (docs/kafka-semantics.md#orphaned)."""

    HANGING = "hanging"
    COORDINATOR_TRACKED = "coordinator_tracked"
    UNKNOWN = "unknown"
    """The coordinator-side APIs could not be asked (unsupported, unauthorised, failed)."""
    TWO_PHASE = "two_phase"
    """Tracked by its coordinator as a KIP-939 two-phase-commit transaction (timeout
    2147483647): an external coordinator decides its outcome, Kafka never times it out
    (docs/kafka-semantics.md#two-phase-commit). Neither late nor hanging."""
    ORPHANED = "orphaned"
    """Not late yet, but its coordinator did not track its partition on two consecutive polls
    that saw it open with the same key: hanging, caught before it is late. A late transaction
    found so keeps `HANGING`."""


TxnKey = tuple[str, int, int, int, int]
"""(topic, partition, producer_id, producer_epoch, current_txn_start_offset): one transaction."""


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One DescribeProducers entry (a producer active on a partition), as its leader reported
    it: the one record for it in serve, scan and abort (built by `collect.apis.describe_producers`).

    `current_txn_start_offset` >= 0 means a transaction is open from that offset; -1 none."""

    topic: str
    partition: int
    leader_id: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_txn_start_offset: int
    last_timestamp_ms: int
    key: TxnKey = field(init=False, repr=False, compare=False)
    """Made once: a poll looks each open transaction up by it many times."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (
            self.topic,
            self.partition,
            self.producer_id,
            self.producer_epoch,
            self.current_txn_start_offset,
        ))

    @property
    def is_open(self) -> bool:
        return self.current_txn_start_offset >= 0


@dataclass(frozen=True, slots=True)
class OpenTransaction(ProducerEntry):
    """A `ProducerEntry` with an open transaction, plus its start time and where it came from."""

    start_time_ms: int
    start_time_source: StartTimeSource


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The coordinator's view of one transactional id (DescribeTransactions)."""

    transactional_id: str
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    topic_partitions: frozenset[TopicPartition]


UNCLASSIFIED_WHY = {
    "unsupported_api": "unsupported_api: the brokers do not offer ListTransactions/"
    "DescribeTransactions, Kafka before 3.0; hanging and orphaned are unknown",
    "error": "error: coordinator view incomplete",
}
"""Why late transactions are classified unknown, as scan and the status page say it."""


class UnobservedReason(StrEnum):
    """Why partitions were not observed: the small fixed vocabulary used as a metric label.

    `ClusterObservation.unobserved` keeps the detail (a Kafka error name such as
    TOPIC_AUTHORIZATION_FAILED, or a collect error kind such as UNSUPPORTED_VERSION);
    `analyze.unobserved_reason` maps each detail to one of these."""

    BROKER_DOWN = "broker_down"
    """The leader did not answer (unreachable, timed out, authentication failed)."""
    UNSUPPORTED_API = "unsupported_api"
    """The leader does not offer DescribeProducers (Kafka before 2.8)."""
    UNAUTHORIZED = "unauthorized"
    """DescribeProducers needs READ on the topic."""
    NOT_LEADER = "not_leader"
    """Leadership kept moving (NOT_LEADER_OR_FOLLOWER after one retry)."""
    NO_LEADER = "no_leader"
    """Metadata named no leader (LEADER_NOT_AVAILABLE)."""
    ERROR = "error"
    """Any other per-partition or request error."""


class PollPhase(StrEnum):
    """The steps of one poll, named by the Kafka requests each sends, for
    `kafka_txn_exporter_poll_phase_duration_seconds`: where a slow poll spends its time."""

    METADATA = "metadata"
    """Metadata: brokers, leaders (the whole poll stops here when no broker answers)."""
    LIST_TRANSACTIONS = "list_transactions"
    """ListTransactions on every broker (each coordinates a slice of the transactional ids)."""
    DESCRIBE_PRODUCERS = "describe_producers"
    """DescribeProducers on every leader, with the screening of answered partitions (Fetch
    session, ListOffsets) and the Metadata asked again when a leader moved."""
    BROKER_CONFIGS = "broker_configs"
    """DescribeConfigs of brokers (transaction.max.timeout.ms, partition verification) and
    ApiVersions' finalized features, when due."""
    START_TIMES = "start_times"
    """Fetch of the record batch at each new open transaction's start offset."""
    LIST_OFFSETS = "list_offsets"
    """ListOffsets (last stable offset and high watermark) of partitions with an open
    transaction."""
    DESCRIBE_TRANSACTIONS = "describe_transactions"
    """FindCoordinator and DescribeTransactions for the transactional ids asked about."""
    TOPIC_CONFIGS = "topic_configs"
    """DescribeConfigs of the topics of late and orphaned transactions, when due."""
    CONSUMER_GROUPS = "consumer_groups"
    """ListGroups, FindCoordinator and OffsetFetch for partitions with a transaction old,
    late or orphaned enough to look at."""
    ANALYZE = "analyze"
    """The analysis of the observation (no Kafka request), measured by whoever analyzes."""


class PartitionVerification(StrEnum):
    """A broker's `transaction.partition.verification.enable` as DescribeConfigs answered it
    (docs/kafka-semantics.md#exposure); unknown (no answer) is None, not a member."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    NOT_OFFERED = "not_offered"
    """The broker answered without the key: it predates KIP-890 part 1 (Kafka 3.6) and
    verifies nothing, but the flag itself has no value to report."""


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """The finalized feature levels one ApiVersions (v3+) answer carried, with their epoch."""

    epoch: int
    levels: Mapping[str, int]
    """feature name -> finalized max version level."""
    supported: Mapping[str, int] | None = None
    """feature name -> the highest level this broker's Kafka version supports (SupportedFeatures
    of ApiVersions v4+, which lists every feature, KIP-1022); None from a v3 answer, which
    leaves out features whose lowest level is 0."""

    def supported_level(self, feature: str) -> int | None:
        """The highest level of `feature` the broker supports: 0 when a v4+ answer does not
        list it (its Kafka version lacks it); None when not reported."""
        return None if self.supported is None else self.supported.get(feature, 0)

    def level(self, feature: str) -> int:
        """A feature not finalized is at level 0 (KIP-584, KIP-1022: level 0 is never listed)."""
        return self.levels.get(feature, 0)


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """How the poll went for one broker. `up` False means its data is missing, never zero."""

    broker_id: int
    up: bool
    error: str | None = None
    transaction_max_timeout_ms: int | None = None
    observable: bool = True
    """False when the broker is up but cannot report producer state (no DescribeProducers,
    Kafka < 2.8): its partitions are unobserved and its per-broker counts unknown."""
    partition_verification: PartitionVerification | None = None
    """None when not read (broker down, DescribeConfigs failed or refused)."""


@dataclass(frozen=True, slots=True)
class RequestError:
    """One failed request or per-item error, counted by broker, API and Kafka error name."""

    broker_id: int
    api: str
    error: str


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A consumer group's committed offset on one partition (OffsetFetch), and since when the
    exporter has seen that same offset there (`first_seen_ms`: Kafka does not report when it
    was committed)."""

    group_id: str
    topic: str
    partition: int
    offset: int
    first_seen_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupOffsets:
    """Committed offsets of every listed consumer group on the partitions asked about (those
    with a late or orphaned transaction, or one at least `blocked_groups_min_age_seconds`
    old), read only when there is one (docs/kafka-semantics.md#blocked-groups).

    A partition in `unknown` (detail: a Kafka error name such as GROUP_AUTHORIZATION_FAILED, or
    a collect error kind) may have blocked groups that could not be seen: its count of blocked
    groups is unknown, never 0. Committed offsets of groups that were read stay in `committed`."""

    partitions: frozenset[TopicPartition]
    """The partitions asked about."""
    committed: tuple[CommittedOffset, ...] = ()
    """Only offsets >= 0 (-1: nothing committed there)."""
    unknown: Mapping[TopicPartition, str] = field(default_factory=dict)
    incomplete: str | None = None
    """Why the listed groups may not be all of them (detail, e.g. CLUSTER_AUTHORIZATION_FAILED:
    without Describe on the cluster ListGroups leaves out the groups the principal may not
    Describe); None when the list is complete. Every count of blocked groups is then unknown,
    while a group found at the LSO is still blocked."""


@dataclass(frozen=True, slots=True)
class PollFocus:
    """What earlier polls ask of the next one (`orphans.OrphanTracking.focus`): the poller
    keeps no memory of its own of which transactions it saw."""

    describe: frozenset[TxnKey] = frozenset()
    """Open transactions seen open by the previous poll: if still open, their coordinators
    are asked about them (DescribeTransactions) even while young, as the orphaned check needs
    their answer on consecutive polls. A transaction seen for the first time is asked about
    only once late or old enough (most end before the next poll)."""
    orphaned_if_untracked: frozenset[TxnKey] = frozenset()
    """Those of `describe` that one more "not tracked" answer makes orphaned: when this poll's
    answer is "not tracked", their topics' configs and consumer groups are read as a late
    transaction's are."""


@dataclass(frozen=True, slots=True)
class ClusterObservation:
    """Everything one poll of one cluster learned; the input of `analyze`.

    `leaders` holds every partition Metadata returned. Partitions in `unobserved` (leader down,
    error, unauthorised) must not be counted as free of transactions.
    """

    cluster: str
    observed_at_ms: int
    brokers: tuple[BrokerStatus, ...]
    leaders: Mapping[TopicPartition, int]
    open_transactions: tuple[OpenTransaction, ...]
    metadata_answered: bool = True
    """False when no broker answered Metadata: the poll stopped there and is no evidence of
    anything (the orphan tracker's counts stand)."""
    unobserved: Mapping[TopicPartition, str] = field(default_factory=dict)
    transactional_ids: Mapping[int, str] = field(default_factory=dict)
    """producer_id -> transactional_id, from ListTransactions with ProducerIdFilters."""
    descriptions: Mapping[str, TransactionDescription | None] = field(default_factory=dict)
    """transactional_id -> description; None when TRANSACTIONAL_ID_NOT_FOUND."""
    coordinator_view_complete: bool = True
    """False when ListTransactions/DescribeTransactions failed or are unsupported."""
    coordinator_view_unsupported: frozenset[str] = frozenset()
    """The coordinator-side APIs (ListTransactions, DescribeTransactions, FindCoordinator) some
    broker did not offer in this poll: why the view is incomplete on Kafka before 3.0."""
    transaction_states: Mapping[str, int] | None = None
    """Count of transactional ids per coordinator state (ListTransactions), None if unknown."""
    last_stable_offset_lag: Mapping[TopicPartition, int] = field(default_factory=dict)
    request_errors: tuple[RequestError, ...] = ()
    poll_duration_seconds: float = 0.0
    poll_phase_seconds: Mapping[str, float] = field(default_factory=dict)
    """`PollPhase` value -> wall seconds of that phase in this poll. Phases that run at the
    same time each count their own wall time (so they may add up to more than the poll). A
    phase the poll did not reach (Metadata failed) is absent, never 0."""
    metadata_refresh: str | None = None
    """Why this poll asked the full Metadata (a `collect.metadata_age.MetadataRefresh` value);
    None when it reused the previous poll's answer or no broker answered."""
    untracked_polls: Mapping[TxnKey, int] = field(default_factory=dict)
    """Filled by the orphan tracker (`exporter.orphans.track`), empty as the poller returns it.
    Per open transaction its coordinator was asked about in this poll and did not track
    (its partition not in the description, the id not found, or no id for the producer): on
    how many consecutive polls, this one included, that was the answer for the same key.
    `rules.is_orphaned` says when that makes it orphaned."""
    untracked_unknown: frozenset[TxnKey] = frozenset()
    """Filled by the orphan tracker. Open transactions asked about whose coordinator could not
    answer in this poll (loading, moved, unreachable, APIs missing), or whose answers have a
    gap: whether they are orphaned is unknown."""
    finalized_features: FinalizedFeatures | None = None
    """The answer with the highest epoch among the brokers' ApiVersions; None when no broker
    reported finalized features (ApiVersions below v3, or epoch -1)."""
    compacted_topics: Mapping[str, bool] = field(default_factory=dict)
    """topic -> cleanup.policy contains compact, read only for topics with a late or orphaned
    transaction;
    a topic whose config could not be read is left out (unknown)."""
    high_watermarks: Mapping[TopicPartition, int] = field(default_factory=dict)
    """ListOffsets READ_UNCOMMITTED latest, for the partitions with an open transaction."""
    last_stable_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    """ListOffsets READ_COMMITTED latest, for the same partitions."""
    consumer_groups: ConsumerGroupOffsets | None = None
    """None when no group was looked up (no partition with a late or orphaned transaction, or
    one at least `blocked_groups_min_age_seconds` old)."""
    orphan_detection_warm: bool = False
    """Filled by the orphan tracker. True when this poll's orphaned verdicts are complete:
    coordinators were asked on enough consecutive polls (`rules.ORPHANED_AFTER_POLLS`) that a
    transaction untracked all along is reported orphaned now. False after a start (and on a
    failed poll): an orphaned transaction missing from this poll may still be open (the alert
    rules hold it)."""


@dataclass(frozen=True, slots=True)
class BlockedGroup:
    """A consumer group stopped behind an open transaction: its committed offset on the
    partition equals the last stable offset (the transaction's start offset) while the high
    watermark is beyond it."""

    group_id: str
    topic: str
    partition: int
    committed_offset: int
    blocked_seconds: float
    """Since the exporter first saw the group's committed offset at this value (a lower bound:
    Kafka does not say when the offset was committed; the transaction's age is the upper)."""


@dataclass(frozen=True, slots=True)
class LateTransaction:
    transaction: OpenTransaction
    age_seconds: float
    classification: Classification
    transactional_id: str  # "" when no id maps to the producer
    topic_compacted: bool | None = None
    """The topic's cleanup.policy contains compact; None when unknown."""
    blocked_groups: tuple[BlockedGroup, ...] = ()
    """Groups stopped at this transaction's start offset (it holds the partition's LSO)."""
    blocked_groups_unknown: str | None = None
    """Why the groups it blocks are unknown (an `UnobservedReason` value); None when known
    (then `blocked_groups` is the complete list). When set, `blocked_groups` holds those found
    blocked all the same (empty when the partition's groups could not be read), not all."""
    application: str = ""
    """The application its transactional id names (`exporter.applications`); "" unknown."""


@dataclass(frozen=True, slots=True)
class OrphanedTransaction:
    """An open transaction, late or not, that its coordinator did not track on two
    consecutive polls with the same key (docs/kafka-semantics.md#orphaned)."""

    transaction: OpenTransaction
    age_seconds: float
    transactional_id: str  # "" when no id maps to the producer
    untracked_polls: int
    """Consecutive polls (this one included) on which the coordinator did not track it."""
    late: bool
    """Also late: then it is listed among the late transactions too, classified hanging."""
    topic_compacted: bool | None = None
    """As `LateTransaction.topic_compacted`."""
    blocked_groups: tuple[BlockedGroup, ...] = ()
    """As `LateTransaction.blocked_groups`."""
    blocked_groups_unknown: str | None = None
    """As `LateTransaction.blocked_groups_unknown`."""
    application: str = ""
    """As `LateTransaction.application`."""

    @property
    def classification(self) -> Classification:
        return Classification.HANGING if self.late else Classification.ORPHANED


@dataclass(frozen=True, slots=True)
class TwoPhaseTransaction:
    """An open transaction its coordinator tracks as two-phase-commit (KIP-939): never late
    or hanging by Kafka's timeout, stuck once older than `two_phase_late_seconds`."""

    transaction: OpenTransaction
    age_seconds: float
    transactional_id: str
    stuck: bool
    """Older than the cluster's `two_phase_late_seconds`."""
    application: str = ""
    """As `LateTransaction.application`."""

    @property
    def classification(self) -> Classification:
        return Classification.TWO_PHASE


@dataclass(frozen=True, slots=True)
class BlockingTransaction:
    """An open transaction whose blocked consumer groups were read: every late or orphaned
    one, and every other at least `blocked_groups_min_age_seconds` old (a Flink lingering
    transaction stops read_committed consumers long before it is late;
    docs/kafka-semantics.md#blocked-before-late)."""

    transaction: OpenTransaction
    age_seconds: float
    transactional_id: str  # "" when no id maps to the producer
    classification: Classification
    """Late: its late classification (hanging, coordinator_tracked, unknown). Not late:
    ORPHANED, TWO_PHASE, COORDINATOR_TRACKED when its coordinator tracks it (a lingering
    transaction, ended by its transaction.timeout.ms), else UNKNOWN (not asked yet, or not
    tracked on a single poll: not evidence of orphaned yet)."""
    late: bool
    blocked_groups: tuple[BlockedGroup, ...] = ()
    """As `LateTransaction.blocked_groups`."""
    blocked_groups_unknown: str | None = None
    """As `LateTransaction.blocked_groups_unknown`."""
    application: str = ""
    """As `LateTransaction.application`."""


@dataclass(frozen=True, slots=True)
class BrokerSummary:
    broker_id: int
    up: bool
    partitions_with_open_transactions: int | None
    """None (unknown, not zero) unless every partition the broker leads was observed."""
    partitions_with_late_transactions: int | None
    """None under the same condition as the open count."""
    partitions_with_hanging_transactions: int | None
    """None also while any late transaction on the broker is classified unknown (e.g. its
    coordinator is loading): a hanging one may hide among them."""
    transaction_max_timeout_ms: int | None
    partitions_with_orphaned_transactions: int | None = None
    """Partitions led by the broker with an orphaned transaction (late or not). None under
    the open count's condition, and while the coordinator of a transaction on the broker that
    was asked about could not answer (`ClusterObservation.untracked_unknown`)."""
    observable: bool = True
    """False (with `up` True) when the broker cannot report producer state (no
    DescribeProducers): its partitions are unobserved, so its counts are None."""
    partition_verification: PartitionVerification | None = None
    """None when unknown, including every broker that is down in this poll."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What `/metrics` shows for one cluster: the analyzed result of one complete poll."""

    cluster: str
    observed_at_ms: int
    up: bool
    brokers: tuple[BrokerSummary, ...]
    max_active_transaction_duration_seconds: Mapping[TopicPartition, float]
    """Only partitions at or above `min_reported_duration`."""
    cluster_max_active_transaction_duration_seconds: float | None
    """None when no open transaction was seen and some partition was not observed, or no
    broker answered (unknown, not 0). With partitions unobserved, the age of the oldest
    transaction seen (a lower bound: an observed hanging transaction is never hidden)."""
    late_transactions: tuple[LateTransaction, ...]
    transaction_states: Mapping[str, int] | None
    last_stable_offset_lag: Mapping[TopicPartition, int]
    unobserved_partitions: int
    request_errors: tuple[RequestError, ...]
    poll_duration_seconds: float
    poll_phase_seconds: Mapping[str, float] = field(default_factory=dict)
    """`ClusterObservation.poll_phase_seconds` of the poll."""
    metadata_refresh: str | None = None
    """`ClusterObservation.metadata_refresh` of the poll."""
    unobserved_by_reason: Mapping[str, int] = field(default_factory=dict)
    """Unobserved partitions per `UnobservedReason` value (only reasons with a count)."""
    open_transactions_by_start_time_source: Mapping[str, int] = field(default_factory=dict)
    """Open transactions per `StartTimeSource` value (only sources with a count)."""
    orphaned_transactions: tuple[OrphanedTransaction, ...] = ()
    """Every orphaned transaction, late or not (late ones are in `late_transactions` too)."""
    finalized_transaction_version: int | None = None
    """The cluster's finalized `transaction.version` level (0 when not finalized); None when
    no broker reported finalized features."""
    supported_transaction_version: int | None = None
    """The highest `transaction.version` the brokers' Kafka version supports (0: it lacks the
    feature, as 3.x does); None when not reported."""
    compacted_topics: Mapping[str, bool] = field(default_factory=dict)
    """Topics of the late and orphaned transactions whose cleanup.policy is known: True when
    compacted."""
    blocked_groups_unknown_by_reason: Mapping[str, int] = field(default_factory=dict)
    """Late or orphaned transactions whose blocked groups are unknown, per reason (only
    reasons with a count)."""
    orphan_detection_warm: bool = False
    """`ClusterObservation.orphan_detection_warm` of the poll."""
    unclassified_by_reason: Mapping[str, int] = field(default_factory=dict)
    """Late transactions classified unknown (hanging or tracked could not be decided), per
    reason: `unsupported_api` when a broker lacks the coordinator APIs (Kafka before 3.0),
    else `error` (a coordinator's answer missing). Only reasons with a count."""
    two_phase_transactions: tuple[TwoPhaseTransaction, ...] = ()
    """Every open two-phase-commit transaction (KIP-939), stuck or not; none of them is in
    `late_transactions`."""
    blocking_transactions: tuple[BlockingTransaction, ...] = ()
    """Every transaction whose blocked groups were read (late, orphaned, or older than
    `blocked_groups_min_age_seconds`), oldest first."""
    applications_overflowed: int = 0
    """Distinct applications of this poll's reported transactions past `max_applications`
    (their label value is `applications.OVERFLOW`)."""
