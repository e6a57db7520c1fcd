"""Config loading: file + env + flags, and start-up validation that names the field."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.config import ConfigError, Overrides, load_settings, parse_duration_seconds

FULL = """
clusters:
  - name: prod
    bootstrap_servers: [kafka-1:9092, kafka-2:9092]
    client_id: txn-exporter
    poll_interval_seconds: 15s
    request_timeout_seconds: 5
    describe_producers_batch_size: 200
    late_buffer_seconds: 5m
    min_reported_duration_seconds: 30
    transaction_max_timeout_ms: 900000
    config_refresh_seconds: 1h
    labels: {env: prod, dc: eu1}
    tls:
      check_hostname: false
    sasl:
      mechanism: scram-sha-512
      username: exporter
      password_env: PROD_KAFKA_PASSWORD
  - name: staging
    bootstrap_servers: "k1:9092,k2:9092"
web:
  listen_address: 127.0.0.1
  port: 9100
log:
  format: json
  level: DEBUG
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_full_file_loads_every_key(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), env={"PROD_KAFKA_PASSWORD": "s3cret"})
    prod, staging = settings.clusters
    assert prod.name == "prod"
    assert prod.bootstrap_servers == ("kafka-1:9092", "kafka-2:9092")
    assert prod.client_id == "txn-exporter"
    assert prod.poll_interval_seconds == 15.0
    assert prod.request_timeout_seconds == 5.0
    assert prod.describe_producers_batch_size == 200
    assert prod.late_buffer_seconds == 300.0
    assert prod.min_reported_duration_seconds == 30.0
    assert prod.transaction_max_timeout_ms == 900000
    assert prod.config_refresh_seconds == 3600.0
    assert dict(prod.labels) == {"env": "prod", "dc": "eu1"}
    assert prod.tls is not None and prod.tls.check_hostname is False
    assert prod.sasl is not None
    assert (prod.sasl.mechanism, prod.sasl.username, prod.sasl.password) == (
        "SCRAM-SHA-512", "exporter", "s3cret")
    assert "s3cret" not in repr(settings)
    assert staging.bootstrap_servers == ("k1:9092", "k2:9092")
    assert staging.poll_interval_seconds == 30.0  # default
    assert (settings.web.listen_address, settings.web.port) == ("127.0.0.1", 9100)
    assert (settings.log_format, settings.log_level) == ("json", "debug")


def test_password_file_is_read_and_stripped(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    path = write(tmp_path, f"""
        clusters:
          - name: a
            bootstrap_servers: [h:9092]
            sasl: {{mechanism: PLAIN, username: u, password_file: {secret}}}
    """)
    (cluster,) = load_settings(path, env={}).clusters
    assert cluster.sasl is not None and cluster.sasl.password == "hunter2"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30, 30.0), (1.5, 1.5), ("45", 45.0), ("30s", 30.0), ("500ms", 0.5), ("5m", 300.0),
     ("2h", 7200.0)],
)
def test_durations_accept_numbers_and_unit_strings(value: object, seconds: float) -> None:
    assert parse_duration_seconds(value, "x") == seconds


