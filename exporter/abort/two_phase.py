"""The abort command's separate check for two-phase-commit transactions (KIP-939).

An external coordinator (e.g. Flink's exactly-once sink) owns such a transaction's outcome and
may already have decided to commit it; an ABORT marker written behind its back breaks its
exactly-once guarantee. So `abort` refuses one unless `--force-two-phase` is given, whatever
`--force` says (docs/kafka-semantics.md#two-phase-commit, docs/runbook.md)."""

from __future__ import annotations

from exporter.abort.decide import Verdict
from exporter.model import ClusterSnapshot, TopicPartition, TwoPhaseTransaction

FORCE_FLAG = "--force-two-phase"


def find_two_phase(
    snapshot: ClusterSnapshot, tp: TopicPartition, start_offset: int, producer_id: int
) -> TwoPhaseTransaction | None:
    """The detection poll's two-phase-commit transaction at this start offset, if it is one."""
    for two_phase in snapshot.two_phase_transactions:
        txn = two_phase.transaction
        if (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        ):
            return two_phase
    return None


def two_phase_verdict(two_phase: TwoPhaseTransaction) -> Verdict:
    """Never allowed by detection: only `FORCE_FLAG` lets it through."""
    owner = two_phase.transactional_id or "(no transactional id)"
    return Verdict(
        False,
        two_phase.classification,
        two_phase.transactional_id,
        f"two_phase (open {two_phase.age_seconds / 60:.1f} min; KIP-939 two-phase-commit "
        f"transaction of {owner!r}, decided by its external coordinator)",
    )


def refusal_line(two_phase: TwoPhaseTransaction) -> str:
    """One line: why a two-phase-commit transaction is not aborted without its own flag."""
    owner = two_phase.transactional_id or "(no transactional id)"
    return (
        f"two-phase-commit transaction (KIP-939) of transactional id {owner!r}: its external "
        "coordinator owns the outcome and may already have decided to commit it, so an ABORT "
        f"marker can break its exactly-once guarantee; ask its owner, then use {FORCE_FLAG}"
    )
