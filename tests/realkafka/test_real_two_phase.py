"""Two-phase-commit transactions (KIP-939) and transaction version 2 on real brokers.

Facts: docs/kafka-semantics.md#two-phase-commit and #transaction-version-2.
- 4.4.0 offers InitProducerId v6 (Enable2Pc) only with unstable.api.versions.enable=true (v6 is
  `latestVersionUnstable`); with transaction.two.phase.commit.enable=false its coordinator
  answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; with it, the transaction's timeout is
  2147483647 and the coordinator never aborts it. Its Java producer 4.4.0 has no public
  prepare/complete API and never sets Enable2Pc, so the 2PC producer here is the raw protocol.
- 3.9.2 and 4.0.2 have no InitProducerId v6 at all, like the simulator's profiles.
- Kafka's own Java producer (compiled helper tests/realkafka/java/TwoPhaseProducer.java) runs
  transactions back to back: a new epoch per transaction under transaction version 2 (4.x),
  one epoch under version 1 (3.9.2); the exporter calls none of them late, hanging or orphaned.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka_sim.client import KafkaProtocolError, RawKafkaClient
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from kafka_sim.realkafka import KafkaInstall, RealKafkaCluster, java_command, kafka_home
from kafka_sim.versions import PROFILES
from realhelpers import (
    LATE_BACKDATE_MS,
    REPO,
    VERIFICATION_OFF,
    create_topic,
    jmx_late_transactions,
    poll_env,
    unique,
)

from exporter.abort import EXIT_REFUSED
from exporter.model import Classification, ClusterSnapshot
from exporter.observe import ClusterObserver
from exporter.rules import TWO_PHASE_TRANSACTION_TIMEOUT_MS
from exporter.settings import ClusterSettings

INIT_PRODUCER_ID = 22
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSUPPORTED_VERSION = 35
TWO_PHASE_CONFIG = {"transaction.two.phase.commit.enable": "true"}
UNSTABLE_APIS = {"unstable.api.versions.enable": "true"}
HOUR_MS = 3_600_000
SIM_PROFILE = {"3.9.2": "3.8", "4.0.2": "4.0"}
"""The simulator profile each version of the matrix without 2PC is compared with."""


def _has_two_phase(version: str) -> bool:
    return tuple(int(x) for x in version.split(".")[:2]) >= (4, 4)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def java_helper(kafka_version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TwoPhaseProducer compiled against the client jars of the version under test (it reads
    the producer's internal id and epoch reflectively)."""
    classes = tmp_path_factory.mktemp(f"java-classes-{kafka_version}")
    javac = shutil.which("javac") or str(Path(java_command()).with_name("javac"))
    lib = kafka_home() / kafka_version / "lib"
    result = subprocess.run(
        [javac, "-cp", f"{lib}/*", "-d", str(classes),
         str(REPO / "tests" / "realkafka" / "java" / "TwoPhaseProducer.java")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return classes


def _run_java(version: str, classes: Path, *args: str) -> subprocess.Popen[str]:
    lib = kafka_home() / version / "lib"
    return subprocess.Popen(
        [java_command(), "-cp", f"{lib}/*:{classes}", "TwoPhaseProducer", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def two_phase_brokers(
    kafka_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RealKafkaCluster, RealKafkaCluster] | None]:
    """On 4.4+: (2PC enabled, 2PC disabled) brokers, both offering the unstable InitProducerId
    v6, started in parallel. None where the version has no 2PC."""
    if not _has_two_phase(kafka_version):
        yield None
        return
    configs = {
        "on": {**VERIFICATION_OFF, **UNSTABLE_APIS, **TWO_PHASE_CONFIG},
        "off": {**VERIFICATION_OFF, **UNSTABLE_APIS},
    }
    clusters = {
        kind: RealKafkaCluster(
            install=KafkaInstall.find(kafka_version),
            workdir=tmp_path_factory.mktemp(f"kafka-2pc-{kind}-{kafka_version}"),
            broker_config=config,
        )
        for kind, config in configs.items()
    }
    try:
        # Both boot at once; launched from this thread (the JVMs die with their launcher).
        for cluster in clusters.values():
            cluster.launch()
        for cluster in clusters.values():
            for node_id in cluster.node_ids:
                cluster.wait_started(node_id)
        yield clusters["on"], clusters["off"]
    finally:
        for cluster in clusters.values():
            cluster.stop()


def _init_producer_id_versions(cluster: RealKafkaCluster) -> tuple[int, int]:
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    client = RawKafkaClient(host, int(port))
    try:
        return client.negotiate()[INIT_PRODUCER_ID]
    finally:
        client.close()


# --------------------------------------------------------------------------- 2PC


def test_without_two_phase_commit_the_version_has_no_enable2pc_like_its_profile(
    kafka_version: str, real_kafka: RealKafkaCluster
) -> None:
    """Every version's default broker (no unstable APIs) offers InitProducerId up to v5: a
    client cannot even ask for 2PC. Where the matrix lacks 2PC (3.9.2, 4.0.2) the simulator's
    profile agrees."""
    low, high = _init_producer_id_versions(real_kafka)
    assert (low, high) == (0, 5)
    topic = create_topic(real_kafka, unique("no2pc"))
    with pytest.raises(KafkaProtocolError) as refused:
        open_transaction(real_kafka.bootstrap, unique("no2pc-txn"), topic, [0], two_phase=True)
    assert refused.value.error_code == UNSUPPORTED_VERSION
    if kafka_version in SIM_PROFILE:
        assert PROFILES[SIM_PROFILE[kafka_version]].api_versions[INIT_PRODUCER_ID] == (low, high)


@pytest.mark.system_tools  # promtool
def test_a_prepared_two_phase_transaction_is_two_phase_not_late_and_abort_refuses_it(
    kafka_version: str,
    two_phase_brokers: tuple[RealKafkaCluster, RealKafkaCluster] | None,
    tmp_path: Path,
) -> None:
    if two_phase_brokers is None:
        assert not _has_two_phase(kafka_version)  # 3.9.2, 4.0.2: see the test above
        return
    enabled, disabled = two_phase_brokers
    assert _init_producer_id_versions(enabled) == (0, 6)

    # 2PC disabled: Kafka's coordinator refuses Enable2Pc (TransactionCoordinator).
    topic_off = create_topic(disabled, unique("2pc-off"))
    with pytest.raises(KafkaProtocolError) as refused:
        open_transaction(disabled.bootstrap, unique("2pc-off-txn"), topic_off, [0], two_phase=True)
    assert refused.value.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # 2PC enabled: a prepared transaction (written, never ended), its record dated 2 h ago,
    # far past transaction.max.timeout.ms + 5 min and past two_phase_late_seconds (1 h); next
    # to it, a hanging transaction of an ordinary producer on another partition.
    topic = create_topic(enabled, unique("2pc"), partitions=2)
    tid = unique("flink-sink")
    written_ms = int(time.time() * 1000) - 2 * HOUR_MS
    prepared = open_transaction(
        enabled.bootstrap, tid, topic, {0: [(b"k", b"v", written_ms)]}, two_phase=True
    )
    start = prepared.batches[0].base_offset
    prepared.close_quietly()
    hang_pid, _, hang_start = hanging_transaction(
        enabled.bootstrap, unique("plain"), topic, 1, backdate_ms=LATE_BACKDATE_MS
    )

    described = enabled.tool(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", enabled.bootstrap,
        "describe", "--transactional-id", tid,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    row = dict(
        zip(
            described.stdout.splitlines()[0].split(),
            described.stdout.splitlines()[1].split(),
            strict=True,
        )
    )
    assert row["TransactionState"] == "Ongoing"
    assert int(row["TransactionTimeoutMs"]) == TWO_PHASE_TRANSACTION_TIMEOUT_MS

    with poll_env(enabled) as env:
        observation, snapshot = env.poll()
    real = observation.descriptions[tid]
    assert real is not None
    assert real.state == "Ongoing"
    assert real.transaction_timeout_ms == TWO_PHASE_TRANSACTION_TIMEOUT_MS
    assert _simulator_answers() == (
        (real.state, real.transaction_timeout_ms, len(real.topic_partitions)),
        refused.value.error_code,
    )
    (two_phase,) = [t for t in snapshot.two_phase_transactions if t.transaction.topic == topic]
    assert two_phase.classification is Classification.TWO_PHASE
    assert (two_phase.transaction.partition, two_phase.transaction.current_txn_start_offset) == (
        0,
        start,
    )
    assert two_phase.transactional_id == tid and two_phase.stuck
    assert two_phase.age_seconds >= 2 * 3600 - 60
    late = [t for t in snapshot.late_transactions if t.transaction.topic == topic]
    assert [
        (t.transaction.partition, t.transaction.producer_id, t.classification) for t in late
    ] == [(1, hang_pid, Classification.HANGING)]
    assert [t for t in snapshot.orphaned_transactions if t.transaction.topic == topic] == []
    # The broker's own gauge does not know 2PC: it counts both partitions as late.
    assert jmx_late_transactions(enabled) == 2
    (broker,) = snapshot.brokers
    assert broker.partitions_with_late_transactions == 1

    _assert_the_alert_fires(snapshot, tmp_path)

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "real", "bootstrap_servers": enabled.bootstrap.split(",")}],
        "admin": {"clusters": [{"name": "real"}]},
    }), encoding="utf-8")  # fmt: skip
    for flags in ((), ("--force", "--yes")):
        result = _abort(config, topic, 0, start, *flags)
        assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
        assert "two-phase-commit transaction (KIP-939)" in result.stderr
        assert "--force-two-phase" in result.stderr
    # The hanging one next to it is still abortable as before.
    result = _abort(config, topic, 1, hang_start, "--yes")
    assert result.returncode == 0, result.stdout + result.stderr


