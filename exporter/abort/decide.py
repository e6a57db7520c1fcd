"""Pure decisions of the abort command: whether the exporter's detection allows the abort,
the CoordinatorEpoch to send, and the plan printed for the operator. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from exporter.abort.settings import AdminSettings
from exporter.collect.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED,
    error_name,
)
from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    OpenTransaction,
    ProducerEntry,
    TopicPartition,
)
from exporter.rules import ORPHANED_AFTER_POLLS, effective_max_timeout_ms
from exporter.settings import ClusterSettings

WRITE_TXN_MARKERS_VERSION = 1
"""Kafka 4.0 accepts 1 (trunk 1-2); v2 only adds TransactionVersion, which an admin abort
must leave at 0 (legacy marker: the epoch is not bumped)."""


NO_ID_LISTED = "(none: no coordinator lists a transactional id for this producer)"
NO_ID_UNKNOWN = "(unknown: some coordinator's ListTransactions did not answer)"
NOT_LOOKED_UP = "(not looked up: the transaction was seen open on one poll only)"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the exporter's detection allows the abort, and why (one line for humans)."""

    allowed: bool
    classification: Classification | None
    transactional_id: str
    reason: str
    no_id: str = NO_ID_LISTED
    """What the plan's TransactionalId line says when `transactional_id` is empty."""


def marker_coordinator_epoch(reported: int) -> int:
    """The CoordinatorEpoch to send: the reported one, 0 when DescribeProducers says -1.

    Java TransactionsCommand: `producerState.coordinatorEpoch().orElse(0)`. -1 would be fenced
    (TRANSACTION_COORDINATOR_FENCED) on any partition that has ever had a marker from this
    producer (reference, kafka-python pitfalls)."""
    return reported if reported >= 0 else 0


def judge(
    obs: ClusterObservation,
    snapshot: ClusterSnapshot,
    settings: ClusterSettings,
    tp: TopicPartition,
    start_offset: int,
    producer_id: int,
) -> Verdict:
    """`_judge`, with "no id listed" said only when every coordinator's listing answered."""
    verdict = _judge(obs, snapshot, settings, tp, start_offset, producer_id)
    if not verdict.transactional_id and verdict.no_id == NO_ID_LISTED and (
        not obs.coordinator_view_complete
    ):
        return replace(verdict, no_id=NO_ID_UNKNOWN)
    return verdict


def _judge(
    obs: ClusterObservation,
    snapshot: ClusterSnapshot,
    settings: ClusterSettings,
    tp: TopicPartition,
    start_offset: int,
    producer_id: int,
) -> Verdict:
    """Allow a late transaction the find-hanging rule classifies `hanging`, or an orphaned one
    (not tracked by its coordinator on two consecutive polls, late or not: `scan`'s check).

    `obs` is the last poll of the detection (`poll_with_orphan_check`); the transactional id
    is the one the coordinators list for the producer, whatever the transaction's age."""

    def same(txn: OpenTransaction) -> bool:
        return (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        )

    for late in snapshot.late_transactions:
        txn = late.transaction
        if same(txn):
            age = f"open {late.age_seconds / 60:.1f} min"
            tid = late.transactional_id
            if late.classification is Classification.HANGING:
                why = (
                    "no coordinator lists a transactional id for the producer"
                    if not tid
                    else f"the coordinator of {tid!r} does not list this partition"
                )
                return Verdict(True, late.classification, tid, f"hanging ({age}; {why})")
            if late.classification is Classification.COORDINATOR_TRACKED:
                state = obs.descriptions.get(tid)
                state_text = f" (state {state.state})" if state is not None else ""
                return Verdict(
                    False,
                    late.classification,
                    tid,
                    f"coordinator_tracked ({age}): the coordinator of {tid!r}{state_text} still "
                    "lists this partition and will commit or abort it itself",
                )
            return Verdict(
                False,
                late.classification,
                tid,
                f"unknown ({age}): the coordinator could not be asked, so it cannot be told "
                "apart from a transaction the coordinator will still end",
            )
    for orphan in snapshot.orphaned_transactions:
        if same(orphan.transaction):
            tid = orphan.transactional_id
            whose = f"the coordinator of {tid!r}" if tid else "no coordinator"
            return Verdict(
                True,
                Classification.ORPHANED,
                tid,
                f"orphaned (open {orphan.age_seconds / 60:.1f} min, not late yet): {whose} "
                f"did not track this partition on {orphan.untracked_polls} consecutive polls "
                "that saw it open with the same producer id, epoch and start offset; nothing "
                "will end it",
            )
    for txn in obs.open_transactions:
        if same(txn):
            return _young(obs, settings, txn)
    if tp in obs.unobserved:
        return Verdict(
            False, None, "", f"the poll could not observe {tp.topic}-{tp.partition}: "
            f"{obs.unobserved[tp]}"
        )
    return Verdict(False, None, "", "the detection poll did not see this transaction open")


