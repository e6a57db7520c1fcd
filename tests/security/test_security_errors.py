"""`scan` names the real cause when no broker answers: authentication failed, TLS
failed (untrusted CA, wrong hostname), unreachable, timed out - each its own one-line message
and exit status (README, `scan --help`), against the simulator's TLS and SASL listeners.
The same against a real broker: tests/realkafka/test_real_security.py."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka_sim.cluster import SimCluster, SimTls
from resilience.harness import clean_env

from exporter.scan import (
    EXIT_AUTHENTICATION_FAILED,
    EXIT_HANGING,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_TLS_FAILED,
    EXIT_UNREACHABLE,
)
from security.pki import Pki, make_pki

PASSWORD = "Rt5-exporter-Pw-0c9d"
WRONG = "Wq8-not-the-Pw-61fe"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_ssl_sim(pki: Pki) -> Iterator[SimCluster]:
    tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"), ca_file=pki.crt("ca"))
    with SimCluster(brokers=1, topics={"t": 1}, tls=tls,
                    sasl_users={"exporter": PASSWORD}) as sim:
        yield sim


def scan(tmp_path: Path, bootstrap: str, **cluster: Any) -> subprocess.CompletedProcess[str]:
    """`kafka-txn-exporter scan` as a process, the password from a file."""
    (tmp_path / "password").write_text(cluster.pop("password", PASSWORD) + "\n")
    sasl = cluster.pop("sasl", None)
    if sasl is not None:
        sasl = {"username": "exporter", "password_file": str(tmp_path / "password"), **sasl}
        cluster["sasl"] = sasl
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{
        "name": "c", "bootstrap_servers": [bootstrap], "request_timeout_seconds": 2, **cluster,
    }]}))
    return subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--config", str(config),
         "--orphan-check-seconds", "0"],
        env=clean_env(), capture_output=True, text=True, timeout=60,
    )


def the_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line on stderr (no traceback; beside it only JSON log lines), and no
    secret anywhere."""
    for secret in (PASSWORD, WRONG):
        assert secret not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cluster c: "), lines
    return lines[0].removeprefix("error: cluster c: ")


def test_the_right_credentials_scan_cleanly(sasl_ssl_sim: SimCluster, pki: Pki,
                                           tmp_path: Path) -> None:
    result = scan(tmp_path, sasl_ssl_sim.bootstrap_servers, tls={"ca_file": pki.crt("ca")},
                  sasl={"mechanism": "SCRAM-SHA-256"})
    assert result.returncode in (EXIT_OK, EXIT_HANGING), result.stderr
    assert "error" not in result.stderr


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_an_authentication_failure(
    sasl_ssl_sim: SimCluster, pki: Pki, tmp_path: Path, mechanism: str
) -> None:
    result = scan(tmp_path, sasl_ssl_sim.bootstrap_servers, tls={"ca_file": pki.crt("ca")},
                  sasl={"mechanism": mechanism}, password=WRONG)
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    message = the_error(result)
    assert message.startswith(f"authentication failed: SASL {mechanism} with ")
    assert "SASL_AUTHENTICATION_FAILED" in message


def test_a_disabled_mechanism_is_an_authentication_failure(tmp_path: Path) -> None:
    with SimCluster(brokers=1, topics={"t": 1}, sasl_users={"exporter": PASSWORD},
                    sasl_mechanisms=("PLAIN",)) as sim:
        result = scan(tmp_path, sim.bootstrap_servers, sasl={"mechanism": "SCRAM-SHA-256"})
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    message = the_error(result)
    assert "UNSUPPORTED_SASL_MECHANISM" in message and "PLAIN" in message


def test_an_untrusted_broker_certificate_is_a_tls_failure(
    sasl_ssl_sim: SimCluster, pki: Pki, tmp_path: Path
) -> None:
    result = scan(tmp_path, sasl_ssl_sim.bootstrap_servers,
                  tls={"ca_file": pki.crt("other-ca")}, sasl={"mechanism": "PLAIN"})
    assert result.returncode == EXIT_TLS_FAILED, result.stderr
    message = the_error(result)
    assert message.startswith("TLS failed: TLS handshake with ")
    assert "CERTIFICATE_VERIFY_FAILED" in message


def test_a_certificate_for_another_host_is_a_tls_failure(pki: Pki, tmp_path: Path) -> None:
    tls = SimTls(cert_file=pki.crt("wrong-host"), key_file=pki.key("wrong-host"),
                 ca_file=pki.crt("ca"))
    with SimCluster(brokers=1, topics={"t": 1}, tls=tls) as sim:
        result = scan(tmp_path, sim.bootstrap_servers, tls={"ca_file": pki.crt("ca")})
    assert result.returncode == EXIT_TLS_FAILED, result.stderr
    message = the_error(result)
    assert "CERTIFICATE_VERIFY_FAILED" in message and "mismatch" in message


def test_a_port_nobody_listens_on_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        result = scan(tmp_path, f"127.0.0.1:{port}")
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    message = the_error(result)
    assert message.startswith(f"unreachable: connect to 127.0.0.1:{port}: ")


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_a_listener_that_never_answers_is_a_timeout(tmp_path: Path, pki: Pki, tls: bool) -> None:
    """The kernel completes the TCP handshake (listen backlog), nothing ever answers: the
    ApiVersions request (plaintext) or the TLS handshake (tls) times out."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        extra = {"tls": {"ca_file": pki.crt("ca")}} if tls else {}
        result = scan(tmp_path, f"127.0.0.1:{port}", **extra)
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    message = the_error(result)
    assert message.startswith("timed out: ") and f"127.0.0.1:{port}" in message


@pytest.fixture(scope="module")
def plaintext_sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=1, topics={"t": 1}) as sim:
        yield sim


def test_tls_against_a_plaintext_listener_is_a_tls_failure(
    plaintext_sim: SimCluster, pki: Pki, tmp_path: Path
) -> None:
    """The listener reads the ClientHello as an oversized frame and closes the connection."""
    result = scan(tmp_path, plaintext_sim.bootstrap_servers, tls={"ca_file": pki.crt("ca")})
    assert result.returncode == EXIT_TLS_FAILED, result.stderr
    message = the_error(result)
    assert message.startswith("TLS failed: TLS handshake with ")
    assert "the broker closed the connection" in message


def test_sasl_against_a_listener_without_sasl_is_an_authentication_failure(
    plaintext_sim: SimCluster, tmp_path: Path
) -> None:
    result = scan(tmp_path, plaintext_sim.bootstrap_servers, sasl={"mechanism": "PLAIN"})
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    assert "ILLEGAL_SASL_STATE (enabled: []): this listener takes no SASL" in the_error(result)


def test_a_plaintext_client_against_a_tls_listener_of_the_simulator_is_unreachable(
    sasl_ssl_sim: SimCluster, tmp_path: Path
) -> None:
    """A known difference: Kafka's TLS listener answers plaintext with a TLS alert record
    (`scan` then says TLS failed, tests/realkafka/test_real_security.py); the simulator's
    (Python's ssl) closes without one, so all the client sees is a closed connection."""
    result = scan(tmp_path, sasl_ssl_sim.bootstrap_servers, sasl={"mechanism": "PLAIN"})
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    assert "lost: IncompleteReadError" in the_error(result)
