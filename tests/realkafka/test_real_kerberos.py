"""GSSAPI (Kerberos) against a real broker and a real MIT KDC, on every version of the matrix.

One KDC for the session (tests/realkafka/kerberos.py), one broker per version with a
SASL_PLAINTEXT listener taking GSSAPI (Krb5LoginModule with the broker's keytab,
sasl.kerberos.service.name=kafka, advertised as `localhost`: its principal is
kafka/localhost@KTE.TEST) and the StandardAuthorizer; `exporter` holds README's
least-privilege grants. The broker limits SASL sessions (connections.max.reauth.ms), so the
exporter must open new connections with fresh tickets while `serve` runs; the exporter's
principal gets tickets of 45 seconds, so a minute of `serve` crosses a ticket's end.
Facts relied on: docs/kafka-semantics.md#kerberos-gssapi.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kafka_sim.producer import hanging_transaction
from kafka_sim.realkafka import Listener, RealKafkaCluster, start_cluster
from kerberos import REALM, Kdc, start_kdc
from prometheus_client.parser import text_string_to_metric_families
from realhelpers import LATE_BACKDATE_MS, VERIFICATION_OFF, create_topic, unique
from securekafka import README_GRANTS, STANDARD_AUTHORIZER, allow, wait_acls

from exporter.model import Classification
from exporter.observe import ClusterObserver
from exporter.scan import EXIT_AUTHENTICATION_FAILED, EXIT_HANGING, EXIT_UNREACHABLE
from exporter.settings import ClusterSettings, GssapiSettings, SaslSettings

LISTENER = "SASL_PLAINTEXT"
TICKET_LIFE_SECONDS = 45
REAUTH_MS = 15_000
_KRB5_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


@dataclass(frozen=True)
class Realm:
    kdc: Kdc
    directory: Path
    broker_keytab: Path
    exporter_keytab: Path
    stale_keytab: Path
    """An older key of `exporter`'s neighbour `stale`: the KDC has a newer one."""


@pytest.fixture(scope="session")
def realm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Realm]:
    directory = tmp_path_factory.mktemp("kdc")
    kdc = start_kdc(directory)
    try:
        broker_keytab = directory / "broker.keytab"
        exporter_keytab = directory / "exporter.keytab"
        stale_keytab = directory / "stale.keytab"
        kdc.add_principal("kafka/localhost", broker_keytab)
        kdc.add_principal("exporter", exporter_keytab,
                          max_life=f"{TICKET_LIFE_SECONDS} seconds")
        kdc.add_principal("stale", stale_keytab)
        kdc.new_key("stale", directory / "stale-new.keytab")
        yield Realm(kdc, directory, broker_keytab, exporter_keytab, stale_keytab)
    finally:
        kdc.stop()


@dataclass(frozen=True)
class World:
    realm: Realm
    cluster: RealKafkaCluster
    topic: str
    hanging: tuple[int, int, int]

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.cluster.port(1, LISTENER)}"

    def gssapi(self, **changes: str) -> dict[str, str]:
        """The `sasl.gssapi` section of the config file for `exporter`."""
        return {
            "principal": f"exporter@{REALM}",
            "keytab_file": str(self.realm.exporter_keytab),
            "krb5_conf_file": self.realm.kdc.krb5_conf,
            **changes,
        }

    def settings(self, **changes: str) -> ClusterSettings:
        return ClusterSettings(
            name="kerberized", bootstrap_servers=(self.bootstrap,),
            sasl=SaslSettings("GSSAPI", gssapi=GssapiSettings(**self.gssapi(**changes))),
        )


def broker_config(realm: Realm) -> dict[str, str]:
    prefix = f"listener.name.{LISTENER.lower()}.gssapi"
    return {
        **VERIFICATION_OFF,
        "sasl.enabled.mechanisms": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        f"{prefix}.sasl.jaas.config": (
            f'{_KRB5_MODULE} required useKeyTab=true storeKey=true '
            f'keyTab="{realm.broker_keytab}" principal="kafka/localhost@{REALM}";'
        ),
        "connections.max.reauth.ms": str(REAUTH_MS),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    }


