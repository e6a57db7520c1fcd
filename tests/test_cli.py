"""CLI: --version/--help, scan output and exit codes (scan against constructed snapshots)."""

from __future__ import annotations

import io
import json
import os
import platform
import signal
import socket
import subprocess
import sys
from pathlib import Path

from exporter_factories import NOW_MS, blocking, broker, late, open_txn, orphaned, snapshot

from exporter import __version__
from exporter.model import Classification, ClusterSnapshot, PartitionVerification
from exporter.scan import (
    COLUMNS,
    EXIT_AUTHENTICATION_FAILED,
    EXIT_ERROR,
    EXIT_HANGING,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    ClusterFailed,
    run_scan,
)
from exporter.settings import ClusterSettings


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=30, env=env)


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    line = result.stdout.strip()
    assert line.startswith(f"kafka-txn-exporter {__version__} (revision "), line
    # Run from this checkout, the revision is the checked-out commit.
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert f"(revision {head}, python {platform.python_version()})" in line


def test_help_documents_commands_flags_and_env() -> None:
    top = run_cli("--help").stdout
    for word in ("serve", "scan", "demo", "sim", "abort", "KTE_CONFIG",
                 "KTE_CLUSTER_BOOTSTRAP_SERVERS", "KTE_CLUSTER_SASL_PASSWORD_FILE",
                 "KTE_WEB_PORT", "KTE_LOG_FORMAT"):
        assert word in top, word
    serve = run_cli("serve", "--help").stdout
    for flag in ("--config", "--web.listen-address", "--web.port", "--log.format",
                 "--log.level", "--bootstrap-servers", "--web.telemetry-path", "[HOST]:PORT",
                 "SIGHUP", "KTE_WEB_TELEMETRY_PATH", "KTE_CLUSTER_TLS_KEY_PASSWORD_FILE"):
        assert flag in serve, flag
    scan = run_cli("scan", "--help").stdout
    assert "--output" in scan and "Duration(min)" in scan
    assert "--web.port" in run_cli("demo", "--help").stdout


def test_no_command_prints_help_and_exits_2() -> None:
    result = run_cli()
    assert result.returncode == 2
    assert "serve" in result.stderr


def clusters(*names: str) -> tuple[ClusterSettings, ...]:
    return tuple(ClusterSettings(name=n, bootstrap_servers=("h:1",)) for n in names)


def scan_with(*snaps: ClusterSnapshot | Exception, output: str = "table") -> tuple[int, str, str]:
    by_name = {}
    for i, item in enumerate(snaps):
        by_name[f"c{i + 1}"] = item

    def fake(settings: ClusterSettings) -> ClusterSnapshot:
        item = by_name[settings.name]
        if isinstance(item, Exception):
            raise item
        return item

    out, err = io.StringIO(), io.StringIO()
    code = run_scan(clusters(*by_name), output, out, err, scan_fn=fake)
    return code, out.getvalue(), err.getvalue()


HANGING = late(open_txn("hang-test", 0, producer_id=3, age_ms=400_000), Classification.HANGING)
TRACKED = late(open_txn("txn-open", 2, producer_id=2, producer_epoch=1, coordinator_epoch=5,
                        start_offset=42, age_ms=125_000),
               Classification.COORDINATOR_TRACKED, "tx-open-1")


def test_scan_nothing_late_exits_0_with_header_only() -> None:
    code, out, _ = scan_with(snapshot("c1", brokers=[broker(1)]))
    assert code == EXIT_OK
    assert out.split() == list(COLUMNS)


def test_scan_hanging_exits_1_with_find_hanging_columns() -> None:
    code, out, _ = scan_with(snapshot("c1", brokers=[broker(1)],
                                      late_transactions=[TRACKED, HANGING]))
    assert code == EXIT_HANGING
    header, first, second = out.strip().splitlines()
    assert header.split() == list(COLUMNS)
    # sorted by topic: hang-test before txn-open; Duration(min) = (now - LastTimestamp) // 60 s
    assert first.split() == ["hang-test", "0", "3", "0", "-1", "0",
                             str(NOW_MS - 400_000), "6", "400s", "-", "hanging", "-", "-"]
    assert second.split() == ["txn-open", "2", "2", "1", "5", "42", str(NOW_MS - 125_000),
                              "2", "125s", "tx-open-1", "coordinator_tracked", "-", "-"]