def _young(obs: ClusterObservation, settings: ClusterSettings, txn: OpenTransaction) -> Verdict:
    """An open transaction neither late nor orphaned: what its coordinator said, truthfully."""
    threshold_ms = effective_max_timeout_ms(
        settings,
        next(
            (b.transaction_max_timeout_ms for b in obs.brokers if b.broker_id == txn.leader_id),
            None,
        ),
    ) + round(settings.late_buffer_seconds * 1000)
    age_s = max(0, obs.observed_at_ms - txn.start_time_ms) / 1000
    tid = obs.transactional_ids.get(txn.producer_id, "")
    head = (
        f"not late: open {age_s / 60:.1f} min, late only after {threshold_ms / 60000:.1f} min "
        "(transaction.max.timeout.ms + late buffer)"
    )
    untracked = obs.untracked_polls.get(txn.key, 0)
    if untracked:
        whose = f"the coordinator of {tid!r}" if tid else "no coordinator"
        return Verdict(
            False, None, tid,
            f"{head}; {whose} did not track this partition on the last poll, but only "
            f"{untracked} of the {ORPHANED_AFTER_POLLS} consecutive polls that make it "
            "orphaned: run the command again (or raise --orphan-check-seconds)",
        )
    if txn.key in obs.untracked_unknown:
        return Verdict(
            False, Classification.UNKNOWN, tid,
            f"{head}; its coordinator could not be asked whether it tracks this partition "
            "(loading, moved or unreachable), so it cannot be told apart from a transaction "
            "its producer or coordinator will still end",
        )
    description = obs.descriptions.get(tid) if tid else None
    if description is not None and TopicPartition(txn.topic, txn.partition) in (
        description.topic_partitions
    ):
        return Verdict(
            False, Classification.COORDINATOR_TRACKED, tid,
            f"{head}; the coordinator of {tid!r} (state {description.state}) lists this "
            "partition: its producer or the coordinator will still commit or abort it",
        )
    return Verdict(
        False, None, tid,
        f"{head}; its coordinator was not asked (seen open on one poll only: "
        "--orphan-check-seconds 0, or it began during the check), so whether anything "
        "still tracks it was not checked",
        no_id=NOT_LOOKED_UP,
    )


