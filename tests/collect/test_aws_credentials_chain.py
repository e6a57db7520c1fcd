"""Which AWS credentials an MSK IAM login signs with, from each link of the standard chain, and
how it fails, against local fakes of the metadata, container and STS endpoints (127.0.0.1):
no AWS endpoint is reachable from the test machines.

botocore reads the environment when the login first needs credentials; each test sets only
the variables of the link it proves, with the instance metadata disabled unless it is the link
under test (so nothing ever tries 169.254.169.254).
"""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from collect.aws_fakes import CONTAINER_AUTHORIZATION, FakeAws, fake_aws

from exporter.collect.connection import AuthenticationFailed
from exporter.collect.sasl.aws_msk_iam import TOKEN_REUSE_SECONDS, AwsMskIamLogin
from exporter.settings import AwsMskIamSettings, SaslSettings

ROLE_ARN = "arn:aws:iam::123456789012:role/kafka-txn-exporter"
WEB_IDENTITY_TOKEN = "eyJhbGciOiJSUzI1NiJ9.irsa-projected-token.signature"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """An environment with no AWS credentials at all, instance metadata off."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield monkeypatch


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    with fake_aws() as fake:
        yield fake


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def make_login(clock: Clock | None = None, **settings: str) -> AwsMskIamLogin:
    settings.setdefault("region", "eu-west-1")
    sasl = SaslSettings("AWS_MSK_IAM", aws_msk_iam=AwsMskIamSettings(**settings))
    return AwsMskIamLogin(sasl, clock=clock or Clock())


def signed_with(token: str) -> dict[str, str]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    return dict(parse_qsl(urlsplit(url).query))


def access_key(token: str) -> str:
    return signed_with(token)["X-Amz-Credential"].split("/")[0]


def test_environment_credentials(aws_env: pytest.MonkeyPatch) -> None:
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIAENVEXAMPLE")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    aws_env.setenv("AWS_SESSION_TOKEN", "env-session")
    query = signed_with(make_login().token())
    assert query["X-Amz-Credential"].startswith("AKIAENVEXAMPLE/")
    assert query["X-Amz-Security-Token"] == "env-session"


def test_named_profile_of_the_shared_credentials_file(
    aws_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "aws-credentials").write_text(
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n"
        "[monitoring]\naws_access_key_id = AKIAMONITORING\naws_secret_access_key = m\n")
    assert access_key(make_login().token()) == "AKIADEFAULT"
    assert access_key(make_login(profile="monitoring").token()) == "AKIAMONITORING"


def test_unknown_profile_names_it(aws_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthenticationFailed, match="AWS profile 'nope' not found"):
        make_login(profile="nope").token()


def test_eks_irsa_web_identity_token_is_exchanged_at_sts(
    aws_env: pytest.MonkeyPatch, aws: FakeAws, tmp_path: Path
) -> None:
    token_file = tmp_path / "eks-token"
    token_file.write_text(WEB_IDENTITY_TOKEN)
    aws_env.setenv("AWS_ROLE_ARN", ROLE_ARN)
    aws_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    aws_env.setenv("AWS_ENDPOINT_URL_STS", aws.url)

    assert access_key(make_login().token()) == "ASIAIRSA0001"
    (method, _, form), = aws.requests
    assert (method, form["Action"], form["RoleArn"], form["WebIdentityToken"]) == (
        "POST", "AssumeRoleWithWebIdentity", ROLE_ARN, WEB_IDENTITY_TOKEN)


def test_eks_pod_identity_container_endpoint_with_its_authorization_token(
    aws_env: pytest.MonkeyPatch, aws: FakeAws, tmp_path: Path
) -> None:
    authorization = tmp_path / "eks-pod-identity-token"
    authorization.write_text(CONTAINER_AUTHORIZATION)
    aws_env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{aws.url}/container-credentials")
    aws_env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(authorization))

    query = signed_with(make_login().token())
    assert query["X-Amz-Credential"].startswith("ASIAPOD0001/")
    assert query["X-Amz-Security-Token"] == "fake-session-ASIAPOD-1"
    assert [(m, p, h["Authorization"]) for m, p, h in aws.requests] == [
        ("GET", "/container-credentials", CONTAINER_AUTHORIZATION)]


def test_ec2_instance_role_through_imdsv2(aws_env: pytest.MonkeyPatch, aws: FakeAws) -> None:
    aws_env.delenv("AWS_EC2_METADATA_DISABLED")
    aws_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", aws.url + "/")

    assert access_key(make_login().token()) == "ASIAIMDS0001"
    paths = [(m, p) for m, p, _ in aws.requests]
    assert ("PUT", "/latest/api/token") in paths  # IMDSv2: a session token first
    assert paths[-1] == ("GET", "/latest/meta-data/iam/security-credentials/exporter-instance-role")


def test_role_arn_is_assumed_with_the_chain_credentials_and_refreshed_before_expiry(
    aws_env: pytest.MonkeyPatch, aws: FakeAws
) -> None:
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIABASE")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
    aws_env.setenv("AWS_ENDPOINT_URL_STS", aws.url)
    # 8 minutes left: inside botocore's mandatory refresh window (10 minutes), so each new
    # token finds the assumed credentials due for refresh.
    aws.expires_in_seconds = 480
    clock = Clock()
    login = make_login(clock, role_arn=ROLE_ARN, role_session_name="txn-exporter")

    first = login.token()
    assert access_key(first) == "ASIAROLE0002"  # assumed at start, refreshed when used
    clock.now += TOKEN_REUSE_SECONDS
    second = login.token()
    assert access_key(second) == "ASIAROLE0003"
    forms = [form for _, _, form in aws.requests]
    assert {(f["Action"], f["RoleArn"], f["RoleSessionName"]) for f in forms} == {
        ("AssumeRole", ROLE_ARN, "txn-exporter")}


def test_long_lived_assumed_role_is_not_asked_again(
    aws_env: pytest.MonkeyPatch, aws: FakeAws
) -> None:
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIABASE")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
    aws_env.setenv("AWS_ENDPOINT_URL_STS", aws.url)
    clock = Clock()
    login = make_login(clock, role_arn=ROLE_ARN)
    for _ in range(3):
        login.token()
        clock.now += TOKEN_REUSE_SECONDS
    assert aws.actions() == ["AssumeRole"]
    assert login.tokens_signed == 3


def test_no_credentials_anywhere_names_where_it_looked(aws_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        make_login().token()
    assert str(info.value).startswith("AWS_MSK_IAM: no AWS credentials found (looked in the "
                                      "environment")


@pytest.mark.parametrize(("code", "cause"), [
    ("ExpiredTokenException", "expired credentials"),
    ("InvalidIdentityToken",
     "the web identity token was refused (expired, or wrong audience/issuer)"),
    ("AccessDenied",
     "access denied (check the role's trust policy and sts:AssumeRole* grants)"),
])
def test_sts_refusal_names_the_cause_never_the_token(
    aws_env: pytest.MonkeyPatch, aws: FakeAws, tmp_path: Path, code: str, cause: str
) -> None:
    token_file = tmp_path / "eks-token"
    token_file.write_text(WEB_IDENTITY_TOKEN)
    aws_env.setenv("AWS_ROLE_ARN", ROLE_ARN)
    aws_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    aws_env.setenv("AWS_ENDPOINT_URL_STS", aws.url)
    aws.sts_error = code
    with pytest.raises(AuthenticationFailed) as info:
        make_login().token()
    message = str(info.value)
    assert message == f"AWS_MSK_IAM: STS AssumeRoleWithWebIdentity {cause}: {code}"
    assert WEB_IDENTITY_TOKEN not in message


def test_unreachable_sts_is_named(aws_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIABASE")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
    aws_env.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{port}")
    with pytest.raises(AuthenticationFailed) as info:
        make_login(role_arn=ROLE_ARN).token()
    assert str(info.value) == f"AWS_MSK_IAM: could not reach http://127.0.0.1:{port}/"
    assert "base-secret" not in str(info.value)


def test_container_endpoint_refusing_names_the_provider(
    aws_env: pytest.MonkeyPatch, aws: FakeAws, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-authorization-token")
    aws_env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{aws.url}/container-credentials")
    aws_env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(wrong))
    with pytest.raises(AuthenticationFailed) as info:
        asyncio.run(make_login().mechanism_options())
    assert str(info.value).startswith(
        "AWS_MSK_IAM: could not obtain credentials from the container-role provider")
    assert "not-the-authorization-token" not in str(info.value)
