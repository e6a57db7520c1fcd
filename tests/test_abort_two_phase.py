"""`abort` and two-phase-commit transactions (KIP-939), against the simulator.

A 2PC transaction's outcome belongs to its external coordinator: `abort` refuses it, `--force`
included, unless `--force-two-phase` is given (docs/kafka-semantics.md#two-phase-commit)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_sim.client import KafkaProtocolError
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import open_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, cluster_settings, poll_once

from exporter.abort import EXIT_ABORTED, EXIT_REFUSED, run_abort
from exporter.analyze import analyze
from exporter.model import Classification

TWO_PHASE_ON = {**CAPTURE_BROKER_CONFIG, "transaction.two.phase.commit.enable": "true"}
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[SimCluster, Path]]:
    with SimCluster(brokers=1, topics={"t": 1}, broker_config=TWO_PHASE_ON,
                    profile="4.4-two-phase") as cluster:
        config = tmp_path / "config.yaml"
        servers = "\n".join(f"      - {s}" for s in cluster.bootstrap_servers.split(","))
        config.write_text(
            "clusters:\n  - name: sim\n    bootstrap_servers:\n"
            f"{servers}\n    request_timeout_seconds: 2\n"
            "admin:\n  clusters:\n    - name: sim\n      client_id: txn-admin\n",
            encoding="utf-8",
        )
        yield cluster, config


def _abort(sim: SimCluster, config: Path, start: int, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_abort(
        ["--config", str(config), "--cluster", "sim", "--topic", "t", "--partition", "0",
         "--start-offset", str(start), *extra],
        clock_ms=sim.clock.now_ms, stdout=out, stderr=err, env={},
    )
    return code, out.getvalue(), err.getvalue()


def _prepared(sim: SimCluster) -> int:
    """A prepared 2PC transaction (Enable2Pc producer, one record, left open), aged 3 h: far
    past transaction.max.timeout.ms, which the coordinator does not apply to it."""
    txn = open_transaction(sim.bootstrap_servers, "flink-sink-0", "t", [0], two_phase=True,
                           now_ms=sim.clock.now_ms)
    start = txn.batches[0].base_offset
    txn.close_quietly()
    sim.clock.advance(180 * MINUTE_MS)
    assert sim.state.coordinator.abort_timed_out_transactions() == []  # the reaper skips it
    return start


def test_the_coordinator_keeps_a_prepared_two_phase_transaction_and_it_is_classified(
    sim: tuple[SimCluster, Path],
) -> None:
    cluster, _ = sim
    _prepared(cluster)
    settings = cluster_settings(cluster, "sim")
    snap = analyze(poll_once(cluster, settings), settings)
    # One poll asks only about late transactions: this one is late by the clock.
    assert snap.late_transactions == ()
    (two_phase,) = snap.two_phase_transactions
    assert (two_phase.classification, two_phase.stuck) == (Classification.TWO_PHASE, True)
    assert two_phase.transactional_id == "flink-sink-0"


def test_abort_refuses_a_two_phase_transaction_even_with_force(
    sim: tuple[SimCluster, Path],
) -> None:
    cluster, config = sim
    start = _prepared(cluster)
    for extra in ((), ("--force", "--yes")):
        code, out, err = _abort(cluster, config, start, *extra)
        assert code == EXIT_REFUSED, err
        (line,) = err.splitlines()
        assert "two-phase-commit transaction (KIP-939)" in line and "--force-two-phase" in line
        assert "'flink-sink-0'" in line
        assert "Would have written (refused, nothing written)" in out
    assert cluster.state.partition("t", 0).log.last_stable_offset == start


def test_force_two_phase_aborts_it(sim: tuple[SimCluster, Path]) -> None:
    cluster, config = sim
    start = _prepared(cluster)
    code, _, err = _abort(cluster, config, start, "--force-two-phase", "--yes")
    assert code == EXIT_ABORTED, err
    assert "WARNING: --force-two-phase" in err
    log = cluster.state.partition("t", 0).log
    assert log.last_stable_offset == log.high_watermark > start


def test_a_young_two_phase_transaction_is_recognised_by_abort_too(
    sim: tuple[SimCluster, Path],
) -> None:
    cluster, config = sim
    txn = open_transaction(cluster.bootstrap_servers, "flink-sink-1", "t", [0], two_phase=True,
                           now_ms=cluster.clock.now_ms)
    start = txn.batches[0].base_offset
    txn.close_quietly()
    code, _, err = _abort(cluster, config, start, "--force", "--yes")
    assert code == EXIT_REFUSED and "two-phase-commit" in err


def test_a_broker_with_two_phase_commit_disabled_refuses_enable2pc() -> None:
    with SimCluster(brokers=1, topics={"t": 1}, broker_config=CAPTURE_BROKER_CONFIG,
                    profile="4.4-two-phase") as cluster:
        with pytest.raises(KafkaProtocolError) as refused:
            open_transaction(cluster.bootstrap_servers, "x", "t", [0], two_phase=True)
        assert refused.value.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
