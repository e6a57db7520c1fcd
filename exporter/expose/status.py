"""The status page at `/`: per cluster, broker health and the late/hanging transactions.

Server-rendered HTML that reads without JavaScript and loads nothing from elsewhere (an
operator opens it during an incident, possibly from a locked-down network). It reloads itself
with a meta refresh (no script, so the strict CSP stays), links the runbook, and turns its
tables into one card per row on narrow screens (a phone, 412 px wide). Every value that
came from Kafka or the config (topic names, transactional ids, cluster names, errors) goes
through `html.escape`: a transactional id is chosen by whoever runs the producer. The abort
command lines are `shlex.quote`d so that they can be pasted into a shell as they are.
Pure: no I/O, so it renders from any thread that can read the `SnapshotStore`.
"""

from __future__ import annotations

import html
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from exporter.model import (
    UNCLASSIFIED_WHY,
    BlockingTransaction,
    Classification,
    ClusterSnapshot,
    LateTransaction,
    OrphanedTransaction,
    PartitionVerification,
    TopicPartition,
)


def running_abort_command() -> tuple[str, ...]:
    """This installation's `abort` command, by a path that works from any shell: the
    `kafka-txn-exporter` script beside the running interpreter (a virtualenv's bin/, the
    image's /opt/venv/bin), else the interpreter running the package (`python -m exporter`).
    A bare `kafka-txn-exporter` fails wherever that bin/ is not on the operator's PATH."""
    script = Path(sys.executable).with_name("kafka-txn-exporter")
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script), "abort")
    return (sys.executable, "-m", "exporter", "abort")


REFRESH_SECONDS = 30
"""The page reloads itself this often: a poll interval's worth by default."""
RUNBOOK_URL = "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbook.md"
"""docs/runbook.md as published; the alerts' runbook_url points at the same file."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)
"""Also worth sending as a response header (http.py) with the page."""

_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       margin: 0; color: #1b1f24; background: #f6f7f9; }
header { background: #1f2937; color: #f9fafb; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0; color: #cbd5e1; font-size: 13px; }
header a { color: #93c5fd; }
main { padding: 8px 24px 32px; max-width: 1400px; }
section.cluster { background: #fff; border: 1px solid #d8dde3; border-radius: 6px;
                  margin: 16px 0; padding: 4px 18px 14px; }
h2 { font-size: 18px; margin: 12px 0 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
.meta { color: #4b5563; font-size: 13px; margin: 2px 0; }
.badge { display: inline-block; font-size: 12px; font-weight: 600; padding: 1px 8px;
         border-radius: 10px; vertical-align: middle; margin-left: 6px; }
.up { background: #dcfce7; color: #166534; }
.down { background: #fee2e2; color: #991b1b; }
.hanging { background: #fee2e2; color: #991b1b; }
.coordinator_tracked { background: #fef3c7; color: #92400e; }
.unknown { background: #e5e7eb; color: #374151; }
.two_phase { background: #e0e7ff; color: #3730a3; }
.orphaned { background: #fee2e2; color: #991b1b; }
.app { display: block; color: #4b5563; font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 5px 10px; border-bottom: 1px solid #e5e7eb;
         vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.cmd-row td { border-bottom: 1px solid #d1d5db; padding-top: 0; }
code { font-family: "DejaVu Sans Mono", ui-monospace, Menlo, Consolas, monospace;
       font-size: 13px; }
code.cmd { display: block; background: #111827; color: #e5e7eb; padding: 6px 10px;
           border-radius: 4px; white-space: pre-wrap; overflow-wrap: anywhere;
           user-select: all; -webkit-user-select: all; }
.note { color: #4b5563; font-size: 13px; }
.empty { color: #166534; }
.error { color: #991b1b; }
.tid { word-break: break-all; }
body { overflow-wrap: anywhere; }
@media (max-width: 640px) {
  header { padding: 10px 12px; }
  main { padding: 4px 8px 24px; }
  section.cluster { padding: 4px 10px 10px; }
  table.cards, table.cards tbody, table.cards tr, table.cards td { display: block; }
  table.cards thead { display: none; }
  table.cards tr { border-bottom: 1px solid #d1d5db; padding: 4px 0; }
  table.cards td, table.cards td.num { border: 0; padding: 1px 4px; text-align: left;
                                       white-space: normal; }
  table.cards td[data-label]::before { content: attr(data-label) ": "; color: #4b5563;
                                       font-size: 12px; }
  table.cards tr.txn { border-bottom: 0; }
  table.cards tr.cmd-row td:first-child { display: none; }
}
"""