@pytest.fixture(scope="module")
def world(realm: Realm, focused_kafka_version: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    cluster = start_cluster(
        focused_kafka_version, tmp_path_factory.mktemp(f"kerberos-{focused_kafka_version}"),
        broker_config=broker_config(realm),
        listeners=[Listener(LISTENER, LISTENER, advertised_host="localhost")],
        jvm_options=[f"-Djava.security.krb5.conf={realm.kdc.krb5_conf}"],
    )
    try:
        topic = create_topic(cluster, unique("krb"), partitions=2)
        allow(cluster, "exporter", README_GRANTS)
        wait_acls(cluster, "exporter", len(README_GRANTS))
        hanging = hanging_transaction(cluster.bootstrap, unique("krb"), topic, 0,
                                      backdate_ms=LATE_BACKDATE_MS)
        yield World(realm, cluster, topic, hanging)
    finally:
        cluster.stop()


def test_localhost_is_what_127_0_0_1_resolves_back_to() -> None:
    """The service principal names `localhost`; a client that canonicalizes 127.0.0.1 by
    reverse lookup must reach the same name (krb5.conf turns canonicalization off anyway)."""
    import socket

    assert socket.gethostbyaddr("127.0.0.1")[0] == "localhost"


def test_a_good_keytab_polls_and_finds_the_late_hanging_transaction(world: World) -> None:
    """The truth case over GSSAPI: the principal mapped to User:exporter by the broker's
    default rule, README's grants enough, the hanging transaction found."""
    from exporter.analyze import analyze

    settings = world.settings()
    poller = ClusterObserver(settings)
    try:
        observation = poller.poll()
    finally:
        poller.close()
    snapshot = analyze(observation, settings)
    assert [(b.broker_id, b.up) for b in snapshot.brokers] == [(1, True)]
    assert observation.request_errors == ()
    assert snapshot.unobserved_by_reason == {}
    late = {(t.transaction.topic, t.transaction.partition): t
            for t in snapshot.late_transactions}
    found = late[(world.topic, 0)]
    assert found.classification is Classification.HANGING
    assert (found.transaction.producer_id, found.transaction.producer_epoch,
            found.transaction.current_txn_start_offset) == world.hanging


def scan(tmp_path: Path, world: World, **gssapi: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{
        "name": "kerberized", "bootstrap_servers": [world.bootstrap],
        "sasl": {"mechanism": "GSSAPI", "gssapi": world.gssapi(**gssapi)},
    }]}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KTE_", "KRB5"))}
    return subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--config", str(config),
         "--orphan-check-seconds", "0"],
        env=env, capture_output=True, text=True, timeout=120,
    )


def assert_no_keytab_bytes(output: bytes, keytab: Path) -> None:
    """No 12-byte window of the keytab (its keys are 16 and 32 bytes), raw, hex or base64."""
    data = keytab.read_bytes()
    for start in range(0, len(data) - 12, 3):
        window = data[start:start + 12]
        for form in (window, window.hex().encode(), base64.b64encode(window)):
            assert form not in output


def error_line(result: subprocess.CompletedProcess[str], *keytabs: Path) -> str:
    """The one `error:` line; no traceback, and no keytab byte in any output."""
    assert "Traceback" not in result.stderr
    for keytab in keytabs:
        assert_no_keytab_bytes((result.stdout + result.stderr).encode(), keytab)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_scan_with_the_keytab_finds_the_hanging_transaction(
    world: World, tmp_path: Path
) -> None:
    result = scan(tmp_path, world)
    assert result.returncode == EXIT_HANGING, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[:2] for row in rows if row[0] == world.topic] == [[world.topic, "0"]]


def test_scan_with_a_wrong_keytab_is_an_authentication_failure_naming_it(
    world: World, tmp_path: Path
) -> None:
    result = scan(tmp_path, world, principal=f"stale@{REALM}",
                  keytab_file=str(world.realm.stale_keytab))
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    line = error_line(result, world.realm.stale_keytab)
    assert line.startswith("error: cluster kerberized: authentication failed: Kerberos login: "
                           "wrong keytab"), line
    # A keytab without the principal's key at all.
    result = scan(tmp_path, world, principal=f"stale@{REALM}")
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    assert "no key for the principal in the keytab" in error_line(
        result, world.realm.exporter_keytab)


def test_scan_with_another_service_name_names_the_unknown_service_principal(
    world: World, tmp_path: Path
) -> None:
    result = scan(tmp_path, world, service_name="kafka-other")
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    line = error_line(result, world.realm.exporter_keytab)
    assert "service ticket for kafka-other@localhost: service principal unknown" in line, line


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in ("kafka_txn_exporter_up", "kafka_txn_exporter_broker_up",
                           "kafka_txn_exporter_last_successful_poll_timestamp_seconds")
    }


