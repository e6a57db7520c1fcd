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


@pytest.fixture(autouse=True)
def _logging_reset_after_each_test(reset_logging: None) -> None:
    """`abort` in process configures logging onto its own stderr (tests/conftest.py)."""


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
    """A config with the cluster on MSK IAM; every command logs at debug level."""
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"log": {"level": "debug", "format": "json"}, "clusters": [{
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
        for secret in (SECRET_KEY, WRONG_SECRET, SESSION_TOKEN, ADMIN_SECRET):
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


ADMIN_KEY = "ASIAMSKSIMADMIN0001"
ADMIN_SECRET = "Kd2+admin/sim-secret-key-95ac3e71"
ADMIN_PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/kafka-txn-admin/sim"


@pytest.fixture
def msk_for_abort(pki: Pki) -> Iterator[tuple[SimCluster, MskIamAuthority]]:
    """A cluster of its own (the abort changes it), knowing the exporter's and the admin's key."""
    authority = MskIamAuthority(MskIamVerifier(REGION, {
        ACCESS_KEY: MskIamKey(SECRET_KEY, SESSION_TOKEN, PRINCIPAL),
        ADMIN_KEY: MskIamKey(ADMIN_SECRET, None, ADMIN_PRINCIPAL),
    }))
    tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"), ca_file=pki.crt("ca"))
    with SimCluster(brokers=2, topics={"t": 2}, broker_config=BROKER_CONFIG, tls=tls,
                    sasl_authority=authority) as sim:
        yield sim, authority


def run_abort_with_admin_profile(
    sim: SimCluster, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    admin_secret: str, start_offset: int,
) -> tuple[int, str, str]:
    """`abort --yes` in process; the admin's key from profile txn-admin of the shared
    credentials file, the exporter's from the environment (never used by abort)."""
    import io

    from exporter.abort import run_abort

    for name, value in aws_env(tmp_path).items():
        if name.startswith("AWS_") or name == "HOME":
            monkeypatch.setenv(name, value)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[txn-admin]\naws_access_key_id = {ADMIN_KEY}\n"
                           f"aws_secret_access_key = {admin_secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    config = write_config(tmp_path, sim, pki)
    data = yaml.safe_load(config.read_text())
    data["admin"] = {"clusters": [{"name": "msk", "sasl": {
        "mechanism": "AWS_MSK_IAM",
        "aws_msk_iam": {"region": REGION, "profile": "txn-admin"}}}]}
    config.write_text(yaml.safe_dump(data))
    out, err = io.StringIO(), io.StringIO()
    code = run_abort(
        ["--config", str(config), "--cluster", "msk", "--topic", "t", "--partition", "1",
         "--start-offset", str(start_offset), "--yes"],
        clock_ms=sim.clock.now_ms, stdout=out, stderr=err, env={}, sleep=lambda _: None,
    )
    return code, out.getvalue(), err.getvalue()


def test_abort_logs_in_as_the_admin_role_and_writes_the_marker(
    msk_for_abort: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from exporter.abort import EXIT_ABORTED

    sim, authority = msk_for_abort
    now = sim.clock.now_ms()
    sim.call(seed_hanging_transaction, sim.state, "msk-hang-2", "t", 1,
             last_timestamp_ms=now - 400_000)
    log = sim.call(lambda: sim.state.partition("t", 1).log)
    start = int(sim.call(lambda: log.last_stable_offset))
    assert start < int(sim.call(lambda: log.high_watermark))  # pinned by the open transaction

    code, out, err = run_abort_with_admin_profile(sim, pki, tmp_path, monkeypatch,
                                                  ADMIN_SECRET, start)
    assert code == EXIT_ABORTED, err
    assert_no_secret(out, err)
    assert int(sim.call(lambda: log.last_stable_offset)) > start  # the marker was written
    assert set(authority.principals) == {ADMIN_PRINCIPAL}  # never the exporter's principal


def test_abort_with_a_wrong_admin_key_exits_3_naming_the_cause(
    msk_for_abort: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim, authority = msk_for_abort
    code, out, err = run_abort_with_admin_profile(sim, pki, tmp_path, monkeypatch,
                                                  WRONG_SECRET, 0)
    assert code == EXIT_AUTHENTICATION_FAILED, err
    assert_no_secret(out, err)
    lines = [line for line in err.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and "cannot reach cluster 'msk': authentication failed: SASL " \
        "AWS_MSK_IAM" in lines[0], err
    assert authority.refusals and authority.refusals[-1] == "signature does not match"


def test_the_spark_scan_task_logs_in_the_same_way(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What each `spark scan` task runs (scan_job.poll_and_analyze) on the settings Spark
    ships to it (pickled), loaded from the same file by the same loader."""
    import pickle

    from exporter.config import load_settings
    from exporter.spark.scan_job import poll_and_analyze

    sim, authority = msk
    for name, value in aws_env(tmp_path).items():
        if name.startswith("AWS_") or name == "HOME":
            monkeypatch.setenv(name, value)
    settings = load_settings(str(write_config(tmp_path, sim, pki)), env={})
    shipped = pickle.loads(pickle.dumps(settings.clusters[0]))
    accepted = authority.accepted

    result = poll_and_analyze(shipped)
    assert result.error is None and result.snapshot is not None and result.snapshot.up
    assert [lt.classification for lt in result.snapshot.late_transactions] == ["hanging"]
    assert authority.accepted > accepted

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    failed = poll_and_analyze(shipped)
    assert failed.snapshot is None and failed.error is not None
    assert failed.error.startswith("authentication failed: SASL AWS_MSK_IAM")
    assert WRONG_SECRET not in failed.error


WEB_IDENTITY_TOKEN = "eyJraWQiOiJzaW0ifQ.msk-irsa-web-identity-8d2f.c2lnbmF0dXJl"
ROLE_ARN = "arn:aws:iam::123456789012:role/kafka-txn-exporter"


def test_debug_logs_of_the_credential_chain_carry_no_token_or_key(pki: Pki, tmp_path: Path) -> None:
    """`scan` at debug level through the longest chain: EKS IRSA (web identity token at STS),
    then role_arn assumed with it; the simulator knows the key the fake STS issues last. No
    web identity token, secret key, session token or MSK token in any output."""
    from collect.aws_fakes import fake_aws

    with fake_aws() as aws:
        # The fake numbers its keys: 1 for the web identity exchange, 2 for the assumed role.
        authority = MskIamAuthority(MskIamVerifier(REGION, {"ASIAROLE0002": MskIamKey(
            "fake-secret-ASIAROLE-2", "fake-session-ASIAROLE-2", PRINCIPAL)}))
        tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"),
                     ca_file=pki.crt("ca"))
        with SimCluster(brokers=1, topics={"t": 1}, broker_config=BROKER_CONFIG, tls=tls,
                        sasl_authority=authority) as sim:
            token_file = tmp_path / "eks-token"
            token_file.write_text(WEB_IDENTITY_TOKEN)
            config = write_config(tmp_path, sim, pki, sasl={
                "mechanism": "AWS_MSK_IAM",
                "aws_msk_iam": {"region": REGION, "role_arn": ROLE_ARN}})
            env = aws_env(tmp_path, secret=None)
            env.update(AWS_ROLE_ARN="arn:aws:iam::123456789012:role/irsa-base",
                       AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file),
                       AWS_ENDPOINT_URL_STS=aws.url)
            result = subprocess.run(
                [sys.executable, "-m", "exporter", "scan", "--config", str(config),
                 "--orphan-check-seconds", "0"],
                env=env, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    assert aws.actions() == ["AssumeRoleWithWebIdentity", "AssumeRole"]
    assert len(authority.tokens) >= 1
    output = result.stdout + result.stderr
    assert '"level": "debug"' in output  # debug records were written
    for secret in (WEB_IDENTITY_TOKEN, "fake-secret-ASIAIRSA-1", "fake-session-ASIAIRSA-1",
                   "fake-secret-ASIAROLE-2", "fake-session-ASIAROLE-2", *authority.tokens):
        assert secret not in output


@pytest.mark.slow
def test_serve_renews_connections_before_the_brokers_session_ends(
    pki: Pki, tmp_path: Path
) -> None:
    """MSK ends a SASL session when its token (or credentials) expire and closes the connection
    on the next request (KIP-368). The exporter replaces a connection 85% into the session the
    broker announced, between polls: no request meets a closed session, no error, no `up 0`.
    Sessions here last 12 s (a real one 15 minutes) so that renewals happen within the test."""
    authority = MskIamAuthority(MskIamVerifier(
        REGION, {ACCESS_KEY: MskIamKey(SECRET_KEY, SESSION_TOKEN, PRINCIPAL)}),
        max_session_seconds=12)
    tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"), ca_file=pki.crt("ca"))
    with SimCluster(brokers=2, topics={"t": 2}, broker_config=BROKER_CONFIG, tls=tls,
                    sasl_authority=authority) as sim:
        config = write_config(tmp_path, sim, pki, poll_interval_seconds=1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config),
             "--web.listen-address", "127.0.0.1", "--web.port", "0"],
            env=aws_env(tmp_path), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        try:
            base = read_listen_url(proc)
            wait_until(lambda: http_get(base + "/readyz")[0] == 200, 30, "/readyz 200")
            # Two connections (one per broker), each renewed at least twice; a scrape after
            # each login round sees the polls around it.
            ups = []
            for logins in (2, 4, 6):
                wait_until(lambda n=logins: authority.accepted >= n, 120, f"{logins} logins")
                ups.append(samples(http_get(base + "/metrics")[1]))
            polls_before = polls(ups[-1])
            wait_until(lambda: polls(samples(http_get(base + "/metrics")[1])) >= polls_before + 2,
                       30, "two more polls")
            ups.append(samples(http_get(base + "/metrics")[1]))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert authority.sessions_expired == 0  # no request ever met an ended session
    assert set(authority.principals) == {PRINCIPAL}
    for s in ups:
        assert s[("kafka_txn_exporter_up", frozenset({("cluster", "msk")}))] == 1
        errors = {labels: value for (name, labels), value in s.items()
                  if name == "kafka_txn_exporter_request_errors_total" and value > 0}
        assert errors == {}


def polls(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    """Polls done so far: the poll duration histogram's count."""
    return sum(value for (name, labels), value in metrics.items()
               if name == "kafka_txn_exporter_poll_duration_seconds_count")


def test_serve_without_aws_credentials_is_up_0_with_the_reason_counted(
    msk: tuple[SimCluster, MskIamAuthority], pki: Pki, tmp_path: Path
) -> None:
    sim, _ = msk
    config = write_config(tmp_path, sim, pki, poll_interval_seconds=1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", "127.0.0.1", "--web.port", "0"],
        env=aws_env(tmp_path, secret=None), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )

    def auth_errors() -> float:
        s = samples(http_get(base + "/metrics")[1])
        return sum(value for (name, labels), value in s.items()
                   if name == "kafka_txn_exporter_request_errors_total"
                   and ("error", "AUTHENTICATION_FAILED") in labels)

    try:
        base = read_listen_url(proc)
        wait_until(lambda: auth_errors() >= 2, 30, "two polls refused")
        s = samples(http_get(base + "/metrics")[1])
        ready = http_get(base + "/readyz")[0]
        assert proc.poll() is None  # the daemon keeps polling
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert s[("kafka_txn_exporter_up", frozenset({("cluster", "msk")}))] == 0
    assert ready == 503
    assert "no AWS credentials found" in err
    assert "Traceback" not in err + out