def test_scan_shows_blocked_groups_in_table_and_json() -> None:
    blocking = late(open_txn("pay", 0, producer_id=5, start_offset=6, age_ms=400_000),
                    Classification.HANGING, blocked=[("grp-rc", 120.0), ("etl", 30.0)])
    unknown = late(open_txn("pay", 1, producer_id=6, start_offset=9, age_ms=400_000),
                   Classification.HANGING, blocked_unknown="unauthorized")
    snap = snapshot("c1", brokers=[broker(1)], late_transactions=[blocking, unknown],
                    blocked_groups_unknown_by_reason={"unauthorized": 1})
    code, out, err = scan_with(snap)
    assert code == EXIT_HANGING
    _, first, second = out.strip().splitlines()
    assert first.split()[-2] == "grp-rc,etl" and second.split()[-2] == "?"
    assert "blocked consumer groups unknown (unauthorized) for 1" in err
    _, out, _ = scan_with(snap, output="json")
    rows = json.loads(out)["transactions"]
    assert rows[0]["blocked_groups"] == [
        {"group_id": "grp-rc", "committed_offset": 6, "blocked_seconds": 120.0},
        {"group_id": "etl", "committed_offset": 6, "blocked_seconds": 30.0},
    ]
    assert rows[0]["blocked_groups_unknown"] is None
    assert rows[1]["blocked_groups"] is None and rows[1]["blocked_groups_unknown"] == "unauthorized"


def test_scan_shows_a_lingering_transaction_blocking_groups_without_failing() -> None:
    """Not late, tracked by its coordinator, stopping a group: a row classified
    coordinator_tracked with its groups and application; exit status 0 (nothing hanging)."""
    lingering = blocking(
        open_txn("clicks", 1, producer_id=11, start_offset=70, age_ms=180_000),
        Classification.COORDINATOR_TRACKED, "clicks-sink-3-118",
        blocked=[("dashboard", 120.0)], application="clicks-sink",
    )
    quiet = blocking(open_txn("clicks", 2, producer_id=12, start_offset=5, age_ms=180_000),
                     Classification.COORDINATOR_TRACKED, "clicks-sink-4-118",
                     application="clicks-sink")  # stops nobody: no row
    snap = snapshot("c1", brokers=[broker(1)], blocking_transactions=[lingering, quiet])
    code, out, _ = scan_with(snap)
    assert code == EXIT_OK
    _, row = out.strip().splitlines()
    assert row.split() == ["clicks", "1", "11", "0", "-1", "70", str(NOW_MS - 180_000), "3",
                           "180s", "clicks-sink-3-118", "coordinator_tracked", "dashboard",
                           "clicks-sink"]
    code, out, _ = scan_with(snap, output="json")
    (data,) = json.loads(out)["transactions"]
    assert code == EXIT_OK
    assert data["late"] is False and data["application"] == "clicks-sink"
    assert data["blocked_groups"] == [
        {"group_id": "dashboard", "committed_offset": 70, "blocked_seconds": 120.0}]


ORPHANED = orphaned(open_txn("txn-open", 1, producer_id=9, start_offset=7, age_ms=95_000),
                    "etl-1")


def test_scan_orphaned_not_yet_late_is_a_row_and_exits_1() -> None:
    late_orphan = orphaned(HANGING.transaction, late=True)  # listed once, as hanging
    snap = snapshot("c1", brokers=[broker(1)], late_transactions=[TRACKED],
                    orphaned_transactions=[ORPHANED, late_orphan])
    code, out, _ = scan_with(snap)
    assert code == EXIT_HANGING
    _, first, second = out.strip().splitlines()
    assert first.split() == ["txn-open", "1", "9", "0", "-1", "7", str(NOW_MS - 95_000),
                             "1", "95s", "etl-1", "orphaned", "-", "-"]
    assert second.split()[-3:] == ["coordinator_tracked", "-", "-"]
    code, out, _ = scan_with(snap, output="json")
    data = json.loads(out)
    assert code == EXIT_HANGING and data["orphaned"] is True and data["hanging"] is False
    assert [r["classification"] for r in data["transactions"]] == [
        "orphaned", "coordinator_tracked"]


def test_scan_only_tracked_late_exits_0() -> None:
    code, _, _ = scan_with(snapshot("c1", brokers=[broker(1)], late_transactions=[TRACKED]))
    assert code == EXIT_OK


def test_scan_json_output() -> None:
    code, out, _ = scan_with(snapshot("c1", brokers=[broker(1)], late_transactions=[HANGING]),
                             output="json")
    assert code == EXIT_HANGING
    data = json.loads(out)
    assert data["hanging"] is True
    (row,) = data["transactions"]
    assert row["topic"] == "hang-test" and row["producer_id"] == 3
    assert row["duration_minutes"] == 6 and row["classification"] == "hanging"
    assert row["transactional_id"] == "" and row["age_seconds"] == 400.0


