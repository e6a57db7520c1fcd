"""AWS MSK IAM end to end against the simulator: `scan` and `serve` log in with SASL/OAUTHBEARER
and a SigV4-signed `kafka-cluster:Connect` token, over TLS, and find the hanging transaction;
the simulator's broker verifies the signature with the secret key it knows (kafka_sim.msk_iam)
as MSK documents it. Refusals (wrong key, expired or future-dated token, no credentials) exit 3
naming the cause, and no key or token reaches any output.

What this cannot prove is said in README ("AWS MSK (IAM)"): nothing here talks to AWS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.msk_iam import MskIamAuthority, MskIamKey, MskIamVerifier
from kafka_sim.seed import seed_hanging_transaction
from test_e2e_serve import http_get, read_listen_url, samples, wait_until

from exporter.scan import EXIT_AUTHENTICATION_FAILED, EXIT_HANGING
from security.pki import Pki, make_pki

REGION = "eu-west-1"
ACCESS_KEY = "ASIAMSKSIMEXAMPLE01"
SECRET_KEY = "Zq3+msk/sim-secret-key-7c1e0b5a9d"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjE-msk-sim-session-4f2a"
WRONG_SECRET = "Yx8+not/the-secret-key-2b9d4e6f10"
PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/kafka-txn-exporter/sim"
BROKER_CONFIG = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
}


class Clock:
    """The simulated broker's wall clock, offset to stand for a skewed or late client."""

    offset_seconds = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_seconds


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker_clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def msk(pki: Pki, broker_clock: Clock) -> Iterator[tuple[SimCluster, MskIamAuthority]]:
    authority = MskIamAuthority(MskIamVerifier(
        REGION, {ACCESS_KEY: MskIamKey(SECRET_KEY, SESSION_TOKEN, PRINCIPAL)}, broker_clock))
    tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"), ca_file=pki.crt("ca"))
    with SimCluster(brokers=2, topics={"t": 2}, broker_config=BROKER_CONFIG, tls=tls,
                    sasl_authority=authority) as sim:
        now = sim.clock.now_ms()
        sim.call(seed_hanging_transaction, sim.state, "msk-hang-1", "t", 1,
                 last_timestamp_ms=now - 400_000)
        yield sim, authority


@pytest.fixture(autouse=True)
def broker_clock_reset(broker_clock: Clock) -> Iterator[None]:
    yield
    broker_clock.offset_seconds = 0.0


def aws_env(tmp_path: Path, secret: str | None = SECRET_KEY) -> dict[str, str]:
    """The command's environment: only the credentials under test (no host AWS settings, no
    instance metadata lookups)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KTE_", "AWS_"))}
    env.update(KTE_LOG_FORMAT="json", HOME=str(tmp_path),
               AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    if secret is not None:
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=secret,
                   AWS_SESSION_TOKEN=SESSION_TOKEN)
    return env


def write_config(tmp_path: Path, sim: SimCluster, pki: Pki, **cluster: Any) -> Path:
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"clusters": [{
        "name": "msk",
        "bootstrap_servers": sim.bootstrap_servers.split(","),
        "request_timeout_seconds": 3,
        "late_buffer_seconds": 10,
        "min_reported_duration_seconds": 0,
        "tls": {"ca_file": pki.crt("ca")},
        "sasl": {"mechanism": "AWS_MSK_IAM", "aws_msk_iam": {"region": REGION}},
        **cluster,
    }]}))
    return config


def scan(tmp_path: Path, sim: SimCluster, pki: Pki,
         secret: str | None = SECRET_KEY) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp_path, sim, pki)
    return subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--config", str(config),
         "--orphan-check-seconds", "0"],
        env=aws_env(tmp_path, secret), capture_output=True, text=True, timeout=90,
    )


def assert_no_secret(*outputs: str) -> None:
    for text in outputs:
        for secret in (SECRET_KEY, WRONG_SECRET, SESSION_TOKEN):
            assert secret not in text


def the_error(result: subprocess.CompletedProcess[str]) -> str:
    assert_no_secret(result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cluster msk: "), lines
    return lines[0].removeprefix("error: cluster msk: ")


def test_scan_logs_in_with_a_signed_token_and_finds_the_hanging_transaction(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path
) -> None:
    sim, authority = msk
    accepted, refused = authority.accepted, len(authority.refusals)
    result = scan(tmp_path, sim, pki)
    assert result.returncode == EXIT_HANGING, result.stderr
    assert "msk-hang-1" in result.stdout or "hanging" in result.stdout
    assert authority.accepted > accepted  # every connection proved the signature
    assert len(authority.refusals) == refused
    assert_no_secret(result.stdout, result.stderr)


def test_a_wrong_secret_key_is_an_authentication_failure(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path
) -> None:
    sim, authority = msk
    result = scan(tmp_path, sim, pki, secret=WRONG_SECRET)
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    message = the_error(result)
    assert message.startswith("authentication failed: SASL AWS_MSK_IAM with 127.0.0.1:")
    assert 'SASL_AUTHENTICATION_FAILED {"status":"invalid_token"}' in message
    assert "kafka-cluster:Connect" in message and "clock" in message
    assert authority.refusals[-1] == "signature does not match"


@pytest.mark.parametrize(("offset", "reason"), [
    (-3600.0, "in the future: clock skew"),
    (3600.0, "expired"),
])
def test_a_token_outside_its_time_window_is_refused(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path, broker_clock: Clock,
    offset: float, reason: str,
) -> None:
    """The broker's clock an hour behind (the client's ahead: skew) or ahead (token expired)."""
    sim, authority = msk
    broker_clock.offset_seconds = offset
    result = scan(tmp_path, sim, pki)
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    assert "this host's clock" in the_error(result)
    assert reason in authority.refusals[-1]


def test_no_aws_credentials_exit_3_naming_the_cause(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path
) -> None:
    sim, _ = msk
    result = scan(tmp_path, sim, pki, secret=None)
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    assert "AWS_MSK_IAM: no AWS credentials found" in the_error(result)


def test_serve_over_msk_iam_finds_the_hanging_transaction_with_one_token(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path
) -> None:
    sim, authority = msk
    config = write_config(tmp_path, sim, pki, poll_interval_seconds=1)
    tokens_before = set(authority.tokens)
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", "127.0.0.1", "--web.port", "0"],
        env=aws_env(tmp_path), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        base = read_listen_url(proc)
        wait_until(lambda: http_get(base + "/readyz")[0] == 200, 30, "/readyz 200")
        metrics = http_get(base + "/metrics")[1]
        status = http_get(base + "/")[1]
        s = samples(metrics)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert_no_secret(metrics, status, out, err)
    assert s[("kafka_txn_exporter_up", frozenset({("cluster", "msk")}))] == 1
    hanging = [dict(labels) for (name, labels) in s
               if name == "kafka_late_transaction_age_seconds"]
    assert [(h["topic"], h["partition"], h["classification"]) for h in hanging] == [
        ("t", "1", "hanging")]
    new_tokens = set(authority.tokens) - tokens_before
    assert len(new_tokens) == 1  # every connection of the cluster used the same token