def describe_plan(
    cluster: str,
    tp: TopicPartition,
    leader_id: int,
    leader_address: tuple[str, int] | None,
    producer: ProducerEntry,
    verdict: Verdict,
    last_stable_offset: int | None,
    high_watermark: int | None,
) -> str:
    """Exactly what will be written, one field per line."""
    epoch = marker_coordinator_epoch(producer.coordinator_epoch)
    epoch_note = (
        " (DescribeProducers reported -1: no marker yet on this partition; Java uses 0)"
        if producer.coordinator_epoch < 0
        else " (as DescribeProducers reported)"
    )
    where = f" at {leader_address[0]}:{leader_address[1]}" if leader_address else ""
    lines = [
        ("Cluster", cluster),
        ("Topic", tp.topic),
        ("Partition", str(tp.partition)),
        ("Leader", f"broker {leader_id}{where}"),
        ("ProducerId", str(producer.producer_id)),
        ("ProducerEpoch", str(producer.producer_epoch)),
        ("CoordinatorEpoch", f"{epoch}{epoch_note}"),
        ("StartOffset", str(producer.current_txn_start_offset)),
        ("Marker", f"ABORT (WriteTxnMarkers v{WRITE_TXN_MARKERS_VERSION} to the leader)"),
        ("TransactionalId", verdict.transactional_id or verdict.no_id),
        ("Classification", verdict.reason),
        (
            "LastStableOffset",
            "unknown" if last_stable_offset is None else
            f"{last_stable_offset} (high watermark {high_watermark})",
        ),
    ]
    width = max(len(k) for k, _ in lines) + 1
    return "".join(f"  {k + ':':<{width}} {v}\n" for k, v in lines)


def conflicting_marker_answer(codes: Sequence[int], tp: TopicPartition) -> str:
    """A WriteTxnMarkers answer listing the one partition asked several times, with different
    errors: whether the marker was written is not known from it."""
    answers = ", ".join(f"{error_name(code)} ({code})" for code in codes)
    return (
        f"WARNING: the WriteTxnMarkers answer lists {tp.topic}-{tp.partition} {len(codes)} "
        f"times ({answers}): it does not tell whether the marker was written; the partition "
        "is checked instead.\n"
    )


def marker_error_message(code: int, admin: AdminSettings, tp: TopicPartition) -> str:
    """A WriteTxnMarkers per-partition error, with what to do about the common ones."""
    name = error_name(code)
    if code == CLUSTER_AUTHORIZATION_FAILED:
        if admin.sasl is not None and admin.sasl.mechanism == "AWS_MSK_IAM":
            return (
                f"permission denied: the broker answered {name} ({code}). On AWS MSK with IAM "
                "access control, writing a transaction marker needs kafka-cluster:AlterCluster "
                "(and kafka-cluster:DescribeCluster) on the cluster for the admin role of "
                f"cluster {admin.cluster!r}, and a cluster on Kafka 3.8 or later. "
                "Nothing was written."
            )
        who = f"User:{admin.sasl.username}" if admin.sasl is not None else None
        return (
            f"permission denied: the broker answered {name} ({code}). Writing a transaction "
            f"marker needs ALTER (or CLUSTER_ACTION) on the Kafka cluster resource, which "
            f"{who or 'the admin principal'} of cluster {admin.cluster!r} does not have. "
            "Grant it, e.g.\n"
            "  kafka-acls.sh --bootstrap-server ... --add --allow-principal "
            f"{who or 'User:<admin principal>'} "
            "--operation Alter --cluster\n"
            "or set admin.clusters[].sasl to a principal that has it. Nothing was written."
        )
    if code == TRANSACTION_COORDINATOR_FENCED:
        return (
            f"{name} ({code}): the partition has seen a marker from a newer coordinator epoch "
            "since the check; run the command again to re-read it. Nothing was written."
        )
    if code == INVALID_PRODUCER_EPOCH:
        return (
            f"{name} ({code}): the producer's epoch moved on since the check (the producer or "
            "its coordinator acted); run the command again. Nothing was written."
        )
    return f"WriteTxnMarkers for {tp.topic}-{tp.partition} failed: {name} ({code})"


def open_list(producers: Sequence[ProducerEntry]) -> str:
    """The open transactions of a partition, for a refusal message."""
    starts = sorted(
        (p.current_txn_start_offset, p.producer_id)
        for p in producers
        if p.current_txn_start_offset >= 0
    )
    if not starts:
        return "the partition has no open transaction"
    return "open transactions start at: " + ", ".join(
        f"{offset} (producer {pid})" for offset, pid in starts
    )
