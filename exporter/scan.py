"""`kafka-txn-exporter scan`: one poll, printed like `kafka-transactions.sh find-hanging`.

The table keeps find-hanging's columns (Topic, Partition, ProducerId, ProducerEpoch,
CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min) where Duration = now -
LastTimestamp, in whole minutes as the Java tool prints it) and adds Age (seconds since the
transaction's start, the exporter's measure), TransactionalId, Classification and
BlockedGroups (the consumer groups stopped at its start offset: "-" none, "?" unknown) and
Application (the one its transactional id names, "-" unknown). Rows are the *late* transactions,
the *orphaned* ones not yet late (docs/kafka-semantics.md#orphaned), and the others at least
`blocked_groups_min_age_seconds` old that stop a consumer group (or whose groups are unknown):
a lingering one is classified coordinator_tracked (docs/kafka-semantics.md#blocked-before-late);
they do not change the exit status.
orphaned needs the coordinator's "not tracked" on two consecutive polls after the transaction was
first seen. When the first poll sees open transactions not yet late the scan polls again at once
to ask their coordinators; only when one is found not tracked does it wait
`orphan_check_seconds` and poll a third time to confirm (0 = one poll, find-hanging's way). A
healthy cluster costs one extra quick poll, never a wait. Exit status 1 when a row is classified
hanging or orphaned. The JSON output also gives each row's `topic_compacted`
and blocked groups, and each cluster's exposure (finalized transaction.version, partition
verification per broker); an exposed cluster gets a note. Two-phase-commit (KIP-939)
transactions are no rows (never late or hanging: an external coordinator decides them): each
gets a note, and the JSON lists them under `two_phase` (docs/kafka-semantics.md#two-phase-commit).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

from exporter.model import (
    UNCLASSIFIED_WHY,
    BlockingTransaction,
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    LateTransaction,
    OrphanedTransaction,
    PartitionVerification,
    TwoPhaseTransaction,
)
from exporter.rules import ORPHANED_AFTER_POLLS
from exporter.settings import ClusterSettings

if TYPE_CHECKING:
    from exporter.observe import ClusterObserver

EXIT_OK = 0
EXIT_HANGING = 1
EXIT_ERROR = 2
"""Bad configuration, or an error with none of the causes below."""
EXIT_AUTHENTICATION_FAILED = 3
"""SASL refused: wrong user or password, mechanism not enabled."""
EXIT_TLS_FAILED = 4
"""TLS handshake failed: certificate not trusted by the CA, hostname not in it, refused; or
the listener speaks TLS and the client not (or the other way round)."""
EXIT_UNREACHABLE = 5
"""No broker reached: connection refused, unknown host, no route."""
EXIT_TIMEOUT = 6
"""Connected (or connecting) but no answer in time."""
EXIT_STATUS_HELP = (
    "Exit status: 0 nothing hanging, 1 a hanging or orphaned transaction was found, "
    "2 bad configuration (or another error), 3 authentication failed (SASL; for "
    "AWS_MSK_IAM also AWS credentials not found or refused), 4 TLS failed "
    "(certificate not trusted, wrong hostname, listener and tls setting disagree), "
    "5 cluster unreachable, 6 timed out; with "
    "several clusters failing, the lowest of their codes."
)

COLUMNS = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
    "Age",
    "TransactionalId",
    "Classification",
    "BlockedGroups",
    "Application",
)

DEFAULT_ORPHAN_CHECK_SECONDS = 2.0
ScanFn = Callable[[ClusterSettings], ClusterSnapshot]


class ClusterFailed(Exception):
    """No broker of the cluster answered: one line naming the cause, and its exit status."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def cluster_failure(error: Exception | None) -> ClusterFailed:
    """The cause of a failed Metadata (docs/kafka-semantics.md#connection-failures), with the
    collect layer's message: the broker's own words for SASL (never a credential)."""
    from exporter.collect.connection import (
        AuthenticationFailed,
        BrokerUnreachable,
        ConnectTimeout,
        RequestTimeout,
        TlsConnectionClosed,
        TlsFailed,
    )

    if error is None:
        return ClusterFailed("cluster not reachable (no broker answered)", EXIT_UNREACHABLE)
    causes: tuple[tuple[type[Exception], str, int], ...] = (
        (TlsFailed, "TLS failed", EXIT_TLS_FAILED),
        (TlsConnectionClosed, "TLS failed", EXIT_TLS_FAILED),
        (AuthenticationFailed, "authentication failed", EXIT_AUTHENTICATION_FAILED),
        (ConnectTimeout, "timed out", EXIT_TIMEOUT),
        (RequestTimeout, "timed out", EXIT_TIMEOUT),
        (BrokerUnreachable, "unreachable", EXIT_UNREACHABLE),
    )
    for kind, label, code in causes:
        if isinstance(error, kind):
            return ClusterFailed(f"{label}: {error}", code)
    return ClusterFailed(f"no usable answer: {getattr(error, 'kind', 'ERROR')}: {error}",
                         EXIT_ERROR)


