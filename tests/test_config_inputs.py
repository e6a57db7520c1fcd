"""Hostile and odd configuration input.

Every bad file or value is a ConfigError naming the field (exit status 2 from the CLI), with
bounded output, no traceback and not one byte of a secret.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from exporter import config as config_module
from exporter.config import ConfigError, Overrides, load_settings, parse_listen_address
from exporter.webconfig import parse_web_config_file

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "clusters: [{name: a, bootstrap_servers: ['h:1']}]\n"
SECRET = "Hunter2-Sekrit"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=60, env={**clean, **(env or {})})


def config_error(path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(str(path), env=env or {})
    return str(info.value)


def assert_exit_2(result: subprocess.CompletedProcess[str], field: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert len(result.stderr) < 1000, len(result.stderr)
    assert field in result.stderr, result.stderr


# ---------------------------------------------------------------------------------- bad files


def test_config_file_not_utf8_exits_2_without_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(CLUSTER.encode() + b"# caf\xe9 " + SECRET.encode("latin-1") + b"\n")
    result = run_cli("serve", "--config", str(path))
    assert_exit_2(result, "config file:")
    assert "not UTF-8" in result.stderr and SECRET not in result.stderr


def test_password_file_not_utf8_never_shows_a_byte_or_position(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_bytes(b"s3cr" + b"\xff" + b"etPassw0rd")
    path = tmp_path / "c.yaml"
    path.write_text("clusters:\n  - name: a\n    bootstrap_servers: ['h:1']\n    sasl:\n"
                    f"      mechanism: PLAIN\n      username: u\n      password_file: '{secret}'\n")
    result = run_cli("serve", "--config", str(path))
    assert_exit_2(result, "clusters[0].sasl.password_file")
    for leak in ("s3cr", "etPassw0rd", "xff", "\\xff", "position", str(secret)):
        assert leak not in result.stderr, leak


def test_web_config_file_not_utf8_exits_2(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_bytes(b"basic_auth_users: {al\xefce: x}\n")
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER + f"web: {{web_config_file: '{web}'}}\n")
    assert_exit_2(run_cli("serve", "--config", str(path)), "web.web_config_file")


def test_yaml_nested_50k_deep_exits_2_briefly(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER + "web: " + "[" * 50_000 + "]" * 50_000 + "\n")
    result = run_cli("serve", "--config", str(path))
    assert_exit_2(result, "nested deeper than")


def test_yaml_alias_bomb_in_a_validated_field_exits_2_fast_and_small(tmp_path: Path) -> None:
    """10^9 elements if expanded: refused while composing, before any value is printed."""
    levels = ["x0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "c.yaml"
    path.write_text("clusters:\n  - name: a\n"
                    + "".join(f"    {line}\n" for line in levels)
                    + "    bootstrap_servers: *a8\n")
    started = time.monotonic()
    result = run_cli("serve", "--config", str(path))
    assert time.monotonic() - started < 30
    assert_exit_2(result, "expands to more than")


def test_a_bomb_that_passes_the_loader_is_still_described_briefly() -> None:
    """Error messages describe values with reprlib: a huge shared structure prints ~100 bytes."""
    shared: list[object] = ["x"] * 10
    for _ in range(8):
        shared = [shared] * 10
    with pytest.raises(ConfigError) as info:
        config_module._bootstrap_servers({"not": shared}, "clusters[0].bootstrap_servers")
    assert len(str(info.value)) < 300


def test_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("clusters:\n"
                    "  - &first {name: a, bootstrap_servers: ['h:1'], poll_interval_seconds: 15s}\n"
                    "  - {<<: *first, name: b}\n")
    settings = load_settings(str(path), env={})
    assert [(c.name, c.poll_interval_seconds) for c in settings.clusters] == [
        ("a", 15.0), ("b", 15.0)]


# ---------------------------------------------------------------------------------- no echo


@pytest.mark.parametrize(("sasl", "env", "field"), [
    (f"password_env: '{SECRET}!'", {}, "clusters[0].sasl.password_env"),
    (f"password_env: {SECRET.replace('-', '_')}", {}, "clusters[0].sasl.password_env"),
    (f"password_file: '/nonexistent/{SECRET}'", {}, "clusters[0].sasl.password_file"),
])
def test_a_password_where_a_name_belongs_is_not_echoed(
    tmp_path: Path, sasl: str, env: dict[str, str], field: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("clusters: [{name: a, bootstrap_servers: ['h:1'], sasl: {mechanism: PLAIN, "
                    f"username: u, {sasl}}}}}]\n")
    message = config_error(path, env)
    assert message.startswith(field), message
    assert SECRET not in message and SECRET.replace("-", "_") not in message


@pytest.mark.parametrize("value", [f"{SECRET}!", SECRET.replace("-", "_")])
def test_kte_cluster_sasl_password_env_is_not_echoed(value: str) -> None:
    result = run_cli("serve", "--bootstrap-servers", "h:1", env={
        "KTE_CLUSTER_SASL_MECHANISM": "PLAIN", "KTE_CLUSTER_SASL_USERNAME": "u",
        "KTE_CLUSTER_SASL_PASSWORD_ENV": value})
    assert_exit_2(result, "")
    assert "password_env" in result.stderr.lower()
    assert SECRET not in result.stderr and SECRET.replace("-", "_") not in result.stderr


# --------------------------------------------------------------------------- accepted but wrong


@pytest.mark.parametrize(("headers", "expected"), [
    ('{X-Frame-Options: "deny\\r\\nSet-Cookie: a=b"}', "control characters"),
    ('{X-Test: "a\\nb"}', "control characters"),
    ('{"Bad Header": x}', "invalid header name"),
    ('{"X-A:b": x}', "invalid header name"),
    ("{Content-Length: '0'}", "set by the server itself"),
])
def test_header_injection_and_bad_names_are_rejected(
    tmp_path: Path, headers: str, expected: str
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"http_server_config: {{headers: {headers}}}\n")
    with pytest.raises(ConfigError) as info:
        parse_web_config_file(str(web))
    assert "http_server_config.headers" in str(info.value) and expected in str(info.value)


def test_tls_min_version_above_max_version_is_rejected(tmp_path: Path) -> None:
    for name in ("s.crt", "s.key"):
        (tmp_path / name).write_text("-")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: s.crt, key_file: s.key, min_version: TLS13, "
                   "max_version: TLS12}\n")
    with pytest.raises(ConfigError, match=r"tls_server_config.max_version: TLS12 is below "
                                          "min_version TLS13"):
        parse_web_config_file(str(web))


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER + "clusters: [{name: b, bootstrap_servers: ['h:2']}]\n")
    assert config_error(path) == "config file: duplicate key 'clusters' (line 2, column 1)"
    path.write_text("clusters: [{name: a, name: b, bootstrap_servers: ['h:1']}]\n")
    assert "duplicate key 'name'" in config_error(path)
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users: {}\nbasic_auth_users: {}\n")
    with pytest.raises(ConfigError, match=r"web\.web_config_file: duplicate key"):
        parse_web_config_file(str(web))


def test_nul_in_listen_address_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER + 'web: {listen_address: "10.0.0.1\\0evil"}\n')
    assert config_error(path).startswith("web.listen_address: must not contain a NUL")


@pytest.mark.parametrize(("key", "value", "ok"), [
    ("poll_interval_seconds", "0.000001", False),
    ("poll_interval_seconds", "100000000000", False),
    ("poll_interval_seconds", "0.5", True),
    ("poll_interval_seconds", "25h", False),
    ("poll_interval_seconds", "24h", True),
    ("request_timeout_seconds", "0.01", False),
    ("request_timeout_seconds", "10m", True),
    ("request_timeout_seconds", "11m", False),
    ("late_buffer_seconds", "0", True),
    ("late_buffer_seconds", "169h", False),
    ("config_refresh_seconds", "0.5", False),
    ("min_reported_duration_seconds", "168h", True),
    ("describe_producers_batch_size", "0", False),
    ("describe_producers_batch_size", "100001", False),
])
def test_intervals_have_documented_bounds(key: str, value: str, ok: bool) -> None:
    env = {"KTE_CLUSTER_BOOTSTRAP_SERVERS": "h:1", f"KTE_CLUSTER_{key.upper()}": value}
    if ok:
        load_settings(None, env=env)
        return
    with pytest.raises(ConfigError, match=rf"^KTE_CLUSTER_{key.upper()}: must be between"):
        load_settings(None, env=env)


def test_readme_lists_every_interval_bound() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for key, (low, high) in config_module.DURATION_BOUNDS_SECONDS.items():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{key}`")), "")
        assert f"{low:g}" in row and f"{high:g}" in row, (key, row)


# ------------------------------------------------------------------------------------ web flags


@pytest.mark.parametrize(("flag", "port_flag", "expected"), [
    (":9981", None, ("0.0.0.0", 9981)),
    ("0.0.0.0:9999", None, ("0.0.0.0", 9999)),
    ("[::1]:9981", None, ("::1", 9981)),
    ("127.0.0.1", "9100", ("127.0.0.1", 9100)),  # the address-only form keeps working
    ("::", None, ("::", 9981)),  # a bare IPv6 address is an address
    ("[::]", "9100", ("::", 9100)),
])
def test_listen_address_takes_host_port(
    flag: str, port_flag: str | None, expected: tuple[str, int]
) -> None:
    settings = load_settings(None, env={"KTE_CLUSTER_BOOTSTRAP_SERVERS": "h:1"},
                             overrides=Overrides(web_listen_address=flag, web_port=port_flag))
    assert (settings.web.listen_address, settings.web.port) == expected


def test_port_in_the_listen_address_overrides_the_files_port(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER + "web: {listen_address: 10.0.0.1, port: 9100}\n")
    settings = load_settings(str(path), env={},
                             overrides=Overrides(web_listen_address="127.0.0.1:9200"))
    assert (settings.web.listen_address, settings.web.port) == ("127.0.0.1", 9200)


@pytest.mark.parametrize(("flag", "port", "expected"), [
    ("127.0.0.1:9981", "9100", "its port 9981 differs from --web.port 9100"),
    ("[::1", None, "expected [host]:port"),
    ("host:", None, "expected a port after"),
    ("host:99999", None, "expected a TCP port"),
    ("a b:1", None, "must not contain spaces"),
])
def test_bad_listen_addresses_name_the_flag(flag: str, port: str | None, expected: str) -> None:
    with pytest.raises(ConfigError, match=r"^--web.listen-address: ") as info:
        load_settings(None, env={"KTE_CLUSTER_BOOTSTRAP_SERVERS": "h:1"},
                      overrides=Overrides(web_listen_address=flag, web_port=port))
    assert expected in str(info.value)


def test_parse_listen_address_is_exporter_toolkit_like() -> None:
    assert parse_listen_address("localhost:80", "x") == ("localhost", 80)
    assert parse_listen_address("fe80::1", "x") == ("fe80::1", None)


@pytest.mark.parametrize(("path", "ok"), [
    ("/metrics", True), ("/probe/metrics", True), ("metrics", False), ("/", False),
    ("/healthz", False), ("/a b", False), ("/m?x=1", False),
])
def test_telemetry_path(path: str, ok: bool) -> None:
    env = {"KTE_CLUSTER_BOOTSTRAP_SERVERS": "h:1"}
    if ok:
        settings = load_settings(None, env=env, overrides=Overrides(web_telemetry_path=path))
        assert settings.web.telemetry_path == path
        assert load_settings(None, env={**env, "KTE_WEB_TELEMETRY_PATH": path}
                             ).web.telemetry_path == path
        return
    with pytest.raises(ConfigError, match=r"^--web.telemetry-path: "):
        load_settings(None, env=env, overrides=Overrides(web_telemetry_path=path))


# --------------------------------------------------------------------------- the example file


def _schema_keys() -> set[str]:
    """Every key the declarations know, each part of a dotted one (`sasl`, `oauthbearer`)."""
    keys = set(config_module._TOP_LEVEL_KEYS) | set(config_module._CLIENT_ENTRY_FIELDS)
    for settings in (config_module.CLUSTER_SETTINGS, config_module.WEB_SETTINGS,
                     config_module.LOG_SETTINGS, config_module.HISTORY_SETTINGS):
        keys |= {part for setting in settings for part in setting.path}
    return keys


def _example_keys(text: str) -> set[str]:
    """Every key the example shows, set or commented out (`# key: value`)."""
    return set(re.findall(r"^\s*(?:#\s*)?(?:-\s+)?([a-z][a-z0-9_]*):(?:\s|$)", text, flags=re.M))


def test_example_config_shows_every_key_and_only_real_ones() -> None:
    text = (ROOT / "exporter.example.yaml").read_text(encoding="utf-8")
    shown = _example_keys(text)
    schema = _schema_keys()
    assert schema - shown == set(), f"keys missing from exporter.example.yaml: {schema - shown}"
    label_names = {"env", "region"}  # the example's own static labels, not schema keys
    assert shown - schema - label_names == set(), f"keys the schema lacks: {shown - schema}"


def test_example_config_loads_once_its_files_exist(tmp_path: Path) -> None:
    """Its values are valid: only the secret/certificate files it points at are missing here."""
    data = yaml.safe_load((ROOT / "exporter.example.yaml").read_text(encoding="utf-8"))
    for cluster in data["clusters"]:
        cluster.pop("tls", None)
        cluster.pop("sasl", None)
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(data))
    settings = load_settings(str(path), env={})
    assert [c.name for c in settings.clusters] == ["prod", "staging"]
    assert settings.web.telemetry_path == "/metrics"


def test_web_key_password_file_name_is_not_echoed(tmp_path: Path) -> None:
    for name in ("s.crt", "s.key"):
        (tmp_path / name).write_text("-")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: s.crt, key_file: s.key, "
                   f"key_password_file: '{SECRET}'}}\n")
    with pytest.raises(ConfigError) as info:
        parse_web_config_file(str(web))
    assert "key_password_file: the file it names does not exist" in str(info.value)
    assert SECRET not in str(info.value)
    (tmp_path / "pw").write_bytes(b"\xff" + SECRET.encode())
    web.write_text("tls_server_config: {cert_file: s.crt, key_file: s.key, "
                   "key_password_file: pw}\n")
    with pytest.raises(ConfigError) as info:
        parse_web_config_file(str(web))
    assert "not UTF-8" in str(info.value) and SECRET not in str(info.value)
    assert str(tmp_path / "pw") not in str(info.value)
