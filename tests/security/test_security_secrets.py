"""The SASL password never appears in anything the exporter emits: stdout, stderr (logs at
debug level), /metrics, the status page, /readyz, /healthz, `scan` output, `--help`.

Runs the real `serve` and `scan` processes against a SASL simulator with the password given
through `password_file` and through `password_env`, with the right and a wrong password (the
wrong one is a secret too: it may be someone's real password for another system). Besides the
password itself, its encodings that would betray a dumped SASL token are searched for.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka_sim.cluster import SimCluster
from kafka_sim.seed import seed_hanging_transaction
from resilience.harness import ServeProcess, clean_env

pytestmark = pytest.mark.slow  # serve and scan as processes, per mechanism

RIGHT = "Zq7-right-Pw-4b9e1c"
WRONG = "Xk2-wrong-Pw-77aa0d"
USER = "exporter"


def encodings(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        raw.hex(),
        base64.b64encode(raw).decode(),
        base64.b64encode(b"\0" + USER.encode() + b"\0" + raw).decode(),  # a PLAIN token
        repr(raw),
    ]


def assert_no_secret(text: str, secret: str, where: str) -> None:
    for form in encodings(secret):
        assert form not in text, f"{where} contains the password (as {form!r})"


@pytest.fixture(scope="module")
def sasl_sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=2, topics={"t": 2}, sasl_users={USER: RIGHT},
                    broker_config={"transaction.max.timeout.ms": "60000"}) as sim:
        sim.call(seed_hanging_transaction, sim.state, "secret-hang-1", "t", 0,
                 last_timestamp_ms=sim.clock.now_ms() - 400_000)
        yield sim


def write_config(tmp_path: Path, sim: SimCluster, mechanism: str, password_file: str | None,
                 password_env: str | None) -> Path:
    sasl: dict[str, str] = {"mechanism": mechanism, "username": USER}
    if password_file:
        sasl["password_file"] = password_file
    if password_env:
        sasl["password_env"] = password_env
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "sasl", "bootstrap_servers": sim.bootstrap_servers.split(","),
                      "poll_interval_seconds": 0.5, "request_timeout_seconds": 2,
                      "late_buffer_seconds": 10, "min_reported_duration_seconds": 0,
                      "sasl": sasl}],
        "log": {"level": "debug", "format": "json"},
    }))
    return config


CASES = [
    pytest.param("PLAIN", "file", RIGHT, id="plain-file-right"),
    pytest.param("PLAIN", "file", WRONG, id="plain-file-wrong"),
    pytest.param("SCRAM-SHA-256", "env", RIGHT, id="scram-env-right"),
    pytest.param("SCRAM-SHA-512", "env", WRONG, id="scram-env-wrong"),
]


@pytest.mark.parametrize(("mechanism", "source", "password"), CASES)
def test_serve_never_shows_the_password(sasl_sim: SimCluster, tmp_path: Path, mechanism: str,
                                        source: str, password: str) -> None:
    env = clean_env()
    if source == "file":
        secret_file = tmp_path / "password"
        secret_file.write_text(password + "\n")
        config = write_config(tmp_path, sasl_sim, mechanism, str(secret_file), None)
    else:
        env["EXPORTER_KAFKA_PASSWORD"] = password
        config = write_config(tmp_path, sasl_sim, mechanism, None, "EXPORTER_KAFKA_PASSWORD")
    proc = ServeProcess(["serve", "--config", str(config), "--web.listen-address", "127.0.0.1",
                         "--web.port", "0"], env)
    pages: dict[str, str] = {}
    try:
        scraper = proc.wait_started()
        if password == RIGHT:
            scraper.wait_for(lambda: scraper.get("/readyz")[0] == 200, "a successful poll")
        else:
            scraper.wait_for(lambda: (scraper.value(
                "kafka_txn_exporter_request_errors_total", error="AUTHENTICATION_FAILED") or 0)
                >= 2, "two failed polls")
        for path in ("/metrics", "/", "/readyz", "/healthz"):
            pages[path] = scraper.get(path)[1]
    finally:
        code, _ = proc.stop()
    assert code == 0
    # The test is only meaningful if the runs did what they should.
    if password == RIGHT:
        assert 'kafka_txn_exporter_up{cluster="sasl"} 1.0' in pages["/metrics"]
        assert "secret-hang-1" in pages["/"]
    else:
        assert 'error="AUTHENTICATION_FAILED"' in pages["/metrics"]
        assert "AUTHENTICATION_FAILED" in proc.output  # the failure is logged, without secret
    for where, text in [("output", proc.output), *pages.items()]:
        assert_no_secret(text, password, where)


@pytest.mark.parametrize(("mechanism", "source", "password"), CASES[:2])
def test_scan_never_shows_the_password(sasl_sim: SimCluster, tmp_path: Path, mechanism: str,
                                       source: str, password: str) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text(password)
    config = write_config(tmp_path, sasl_sim, mechanism, str(secret_file), None)
    for output in ("table", "json"):
        result = subprocess.run(
            [sys.executable, "-m", "exporter", "scan", "--config", str(config),
             "--output", output],
            env=clean_env(), capture_output=True, text=True, timeout=60)
        # 3: authentication failed (README, exit status of `scan`)
        assert result.returncode == (1 if password == RIGHT else 3), result.stderr
        assert_no_secret(result.stdout + result.stderr, password, f"scan --output {output}")


def test_help_shows_no_password_from_the_environment() -> None:
    env = clean_env(KTE_CLUSTER_SASL_PASSWORD_ENV="EXPORTER_KAFKA_PASSWORD",
                    EXPORTER_KAFKA_PASSWORD=RIGHT)
    for args in (["--help"], ["serve", "--help"], ["scan", "--help"]):
        result = subprocess.run([sys.executable, "-m", "exporter", *args], env=env,
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 0
        assert "KTE_CLUSTER_SASL_PASSWORD_ENV" in result.stdout
        assert_no_secret(result.stdout + result.stderr, RIGHT, " ".join(args))