def render_status_page(
    snapshots: Mapping[str, ClusterSnapshot | None],
    *,
    errors: Mapping[str, str | None] | None = None,
    config_file: str | None = None,
    abort_command: Sequence[str] | None = None,
    now_ms: int | None = None,
    refresh_seconds: int = REFRESH_SECONDS,
    runbook_url: str = RUNBOOK_URL,
    metrics_path: str = "/metrics",
) -> bytes:
    """The whole page as UTF-8 HTML.

    `snapshots`: cluster name -> its current snapshot (None before the first successful poll
    or after a failed one); `errors`: cluster name -> the store's last error; `config_file`
    goes into the abort command lines as `--config` (omitted when unknown), after
    `abort_command` (default: `running_abort_command()`); the page reloads every
    `refresh_seconds` (0: never).
    """
    abort_command = running_abort_command() if abort_command is None else abort_command
    now = int(time.time() * 1000) if now_ms is None else now_ms
    errors = errors or {}
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        # Defence in depth behind html.escape: no script, no outside request of any kind.
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">",
        # Reload without JavaScript; CSP does not govern a meta refresh to the page itself.
        f"<meta http-equiv=\"refresh\" content=\"{int(refresh_seconds)}\">"
        if refresh_seconds > 0 else "",
        "<title>kafka-txn-exporter status</title>",
        f"<style>{_CSS}</style></head><body>",
        "<header><h1>kafka-txn-exporter</h1>",
        f"<p>Late and hanging Kafka transactions &middot; page rendered {_e(_utc(now))} "
        + (f"(refreshes every {int(refresh_seconds)} s) " if refresh_seconds > 0 else "")
        + f"&middot; <a href=\"{_e(runbook_url)}\" rel=\"noopener noreferrer\">runbook</a> "
        f"&middot; <a href=\"{_e(metrics_path.lstrip('/'))}\">{_e(metrics_path)}</a> "
        "&middot; <a href=\"healthz\">/healthz</a>"
        " &middot; <a href=\"readyz\">/readyz</a></p></header><main>",
    ]
    if not snapshots:
        parts.append("<p class=\"note\">No cluster configured.</p>")
    for name in sorted(snapshots):
        parts.append(
            _cluster_section(name, snapshots[name], errors.get(name), config_file,
                             abort_command, now, runbook_url)
        )
    parts.append(
        "<p class=\"note\">Only <strong>hanging</strong> transactions get an abort command: "
        "the coordinator still tracks <em>coordinator_tracked</em> ones and will end them, "
        "and <em>unknown</em> ones could not be checked. The command detects again and "
        "prints what it would write; add <code>--yes</code> to write the ABORT marker. "
        f"Before aborting, follow <a href=\"{_e(runbook_url)}#check-before-aborting\" "
        "rel=\"noopener noreferrer\">the runbook's checks</a>.</p>"
    )
    parts.append("</main></body></html>\n")
    return "".join(parts).encode("utf-8")


def abort_command_line(
    snapshot_cluster: str,
    late: LateTransaction,
    config_file: str | None = None,
    abort_command: Sequence[str] | None = None,
) -> str:
    """The shell command that aborts this transaction (dry run until `--yes` is added)."""
    txn = late.transaction
    argv = [*(running_abort_command() if abort_command is None else abort_command)]
    if config_file is not None:
        argv += ["--config", config_file]
    argv += [
        "--cluster", snapshot_cluster,
        "--topic", txn.topic,
        "--partition", str(txn.partition),
        "--start-offset", str(txn.current_txn_start_offset),
    ]
    return shlex.join(argv)


