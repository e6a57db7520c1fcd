"""The `abort` command: arguments, the detect -> decide -> (dry run | write -> verify)
sequence, and exit status (0 aborted or dry run ok, 1 refused, 2 error; no broker reached: 3
authentication, 4 TLS, 5 unreachable, 6 timeout, as `scan`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from exporter.abort.decide import (
    conflicting_marker_answer,
    describe_plan,
    judge,
    marker_error_message,
    open_list,
)
from exporter.abort.io import AbortFailed, AdminSession, PartitionState
from exporter.abort.settings import AdminSettings, admin_cluster_settings, load_admin_settings
from exporter.abort.two_phase import FORCE_FLAG, find_two_phase, refusal_line, two_phase_verdict
from exporter.collect.poll import wall_clock_ms
from exporter.config import ConfigError
from exporter.logs import configure_logging
from exporter.model import ProducerEntry, TopicPartition
from exporter.observe import ClusterObserver
from exporter.scan import add_orphan_check_argument, cluster_failure, poll_with_orphan_check
from exporter.settings import ClusterSettings

PROG = "kafka-txn-exporter abort"
EXIT_ABORTED = 0
EXIT_REFUSED = 1
EXIT_ERROR = 2
VERIFY_ATTEMPTS = 20
VERIFY_DELAY_SECONDS = 0.1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Abort one hanging transaction by writing an ABORT marker to its partition "
            "(like kafka-transactions.sh abort), after detecting it again: late and not "
            "listed by its coordinator (find-hanging's rule), or orphaned (not tracked by its "
            "coordinator on two consecutive polls, checked as scan does). Without --yes "
            "it only prints what it would write. Credentials: the config file's "
            "admin.clusters[] entry for --cluster (the exporter's own principal stays "
            "read-only). Exit status: 0 aborted (or dry run ok), 1 refused, 2 error; no broker "
            "reached: 3 authentication failed, 4 TLS failed, 5 unreachable, 6 timed out."
        ),
    )
    parser.add_argument("--config", "-c", metavar="FILE",
                        help="YAML config file with clusters and admin (env KTE_CONFIG): a "
                             "regular file or a pipe (e.g. /dev/stdin, read once), at most "
                             "4 MiB, read within 2 s")
    parser.add_argument("--cluster", required=True, metavar="NAME", help="cluster name")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", required=True, type=int)
    parser.add_argument("--start-offset", required=True, type=int, dest="start_offset",
                        help="the transaction's StartOffset (CurrentTxnStartOffset)")
    parser.add_argument("--force", action="store_true",
                        help="abort even when the transaction is neither hanging nor orphaned")
    parser.add_argument(FORCE_FLAG, action="store_true", dest="force_two_phase",
                        help="abort a two-phase-commit (KIP-939) transaction, which --force "
                             "never does: its external coordinator owns the outcome")
    parser.add_argument("--yes", action="store_true",
                        help="really write the marker (default: dry run)")
    add_orphan_check_argument(parser)
    return parser


def run_abort(
    argv: list[str],
    *,
    clock_ms: Callable[[], int] = wall_clock_ms,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    env: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The `abort` subcommand; `argv` excludes the word `abort`."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR
    try:
        settings, admins = load_admin_settings(args.config, env)
    except ConfigError as exc:
        err.write(f"{PROG}: config error: {exc}\n")
        return EXIT_ERROR
    # Progress and warnings of the shared poll code go to stderr; stdout holds the plan.
    configure_logging(
        settings.log_format, "debug" if settings.log_level == "debug" else "warning", stream=err
    )
    cluster = next((c for c in settings.clusters if c.name == args.cluster), None)
    if cluster is None:
        err.write(
            f"{PROG}: --cluster: unknown cluster {args.cluster!r} "
            f"(configured: {', '.join(sorted(c.name for c in settings.clusters))})\n"
        )
        return EXIT_ERROR
    admin = admins.get(cluster.name)
    if admin is None:
        err.write(
            f"{PROG}: config error: admin.clusters: no entry for cluster {cluster.name!r}. The "
            "exporter's own credentials are read-only by design; add an admin entry with a "
            "principal that has ALTER on the cluster (see docs/abort.md).\n"
        )
        return EXIT_ERROR
    tp = TopicPartition(args.topic, args.partition)
    try:
        return _abort(
            admin_cluster_settings(cluster, admin), admin, tp, args.start_offset,
            force=args.force, yes=args.yes, orphan_check_seconds=args.orphan_check_seconds,
            clock_ms=clock_ms, sleep=sleep, out=out, err=err,
            force_two_phase=args.force_two_phase,
        )
    except AbortFailed as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return EXIT_ERROR
    except OSError as exc:  # e.g. an unreadable TLS key or CA file when building the client
        err.write(f"{PROG}: error: cluster {cluster.name}: cannot create its client: {exc}\n")
        return EXIT_ERROR


def _abort(
    settings: ClusterSettings,
    admin: AdminSettings,
    tp: TopicPartition,
    start_offset: int,
    *,
    force: bool,
    yes: bool,
    orphan_check_seconds: float,
    clock_ms: Callable[[], int],
    sleep: Callable[[float], None],
    out: TextIO,
    err: TextIO,
    force_two_phase: bool = False,
) -> int:
    # 1. Detect again through the daemon's own path, with scan's orphan check (two looks).
    poller = ClusterObserver(
        settings, clock_ms=clock_ms,
        # Its coordinator is asked even when young: a two-phase-commit one must be recognised.
        also_ask=lambda txn: (txn.topic, txn.partition) == (tp.topic, tp.partition),
    )
    try:
        obs, snapshot = poll_with_orphan_check(poller, settings, orphan_check_seconds, sleep)
        metadata_error = poller.metadata_error
    finally:
        poller.close()
    if not obs.brokers:
        # The cause and exit status `scan` gives (3 authentication, 4 TLS, 5 unreachable,
        # 6 timeout): a login that fails is told apart from a cluster that is down.
        failure = cluster_failure(metadata_error)
        err.write(f"{PROG}: error: cannot reach cluster {settings.name!r}: {failure}\n")
        return failure.exit_code

    session = AdminSession(settings)
    try:
        # 2. The leader's current view of the partition, right before deciding.
        before = session.run(session.partition_state(tp))
        producer = before.open_at(start_offset)
        if producer is None:
            err.write(
                f"{PROG}: refused: no open transaction starts at offset {start_offset} on "
                f"{tp.topic}-{tp.partition} (leader {before.leader_id}); "
                + open_list(before.producers) + "\n"
            )
            return EXIT_REFUSED
        # 3. Refuse unless hanging.
        verdict = judge(obs, snapshot, settings, tp, start_offset, producer.producer_id)
        # 3b. A two-phase-commit transaction: only with its own flag (--force is not enough).
        two_phase = find_two_phase(snapshot, tp, start_offset, producer.producer_id)
        if two_phase is not None:
            verdict = two_phase_verdict(two_phase)
        plan = describe_plan(
            settings.name, tp, before.leader_id, before.leader_address, producer, verdict,
            before.last_stable_offset, before.high_watermark,
        )
        if two_phase is not None and not force_two_phase:
            err.write(f"{PROG}: refused: {refusal_line(two_phase)}\n")
            out.write("Would have written (refused, nothing written):\n" + plan)
            return EXIT_REFUSED
        if two_phase is not None:
            err.write(f"WARNING: {FORCE_FLAG}: aborting a two-phase-commit transaction; tell "
                      "its external coordinator, which will fail to commit it\n")
        elif not verdict.allowed and not force:
            err.write(f"{PROG}: refused: the transaction is neither hanging nor orphaned: "
                      f"{verdict.reason}\nUse --force to abort it anyway.\n")
            out.write("Would have written (refused, nothing written):\n" + plan)
            return EXIT_REFUSED
        elif not verdict.allowed:
            err.write(
                "WARNING: --force: aborting a transaction that is neither hanging nor orphaned: "
                f"{verdict.reason}\nWARNING: if its producer or coordinator is still working "
                "on it, its records are discarded for read_committed consumers and the "
                "producer will fail with an epoch or sequence error.\n"
            )
        # 4. Dry run.
        if not yes:
            out.write("Dry run: would write this ABORT marker:\n" + plan)
            out.write("Nothing written. Run again with --yes to write it.\n")
            return EXIT_ABORTED
        out.write("Writing this ABORT marker:\n" + plan)
        # 5. Write.
        codes = session.run(session.write_abort_marker(before.leader_id, tp, producer))
        if len(set(codes)) > 1:
            # One partition asked, several answers that disagree: the answer cannot say
            # whether the marker was written (never "nothing was written"); the partition can.
            err.write(conflicting_marker_answer(codes, tp))
            return _verify(session, tp, producer, before, out, err, answered=False)
        elif codes[0] != 0:
            raise AbortFailed(marker_error_message(codes[0], admin, tp))
        # 6. Verify: gone from DescribeProducers, LSO advanced.
        return _verify(session, tp, producer, before, out, err)
    finally:
        session.close()


def _verify(
    session: AdminSession,
    tp: TopicPartition,
    producer: ProducerEntry,
    before: PartitionState,
    out: TextIO,
    err: TextIO,
    answered: bool = True,
) -> int:
    """`answered`: the WriteTxnMarkers answer said the marker was written (False: it did not
    say, and only the partition tells)."""
    start = producer.current_txn_start_offset
    older = [
        p for p in before.producers
        if 0 <= p.current_txn_start_offset < start and p.producer_id != producer.producer_id
    ]
    after = before
    for attempt in range(VERIFY_ATTEMPTS):
        after = session.run(session.partition_state(tp))
        still_open = after.open_at(start) is not None
        advanced = (
            before.last_stable_offset is not None
            and after.last_stable_offset is not None
            and after.last_stable_offset > before.last_stable_offset
        )
        if not still_open and (advanced or older):
            break
        if attempt + 1 < VERIFY_ATTEMPTS:
            time.sleep(VERIFY_DELAY_SECONDS)
    if after.open_at(start) is not None:
        accepted = "the marker was accepted" if answered else (
            "whether the marker was written is unknown")
        raise AbortFailed(
            f"{accepted} but DescribeProducers still shows a transaction at "
            f"offset {start} on {tp.topic}-{tp.partition}"
        )
    lso_text = f"{before.last_stable_offset} -> {after.last_stable_offset}"
    if before.last_stable_offset is None or after.last_stable_offset is None:
        err.write(f"{PROG}: warning: could not read the LSO (ListOffsets) to confirm\n")
    elif after.last_stable_offset <= before.last_stable_offset:
        if older:
            out.write(
                f"Aborted. The LSO stays at {after.last_stable_offset}: an older open "
                f"transaction starts at offset {older[0].current_txn_start_offset} "
                f"(producer {older[0].producer_id}).\n"
            )
            return EXIT_ABORTED
        raise AbortFailed(
            f"the transaction is gone but the LSO did not advance ({lso_text})"
        )
    out.write(
        f"Aborted: no open transaction at offset {start} any more; "
        f"last stable offset {lso_text}.\n"
    )
    return EXIT_ABORTED
