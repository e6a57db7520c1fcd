"""`sasl.mechanism: GSSAPI` in the config: what it needs, what it refuses (exit 2 naming the
field), and the named Kerberos causes of a failed login (exit 3 or 5)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.collect.connection import AuthenticationFailed, BrokerUnreachable
from exporter.collect.sasl.gssapi import kerberos_failure
from exporter.config import ConfigError, load_settings
from exporter.settings import GssapiSettings

NEEDS_GSSAPI = pytest.mark.system_tools
"""Loads a GSSAPI config, which needs the gssapi binding (built against the MIT libraries
scripts/install-test-deps installs)."""


def config(tmp_path: Path, sasl: str, extra: str = "") -> str:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(f"""
        clusters:
          - name: onprem
            bootstrap_servers: [kafka-1.example.com:9092]
            sasl: {sasl}
    """) + textwrap.dedent(extra))
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    keytab, krb5_conf = tmp_path / "exporter.keytab", tmp_path / "krb5.conf"
    keytab.write_bytes(b"\x05\x02keytab")
    krb5_conf.write_text("[libdefaults]\n default_realm = EXAMPLE.COM\n")
    return {"keytab": str(keytab), "krb5_conf": str(krb5_conf)}


@NEEDS_GSSAPI
def test_a_keytab_login_loads_with_the_default_service_name(
    tmp_path: Path, files: dict[str, str]
) -> None:
    path = config(tmp_path, "{mechanism: gssapi, gssapi: {principal: exporter@EXAMPLE.COM, "
                  f"keytab_file: {files['keytab']}, krb5_conf_file: {files['krb5_conf']}}}}}")
    (cluster,) = load_settings(path, env={}).clusters
    assert cluster.sasl is not None and cluster.sasl.mechanism == "GSSAPI"
    assert cluster.sasl.gssapi == GssapiSettings(
        principal="exporter@EXAMPLE.COM", keytab_file=files["keytab"],
        krb5_conf_file=files["krb5_conf"], service_name="kafka")


@NEEDS_GSSAPI
def test_a_credential_cache_login_needs_no_principal(tmp_path: Path) -> None:
    path = config(tmp_path, "{mechanism: GSSAPI, gssapi: {ccache: 'FILE:/tmp/krb5cc_exporter', "
                  "service_name: kafka-prod}}")
    (cluster,) = load_settings(path, env={}).clusters
    assert cluster.sasl is not None
    assert cluster.sasl.gssapi == GssapiSettings(ccache="FILE:/tmp/krb5cc_exporter",
                                                 service_name="kafka-prod")


@pytest.mark.parametrize(("sasl", "message"), [
    ("{mechanism: GSSAPI}",
     "clusters[0].sasl.gssapi: required for mechanism GSSAPI"),
    ("{mechanism: GSSAPI, gssapi: {keytab_file: KEYTAB}}",
     "clusters[0].sasl.gssapi.principal: required with keytab_file"),
    ("{mechanism: GSSAPI, username: u, gssapi: {ccache: 'FILE:/x'}}",
     "clusters[0].sasl.username: not used by GSSAPI"),
    ("{mechanism: GSSAPI, password_file: KEYTAB, gssapi: {ccache: 'FILE:/x'}}",
     "clusters[0].sasl.password_file: not used by GSSAPI"),
    ("{mechanism: SCRAM-SHA-512, username: u, password_env: PW, gssapi: {ccache: 'FILE:/x'}}",
     "clusters[0].sasl.gssapi: only with mechanism GSSAPI, not SCRAM-SHA-512"),
    ("{mechanism: GSSAPI, gssapi: {principal: a@B, keytab_file: /nonexistent/x.keytab}}",
     "clusters[0].sasl.gssapi.keytab_file: file not found"),
    ("{mechanism: GSSAPI, gssapi: {principal: 'a b@B', keytab_file: KEYTAB}}",
     "clusters[0].sasl.gssapi.principal: expected a Kerberos principal"),
    ("{mechanism: GSSAPI, gssapi: {ccache: 'FILE:/x', service_name: kafka/host}}",
     "clusters[0].sasl.gssapi.service_name: expected the first part of the brokers' principal"),
    ("{mechanism: GSSAPI, gssapi: {ccache: 'FILE:/x', keytab: KEYTAB}}",
     "clusters[0].sasl.gssapi: unknown key 'keytab' (known: ccache, keytab_file, "
     "krb5_conf_file, principal, service_name)"),
    ("{mechanism: GSSAPI, gssapi: 'exporter@EXAMPLE.COM'}",
     "clusters[0].sasl.gssapi: expected a mapping"),
])
def test_a_wrong_gssapi_config_names_the_field(
    tmp_path: Path, files: dict[str, str], sasl: str, message: str
) -> None:
    path = config(tmp_path, sasl.replace("KEYTAB", files["keytab"]), "")
    with pytest.raises(ConfigError) as error:
        load_settings(path, env={"PW": "x"})
    assert str(error.value).startswith(message), str(error.value)


@NEEDS_GSSAPI
def test_two_clusters_cannot_use_two_krb5_conf_files(
    tmp_path: Path, files: dict[str, str]
) -> None:
    other = tmp_path / "other-krb5.conf"
    other.write_text("")
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(f"""
        clusters:
          - {{name: a, bootstrap_servers: ['h:1'], sasl: {{mechanism: GSSAPI, gssapi:
              {{ccache: 'FILE:/x', krb5_conf_file: {files['krb5_conf']}}}}}}}
          - {{name: b, bootstrap_servers: ['h:1'], sasl: {{mechanism: GSSAPI, gssapi:
              {{ccache: 'FILE:/y', krb5_conf_file: {other}}}}}}}
    """))
    with pytest.raises(ConfigError, match=r"^clusters\[1\]\.sasl\.gssapi\.krb5_conf_file: "
                       r"differs from clusters\[0\]'s"):
        load_settings(str(path), env={})


def test_the_cli_refuses_a_bad_gssapi_config_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = config(tmp_path, "{mechanism: GSSAPI, gssapi: {keytab_file: /nonexistent/k}}")
    result = subprocess.run([sys.executable, "-m", "exporter", "scan", "--config", path],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kafka-txn-exporter: config error: clusters[0].sasl.gssapi.keytab_file: file not found: "
        "'/nonexistent/k'"]


class FakeGssError(Exception):
    """What the gssapi binding raises: the minor status as the library reports it (the
    signed com_err code as an unsigned 32-bit number)."""

    def __init__(self, minor: int, text: str) -> None:
        super().__init__(text)
        self.min_code = minor % 2**32


KRB5 = -1765328384


@pytest.mark.parametrize(("minor", "kind", "cause"), [
    (KRB5 + 156, BrokerUnreachable, "KDC unreachable"),
    (KRB5 + 37, AuthenticationFailed, "clock skew too great"),
    (KRB5 + 24, AuthenticationFailed, "wrong keytab: the KDC refused its key"),
    (KRB5 + 6, AuthenticationFailed, "client principal unknown to the KDC"),
    (KRB5 + 7, AuthenticationFailed, "service principal unknown to the KDC"),
    (KRB5 + 32, AuthenticationFailed, "expired credentials"),
    (12345, AuthenticationFailed, "failed"),
])
def test_kerberos_failures_are_named_with_their_exit_code_kind(
    minor: int, kind: type[Exception], cause: str
) -> None:
    error = kerberos_failure(FakeGssError(minor, "Minor (x): the library's words"), "login")
    assert type(error) is kind
    assert str(error) == f"Kerberos login: {cause}" + str(error).split(cause, 1)[1]
    assert str(error).endswith("(Minor (x): the library's words)")


def test_with_a_keytab_no_ticket_at_all_means_the_keytab_lacks_the_principal() -> None:
    no_cache = FakeGssError(KRB5 + 195, "No credentials cache found")
    assert "the credential cache does not exist" in str(kerberos_failure(no_cache, "login"))
    assert "no key for the principal in the keytab" in str(
        kerberos_failure(no_cache, "login", keytab=True))
