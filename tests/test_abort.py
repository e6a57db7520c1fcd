"""`kafka-txn-exporter abort` (exporter/abort/) against the simulated cluster.

Semantics: docs/kafka-semantics.md#abort. The simulator runs with
transaction.max.timeout.ms=60000 and partition verification off (needed for a hanging
transaction, like the real-broker capture's hang-1); tests move the simulator clock instead of
waiting, and the command's poll uses that clock.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, SimEnv, cluster_settings, poll_once

from exporter.abort import (
    EXIT_ABORTED,
    EXIT_ERROR,
    EXIT_REFUSED,
    load_admin_settings,
    marker_coordinator_epoch,
    run_abort,
    write_txn_markers_request,
)
from exporter.analyze import analyze
from exporter.collect.connection import BrokerConnection, ConnectionOptions
from exporter.config import ConfigError
from exporter.model import Classification, ProducerEntry, TopicPartition
from exporter.settings import ClusterSettings

WRITE_TXN_MARKERS = 27
CLUSTER_AUTHORIZATION_FAILED = 31
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Env(SimEnv):
    config_file: Path
    settings: ClusterSettings
    waits: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        """The orphan check's pause, on the simulator's clock."""
        self.waits.append(seconds)
        self.sim.clock.advance(round(seconds * 1000))

    def abort(self, *extra: str, topic: str = "t", partition: int = 0,
              start_offset: int = 0) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run_abort(
            ["--config", str(self.config_file), "--cluster", "sim", "--topic", topic,
             "--partition", str(partition), "--start-offset", str(start_offset), *extra],
            clock_ms=self.sim.clock.now_ms, stdout=out, stderr=err, env={},
            sleep=self.sleep,
        )
        return code, out.getvalue(), err.getvalue()

    def log(self, partition: int) -> Any:
        return self.sim.state.partition("t", partition).log

    def offsets(self, partition: int) -> tuple[int, int]:
        """(last stable offset, high watermark) as the leader holds them."""
        log = self.log(partition)
        return int(log.last_stable_offset), int(log.high_watermark)

    def fresh_poll_late(self) -> list[tuple[str, int, int, int, Classification]]:
        snap = analyze(poll_once(self.sim, self.settings), self.settings)
        return [
            (lt.transaction.topic, lt.transaction.partition, lt.transaction.producer_id,
             lt.transaction.current_txn_start_offset, lt.classification)
            for lt in snap.late_transactions
        ]


def _write_config(path: Path, bootstrap: str, admin: str | None) -> None:
    servers = "\n".join(f"      - {s}" for s in bootstrap.split(","))
    text = (
        "clusters:\n"
        "  - name: sim\n"
        "    bootstrap_servers:\n"
        f"{servers}\n"
        "    request_timeout_seconds: 2\n"
        "    late_buffer_seconds: 300\n"
    )
    if admin is not None:
        text += admin
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        config_file = tmp_path / "config.yaml"
        _write_config(config_file, sim.bootstrap_servers,
                      "admin:\n  clusters:\n    - name: sim\n      client_id: txn-admin\n")
        settings = cluster_settings(
            sim, "sim", request_timeout_seconds=2.0, late_buffer_seconds=300.0
        )
        yield Env(sim, config_file, settings)


def _hang(env: Env, partition: int = 0, tid: str = "hang-1") -> tuple[int, int, int]:
    pid, epoch, start = hanging_transaction(env.bootstrap, tid, "t", partition,
                                            now_ms=env.now_ms)
    # Past transaction.max.timeout.ms (60 s) + the 5 min late buffer.
    env.sim.clock.advance(10 * MINUTE_MS)
    return pid, epoch, start


def _field(out: str, name: str) -> str:
    match = re.search(rf"^\s+{re.escape(name)}:\s+(.*)$", out, re.MULTILINE)
    assert match is not None, f"{name} missing from:\n{out}"
    return match.group(1)


# --------------------------------------------------------------------------- the happy path


def test_abort_hanging_transaction_lso_advances_and_fresh_poll_shows_it_gone(env: Env) -> None:
    pid, epoch, start = _hang(env)
    assert env.fresh_poll_late() == [("t", 0, pid, start, Classification.HANGING)]
    lso_before, hw_before = env.offsets(0)
    assert (lso_before, hw_before) == (start, start + 1)  # pinned at the open transaction

    code, out, err = env.abort("--yes", start_offset=start)

    assert code == EXIT_ABORTED, err
    # The plan names exactly what is written.
    assert _field(out, "Topic") == "t"
    assert _field(out, "Partition") == "0"
    assert _field(out, "Leader").startswith(f"broker {env.leader('t', 0)} at 127.0.0.1:")
    assert _field(out, "ProducerId") == str(pid)
    assert _field(out, "ProducerEpoch") == str(epoch)
    # DescribeProducers reports -1 before any marker: Java's orElse(0), never -1.
    assert _field(out, "CoordinatorEpoch").startswith("0 (DescribeProducers reported -1")
    assert _field(out, "Marker").startswith("ABORT")
    # hang-1 is known to its coordinator (state Empty) but without this partition.
    assert _field(out, "TransactionalId") == "hang-1"
    assert _field(out, "Classification").startswith("hanging")
    assert "does not list this partition" in _field(out, "Classification")
    assert f"last stable offset {start} -> {start + 2}" in out
    # The leader wrote one ABORT control batch for that producer with coordinator epoch 0.
    log = env.log(0)
    marker = log.batches[-1]
    assert marker.is_control and marker.producer_id == pid and marker.producer_epoch == epoch
    assert log.producers[pid].coordinator_epoch == 0
    assert log.producers[pid].current_txn_first_offset == -1
    assert env.offsets(0) == (start + 2, start + 2)
    # The exporter's own poll no longer sees anything late.
    assert env.fresh_poll_late() == []


def test_dry_run_prints_the_plan_and_writes_nothing(env: Env) -> None:
    pid, _, start = _hang(env)
    before = env.offsets(0)

    code, out, err = env.abort(start_offset=start)

    assert code == EXIT_ABORTED, err
    assert out.startswith("Dry run")
    assert "Nothing written" in out
    assert _field(out, "ProducerId") == str(pid)
    assert env.offsets(0) == before
    assert not env.log(0).batches[-1].is_control
    assert env.fresh_poll_late() == [("t", 0, pid, start, Classification.HANGING)]


# --------------------------------------------------------------------------- refusals


def test_refuses_coordinator_tracked_transaction_and_force_overrides(env: Env) -> None:
    """A late transaction its coordinator still lists is the coordinator's to end: the sweep
    has moved it to PrepareAbort but its markers are stalled (block_markers)."""
    txn = open_transaction(env.bootstrap, "tracked-1", "t", [1], transaction_timeout_ms=60_000,
                           now_ms=env.now_ms)
    try:
        env.sim.block_markers(env.leader("t", 1), True)
        env.sim.clock.advance(10 * MINUTE_MS)
        start = txn.result().start_offset("t", 1)
        assert env.fresh_poll_late() == [
            ("t", 1, txn.producer_id, start, Classification.COORDINATOR_TRACKED)
        ]
        before = env.offsets(1)

        code, out, err = env.abort("--yes", partition=1, start_offset=start)

        assert code == EXIT_REFUSED
        assert "neither hanging nor orphaned: coordinator_tracked" in err
        assert "'tracked-1'" in err and "--force" in err
        assert "nothing written" in out
        assert env.offsets(1) == before

        code, out, err = env.abort("--yes", "--force", partition=1, start_offset=start)

        assert code == EXIT_ABORTED, err
        assert "WARNING: --force" in err
        assert env.offsets(1)[0] > before[0]
    finally:
        txn.close_quietly()


def test_refuses_a_transaction_that_is_not_late(env: Env) -> None:
    """An ordinary young transaction: its coordinator lists it, and the plan shows the id the
    coordinator lists, not "none maps to the producer"."""
    txn = open_transaction(env.bootstrap, "young-1", "t", [2], now_ms=env.now_ms)
    try:
        start = txn.result().start_offset("t", 2)
        code, out, err = env.abort("--yes", partition=2, start_offset=start)
        assert code == EXIT_REFUSED
        assert "not late" in err
        assert "the coordinator of 'young-1' (state Ongoing) lists this partition" in err
        assert _field(out, "TransactionalId") == "young-1"
        assert env.waits == []  # tracked at the second look: no confirmation poll, no wait
        assert env.offsets(2) == (start, start + 1)
    finally:
        txn.close_quietly()


def test_a_young_orphaned_transaction_is_confirmed_by_two_looks_and_aborted(env: Env) -> None:
    """Not late, but its coordinator does not track its partition: `scan`'s two-look check
    calls it orphaned, and abort proceeds with the id the coordinator lists."""
    pid, _, start = hanging_transaction(env.bootstrap, "young-hang", "t", 1, now_ms=env.now_ms)
    assert env.fresh_poll_late() == []  # not late: find-hanging's rule would not see it

    code, out, err = env.abort(partition=1, start_offset=start)  # dry run

    assert code == EXIT_ABORTED, err
    assert env.waits == [2.0]  # the default --orphan-check-seconds, before the confirming look
    assert _field(out, "TransactionalId") == "young-hang"
    reason = _field(out, "Classification")
    assert reason.startswith("orphaned (open ")
    assert "the coordinator of 'young-hang' did not track this partition on 2 consecutive" in reason
    assert "may still be ended" not in out + err
    assert env.offsets(1) == (start, start + 1)

    code, out, err = env.abort("--yes", partition=1, start_offset=start)

    assert code == EXIT_ABORTED, err
    assert _field(out, "ProducerId") == str(pid)
    assert f"last stable offset {start} -> {start + 2}" in out
    assert env.offsets(1) == (start + 2, start + 2)


def test_one_look_at_a_young_untracked_transaction_refuses_without_calling_it_live(
    env: Env,
) -> None:
    """With --orphan-check-seconds 0 there is no second look at a young transaction: the
    refusal says its tracking was not checked and claims no "tracked". Its id is shown all the
    same: the detection poll lists the target partition's transactions at once (to recognise a
    two-phase-commit one), and the coordinator lists this id."""
    _, _, start = hanging_transaction(env.bootstrap, "young-hang-0", "t", 2, now_ms=env.now_ms)

    code, out, err = env.abort("--orphan-check-seconds", "0", partition=2, start_offset=start)

    assert code == EXIT_REFUSED
    assert "its coordinator was not asked" in err
    assert "may still be ended" not in err
    assert _field(out, "TransactionalId") == "young-hang-0"
    assert env.waits == []


def test_a_young_transaction_whose_coordinator_is_loading_is_refused_as_unknown(
    env: Env,
) -> None:
    _, _, start = hanging_transaction(env.bootstrap, "young-hang-l", "t", 0, now_ms=env.now_ms)
    state: Any = env.sim.state
    partition = env.sim.call(lambda: state.coordinator.partition_for("young-hang-l"))
    env.sim.call(state.coordinator.loading_partitions.add, partition)

    code, out, err = env.abort(start_offset=start)

    assert code == EXIT_REFUSED
    assert "its coordinator could not be asked" in err
    assert "nothing written" in out
    assert env.offsets(0) == (start, start + 1)


def test_refuses_when_no_transaction_starts_at_the_offset(env: Env) -> None:
    _, _, start = _hang(env)
    code, _, err = env.abort("--yes", "--force", start_offset=start + 5)
    assert code == EXIT_REFUSED
    assert f"no open transaction starts at offset {start + 5}" in err
    assert f"open transactions start at: {start} " in err


# --------------------------------------------------------------------------- errors


def test_cluster_authorization_failed_says_alter_is_missing(env: Env) -> None:
    pid, _, start = _hang(env)
    env.sim.inject_error(WRITE_TXN_MARKERS, CLUSTER_AUTHORIZATION_FAILED)

    code, _, err = env.abort("--yes", start_offset=start)

    assert code == EXIT_ERROR
    assert "permission denied" in err and "CLUSTER_AUTHORIZATION_FAILED (31)" in err
    assert "ALTER" in err and "--operation Alter --cluster" in err
    assert "--allow-principal User:<admin principal>" in err
    assert env.fresh_poll_late() == [("t", 0, pid, start, Classification.HANGING)]


def test_unknown_partition_is_an_error(env: Env) -> None:
    code, _, err = env.abort("--yes", "--force", topic="no-such-topic")
    assert code == EXIT_ERROR
    assert "unknown topic or partition: no-such-topic-0" in err


def test_missing_admin_section_is_an_error(env: Env, tmp_path: Path) -> None:
    _write_config(env.config_file, env.bootstrap, admin=None)
    code, _, err = env.abort("--yes")
    assert code == EXIT_ERROR
    assert "admin.clusters: no entry for cluster 'sim'" in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_abort(["--cluster", "x"]) == EXIT_ERROR
    assert "--topic" in capsys.readouterr().err


# --------------------------------------------------------------------------- units


def test_marker_coordinator_epoch_uses_reported_and_zero_for_minus_one() -> None:
    assert marker_coordinator_epoch(-1) == 0
    assert marker_coordinator_epoch(0) == 0
    assert marker_coordinator_epoch(7) == 7


def test_write_txn_markers_request_is_v1_abort_with_reported_epochs() -> None:
    connection = BrokerConnection("127.0.0.1", 1, ConnectionOptions(client_id="t"))
    connection.api_versions = {WRITE_TXN_MARKERS: (1, 2)}
    producer = ProducerEntry(topic="t", partition=4, leader_id=1, producer_id=42,
                             producer_epoch=3, coordinator_epoch=5,
                             current_txn_start_offset=10, last_timestamp_ms=0)
    request = write_txn_markers_request(TopicPartition("t", 4), producer)(connection)
    assert request.API_VERSION == 1
    (marker,) = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (42, 3, 5)
    assert marker.transaction_result is False
    assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [("t", [4])]
    request.with_header(correlation_id=1, client_id="t")
    assert request.encode(header=True, framed=True)


def test_admin_loader_accepts_a_kte_named_password_env(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    _write_config(path, "127.0.0.1:9092", (
        "admin:\n  clusters:\n    - name: sim\n      sasl:\n        mechanism: PLAIN\n"
        "        username: admin\n        password_env: KTE_ADMIN_PASSWORD\n"
    ))
    settings, admins = load_admin_settings(str(path), {"KTE_ADMIN_PASSWORD": "s3cret"})
    assert [c.name for c in settings.clusters] == ["sim"]
    sasl = admins["sim"].sasl
    assert sasl is not None and (sasl.username, sasl.password) == ("admin", "s3cret")


def test_admin_loader_rejects_an_admin_entry_for_an_unknown_cluster(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    _write_config(path, "127.0.0.1:9092", "admin:\n  clusters:\n    - name: prod\n")
    with pytest.raises(ConfigError, match=r"admin.clusters\[0\].name: no cluster named 'prod'"):
        load_admin_settings(str(path), {})


def test_daemon_code_paths_never_write_markers() -> None:
    """Only exporter/abort/ may mention WriteTxnMarkers, and the daemon's entry point must
    not import it."""
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "exporter").rglob("*.py")
        if "abort" not in p.relative_to(REPO / "exporter").parts
        and re.search(r"WriteTxnMarkers|write_txn_markers", p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys, exporter.cli, exporter.scheduler, exporter.expose.http; "
         "print('exporter.abort' in sys.modules)"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    assert result.stdout.strip() == "False"


def test_admin_loader_once_config_accepts_the_admin_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring the lead applies to config.py (`admin` a known top-level key, so `serve`
    reads the same file): the loader then hands the file to load_settings unchanged."""
    import exporter.config as config_module

    monkeypatch.setattr(config_module, "_TOP_LEVEL_KEYS", (*config_module._TOP_LEVEL_KEYS,
                                                           "admin"))
    path = tmp_path / "c.yaml"
    _write_config(path, "127.0.0.1:9092", "admin:\n  clusters:\n    - name: sim\n")
    settings, admins = load_admin_settings(str(path), {})
    assert [c.name for c in settings.clusters] == ["sim"] and list(admins) == ["sim"]
    assert config_module.load_settings(str(path), env={}).clusters[0].name == "sim"


def test_an_answer_listing_the_partition_twice_never_says_nothing_was_written(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker writes the marker, but its answer lists the partition twice, the first copy
    with an error: the answer proves nothing either way, so the partition is checked."""
    import exporter.abort.io as abort_io

    parse = abort_io.parse_write_txn_markers

    def twice(response: Any, tp: TopicPartition) -> tuple[int, ...]:
        for marker in response.markers:
            for topic in marker.topics:
                if topic.name == tp.topic:
                    written = topic.partitions[0]
                    copy = type(written)(partition_index=written.partition_index,
                                         error_code=47)  # INVALID_PRODUCER_EPOCH
                    topic.partitions = [copy, *topic.partitions]
        return parse(response, tp)

    monkeypatch.setattr(abort_io, "parse_write_txn_markers", twice)
    _, _, start = _hang(env)

    code, out, err = env.abort("--yes", start_offset=start)

    assert "Nothing was written" not in out + err
    assert "lists t-0 2 times (INVALID_PRODUCER_EPOCH (47), NO_ERROR (0))" in err
    assert "does not tell whether the marker was written" in err
    assert code == EXIT_ABORTED, err
    assert f"last stable offset {start} -> {start + 2}" in out  # it was written
    assert env.log(0).batches[-1].is_control