def _simulator_answers() -> tuple[tuple[str, int, int], int]:
    """The same two questions put to the simulator's "4.4-two-phase" profile: the coordinator's
    description of a prepared 2PC transaction (state, timeout, partitions), and the error a
    broker with 2PC disabled answers to Enable2Pc."""
    enabled = {"transaction.two.phase.commit.enable": "true"}
    with SimCluster(
        brokers=1, topics={"t": 1}, broker_config=enabled, profile="4.4-two-phase"
    ) as sim:
        txn = open_transaction(sim.bootstrap_servers, "sim-2pc", "t", [0], two_phase=True)
        txn.close_quietly()
        settings = ClusterSettings(name="sim", bootstrap_servers=(sim.bootstrap_servers,))
        poller = ClusterObserver(settings, clock_ms=sim.clock.now_ms, also_ask=lambda _: True)
        try:
            description = poller.poll().descriptions["sim-2pc"]
        finally:
            poller.close()
    assert description is not None
    with (
        SimCluster(brokers=1, topics={"t": 1}, profile="4.4-two-phase") as sim,
        pytest.raises(KafkaProtocolError) as refused,
    ):
        open_transaction(sim.bootstrap_servers, "sim-2pc", "t", [0], two_phase=True)
    return (
        (description.state, description.transaction_timeout_ms, len(description.topic_partitions)),
        refused.value.error_code,
    )


