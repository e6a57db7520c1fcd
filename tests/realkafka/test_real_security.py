"""Security against a real broker: the exporter over a
SASL_SSL listener (CA and hostname checked) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, the
KRaft StandardAuthorizer's ACLs taken away one at a time, and `scan`'s exit status and message
per cause (authentication, TLS) - on every version of the matrix.

One broker per version for the module (tests/realkafka/securekafka.py). Principals:
`exporter` holds README's least-privilege grants; `limited` holds Read on one topic, Describe on
another, Describe on the transactional ids of one prefix and on every group, and nothing on the
cluster. Facts relied on: docs/kafka-semantics.md#acls-on-a-real-broker.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml
from kafka.admin import ACLOperation, ACLResourcePatternType, ResourceType
from kafka_sim.producer import OpenTransaction, hanging_transaction, open_transaction
from realhelpers import LATE_BACKDATE_MS, create_topic, unique
from securekafka import (
    MECHANISMS,
    PASSWORDS,
    README_GRANTS,
    SecureKafka,
    allow,
    start_secure_kafka,
    wait_acls,
)
from waits import wait_for

from exporter.model import Classification, ClusterObservation, ClusterSnapshot, TopicPartition
from exporter.observe import ClusterObserver
from exporter.scan import (
    EXIT_AUTHENTICATION_FAILED,
    EXIT_HANGING,
    EXIT_TIMEOUT,
    EXIT_TLS_FAILED,
    run_scan,
)
from exporter.settings import ClusterSettings


@dataclass(frozen=True)
class World:
    """The module's broker and what the fixture made on it."""

    kafka: SecureKafka
    readable: str
    """3 partitions; `limited` may Read it. Partition 0 holds a late hanging transaction."""
    unreadable: str
    """2 partitions; `limited` may only Describe it. Partition 1 holds a late hanging one."""
    hanging: tuple[int, int, int]
    """(producer id, epoch, start offset) of the hanging transaction in `readable`-0."""
    visible_prefix: str
    """`limited` may Describe the transactional ids with this prefix."""