def _cluster_section(
    name: str,
    snapshot: ClusterSnapshot | None,
    error: str | None,
    config_file: str | None,
    abort_command: Sequence[str],
    now_ms: int,
    runbook_url: str,
) -> str:
    anchor = _e("cluster-" + name)
    if snapshot is None:
        reason = error or "no successful poll yet"
        return (
            f"<section class=\"cluster\" id=\"{anchor}\" data-cluster=\"{_e(name)}\">"
            f"<h2>Cluster <code>{_e(name)}</code><span class=\"badge down\">NO DATA</span></h2>"
            f"<p class=\"error\">{_e(reason)}</p></section>"
        )
    up_badge = "<span class=\"badge up\">UP</span>" if snapshot.up else (
        "<span class=\"badge down\">DOWN</span>"
    )
    hanging = sum(
        1 for lt in snapshot.late_transactions if lt.classification is Classification.HANGING
    )
    orphaned = len(snapshot.orphaned_transactions)
    out = [
        f"<section class=\"cluster\" id=\"{anchor}\" data-cluster=\"{_e(name)}\">",
        f"<h2>Cluster <code>{_e(name)}</code>{up_badge}</h2>",
        f"<p class=\"meta\">Polled {_e(_utc(snapshot.observed_at_ms))} "
        f"({_e(_duration(max(0, now_ms - snapshot.observed_at_ms) / 1000))} ago, took "
        f"{snapshot.poll_duration_seconds:.2f} s) &middot; oldest open transaction "
        f"{_e(_optional_duration(snapshot.cluster_max_active_transaction_duration_seconds))} "
        "&middot; "
        f"{len(snapshot.late_transactions)} late, {hanging} hanging, {orphaned} orphaned, "
        f"{len(snapshot.two_phase_transactions)} two-phase",
    ]
    for reason, count in sorted(snapshot.unclassified_by_reason.items()):
        out.append(
            f" &middot; <span class=\"error\">{count} late transaction(s) not classified "
            f"({_e(UNCLASSIFIED_WHY.get(reason, reason))})</span>"
        )
    if snapshot.unobserved_partitions:
        out.append(
            f" &middot; <span class=\"error\">{snapshot.unobserved_partitions} partition(s) "
            "not observed (leader down, error or not authorised): their transactions are "
            "unknown, not absent</span>"
        )
    out.append("</p>")
    if error:
        out.append(f"<p class=\"error\">Last error: {_e(error)}</p>")
    out.append(_brokers_table(snapshot))
    out.append(_exposure_section(snapshot))
    out.append(_transactions_table(name, snapshot, config_file, abort_command, runbook_url))
    out.append(_orphaned_table(snapshot, runbook_url))
    out.append(_two_phase_table(snapshot, runbook_url))
    out.append(_blocking_table(snapshot, runbook_url))
    if snapshot.request_errors:
        counts: dict[tuple[int, str, str], int] = {}
        for err in snapshot.request_errors:
            key = (err.broker_id, err.api, err.error)
            counts[key] = counts.get(key, 0) + 1
        items = "".join(
            f"<li>broker {b}: {_e(api)} {_e(code)} &times; {n}</li>"
            for (b, api, code), n in sorted(counts.items())
        )
        out.append(f"<h3>Request errors in the last poll</h3><ul class=\"note\">{items}</ul>")
    out.append("</section>")
    return "".join(out)


