"""Configuration of SASL mechanism AWS_MSK_IAM (file, single-cluster env, admin section)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from exporter.abort.settings import load_admin_settings
from exporter.config import ConfigError, load_settings
from exporter.settings import AwsMskIamSettings

NO_ENV: dict[str, str] = {}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_file_gives_region_profile_and_role(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, """
        clusters:
          - name: msk
            bootstrap_servers: [b-1.msk.example:9098]
            tls: {}
            sasl:
              mechanism: aws_msk_iam
              aws_msk_iam:
                region: eu-west-1
                profile: monitoring
                role_arn: arn:aws:iam::123456789012:role/kafka-txn-exporter
                role_session_name: txn-exporter
        """), env=NO_ENV)
    sasl = settings.clusters[0].sasl
    assert sasl is not None and sasl.mechanism == "AWS_MSK_IAM"
    assert sasl.aws_msk_iam == AwsMskIamSettings(
        region="eu-west-1", profile="monitoring",
        role_arn="arn:aws:iam::123456789012:role/kafka-txn-exporter",
        role_session_name="txn-exporter")
    assert (sasl.username, sasl.password) == ("", "")


def test_region_falls_back_to_aws_region_as_eks_sets_it(tmp_path: Path) -> None:
    config = write(tmp_path, """
        clusters:
          - {name: msk, bootstrap_servers: ["b-1:9098"], tls: {}, sasl: {mechanism: AWS_MSK_IAM}}
        """)
    sasl = load_settings(config, env={"AWS_REGION": "us-east-2"}).clusters[0].sasl
    assert sasl is not None and sasl.aws_msk_iam == AwsMskIamSettings(region="us-east-2")
    sasl = load_settings(config, env={"AWS_DEFAULT_REGION": "ca-central-1"}).clusters[0].sasl
    assert sasl is not None and sasl.aws_msk_iam is not None
    assert sasl.aws_msk_iam.region == "ca-central-1"


def test_single_cluster_environment_variables() -> None:
    settings = load_settings(env={
        "KTE_CLUSTER_BOOTSTRAP_SERVERS": "b-1:9098",
        "KTE_CLUSTER_TLS_CHECK_HOSTNAME": "true",
        "KTE_CLUSTER_SASL_MECHANISM": "AWS_MSK_IAM",
        "KTE_CLUSTER_SASL_AWS_MSK_IAM_REGION": "eu-central-1",
        "KTE_CLUSTER_SASL_AWS_MSK_IAM_ROLE_ARN": "arn:aws:iam::123456789012:role/x",
    })
    sasl = settings.clusters[0].sasl
    assert sasl is not None and sasl.aws_msk_iam == AwsMskIamSettings(
        region="eu-central-1", role_arn="arn:aws:iam::123456789012:role/x")


@pytest.mark.parametrize(("sasl", "tls", "message"), [
    ("{mechanism: AWS_MSK_IAM}", "{}",
     "clusters[0].sasl.aws_msk_iam.region: required with AWS_MSK_IAM (or set AWS_REGION)"),
    ("{mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1}}", None,
     "clusters[0].tls: required with sasl.mechanism AWS_MSK_IAM"),
    ("{mechanism: AWS_MSK_IAM, aws_msk_iam: {region: Europe}}", "{}",
     "clusters[0].sasl.aws_msk_iam.region: expected an AWS region like eu-west-1, got 'Europe'"),
    ("{mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1, role_arn: 'arn:aws:iam::1:x'}}",
     "{}", "clusters[0].sasl.aws_msk_iam.role_arn: expected an IAM role ARN"),
    ("{mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1, role_session_name: s1}}",
     "{}", "clusters[0].sasl.aws_msk_iam.role_session_name: needs role_arn"),
    ("{mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1, secret_key: abc}}", "{}",
     "clusters[0].sasl.aws_msk_iam: unknown key 'secret_key'"),
    ("{mechanism: AWS_MSK_IAM, username: u, aws_msk_iam: {region: eu-west-1}}", "{}",
     "clusters[0].sasl.username: not used with AWS_MSK_IAM"),
    ("{mechanism: AWS_MSK_IAM, password_env: P, aws_msk_iam: {region: eu-west-1}}", "{}",
     "clusters[0].sasl.password_env: not used with AWS_MSK_IAM"),
    ("{mechanism: PLAIN, username: u, password_env: P, aws_msk_iam: {region: eu-west-1}}",
     "{}", "clusters[0].sasl.aws_msk_iam: only with mechanism AWS_MSK_IAM, not PLAIN"),
])
def test_bad_settings_name_the_field(
    tmp_path: Path, sasl: str, tls: str | None, message: str
) -> None:
    tls_line = "" if tls is None else f"\n            tls: {tls}"
    config = write(tmp_path, f"""
        clusters:
          - name: msk
            bootstrap_servers: ["b-1:9098"]{tls_line}
            sasl: {sasl}
        """)
    with pytest.raises(ConfigError) as info:
        load_settings(config, env={"P": "pw"})
    assert str(info.value).startswith(message), str(info.value)


def test_admin_entry_takes_aws_msk_iam_and_needs_tls(tmp_path: Path) -> None:
    config = write(tmp_path, """
        clusters:
          - name: msk
            bootstrap_servers: ["b-1:9098"]
            tls: {}
            sasl: {mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1}}
        admin:
          clusters:
            - name: msk
              sasl:
                mechanism: AWS_MSK_IAM
                aws_msk_iam: {region: eu-west-1, role_arn: "arn:aws:iam::123456789012:role/a"}
        """)
    _, admins = load_admin_settings(config, env=NO_ENV)
    sasl = admins["msk"].sasl
    assert sasl is not None and sasl.aws_msk_iam is not None
    assert sasl.aws_msk_iam.role_arn == "arn:aws:iam::123456789012:role/a"

    no_tls = write(tmp_path, """
        clusters:
          - {name: plain, bootstrap_servers: ["b-1:9092"]}
        admin:
          clusters:
            - name: plain
              sasl: {mechanism: AWS_MSK_IAM, aws_msk_iam: {region: eu-west-1}}
        """)
    with pytest.raises(ConfigError, match=r"^admin\.clusters\[0\]\.tls: required with sasl"):
        load_admin_settings(no_tls, env=NO_ENV)