def _orphan_check_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 60, got {text!r}")
    return value


def add_orphan_check_argument(parser: argparse.ArgumentParser) -> None:
    """`--orphan-check-seconds`, shared by `scan` and `spark scan`."""
    parser.add_argument("--orphan-check-seconds", type=_orphan_check_seconds,
                        default=DEFAULT_ORPHAN_CHECK_SECONDS, metavar="SECONDS",
                        help="pause before the poll that confirms a transaction its coordinator "
                             "does not track is orphaned "
                             f"(default {DEFAULT_ORPHAN_CHECK_SECONDS:g}; 0: poll once, "
                             "late transactions only)")


def scan_cluster(
    settings: ClusterSettings,
    orphan_check_seconds: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterSnapshot:
    """Poll + analyze one cluster with the orphan check of `poll_with_orphan_check`."""
    from exporter.observe import ClusterObserver

    poller = ClusterObserver(settings)
    try:
        snapshot = poll_with_orphan_check(poller, settings, orphan_check_seconds, sleep)[1]
        if not snapshot.up:
            raise cluster_failure(poller.metadata_error)
        return snapshot
    finally:
        poller.close()


def poll_with_orphan_check(
    poller: ClusterObserver,
    settings: ClusterSettings,
    orphan_check_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[ClusterObservation, ClusterSnapshot]:
    """Poll + analyze; with `orphan_check_seconds` > 0, poll again at once when the first poll
    saw open transactions, and once more that much later while one was found not tracked (the
    wait separates the two "not tracked" answers that make it orphaned). Shared by `scan` and
    `abort`, which must confirm "orphaned" the same way."""
    from exporter.analyze import analyze

    obs = poller.poll()
    snapshot = analyze(obs, settings)
    for extra in range(ORPHANED_AFTER_POLLS if orphan_check_seconds > 0 else 0):
        # A late transaction already has find-hanging's verdict; only younger ones need the
        # orphan check. The first extra poll asks about what the first saw open; a later
        # one is needed only while one was found not tracked fewer times than it takes.
        late = {t.transaction.key for t in snapshot.late_transactions}
        if extra == 0:
            pending = any(t.key not in late for t in obs.open_transactions)
        else:
            pending = any(
                n < ORPHANED_AFTER_POLLS and key not in late
                for key, n in obs.untracked_polls.items()
            )
        if not pending:
            break
        if extra > 0:
            sleep(orphan_check_seconds)
        obs = poller.poll()
        snapshot = analyze(obs, settings)
    return obs, snapshot


@dataclass(frozen=True, slots=True)
class ScanRow:
    cluster: str
    late: LateTransaction | OrphanedTransaction | BlockingTransaction
    """A late transaction, an orphaned one not yet late, or another that blocks groups."""
    observed_at_ms: int

    @property
    def duration_minutes(self) -> int:
        """find-hanging's Duration(min): now - LastTimestamp, truncated to minutes."""
        return max(0, self.observed_at_ms - self.late.transaction.last_timestamp_ms) // 60_000

    def as_dict(self) -> dict[str, Any]:
        txn = self.late.transaction
        return {
            "cluster": self.cluster,
            "topic": txn.topic,
            "partition": txn.partition,
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "coordinator_epoch": txn.coordinator_epoch,
            "start_offset": txn.current_txn_start_offset,
            "last_timestamp_ms": txn.last_timestamp_ms,
            "duration_minutes": self.duration_minutes,
            "age_seconds": round(self.late.age_seconds, 3),
            "start_time_ms": txn.start_time_ms,
            "start_time_source": str(txn.start_time_source),
            "transactional_id": self.late.transactional_id,
            "classification": str(self.late.classification),
            "application": self.late.application,
            "late": isinstance(self.late, LateTransaction),
            "topic_compacted": (
                None if isinstance(self.late, BlockingTransaction) else self.late.topic_compacted
            ),
            # null when unknown (then blocked_groups_unknown says why), [] when none
            "blocked_groups": None if self.late.blocked_groups_unknown is not None else [
                {"group_id": g.group_id, "committed_offset": g.committed_offset,
                 "blocked_seconds": round(g.blocked_seconds, 3)}
                for g in self.late.blocked_groups
            ],
            "blocked_groups_unknown": self.late.blocked_groups_unknown,
        }

    def cells(self, with_cluster: bool) -> list[str]:
        txn = self.late.transaction
        cells = [
            txn.topic,
            str(txn.partition),
            str(txn.producer_id),
            str(txn.producer_epoch),
            str(txn.coordinator_epoch),
            str(txn.current_txn_start_offset),
            str(txn.last_timestamp_ms),
            str(self.duration_minutes),
            f"{self.late.age_seconds:.0f}s",
            self.late.transactional_id or "-",
            str(self.late.classification),
            self.blocked_groups_cell(),
            self.late.application or "-",
        ]
        return [self.cluster, *cells] if with_cluster else cells

    def blocked_groups_cell(self) -> str:
        if self.late.blocked_groups_unknown is not None:
            return "?"
        return ",".join(g.group_id for g in self.late.blocked_groups) or "-"


def rows_of(snapshot: ClusterSnapshot) -> list[ScanRow]:
    entries: list[LateTransaction | OrphanedTransaction | BlockingTransaction] = [
        *snapshot.late_transactions
    ]
    entries += [o for o in snapshot.orphaned_transactions if not o.late]
    entries += blocking_only(snapshot)
    rows = [ScanRow(snapshot.cluster, entry, snapshot.observed_at_ms) for entry in entries]
    return sorted(rows, key=lambda r: (r.late.transaction.topic, r.late.transaction.partition,
                                       r.late.transaction.current_txn_start_offset))


def blocking_only(snapshot: ClusterSnapshot) -> list[BlockingTransaction]:
    """Transactions neither late, orphaned nor two-phase (those have their own rows or notes)
    that stop a consumer group, or whose groups are unknown: a lingering one."""
    return [
        b for b in snapshot.blocking_transactions
        if not b.late
        and b.classification not in (Classification.ORPHANED, Classification.TWO_PHASE)
        and (b.blocked_groups or b.blocked_groups_unknown is not None)
    ]


def two_phase_dict(cluster: str, entry: TwoPhaseTransaction) -> dict[str, Any]:
    txn = entry.transaction
    return {
        "cluster": cluster,
        "topic": txn.topic,
        "partition": txn.partition,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "start_offset": txn.current_txn_start_offset,
        "age_seconds": round(entry.age_seconds, 3),
        "transactional_id": entry.transactional_id,
        "classification": str(entry.classification),
        "application": entry.application,
        "stuck": entry.stuck,
    }


def two_phase_note(cluster: str, entry: TwoPhaseTransaction) -> str:
    txn = entry.transaction
    state = "stuck, older than two_phase_late_seconds" if entry.stuck else "in time"
    return (
        f"{cluster}: two-phase-commit transaction of {entry.transactional_id!r} on "
        f"{txn.topic}-{txn.partition} from offset {txn.current_txn_start_offset}, open "
        f"{entry.age_seconds:.0f}s ({state}): its external coordinator decides it, not hanging"
    )


def exposure_of(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """The cluster's exposure (docs/kafka-semantics.md#exposure); unknown is null."""
    return {
        "finalized_transaction_version": snapshot.finalized_transaction_version,
        "partition_verification": {
            str(b.broker_id): None if b.partition_verification is None
            else str(b.partition_verification)
            for b in snapshot.brokers
        },
    }


def exposure_note(snapshot: ClusterSnapshot) -> str | None:
    """One line when hanging transactions can still be created on the cluster."""
    exposed = [
        str(b.broker_id) for b in snapshot.brokers
        if b.partition_verification in (PartitionVerification.DISABLED,
                                         PartitionVerification.NOT_OFFERED)
    ]
    version = snapshot.finalized_transaction_version
    parts = []
    if exposed:
        parts.append(f"partition verification off on broker(s) {', '.join(exposed)}")
    if version is not None and version < 2:
        supported = snapshot.supported_transaction_version
        if supported is not None and supported < 2:
            # Kafka 3.x has no transaction.version 2 to raise (it came with 4.0).
            parts.append("transaction.version 2 is not supported by the brokers' Kafka "
                         f"version (it came with Kafka 4.0; finalized level {version})")
        elif supported is not None:
            parts.append(f"finalized transaction.version {version} (below 2; the brokers "
                         f"support {supported}: kafka-features.sh upgrade --feature "
                         "transaction.version=2)")
        else:
            parts.append(f"finalized transaction.version {version} (below 2)")
    if not parts:
        return None
    return f"{snapshot.cluster}: exposed to hanging transactions: {'; '.join(parts)}"


def format_table(rows: Sequence[ScanRow], with_cluster: bool) -> str:
    header = ["Cluster", *COLUMNS] if with_cluster else list(COLUMNS)
    lines = [header, *(row.cells(with_cluster) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        " ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def run_scan(
    clusters: Sequence[ClusterSettings],
    output: str,
    out: TextIO,
    err: TextIO,
    scan_fn: ScanFn | None = None,
    orphan_check_seconds: float = DEFAULT_ORPHAN_CHECK_SECONDS,
) -> int:
    """Poll every cluster; print; return the exit status (EXIT_STATUS_HELP)."""
    if scan_fn is None:
        scan_fn = partial(scan_cluster, orphan_check_seconds=orphan_check_seconds)
    rows: list[ScanRow] = []
    errors: dict[str, str] = {}
    error_codes: list[int] = []
    notes: list[str] = []
    exposure: dict[str, dict[str, Any]] = {}
    two_phase: list[dict[str, Any]] = []
    for cluster in clusters:
        try:
            snapshot = scan_fn(cluster)
            if not snapshot.up:
                raise cluster_failure(None)
        except ClusterFailed as exc:
            errors[cluster.name] = str(exc)
            error_codes.append(exc.exit_code)
            continue
        except Exception as exc:
            errors[cluster.name] = f"{type(exc).__name__}: {exc}"
            error_codes.append(EXIT_ERROR)
            continue
        rows.extend(rows_of(snapshot))
        for entry in snapshot.two_phase_transactions:
            two_phase.append(two_phase_dict(cluster.name, entry))
            notes.append(two_phase_note(cluster.name, entry))
        exposure[cluster.name] = exposure_of(snapshot)
        if (note := exposure_note(snapshot)) is not None:
            notes.append(note)
        if snapshot.unobserved_partitions:
            notes.append(f"{cluster.name}: {snapshot.unobserved_partitions} partition(s) "
                         "could not be observed")
        for reason, unknown in sorted(snapshot.unclassified_by_reason.items()):
            notes.append(f"{cluster.name}: {unknown} late transaction(s) could not be "
                         f"classified ({UNCLASSIFIED_WHY.get(reason, reason)})")
        for reason, count in sorted(snapshot.blocked_groups_unknown_by_reason.items()):
            notes.append(f"{cluster.name}: blocked consumer groups unknown ({reason}) for "
                         f"{count} transaction(s)")
        if snapshot.applications_overflowed:
            notes.append(f"{cluster.name}: {snapshot.applications_overflowed} application(s) "
                         "past max_applications are shown as _overflow")

    hanging = any(r.late.classification is Classification.HANGING for r in rows)
    orphaned = any(r.late.classification is Classification.ORPHANED for r in rows)
    if output == "json":
        json.dump(
            {
                "transactions": [row.as_dict() for row in rows],
                "hanging": hanging,
                "orphaned": orphaned,
                "errors": errors,
                "notes": notes,
                "exposure": exposure,
                "two_phase": two_phase,
            },
            out,
            indent=2,
        )
        out.write("\n")
    else:
        out.write(format_table(rows, with_cluster=len(clusters) > 1) + "\n")
    for note in notes:
        err.write(f"note: {note}\n")
    for name, message in errors.items():
        err.write(f"error: cluster {name}: {message}\n")
    if error_codes:
        return min(error_codes)
    return EXIT_HANGING if hanging or orphaned else EXIT_OK
