"""Pure decisions of the abort command: whether the exporter's detection allows the abort,
the CoordinatorEpoch to send, and the plan printed for the operator. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    ProducerEntry,
    TopicPartition,
)
from exporter.rules import effective_max_timeout_ms
from exporter.settings import ClusterSettings

WRITE_TXN_MARKERS_VERSION = 1
"""Kafka 4.0 accepts 1 (trunk 1-2); v2 only adds TransactionVersion, which an admin abort
must leave at 0 (legacy marker: the epoch is not bumped)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the exporter's detection allows the abort, and why (one line for humans)."""

    allowed: bool
    classification: Classification | None
    transactional_id: str
    reason: str


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
    """Allow only a late transaction the find-hanging rule classifies `hanging`."""
    for late in snapshot.late_transactions:
        txn = late.transaction
        if (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        ):
            age = f"open {late.age_seconds / 60:.1f} min"
            tid = late.transactional_id
            if late.classification is Classification.HANGING:
                why = (
                    "no transactional id maps to the producer"
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
    for txn in obs.open_transactions:
        if (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        ):
            threshold_ms = effective_max_timeout_ms(
                settings,
                next(
                    (b.transaction_max_timeout_ms for b in obs.brokers
                     if b.broker_id == txn.leader_id),
                    None,
                ),
            ) + round(settings.late_buffer_seconds * 1000)
            age_s = max(0, obs.observed_at_ms - txn.start_time_ms) / 1000
            return Verdict(
                False,
                None,
                obs.transactional_ids.get(producer_id, ""),
                f"not late: open {age_s / 60:.1f} min, late only after "
                f"{threshold_ms / 60000:.1f} min (transaction.max.timeout.ms + late buffer); "
                "a transaction that young may still be ended by its producer or coordinator",
            )
    if tp in obs.unobserved:
        return Verdict(
            False, None, "", f"the poll could not observe {tp.topic}-{tp.partition}: "
            f"{obs.unobserved[tp]}"
        )
    return Verdict(False, None, "", "the detection poll did not see this transaction open")


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
        ("TransactionalId", verdict.transactional_id or "(none maps to the producer)"),
        ("Classification", verdict.reason),
        (
            "LastStableOffset",
            "unknown" if last_stable_offset is None else
            f"{last_stable_offset} (high watermark {high_watermark})",
        ),
    ]
    width = max(len(k) for k, _ in lines) + 1
    return "".join(f"  {k + ':':<{width}} {v}\n" for k, v in lines)


def marker_error_message(code: int, admin: AdminSettings, tp: TopicPartition) -> str:
    """A WriteTxnMarkers per-partition error, with what to do about the common ones."""
    name = error_name(code)
    if code == CLUSTER_AUTHORIZATION_FAILED:
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
