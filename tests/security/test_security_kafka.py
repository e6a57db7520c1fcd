"""TLS and SASL from the exporter to Kafka, end to end against the simulator's TLS and SASL
listeners, with certificates generated per test (security/pki.py).

Already covered elsewhere (not repeated): SASL PLAIN/SCRAM over plaintext and a wrong SASL
password at the connection level (tests/collect/test_collect_connection.py), an untrusted CA
at the connection level, and a ClusterPoller over SASL_PLAINTEXT SCRAM-SHA-256
(tests/collect/test_collect_poll_sim.py). Here: hostname verification, client certificates,
SASL over TLS (SASL_SSL) for every mechanism, through ClusterPoller and through `serve`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.seed import seed_hanging_transaction
from test_e2e_serve import http_get, read_listen_url, samples, wait_until

from exporter.model import ClusterObservation
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings, SaslSettings, TlsSettings
from security.pki import Pki, make_pki

BROKER_CONFIG = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
}
USERS = {"exporter": "s3cret-exporter-pw"}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def poll_once(sim: SimCluster, **settings: object) -> ClusterObservation:
    cluster = ClusterSettings(
        name="sec", bootstrap_servers=tuple(sim.bootstrap_servers.split(",")),
        request_timeout_seconds=3.0, **settings,  # type: ignore[arg-type]
    )
    poller = ClusterObserver(cluster, clock_ms=sim.clock.now_ms)
    try:
        return poller.poll()
    finally:
        poller.close()


def tls_sim(pki: Pki, cert: str = "broker", client_auth: str = "none",
            sasl: bool = False) -> SimCluster:
    tls = SimTls(cert_file=pki.crt(cert), key_file=pki.key(cert), ca_file=pki.crt("ca"),
                 client_auth=client_auth)  # type: ignore[arg-type]
    return SimCluster(brokers=2, topics={"t": 2}, broker_config=BROKER_CONFIG, tls=tls,
                      sasl_users=USERS if sasl else None)


def assert_all_up(obs: ClusterObservation) -> None:
    assert [(b.broker_id, b.up) for b in obs.brokers] == [(1, True), (2, True)]
    assert obs.request_errors == ()
    assert obs.unobserved == {}


def assert_refused(obs: ClusterObservation, error: str = "AUTHENTICATION_FAILED") -> None:
    """Nothing reached: no broker, no data, one Metadata error (never 'no transactions')."""
    assert obs.brokers == ()
    assert [(e.api, e.error) for e in obs.request_errors] == [("Metadata", error)]


def test_tls_verifies_ca_and_hostname_by_default(pki: Pki) -> None:
    with tls_sim(pki) as sim:
        assert sim.security_protocol == "SSL"
        tls = TlsSettings(ca_file=pki.crt("ca"))
        assert tls.check_hostname  # the default
        assert_all_up(poll_once(sim, tls=tls))
        assert_refused(poll_once(sim, tls=TlsSettings(ca_file=pki.crt("other-ca"))))


def test_certificate_for_another_host_is_refused_unless_hostname_check_is_off(pki: Pki) -> None:
    with tls_sim(pki, cert="wrong-host") as sim:
        # Signed by the trusted CA, but for broker.invalid, not 127.0.0.1.
        assert_refused(poll_once(sim, tls=TlsSettings(ca_file=pki.crt("ca"))))
        assert_all_up(poll_once(sim, tls=TlsSettings(ca_file=pki.crt("ca"),
                                                     check_hostname=False)))


def test_broker_requiring_a_client_certificate(pki: Pki) -> None:
    """ssl.client.auth=required: no certificate or one from another CA is refused."""
    with tls_sim(pki, client_auth="required") as sim:
        with_cert = TlsSettings(ca_file=pki.crt("ca"), cert_file=pki.crt("client"),
                                key_file=pki.key("client"))
        assert_all_up(poll_once(sim, tls=with_cert))
        for tls in (TlsSettings(ca_file=pki.crt("ca")),
                    TlsSettings(ca_file=pki.crt("ca"), cert_file=pki.crt("rogue-client"),
                                key_file=pki.key("rogue-client"))):
            obs = poll_once(sim, tls=tls)
            assert obs.brokers == ()
            # TLS 1.3 reports the refusal after the client's handshake finished: the first
            # read fails, so the error is the connection's, not the handshake's.
            assert [e.api for e in obs.request_errors] == ["Metadata"]
            assert obs.request_errors[0].error in ("AUTHENTICATION_FAILED", "BROKER_UNREACHABLE")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_over_tls(pki: Pki, mechanism: str) -> None:
    with tls_sim(pki, sasl=True) as sim:
        assert sim.security_protocol == "SASL_SSL"
        tls = TlsSettings(ca_file=pki.crt("ca"))
        good = SaslSettings(mechanism, "exporter", USERS["exporter"])
        assert_all_up(poll_once(sim, tls=tls, sasl=good))
        bad = SaslSettings(mechanism, "exporter", "not-the-password")
        obs = poll_once(sim, tls=tls, sasl=bad)
        assert_refused(obs)
        assert "not-the-password" not in repr(obs)


def test_sasl_without_tls_against_a_tls_listener_is_refused(pki: Pki) -> None:
    """A plaintext client talking to a SASL_SSL port: no data, the daemon reports, no hang."""
    with tls_sim(pki, sasl=True) as sim:
        obs = poll_once(sim, sasl=SaslSettings("PLAIN", "exporter", USERS["exporter"]))
        assert obs.brokers == ()
        assert [e.api for e in obs.request_errors] == ["Metadata"]


@pytest.fixture
def sasl_ssl_mtls_sim(pki: Pki) -> Iterator[SimCluster]:
    with tls_sim(pki, client_auth="required", sasl=True) as sim:
        now = sim.clock.now_ms()
        sim.call(seed_hanging_transaction, sim.state, "sec-hang-1", "t", 1,
                 last_timestamp_ms=now - 400_000)
        yield sim


def test_serve_over_sasl_ssl_with_client_certificate(
    pki: Pki, sasl_ssl_mtls_sim: SimCluster, tmp_path: Path
) -> None:
    """The real `serve` process, configured from a YAML file like production: SCRAM-SHA-512
    over TLS with a client certificate, password from a file. It finds the hanging
    transaction through that channel."""
    sim = sasl_ssl_mtls_sim
    password_file = tmp_path / "password"
    password_file.write_text(USERS["exporter"] + "\n")
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{
        "name": "secure",
        "bootstrap_servers": sim.bootstrap_servers.split(","),
        "poll_interval_seconds": 1,
        "late_buffer_seconds": 10,
        "min_reported_duration_seconds": 0,
        "tls": {"ca_file": pki.crt("ca"), "cert_file": pki.crt("client"),
                "key_file": pki.key("client")},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "exporter",
                 "password_file": str(password_file)},
    }]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["KTE_LOG_FORMAT"] = "json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", "127.0.0.1", "--web.port", "0"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        base = read_listen_url(proc)
        wait_until(lambda: http_get(base + "/readyz")[0] == 200, 20, "/readyz 200")
        s = samples(http_get(base + "/metrics")[1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert s[("kafka_txn_exporter_up", frozenset({("cluster", "secure")}))] == 1
    for broker in ("1", "2"):
        assert s[("kafka_txn_exporter_broker_up",
                  frozenset({("cluster", "secure"), ("broker", broker)}))] == 1
    hanging = [dict(labels) for (name, labels) in s
               if name == "kafka_late_transaction_age_seconds"]
    assert [(h["topic"], h["partition"], h["classification"]) for h in hanging] == [
        ("t", "1", "hanging")]