def test_scan_json_reports_exposure_and_compaction_unknown_as_null() -> None:
    compacted = late(open_txn("changelog", 1, producer_id=4), Classification.HANGING,
                     topic_compacted=True)
    exposed = snapshot(
        "c1",
        brokers=[broker(1, partition_verification=PartitionVerification.DISABLED),
                 broker(2, partition_verification=PartitionVerification.ENABLED),
                 broker(3, up=False)],
        late_transactions=[HANGING, compacted],
        finalized_transaction_version=2,
    )
    safe = snapshot("c2", brokers=[broker(1, partition_verification=PartitionVerification.ENABLED)],
                    finalized_transaction_version=2)
    code, out, err = scan_with(exposed, safe, output="json")
    assert code == EXIT_HANGING
    data = json.loads(out)
    assert {r["topic"]: r["topic_compacted"] for r in data["transactions"]} == {
        "changelog": True, "hang-test": None}
    assert data["exposure"] == {
        "c1": {"finalized_transaction_version": 2,
               "partition_verification": {"1": "disabled", "2": "enabled", "3": None}},
        "c2": {"finalized_transaction_version": 2, "partition_verification": {"1": "enabled"}},
    }
    assert data["notes"] == [
        "c1: exposed to hanging transactions: partition verification off on broker(s) 1"]
    assert err.splitlines() == [f"note: {data['notes'][0]}"]


def test_scan_notes_an_old_cluster_and_a_low_transaction_version() -> None:
    old = snapshot("c1", brokers=[broker(1, partition_verification=(
        PartitionVerification.NOT_OFFERED))], finalized_transaction_version=0)
    _, _, err = scan_with(old)
    assert err.splitlines() == [
        "note: c1: exposed to hanging transactions: partition verification off on broker(s) 1;"
        " finalized transaction.version 0 (below 2)"]
    unknown = snapshot("c1", brokers=[broker(1)])  # nothing known: no claim either way
    assert scan_with(unknown)[2] == ""


def test_scan_error_exits_2() -> None:
    code, _, err = scan_with(ConnectionError("refused"))
    assert code == EXIT_ERROR
    assert "cluster c1" in err


def test_scan_of_a_cluster_no_broker_answered_exits_unreachable() -> None:
    code, _, err = scan_with(snapshot("c1", up=False))
    assert code == EXIT_UNREACHABLE
    assert err == "error: cluster c1: cluster not reachable (no broker answered)\n"


def test_scan_with_several_failed_clusters_exits_with_the_lowest_cause() -> None:
    code, _, err = scan_with(ClusterFailed("timed out: x", EXIT_TIMEOUT),
                             ClusterFailed("authentication failed: y", EXIT_AUTHENTICATION_FAILED),
                             snapshot("c3", up=False))
    assert code == EXIT_AUTHENTICATION_FAILED
    assert err.splitlines() == [
        "error: cluster c1: timed out: x",
        "error: cluster c2: authentication failed: y",
        "error: cluster c3: cluster not reachable (no broker answered)",
    ]


def test_scan_error_wins_over_hanging_and_multi_cluster_column() -> None:
    code, out, _ = scan_with(
        snapshot("c1", brokers=[broker(1)], late_transactions=[HANGING]),
        ConnectionError("refused"),
    )
    assert code == EXIT_ERROR
    assert out.split()[0] == "Cluster"


def test_serve_port_in_use_exits_2() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--bootstrap-servers", "127.0.0.1:1", "--web.listen-address",
                         "127.0.0.1", "--web.port", str(port))
    assert result.returncode == 2
    assert f"web: cannot listen on 127.0.0.1:{port}" in result.stderr


def test_sim_subcommand_delegates_its_arguments() -> None:
    result = run_cli("sim", "--help")
    assert result.returncode == 0
    assert "usage: kafka-txn-exporter sim" in result.stdout
    assert "--brokers" in result.stdout  # the simulator's own flag, not ours


def test_abort_subcommand_delegates_its_arguments() -> None:
    result = run_cli("abort", "--help")
    assert result.returncode == 0
    assert "--start-offset" in result.stdout and "--yes" in result.stdout


def test_ctrl_c_during_a_scan_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    """Interrupted while a request waits on a broker that accepted and never answers."""
    with socket.socket() as silent_broker:
        silent_broker.bind(("127.0.0.1", 0))
        silent_broker.listen()
        port = silent_broker.getsockname()[1]
        config = tmp_path / "c.yaml"
        config.write_text(f"clusters:\n  - {{name: a, bootstrap_servers: ['127.0.0.1:{port}'],"
                          " request_timeout_seconds: 30}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "scan", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            # A shell starting this suite in the background ignores SIGINT for it; a terminal's
            # Ctrl-C reaches a scan whose SIGINT is at its default.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        silent_broker.settimeout(30)
        connection, _ = silent_broker.accept()  # the scan is now waiting for an answer
        with connection:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "kafka-txn-exporter: interrupted"
    assert "Traceback" not in err and "Exception ignored" not in err
    assert out == ""