def test_env_defines_single_cluster_without_file() -> None:
    settings = load_settings(None, env={
        "KTE_CLUSTER_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
        "KTE_CLUSTER_POLL_INTERVAL_SECONDS": "10s",
        "KTE_CLUSTER_LABELS": "env=dev,team=data",
        "KTE_CLUSTER_TLS_CHECK_HOSTNAME": "false",
        "KTE_WEB_PORT": "9200",
        "KTE_LOG_FORMAT": "console",
    })
    (cluster,) = settings.clusters
    assert cluster.name == "default"
    assert cluster.bootstrap_servers == ("127.0.0.1:9092",)
    assert cluster.poll_interval_seconds == 10.0
    assert dict(cluster.labels) == {"env": "dev", "team": "data"}
    assert cluster.tls is not None and cluster.tls.check_hostname is False
    assert settings.web.port == 9200
    assert settings.log_format == "console"


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
        clusters: [{name: a, bootstrap_servers: [h:1], poll_interval_seconds: 5}]
        web: {port: 1000}
    """)
    env = {"KTE_WEB_PORT": "2000", "KTE_CLUSTER_POLL_INTERVAL_SECONDS": "7"}
    settings = load_settings(path, env=env, overrides=Overrides(web_port="3000"))
    assert settings.web.port == 3000
    assert settings.clusters[0].poll_interval_seconds == 7.0
    assert load_settings(path, env=env).web.port == 2000
    assert load_settings(path, env={}).web.port == 1000


def test_kte_config_env_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "clusters: [{name: fromenv, bootstrap_servers: [h:1]}]")
    assert load_settings(None, env={"KTE_CONFIG": path}).clusters[0].name == "fromenv"


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("clusters: [{name: a, bootstrap_servers: [h:1], poll_interval_seconds: abc}]", {},
         "clusters[0].poll_interval_seconds: expected a number of seconds"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], pol_interval_seconds: 3}]", {},
         "clusters[0]: unknown key 'pol_interval_seconds'"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nhistory: {retention_days: soon}", {},
         "history.retention_days: expected"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nhistory: {dir: /tmp}", {},
         "history: unknown key 'dir'"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nweb: {port: 70000}", {},
         "web.port: expected a TCP port"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nweb: {port: '80x'}", {},
         "web.port: expected an integer"),
        ("clusters: [{name: a}]", {}, "clusters[0].bootstrap_servers: required"),
        ("clusters: [{name: a, bootstrap_servers: [nohostport]}]", {},
         "clusters[0].bootstrap_servers[0]: expected host:port"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], late_buffer_seconds: -1}]", {},
         "clusters[0].late_buffer_seconds: must be between 0 and 604800 seconds"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], labels: {cluster: x}}]", {},
         "clusters[0].labels.cluster: label name is used"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}, {name: a, bootstrap_servers: [h:1]}]",
         {}, "clusters[1].name: duplicate cluster name"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], sasl: {mechanism: PLAIN, username: u, "
         "password: hunter2}}]", {}, "clusters[0].sasl.password: inline passwords are not allowed"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], sasl: {mechanism: PLAIN, username: u, "
         "password_env: NOPE_UNSET}}]", {},
         "clusters[0].sasl.password_env: the environment variable it names is not set"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], sasl: {mechanism: DIGEST-MD5, username: u,"
         " password_env: X}}]", {"X": "y"}, "clusters[0].sasl.mechanism: expected one of"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], tls: {ca_file: /nonexistent/ca.pem}}]",
         {}, "clusters[0].tls.ca_file: file not found"),
        ("log: {format: xml}\nclusters: [{name: a, bootstrap_servers: [h:1]}]", {},
         "log.format: expected one of auto, json, console"),
        ("clusterz: []", {}, "clusterz: unknown key"),
        ("clusters: {name: a}", {}, "clusters: expected a list"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]", {"KTE_CLUSTER_POLL_INTERVAL": "3"},
         "KTE_CLUSTER_POLL_INTERVAL: unknown environment variable"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]",
         {"KTE_CLUSTER_POLL_INTERVAL_SECONDS": "soon"},
         "KTE_CLUSTER_POLL_INTERVAL_SECONDS: expected a number of seconds"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}, {name: b, bootstrap_servers: [h:1]}]",
         {"KTE_CLUSTER_CLIENT_ID": "x"}, "KTE_CLUSTER_CLIENT_ID: single-cluster overrides need"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nweb: {web_config_file: %(self)s}", {},
         "web.web_config_file: unknown key 'clusters'"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]\nweb: {web_config_file: /nope.yml}", {},
         "web.web_config_file: file not found"),
        ("clusters: [a, b", {}, "config file: invalid YAML (line"),
        ("", {}, "clusters: no cluster configured"),
    ],
)
def test_bad_config_names_the_field(
    tmp_path: Path, text: str, env: dict[str, str], expected: str
) -> None:
    path = str(tmp_path / "c.yaml")
    Path(path).write_text(text % {"self": path} if "%(self)s" in text else text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, env=env)
    assert str(info.value).startswith(expected), str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file: not found"):
        load_settings(str(tmp_path / "absent.yaml"), env={})


def test_password_env_variable_may_use_kte_prefix(tmp_path: Path) -> None:
    """A variable named by password_env is not an 'unknown KTE_* variable'."""
    path = write(tmp_path, """
        clusters: [{name: a, bootstrap_servers: [h:1],
                    sasl: {mechanism: PLAIN, username: u, password_env: KTE_KAFKA_PASSWORD}}]
    """)
    settings = load_settings(path, env={"KTE_KAFKA_PASSWORD": "pw"})
    assert settings.clusters[0].sasl is not None
    assert settings.clusters[0].sasl.password == "pw"


# ---------------------------------------------------------------- through the CLI (subprocess)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        capture_output=True, text=True, timeout=30, env={**base, **(env or {})},
    )


@pytest.mark.parametrize(
    ("text", "args", "env", "expected"),
    [
        ("clusters: [{name: a, bootstrap_servers: [h:1], poll_interval_seconds: abc}]", (), {},
         "clusters[0].poll_interval_seconds: expected a number of seconds or a duration like "
         "'30s'/'5m', got 'abc'"),
        ("clusters: [{name: a, bootstrap_servers: [h:1], bogus: 1}]", (), {},
         "clusters[0]: unknown key 'bogus'"),
        ("clusters: [{name: a, bootstrap_servers: 42}]", (), {},
         "clusters[0].bootstrap_servers: expected a list of host:port strings, got int 42"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]", ("--web.port", "nope"), {},
         "--web.port: expected an integer, got 'nope'"),
        ("clusters: [{name: a, bootstrap_servers: [h:1]}]", (), {"KTE_WEB_PORT": "-5"},
         "KTE_WEB_PORT: expected a TCP port 0-65535, got -5"),
    ],
)
def test_cli_serve_exits_2_naming_the_field(
    tmp_path: Path, text: str, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    path = write(tmp_path, text)
    result = run_cli("serve", "--config", path, *args, env=env)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert result.stdout == ""


def test_cli_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = run_cli("scan", "--config", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "config file: not found" in result.stderr


def test_cli_never_prints_the_sasl_password(tmp_path: Path) -> None:
    path = write(tmp_path, """
        clusters: [{name: a, bootstrap_servers: [h:1],
                    sasl: {mechanism: PLAIN, username: u, password: TopSecretValue}}]
    """)
    result = run_cli("serve", "--config", path)
    assert result.returncode == 2
    assert "clusters[0].sasl.password: inline passwords are not allowed" in result.stderr
    assert "TopSecretValue" not in result.stderr + result.stdout


def test_example_config_is_valid(tmp_path: Path) -> None:
    """exporter.example.yaml documents every key; it must load (with its files made real)."""
    example = (Path(__file__).parent.parent / "exporter.example.yaml").read_text()
    ca, secret = tmp_path / "ca.pem", tmp_path / "pw"
    ca.write_text("x")
    secret.write_text("pw\n")
    text = example.replace("/etc/kafka-txn-exporter/ca.pem", str(ca)).replace(
        "/run/secrets/kafka-password", str(secret))
    settings = load_settings(write(tmp_path, text), env={})
    assert [c.name for c in settings.clusters] == ["prod", "staging"]
    assert settings.web.port == 9981


def test_admin_section_is_accepted_and_its_password_env_is_not_a_typo(tmp_path: Path) -> None:
    """`admin` belongs to the abort command (exporter.abort validates it); serve ignores it."""
    path = write(tmp_path, """
        clusters: [{name: a, bootstrap_servers: [h:1]}]
        admin:
          clusters:
            - name: a
              sasl: {mechanism: PLAIN, username: admin, password_env: KTE_ADMIN_PASSWORD}
    """)
    settings = load_settings(path, env={"KTE_ADMIN_PASSWORD": "x"})
    assert [c.name for c in settings.clusters] == ["a"]
    with pytest.raises(ConfigError, match="admin: expected a mapping"):
        load_settings(write(tmp_path, "clusters: [{name: a, bootstrap_servers: [h:1]}]\n"
                                      "admin: [1]\n", "bad.yaml"), env={})
