"""OAUTHBEARER settings: the file and single-cluster environment forms, and each misuse stopped
at start-up with exit 2 and a line naming the field, never the secret."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.config import ConfigError, load_settings
from exporter.settings import OAuthBearerSettings

SECRET = "client-secret-e3b0c4"
URL = "https://idp.example.com/realms/kafka/protocol/openid-connect/token"


def write(tmp_path: Path, oauth: str, extra: str = "") -> str:
    path = tmp_path / "exporter.yaml"
    path.write_text(textwrap.dedent("""\
        clusters:
          - name: cc
            bootstrap_servers: [pkc-1.example.com:9092]
            sasl:
              mechanism: OAUTHBEARER
        {extra}      oauthbearer: {oauth}
        """).format(oauth=oauth, extra=extra))
    return str(path)


def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "client-secret"
    path.write_text(SECRET + "\n")
    return path


def test_client_credentials_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, f"{{token_endpoint_url: '{URL}', client_id: exporter, "
                           f"client_secret_file: {secret_file(tmp_path)}, scope: 'kafka openid', "
                           "extensions: {logicalCluster: lkc-abc123, identityPoolId: pool-xyz}}")
    (cluster,) = load_settings(path, env={}).clusters
    assert cluster.sasl is not None
    assert cluster.sasl.mechanism == "OAUTHBEARER"
    assert cluster.sasl.oauthbearer == OAuthBearerSettings(
        token_endpoint_url=URL, client_id="exporter", client_secret=SECRET,
        scope="kafka openid",
        extensions={"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"})
    assert SECRET not in repr(cluster)


def test_client_secret_from_a_variable_even_one_named_kte(tmp_path: Path) -> None:
    path = write(tmp_path, f"{{token_endpoint_url: '{URL}', client_id: exporter, "
                           "client_secret_env: KTE_OAUTH_SECRET}")
    (cluster,) = load_settings(path, env={"KTE_OAUTH_SECRET": SECRET}).clusters
    assert cluster.sasl is not None and cluster.sasl.oauthbearer is not None
    assert cluster.sasl.oauthbearer.client_secret == SECRET


def test_a_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    (cluster,) = load_settings(write(tmp_path, f"{{token_file: {token}}}"), env={}).clusters
    assert cluster.sasl is not None
    assert cluster.sasl.oauthbearer == OAuthBearerSettings(token_file=str(token))


def test_the_single_cluster_environment_defines_it() -> None:
    settings = load_settings(None, env={
        "KTE_CLUSTER_BOOTSTRAP_SERVERS": "pkc-1.example.com:9092",
        "KTE_CLUSTER_SASL_MECHANISM": "OAUTHBEARER",
        "KTE_CLUSTER_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": URL,
        "KTE_CLUSTER_SASL_OAUTHBEARER_CLIENT_ID": "exporter",
        "KTE_CLUSTER_SASL_OAUTHBEARER_CLIENT_SECRET_ENV": "KTE_IDP_SECRET",
        "KTE_IDP_SECRET": SECRET,
        "KTE_CLUSTER_SASL_OAUTHBEARER_EXTENSIONS": "logicalCluster=lkc-1,identityPoolId=pool-2",
    })
    (cluster,) = settings.clusters
    assert cluster.sasl is not None and cluster.sasl.oauthbearer is not None
    oauth = cluster.sasl.oauthbearer
    assert (oauth.token_endpoint_url, oauth.client_id, oauth.client_secret) == (
        URL, "exporter", SECRET)
    assert oauth.extensions == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}


SASL = "clusters[0].sasl"
SASL_RE = re.escape(SASL)


@pytest.mark.parametrize(("oauth", "extra", "env", "message"), [
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret: {SECRET}}}", "", {},
     f"{SASL}.oauthbearer.client_secret: inline secrets are not allowed; use "
     "client_secret_file or client_secret_env"),
    (f"{{token_endpoint_url: '{URL}', client_secret_env: S}}", "", {"S": "x"},
     f"{SASL}.oauthbearer.client_id: required (or give token_file)"),
    (f"{{token_endpoint_url: '{URL}', client_id: e}}", "", {},
     f"{SASL}.oauthbearer: set exactly one of client_secret_file or client_secret_env"),
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret_env: S}}", "", {},
     f"{SASL}.oauthbearer.client_secret_env: the environment variable it names is not set"),
    ("{token_endpoint_url: 'http://idp.example.com/token', client_id: e, client_secret_env: S}",
     "", {"S": "x"},
     f"{SASL}.oauthbearer.token_endpoint_url: expected an https:// URL"),
    (f"{{token_endpoint_url: 'https://u:{SECRET}@idp.example.com/t', client_id: e, "
     "client_secret_env: S}", "", {"S": "x"},
     f"{SASL}.oauthbearer.token_endpoint_url: must not carry credentials"),
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret_env: S, "
     "extensions: {auth: x}}", "", {"S": "x"},
     f"{SASL}.oauthbearer.extensions: invalid SASL extension name 'auth'"),
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret_env: S, "
     "extensions: {logicalCluster: \"a\\u00e9\"}}", "", {"S": "x"},
     f"{SASL}.oauthbearer.extensions.logicalCluster: must be printable ASCII"),
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret_env: S, tokn: x}}", "",
     {"S": "x"}, f"{SASL}.oauthbearer: unknown key 'tokn'"),
    ("", "", {}, f"{SASL}.oauthbearer: expected a mapping"),
    (f"{{token_endpoint_url: '{URL}', client_id: e, client_secret_env: S}}",
     "      username: u\n", {"S": "x"}, f"{SASL}.username: not used by OAUTHBEARER"),
    ("{ca_file: /nonexistent/ca.pem}", "", {},
     f"{SASL}.oauthbearer.ca_file: file not found"),
])
def test_each_misuse_names_its_field(tmp_path: Path, oauth: str, extra: str,
                                     env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(write(tmp_path, oauth, extra), env=env)
    assert str(error.value).startswith(message), str(error.value)
    assert SECRET not in str(error.value)


def test_the_oauthbearer_section_is_required(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text("clusters: [{name: a, bootstrap_servers: [h:1], "
                    "sasl: {mechanism: OAUTHBEARER}}]")
    with pytest.raises(ConfigError, match=rf"^{SASL_RE}\.oauthbearer: required with mechanism "
                                          "OAUTHBEARER"):
        load_settings(str(path), env={})


def test_token_file_and_a_token_endpoint_are_exclusive(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    with pytest.raises(ConfigError, match=rf"^{SASL_RE}\.oauthbearer\.token_endpoint_url: not used "
                                          "with token_file"):
        load_settings(write(tmp_path, f"{{token_file: {token}, token_endpoint_url: '{URL}'}}"),
                      env={})


def test_an_oauthbearer_section_with_another_mechanism_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(textwrap.dedent(f"""\
        clusters:
          - name: a
            bootstrap_servers: [h:1]
            sasl: {{mechanism: PLAIN, username: u, password_env: P,
                    oauthbearer: {{token_endpoint_url: '{URL}'}}}}
        """))
    with pytest.raises(ConfigError, match=rf"^{SASL_RE}\.oauthbearer: only with mechanism "
                                          "OAUTHBEARER, not PLAIN"):
        load_settings(str(path), env={"P": "x"})


def test_serve_with_an_inline_client_secret_exits_2_without_echoing_it(tmp_path: Path) -> None:
    path = write(tmp_path, f"{{token_endpoint_url: '{URL}', client_id: e, "
                           f"client_secret: {SECRET}}}")
    result = subprocess.run([sys.executable, "-m", "exporter", "serve", "--config", path],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kafka-txn-exporter: config error: {SASL}.oauthbearer.client_secret: inline secrets "
        "are not allowed; use "
        "client_secret_file or client_secret_env"]
    assert SECRET not in result.stdout + result.stderr