def _abort(
    config: Path, topic: str, partition: int, start: int, *flags: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "simulator")])
    return subprocess.run(
        [sys.executable, "-m", "exporter", "abort", "--config", str(config), "--cluster",
         "real", "--topic", topic, "--partition", str(partition), "--start-offset", str(start),
         *flags],
        capture_output=True, text=True, timeout=120, env=env, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _assert_the_alert_fires(snapshot: ClusterSnapshot, tmp_path: Path) -> None:
    """The generated KafkaTwoPhaseTransactionStuck rule, fed the exporter's real series
    (promtool test rules): fires after its 5 min `for`, naming the transaction."""
    (two_phase,) = [t for t in snapshot.two_phase_transactions if t.stuck]
    txn = two_phase.transaction
    labels = {
        "cluster": snapshot.cluster, "topic": txn.topic, "partition": str(txn.partition),
        "producer_id": str(txn.producer_id), "producer_epoch": str(txn.producer_epoch),
        "coordinator_epoch": str(txn.coordinator_epoch),
        "start_offset": str(txn.current_txn_start_offset),
        "transactional_id": two_phase.transactional_id, "stuck": "true",
    }  # fmt: skip
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    expected = {k: v for k, v in labels.items() if k != "stuck"} | {"severity": "warning"}
    start_age = round(two_phase.age_seconds)
    rule = next(
        r
        for g in yaml.safe_load(
            (REPO / "dashboards" / "alerts" / "rules.yaml").read_text(encoding="utf-8")
        )["groups"]
        for r in g["rules"]
        if r.get("alert") == "KafkaTwoPhaseTransactionStuck"
    )
    summary = (
        f"Two-phase-commit transaction stuck on {txn.topic}-{txn.partition} in Kafka "
        f"cluster {snapshot.cluster}"
    )
    assert rule["annotations"]["summary"].startswith("Two-phase-commit transaction stuck on")
    annotations = {
        "summary": summary,
        "runbook_url": rule["annotations"]["runbook_url"],
        "description": (
            f"The two-phase-commit (KIP-939) transaction of transactional id "
            f'"{two_phase.transactional_id}" (producer {txn.producer_id}, epoch '
            f"{txn.producer_epoch}) has been open on {txn.topic}-{txn.partition} since offset "
            f"{txn.current_txn_start_offset} for {_humanize(start_age + 360)}, longer than "
            "two_phase_late_seconds."
            + rule["annotations"]["description"]
            .split("two_phase_late_seconds.", 1)[1]
            .replace("{{ $labels.start_offset }}", str(txn.current_txn_start_offset))
        ),
    }
    shutil.copy(REPO / "dashboards" / "alerts" / "rules.yaml", tmp_path / "rules.yaml")
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{
                "series": f"kafka_two_phase_transaction_age_seconds{{{selector}}}",
                "values": f"{start_age}+60x10",
            }],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "KafkaTwoPhaseTransactionStuck",
                 "exp_alerts": []},
                {"eval_time": "6m", "alertname": "KafkaTwoPhaseTransactionStuck",
                 "exp_alerts": [{"exp_labels": expected, "exp_annotations": annotations}]},
                {"eval_time": "6m", "alertname": "KafkaLateTransactions", "exp_alerts": []},
            ],
        }],
    }), encoding="utf-8")  # fmt: skip
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/install-test-deps"
    result = subprocess.run(
        [promtool, "test", "rules", "test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _humanize(seconds: int) -> str:
    """Prometheus' humanizeDuration for whole seconds of an hour or more."""
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60}m {rest % 60}s"


# --------------------------------------------------------------------------- TV2


def test_a_java_producer_back_to_back_is_never_late_hanging_or_orphaned(
    kafka_version: str, real_kafka: RealKafkaCluster, java_helper: Path
) -> None:
    """Kafka's own producer of the same version commits transactions back to back while the
    exporter polls. Transaction version 2 (4.x brokers and clients) bumps the epoch on every
    transaction; version 1 (3.9.2) keeps it."""
    topic = create_topic(real_kafka, unique("tv2"))
    count = 40
    producer = _run_java(
        kafka_version,
        java_helper,
        "loop",
        real_kafka.bootstrap,
        topic,
        unique("tv2-txn"),
        str(count),
    )
    seen_open = 0
    with poll_env(real_kafka) as env:
        while producer.poll() is None:
            observation, snapshot = env.poll()
            seen_open += len([t for t in observation.open_transactions if t.topic == topic])
            _assert_nothing_wrong(snapshot, topic)
        _, snapshot = env.poll()
        _assert_nothing_wrong(snapshot, topic)
    out, err = producer.communicate(timeout=60)
    assert producer.returncode == 0, err[-3000:]
    ids = [
        tuple(int(x) for x in line.split()[1:3])
        for line in out.splitlines()
        if line.startswith("TXN ")
    ]
    assert len(ids) == count
    assert len({pid for pid, _ in ids}) == 1
    epochs = [epoch for _, epoch in ids]
    if kafka_version.startswith("3."):
        assert len(set(epochs)) == 1  # transaction version 1: one epoch for the producer
    else:
        assert epochs == list(range(epochs[0], epochs[0] + count))  # a new epoch each time


def _assert_nothing_wrong(snapshot: ClusterSnapshot, topic: str) -> None:
    assert [t for t in snapshot.late_transactions if t.transaction.topic == topic] == []
    assert [t for t in snapshot.orphaned_transactions if t.transaction.topic == topic] == []
    assert [t for t in snapshot.two_phase_transactions if t.transaction.topic == topic] == []