def _brokers_table(snapshot: ClusterSnapshot) -> str:
    rows = []
    for b in snapshot.brokers:
        status = "<span class=\"badge up\">up</span>" if b.up else (
            "<span class=\"badge down\">down</span>"
        )
        timeout = "?" if b.transaction_max_timeout_ms is None else (
            f"{b.transaction_max_timeout_ms} ms"
        )
        counts = (
            (b.partitions_with_open_transactions, b.partitions_with_late_transactions,
             b.partitions_with_hanging_transactions, b.partitions_with_orphaned_transactions)
            if b.up else None
        )
        cells = "".join(
            f"<td class=\"num\">{'?' if c is None else c}</td>" for c in counts
        ) if counts is not None else "<td class=\"num\">?</td>" * 4
        rows.append(
            f"<tr data-broker=\"{b.broker_id}\"><td class=\"num\">{b.broker_id}</td>"
            f"<td>{status}</td><td class=\"num\">{_e(timeout)}</td>{cells}</tr>"
        )
    rows = [_label_cells(row, _BROKER_LABELS) for row in rows]
    if not rows:
        return "<h3>Brokers</h3><p class=\"error\">No broker answered.</p>"
    return (
        "<h3>Brokers</h3><table class=\"brokers cards\"><thead><tr><th class=\"num\">Broker</th>"
        "<th>Status</th><th class=\"num\">transaction.max.timeout.ms</th>"
        "<th class=\"num\">Partitions with open txns</th><th class=\"num\">late</th>"
        "<th class=\"num\">hanging</th><th class=\"num\">orphaned</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


_VERIFICATION_TEXT = {
    PartitionVerification.ENABLED: ("up", "enabled"),
    PartitionVerification.DISABLED: ("down", "disabled: exposed"),
    PartitionVerification.NOT_OFFERED: ("down", "not offered (Kafka before 3.6): exposed"),
}


def _exposure_section(snapshot: ClusterSnapshot) -> str:
    """Can hanging transactions still be created here, and does a late one stop compaction?
    (docs/kafka-semantics.md#exposure). Unknown shows as unknown, never as safe."""
    version = snapshot.finalized_transaction_version
    if version is None:
        version_text = ("<span class=\"note\">unknown (no broker reported finalized "
                        "features)</span>")
    else:
        note = " (not finalized)" if version == 0 else ""
        exposed = (" <span class=\"badge down\">below 2: producers add partitions "
                   "themselves</span>") if version < 2 else ""
        version_text = f"<strong>{version}</strong>{note}{exposed}"
    out = [
        "<h3>Exposure</h3><p class=\"meta\" data-transaction-version=\""
        f"{'' if version is None else version}\">Finalized <code>transaction.version</code>: "
        f"{version_text}</p>"
    ]
    items = []
    for b in snapshot.brokers:
        flag = b.partition_verification
        if flag is None:
            text = "<span class=\"note\">unknown</span>"
        else:
            css, label = _VERIFICATION_TEXT[flag]
            text = f"<span class=\"badge {css}\">{_e(label)}</span>"
        items.append(
            f"<li data-broker=\"{b.broker_id}\" data-verification=\""
            f"{'' if flag is None else flag.value}\">broker {b.broker_id}: {text}</li>"
        )
    if items:
        out.append(
            "<p class=\"meta\"><code>transaction.partition.verification.enable</code> per "
            "broker:</p><ul class=\"verification\">" + "".join(items) + "</ul>"
        )
    topics = sorted({lt.transaction.topic for lt in snapshot.late_transactions}
                    | {o.transaction.topic for o in snapshot.orphaned_transactions})
    if topics:
        cells = []
        for topic in topics:
            compacted = snapshot.compacted_topics.get(topic)
            text = ("<span class=\"note\">unknown</span>" if compacted is None else
                    "<span class=\"badge down\">compacted: cleaning stops at the LSO</span>"
                    if compacted else "not compacted")
            cells.append(
                f"<li data-topic=\"{_e(topic)}\" data-compacted=\""
                f"{'' if compacted is None else str(compacted).lower()}\">"
                f"<code>{_e(topic)}</code>: {text}</li>"
            )
        out.append(
            "<p class=\"meta\">Topics with late or orphaned transactions "
            "(<code>cleanup.policy</code>):</p><ul class=\"compaction\">"
            + "".join(cells) + "</ul>"
        )
    return "".join(out)


def _transactions_table(
    cluster: str,
    snapshot: ClusterSnapshot,
    config_file: str | None,
    abort_command: Sequence[str],
    runbook_url: str,
) -> str:
    title = f"<h3>Late and hanging transactions ({len(snapshot.late_transactions)})</h3>"
    if not snapshot.late_transactions:
        return title + "<p class=\"empty\">No late transactions.</p>"
    rows = []
    for late in snapshot.late_transactions:
        rows.append(_transaction_row(snapshot, late, late.classification.value))
        if late.classification is Classification.HANGING:
            command = abort_command_line(cluster, late, config_file, abort_command)
            action = (
                f"<code class=\"cmd\">{_e(command)}</code>"
                f"<span class=\"note\"><a href=\"{_e(runbook_url)}#kafkahangingtransaction\" "
                "rel=\"noopener noreferrer\">Runbook: confirm, check, then abort</a></span>"
            )
        elif late.classification is Classification.COORDINATOR_TRACKED:
            action = (
                "<span class=\"note\">No abort: the coordinator still lists this partition "
                "and will commit or abort the transaction itself (check its markers if it "
                "stays).</span>"
            )
        else:
            action = (
                "<span class=\"note\">No abort command: the coordinator could not be asked, "
                "so hanging cannot be told apart from coordinator-tracked.</span>"
            )
        rows.append(f"<tr class=\"cmd-row\"><td></td><td colspan=\"8\">{action}</td></tr>")
    return (
        title + _transaction_table("transactions cards", rows)
    )


def _transaction_row(
    snapshot: ClusterSnapshot,
    entry: LateTransaction | OrphanedTransaction,
    badge: str,
) -> str:
    """One row of the late or the orphaned table (the same columns)."""
    txn = entry.transaction
    tp_lag = snapshot.last_stable_offset_lag.get(TopicPartition(txn.topic, txn.partition))
    tid = _tid_cell(entry.transactional_id, entry.application)
    cls = entry.classification.value
    return _label_cells(
        f"<tr class=\"txn\" data-classification=\"{_e(cls)}\">"
        f"<td class=\"num\">{_e(_duration(entry.age_seconds))}</td>"
        f"<td><span class=\"badge {_e(badge)}\">{_e(cls)}</span></td>"
        f"<td><code>{_e(txn.topic)}</code>-{txn.partition}</td>"
        f"<td class=\"num\">{txn.producer_id} / {txn.producer_epoch}</td>"
        f"<td class=\"num\">{txn.coordinator_epoch}</td>"
        f"<td>{tid}</td>"
        f"<td class=\"num\">{txn.current_txn_start_offset}</td>"
        f"<td class=\"num\">{'?' if tp_lag is None else tp_lag}</td>"
        f"{_blocked_groups_cell(entry)}</tr>",
        _TRANSACTION_LABELS,
    )


def _tid_cell(transactional_id: str, application: str) -> str:
    """The transactional id and, under it, the application it names (for routing)."""
    tid = (
        f"<span class=\"tid\">{_e(transactional_id)}</span>"
        if transactional_id else "<em class=\"note\">none</em>"
    )
    if not application:
        return tid
    return (f"{tid}<span class=\"app\" data-application=\"{_e(application)}\">application: "
            f"{_e(application)}</span>")


_BLOCKING_ACTIONS = {
    Classification.COORDINATOR_TRACKED: (
        "Lingering: its coordinator tracks it and ends it at its transaction.timeout.ms. "
        "No abort: restart its job (a Flink job from its checkpoint), or wait, or lower the "
        "timeout."
    ),
    Classification.UNKNOWN: (
        "Its coordinator has not answered yet (or did not track it on one poll only): wait a "
        "poll or two."
    ),
    Classification.TWO_PHASE: "Two-phase commit: only its external coordinator ends it.",
}


def _blocking_table(snapshot: ClusterSnapshot, runbook_url: str) -> str:
    """Transactions that are neither late nor orphaned (those are above) but old enough that
    the groups they stop were read: a lingering one blocks its consumers until its own
    transaction.timeout.ms."""
    entries = [
        b for b in snapshot.blocking_transactions
        if not b.late and b.classification is not Classification.ORPHANED
        and (b.blocked_groups or b.blocked_groups_unknown is not None)
    ]
    title = f"<h3>Transactions blocking consumer groups, not late ({len(entries)})</h3>"
    if not entries:
        return title + "<p class=\"empty\">No other transaction blocks a consumer group.</p>"
    rows = []
    for entry in entries:
        txn = entry.transaction
        lag = snapshot.last_stable_offset_lag.get(TopicPartition(txn.topic, txn.partition))
        cls = entry.classification.value
        rows.append(_label_cells(
            f"<tr class=\"txn\" data-classification=\"{_e(cls)}\">"
            f"<td class=\"num\">{_e(_duration(entry.age_seconds))}</td>"
            f"<td><span class=\"badge {_e(cls)}\">{_e(cls)}</span></td>"
            f"<td><code>{_e(txn.topic)}</code>-{txn.partition}</td>"
            f"<td class=\"num\">{txn.producer_id} / {txn.producer_epoch}</td>"
            f"<td class=\"num\">{txn.coordinator_epoch}</td>"
            f"<td>{_tid_cell(entry.transactional_id, entry.application)}</td>"
            f"<td class=\"num\">{txn.current_txn_start_offset}</td>"
            f"<td class=\"num\">{'?' if lag is None else lag}</td>"
            f"{_blocked_groups_cell(entry)}</tr>",
            _TRANSACTION_LABELS,
        ))
        action = _BLOCKING_ACTIONS.get(entry.classification, "")
        rows.append(f"<tr class=\"cmd-row\"><td></td><td colspan=\"8\">"
                    f"<span class=\"note\">{_e(action)}</span></td></tr>")
    return (
        title + "<p class=\"note\">Open transactions older than "
        "blocked_groups_min_age_seconds, neither late nor orphaned, at whose start offset "
        "consumer groups are stopped (read_committed consumers wait until they end); "
        f"<a href=\"{_e(runbook_url)}#kafkaconsumersblockedbytransaction\" "
        "rel=\"noopener noreferrer\">runbook</a>.</p>"
        + _transaction_table("transactions blocking cards", rows)
    )


def _blocked_groups_cell(
    late: LateTransaction | OrphanedTransaction | BlockingTransaction,
) -> str:
    """The groups stopped at this transaction's start offset, each with how long the exporter
    has seen it there (a lower bound); unknown says why, never "none"."""
    if late.blocked_groups_unknown is not None:
        return (
            f"<td data-blocked-groups=\"unknown\"><span class=\"note\">unknown "
            f"({_e(late.blocked_groups_unknown)})</span></td>"
        )
    if not late.blocked_groups:
        return "<td data-blocked-groups=\"0\">none</td>"
    items = ", ".join(
        f"<code>{_e(g.group_id)}</code> (&ge; {_e(_duration(g.blocked_seconds))})"
        for g in late.blocked_groups
    )
    return f"<td data-blocked-groups=\"{len(late.blocked_groups)}\">{items}</td>"


_BROKER_LABELS = ("Broker", "Status", "transaction.max.timeout.ms", "Partitions with open txns",
                  "late", "hanging", "orphaned")


def _orphaned_table(snapshot: ClusterSnapshot, runbook_url: str) -> str:
    """Orphaned transactions not yet late (late ones are in the late table, as hanging)."""
    early = [o for o in snapshot.orphaned_transactions if not o.late]
    title = f"<h3>Orphaned transactions, not yet late ({len(early)})</h3>"
    if not early:
        return title + "<p class=\"empty\">No orphaned transactions.</p>"
    rows = []
    for orphan in early:
        # Orphaned wears the hanging badge: nothing will end it either.
        rows.append(_transaction_row(snapshot, orphan, "hanging"))
    return (
        title + "<p class=\"note\">Open transactions whose coordinator did not track their "
        "partition on two consecutive polls: nothing will end them. The abort command "
        "refuses them until they "
        "are late (or with --force); "
        f"<a href=\"{_e(runbook_url)}#kafkaorphanedtransaction\" rel=\"noopener noreferrer\">"
        "runbook</a>.</p>"
        + _transaction_table("transactions orphaned cards", rows)
    )


_TWO_PHASE_LABELS = ("Age", "Classification", "Partition", "Producer id / epoch",
                     "Transactional id", "Start offset", "LSO lag")


def _two_phase_table(snapshot: ClusterSnapshot, runbook_url: str) -> str:
    """Two-phase-commit (KIP-939) transactions: apart from the late ones, never hanging."""
    entries = snapshot.two_phase_transactions
    stuck = sum(1 for t in entries if t.stuck)
    title = f"<h3>Two-phase-commit transactions ({len(entries)}, {stuck} stuck)</h3>"
    if not entries:
        return title + "<p class=\"empty\">No two-phase-commit transactions.</p>"
    rows = []
    for entry in entries:
        txn = entry.transaction
        lag = snapshot.last_stable_offset_lag.get(TopicPartition(txn.topic, txn.partition))
        state = "stuck" if entry.stuck else "in time"
        rows.append(_label_cells(
            f"<tr class=\"txn\" data-classification=\"two_phase\" "
            f"data-stuck=\"{'true' if entry.stuck else 'false'}\">"
            f"<td class=\"num\">{_e(_duration(entry.age_seconds))}</td>"
            f"<td><span class=\"badge two_phase\">two_phase</span> {state}</td>"
            f"<td><code>{_e(txn.topic)}</code>-{txn.partition}</td>"
            f"<td class=\"num\">{txn.producer_id} / {txn.producer_epoch}</td>"
            f"<td>{_tid_cell(entry.transactional_id, entry.application)}</td>"
            f"<td class=\"num\">{txn.current_txn_start_offset}</td>"
            f"<td class=\"num\">{'?' if lag is None else lag}</td></tr>",
            _TWO_PHASE_LABELS,
        ))
    head = "".join(
        f"<th class=\"num\">{label}</th>" if label in _NUMERIC_COLUMNS else f"<th>{label}</th>"
        for label in _TWO_PHASE_LABELS
    )
    return (
        title + "<p class=\"note\">Their coordinator tracks them with the timeout 2147483647 "
        "and never aborts them: an external coordinator (e.g. Flink) decides them. Stuck "
        "once older than two_phase_late_seconds. The abort command refuses them unless given "
        "--force-two-phase; "
        f"<a href=\"{_e(runbook_url)}#kafkatwophasetransactionstuck\" "
        "rel=\"noopener noreferrer\">runbook</a>.</p>"
        f"<table class=\"transactions two-phase cards\"><thead><tr>{head}</tr></thead><tbody>"
        + "".join(rows) + "</tbody></table>"
    )


_TRANSACTION_LABELS = ("Age", "Classification", "Partition", "Producer id / epoch",
                       "Coordinator epoch", "Transactional id", "Start offset", "LSO lag",
                       "Consumer groups blocked")
_NUMERIC_COLUMNS = frozenset({"Age", "Producer id / epoch", "Coordinator epoch", "Start offset",
                              "LSO lag"})


def _transaction_table(css_class: str, rows: Sequence[str]) -> str:
    head = "".join(
        f"<th class=\"num\">{label}</th>" if label in _NUMERIC_COLUMNS else f"<th>{label}</th>"
        for label in _TRANSACTION_LABELS
    )
    return (f"<table class=\"{css_class}\"><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _label_cells(row: str, labels: Sequence[str]) -> str:
    """Give the row's cells, in order, `data-label`s: the narrow layout shows them as
    "label: value" in place of the hidden table header."""
    parts = row.split("<td")
    return parts[0] + "".join(
        f"<td data-label=\"{_e(label)}\"{rest}" for label, rest in zip(labels, parts[1:],
                                                                     strict=True)
    )


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _optional_duration(seconds: float | None) -> str:
    """Unknown (some partitions unobserved, no open transaction seen) shows as "unknown"."""
    return "unknown" if seconds is None else _duration(seconds)


def _duration(seconds: float) -> str:
    """Human age: 45s, 12m 05s, 3h 07m, 2d 04h."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"