@pytest.fixture(scope="module")
def world(kafka_version: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    kafka = start_secure_kafka(kafka_version, tmp_path_factory.mktemp(f"secure-{kafka_version}"))
    cluster = kafka.cluster
    try:
        readable = create_topic(cluster, unique("sec-read"), partitions=3)
        unreadable = create_topic(cluster, unique("sec-noread"), partitions=2)
        visible = f"visible-{os.getpid()}-"
        limited = [
            (ResourceType.TOPIC, readable, ACLOperation.READ),
            (ResourceType.TOPIC, unreadable, ACLOperation.DESCRIBE),
            (ResourceType.GROUP, "*", ACLOperation.DESCRIBE),
        ]
        allow(cluster, "exporter", README_GRANTS)
        allow(cluster, "limited", limited)
        allow(
            cluster,
            "limited",
            [(ResourceType.TRANSACTIONAL_ID, visible, ACLOperation.DESCRIBE)],
            ACLResourcePatternType.PREFIXED,
        )
        wait_acls(cluster, "exporter", len(README_GRANTS))
        wait_acls(cluster, "limited", len(limited) + 1)
        hanging = hanging_transaction(
            cluster.bootstrap, unique("visible"), readable, 0, backdate_ms=LATE_BACKDATE_MS
        )
        hanging_transaction(
            cluster.bootstrap, unique("visible"), unreadable, 1, backdate_ms=LATE_BACKDATE_MS
        )
        yield World(kafka, readable, unreadable, hanging, visible)
    finally:
        cluster.stop()


def poll(settings: ClusterSettings, times: int = 1) -> tuple[ClusterObservation, ClusterSnapshot]:
    """`times` polls of one poller (the orphan check needs three); the last one's result."""
    from exporter.analyze import analyze

    poller = ClusterObserver(settings)
    try:
        for _ in range(times):
            observation = poller.poll()
        return observation, analyze(observation, settings)
    finally:
        poller.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_mechanism_over_tls_polls_and_finds_the_late_hanging_transaction(
    world: World, mechanism: str
) -> None:
    """README's grants (its kafka-acls.sh lines, parsed) are enough: no request refused,
    blocked groups and compaction known."""
    observation, snapshot = poll(world.kafka.settings("exporter", mechanism))
    assert [(b.broker_id, b.up) for b in snapshot.brokers] == [(1, True)]
    assert observation.request_errors == ()
    assert snapshot.unobserved_by_reason == {}
    late = {(t.transaction.topic, t.transaction.partition): t for t in snapshot.late_transactions}
    found = late[(world.readable, 0)]
    assert found.classification is Classification.HANGING
    assert (
        found.transaction.producer_id,
        found.transaction.producer_epoch,
        found.transaction.current_txn_start_offset,
    ) == world.hanging
    assert found.transactional_id.startswith(world.visible_prefix)
    assert (found.blocked_groups, found.blocked_groups_unknown) == ((), None)
    assert found.topic_compacted is False  # DescribeConfigs on topics: README's last grant
    assert late[(world.unreadable, 1)].classification is Classification.HANGING


def test_without_describe_on_the_cluster_blocked_groups_are_unknown_never_zero(
    world: World,
) -> None:
    """ListGroups would list only the groups `limited` may Describe: the exporter checks the
    cluster's authorized operations and says unknown (unauthorized) instead of "none"."""
    _, snapshot = poll(world.kafka.settings("limited", "SCRAM-SHA-256"))
    (found,) = [t for t in snapshot.late_transactions if t.transaction.topic == world.readable]
    assert found.classification is Classification.HANGING
    assert found.blocked_groups_unknown == "unauthorized"
    assert found.blocked_groups == ()
    assert snapshot.blocked_groups_unknown_by_reason == {"unauthorized": 1}


def test_without_read_on_a_topic_its_partitions_are_unobserved_never_free(world: World) -> None:
    """DescribeProducers needs Read: the topic `limited` may only Describe holds a hanging
    transaction the exporter cannot see, and says so per partition."""
    observation, snapshot = poll(world.kafka.settings("limited", "PLAIN"))
    assert observation.unobserved == {
        TopicPartition(world.unreadable, 0): "TOPIC_AUTHORIZATION_FAILED",
        TopicPartition(world.unreadable, 1): "TOPIC_AUTHORIZATION_FAILED",
    }
    assert snapshot.unobserved_by_reason == {"unauthorized": 2}
    assert ("DescribeProducers", "TOPIC_AUTHORIZATION_FAILED") in {
        (e.api, e.error) for e in observation.request_errors
    }
    assert not [t for t in snapshot.late_transactions if t.transaction.topic == world.unreadable]
    # Topics without even Describe are invisible (Metadata leaves them out): only the two.
    assert {tp.topic for tp in observation.leaders} == {world.readable, world.unreadable}


@pytest.fixture
def two_open_transactions(world: World) -> Iterator[tuple[OpenTransaction, OpenTransaction]]:
    """Healthy open transactions on `readable` 1 and 2: ids `limited` may and may not
    Describe. Aborted at the end."""
    bootstrap = world.kafka.cluster.bootstrap
    visible = open_transaction(bootstrap, unique("visible"), world.readable, [1])
    hidden = open_transaction(bootstrap, unique("hidden"), world.readable, [2])
    try:
        yield visible, hidden
    finally:
        visible.abort()
        hidden.abort()


def test_without_describe_on_a_transactional_id_a_healthy_transaction_reads_orphaned(
    world: World, two_open_transactions: tuple[OpenTransaction, OpenTransaction]
) -> None:
    """The documented false orphan (docs/kafka-semantics.md#orphaned): ListTransactions leaves
    out the ids the principal may not Describe, so the coordinator "does not track" the hidden
    id's transaction on every poll. With Describe on the ids (`exporter`) it is not orphaned."""
    visible, hidden = two_open_transactions
    _, limited = poll(world.kafka.settings("limited", "SCRAM-SHA-512"), times=3)
    orphaned = {
        o.transaction.partition: o
        for o in limited.orphaned_transactions
        if o.transaction.topic == world.readable and not o.late
    }
    assert sorted(orphaned) == [2]
    assert orphaned[2].transaction.producer_id == hidden.producer_id
    assert orphaned[2].transactional_id == ""
    assert not orphaned[2].late

    seen, full = poll(world.kafka.settings("exporter", "SCRAM-SHA-512"), times=3)
    assert [
        o
        for o in full.orphaned_transactions
        if o.transaction.topic == world.readable and not o.late
    ] == []
    # Not vacuous: the exporter saw both open, and the coordinator tracks both.
    assert {t.producer_id for t in seen.open_transactions if t.topic == world.readable} >= {
        visible.producer_id,
        hidden.producer_id,
    }
    assert {seen.transactional_ids.get(t.producer_id) for t in (visible, hidden)} == {
        visible.transactional_id,
        hidden.transactional_id,
    }


def cluster_entry(
    world: World,
    name: str,
    mechanism: str,
    password_file: Path,
    bootstrap: str | None = None,
    timeout_seconds: float = 10,
    **tls: object,
) -> dict[str, object]:
    """One `clusters[]` entry: the SASL_SSL listener (by default), CA and hostname checked."""
    return {
        "name": name,
        "bootstrap_servers": (bootstrap or world.kafka.sasl_ssl_bootstrap).split(","),
        "request_timeout_seconds": timeout_seconds,
        "tls": {"ca_file": world.kafka.ca_file, **tls},
        "sasl": {
            "mechanism": mechanism,
            "username": "exporter",
            "password_file": str(password_file),
        },
    }


def password_file(tmp_path: Path, password: str, name: str = "password") -> Path:
    path = tmp_path / name
    path.write_text(password + "\n")
    return path


def scan(tmp_path: Path, *clusters: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """`kafka-txn-exporter scan` as a process (one poll per cluster)."""
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": list(clusters)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "scan",
            "--config",
            str(config),
            "--orphan-check-seconds",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_lines(result: subprocess.CompletedProcess[str], *secrets: str) -> dict[str, str]:
    """cluster -> its one `error:` line; no secret in any output, no traceback."""
    for secret in secrets:
        assert secret not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    found: dict[str, str] = {}
    for line in result.stderr.splitlines():
        if line.startswith("error: cluster "):
            name, _, message = line.removeprefix("error: cluster ").partition(": ")
            assert name not in found, result.stderr
            found[name] = message
    return found


def test_scan_with_a_wrong_password_names_the_brokers_reason(world: World, tmp_path: Path) -> None:
    """One cluster per mechanism, each with its own wrong password: one line each, exit 3."""
    wrong = {mechanism: f"wrong-{mechanism}-pw-5d1e" for mechanism in MECHANISMS}
    result = scan(
        tmp_path,
        *(
            cluster_entry(
                world,
                mechanism.lower(),
                mechanism,
                password_file(tmp_path, wrong[mechanism], mechanism),
            )
            for mechanism in MECHANISMS
        ),
    )
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    messages = error_lines(result, *wrong.values(), PASSWORDS["exporter"])
    assert sorted(messages) == sorted(m.lower() for m in MECHANISMS)
    for mechanism in MECHANISMS:
        message = messages[mechanism.lower()]
        assert message.startswith(f"authentication failed: SASL {mechanism} with 127.0.0.1:")
        # The broker's own reason (SaslAuthenticate's error_message), not "not reachable".
        assert "SASL_AUTHENTICATION_FAILED Authentication failed" in message
    assert len(result.stdout.splitlines()) == 1  # the table's header, no row


def test_scan_with_the_right_password_finds_the_hanging_transaction(
    world: World, tmp_path: Path
) -> None:
    secret = password_file(tmp_path, PASSWORDS["exporter"])
    result = scan(tmp_path, cluster_entry(world, "secure", "SCRAM-SHA-256", secret))
    assert result.returncode == EXIT_HANGING, result.stderr
    assert PASSWORDS["exporter"] not in result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[:2] for row in rows if row[0] == world.readable] == [[world.readable, "0"]]


def test_scan_against_another_ca_or_by_another_name_is_a_tls_failure(
    world: World, tmp_path: Path
) -> None:
    """A CA that did not sign the broker's certificate; `localhost`, which reaches the same
    port but is not in the certificate (it names 127.0.0.1 only)."""
    secret = password_file(tmp_path, PASSWORDS["exporter"])
    port = world.kafka.cluster.port(1, "SASL_SSL")
    result = scan(
        tmp_path,
        cluster_entry(world, "other-ca", "PLAIN", secret, ca_file=world.kafka.other_ca_file),
        cluster_entry(world, "by-name", "PLAIN", secret, bootstrap=f"localhost:{port}"),
    )
    assert result.returncode == EXIT_TLS_FAILED, result.stderr
    messages = error_lines(result, PASSWORDS["exporter"])
    assert messages["other-ca"].startswith("TLS failed: TLS handshake with 127.0.0.1:")
    assert messages["by-name"].startswith(f"TLS failed: TLS handshake with localhost:{port}")
    for message in messages.values():
        assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "mismatch" in messages["by-name"] and "mismatch" not in messages["other-ca"]


def scan_in_process(settings: ClusterSettings) -> tuple[int, str]:
    """`scan`'s code in this process (what the `scan` process runs, without its start-up
    cost): the exit status and the one error line."""
    out, err = io.StringIO(), io.StringIO()
    code = run_scan([settings], "table", out, err, orphan_check_seconds=0)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    return code, lines[0].removeprefix(f"error: cluster {settings.name}: ")


def test_scan_without_tls_against_the_sasl_ssl_listener_is_a_tls_failure(world: World) -> None:
    """Kafka's TLS listener answers a plaintext ApiVersions with a TLS alert record; read as a
    Kafka frame its size is absurd (0x1503...). The simulator closes without an alert instead
    (unreachable there: tests/security/test_security_errors.py)."""
    settings = replace(world.kafka.settings("exporter", "PLAIN"), tls=None)
    code, message = scan_in_process(settings)
    assert code == EXIT_TLS_FAILED, message
    assert message.startswith("TLS failed: 127.0.0.1:")
    assert "answered with a TLS record: its listener expects TLS" in message
    assert PASSWORDS["exporter"] not in message


def test_scan_with_tls_against_the_plaintext_listener_is_a_tls_failure(world: World) -> None:
    """The PLAINTEXT listener reads the ClientHello as an oversized frame and closes."""
    settings = replace(
        world.kafka.settings("exporter", bootstrap=world.kafka.cluster.bootstrap), sasl=None
    )
    code, message = scan_in_process(settings)
    assert code == EXIT_TLS_FAILED, message
    assert message.startswith("TLS failed: TLS handshake with 127.0.0.1:")
    assert "the broker closed the connection" in message


def test_scan_with_sasl_against_the_plaintext_listener_is_an_authentication_failure(
    world: World,
) -> None:
    """A listener without SASL answers SaslHandshake ILLEGAL_SASL_STATE, no mechanism."""
    settings = replace(
        world.kafka.settings("exporter", "SCRAM-SHA-256", bootstrap=world.kafka.cluster.bootstrap),
        tls=None,
    )
    code, message = scan_in_process(settings)
    assert code == EXIT_AUTHENTICATION_FAILED, message
    assert "ILLEGAL_SASL_STATE (enabled: []): this listener takes no SASL" in message


def test_scan_of_a_frozen_broker_times_out_and_the_broker_comes_back(
    world: World, tmp_path: Path
) -> None:
    """SIGSTOP: the kernel still accepts TCP connections, nothing answers the TLS handshake."""
    cluster = world.kafka.cluster
    secret = password_file(tmp_path, PASSWORDS["exporter"])
    cluster.kill(1, signal.SIGSTOP)
    try:
        result = scan(tmp_path, cluster_entry(world, "secure", "PLAIN", secret, timeout_seconds=2))
    finally:
        cluster.kill(1, signal.SIGCONT)
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    port = cluster.port(1, "SASL_SSL")
    assert error_lines(result, PASSWORDS["exporter"]) == {
        "secure": f"timed out: connect to 127.0.0.1:{port} timed out after 2 s"
    }
    # Resumed, the broker missed its heartbeats to the controller: fenced, it is left out of
    # Metadata (the exporter says "not in metadata") until its next heartbeat unfences it.
    settings = world.kafka.settings("exporter", "PLAIN", request_timeout_seconds=30.0)
    wait_for("the resumed broker polled up", lambda: poll(settings)[1].up, 120)