def kdc_issued(kdc: Kdc, request: str, service: str) -> int:
    """Tickets the KDC issued to `exporter` for `service` (its log, one line per ticket)."""
    return sum(
        1 for line in kdc.log_text().splitlines()
        if f"{request} " in line and "ISSUE" in line
        and f"exporter@{REALM} for {service}" in line
    )


def test_serve_renews_the_ticket_from_the_keytab_without_a_gap(
    world: World, tmp_path: Path
) -> None:
    """`serve` polling every second for longer than a ticket's life, with the broker closing
    SASL sessions after 15 s: new connections keep authenticating with renewed tickets
    (two more ticket-granting tickets from the keytab), and no scrape sees up 0."""
    kdc = world.realm.kdc
    tgts_before = kdc_issued(kdc, "AS_REQ", "krbtgt/")
    service_before = kdc_issued(kdc, "TGS_REQ", "kafka/localhost")
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{
        "name": "kerberized", "bootstrap_servers": [world.bootstrap],
        "poll_interval_seconds": 1,
        "sasl": {"mechanism": "GSSAPI", "gssapi": world.gssapi()},
    }]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KTE_", "KRB5"))}
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config),
             "--web.listen-address", "127.0.0.1", "--web.port", "0", "--log.format", "json",
             "--log.level", "debug"],
            env=env, stderr=stderr, stdout=subprocess.DEVNULL, text=True,
        )
    try:
        deadline = time.monotonic() + 180
        url = ""
        while not url:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not log exporter_started"
            for line in log.read_text().splitlines():
                if '"exporter_started"' in line:
                    url = str(json.loads(line)["listen"])
            time.sleep(0.2)
        seen: list[dict[str, float]] = []
        while True:
            values = scrape(url)
            if "kafka_txn_exporter_up" in values:
                seen.append(values)
            renewed = kdc_issued(kdc, "AS_REQ", "krbtgt/") - tgts_before
            services = kdc_issued(kdc, "TGS_REQ", "kafka/localhost") - service_before
            if renewed >= 3 and services >= 2:
                break
            assert time.monotonic() < deadline, (renewed, services, seen[-3:])
            time.sleep(0.5)
        # Still polling after the last renewal: a success after the break's scrape.
        last = seen[-1]["kafka_txn_exporter_last_successful_poll_timestamp_seconds"]
        while scrape(url)["kafka_txn_exporter_last_successful_poll_timestamp_seconds"] <= last:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(30)
    # From the first poll's end on (before it, up is 0: nothing polled yet), never a 0.
    first = next(i for i, v in enumerate(seen) if v["kafka_txn_exporter_up"] == 1)
    after = seen[first:]
    assert len(after) >= 20
    assert all(v["kafka_txn_exporter_up"] == 1 for v in after), after
    assert all(v["kafka_txn_exporter_broker_up"] == 1 for v in after), after
    # The renewals in the daemon's own log, and no keytab byte in it (debug level).
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    renewals = [e for e in events if e.get("event") == "kerberos_credentials" and e["renewed"]]
    assert len(renewals) >= 2, events[-5:]
    assert {e["principal"] for e in renewals} == {f"exporter@{REALM}"}
    assert "Traceback" not in log.read_text()
    assert_no_keytab_bytes(log.read_bytes(), world.realm.exporter_keytab)


def test_kdc_down_fails_a_new_login_but_the_ticket_in_hand_keeps_serving(
    world: World, tmp_path: Path
) -> None:
    """A poller logged in before the KDC stops keeps opening connections (its connections
    dropped) with the ticket it holds; a new login (a `scan`) fails naming the KDC."""
    from exporter.analyze import analyze
    from exporter.collect.loop import run as run_on_loop

    settings = world.settings()
    poller = ClusterObserver(settings)
    kdc = world.realm.kdc
    try:
        poller.poll()
        kdc.stop()
        result = scan(tmp_path, world)
        assert result.returncode == EXIT_UNREACHABLE, result.stderr
        line = error_line(result, world.realm.exporter_keytab)
        assert "Kerberos login: KDC unreachable" in line, line
        # New connections, the same login (what a broker closing sessions leads to).
        run_on_loop(poller.poller._client.pool.close())
        observation = poller.poll()
        snapshot = analyze(observation, settings)
        assert [(b.broker_id, b.up) for b in snapshot.brokers] == [(1, True)]
        assert world.topic in {t.transaction.topic for t in snapshot.late_transactions}
    finally:
        poller.close()
        if kdc.process is None:
            kdc.start()
