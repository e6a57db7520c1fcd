"""The simulated MSK broker's token check (kafka_sim.msk_iam): what it refuses and why, and the
OAUTHBEARER exchange of a refusal. Tokens are signed by the exporter's signer, whose output is
checked against AWS's published example and botocore in tests/collect/test_aws_msk_iam_token.py."""

from __future__ import annotations

import base64
import datetime as dt
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from kafka_sim.msk_iam import (
    INVALID_TOKEN,
    MskIamAuthority,
    MskIamKey,
    MskIamVerifier,
    TokenRefused,
)
from kafka_sim.sasl import SaslAuthenticationFailed

from exporter.collect.sasl.aws_msk_iam import AwsCredentials, connect_token, presign_connect_url

SIGNED_AT = dt.datetime(2026, 11, 27, 7, 0, 0, tzinfo=dt.UTC)
NOW = SIGNED_AT.timestamp() + 60
KEYS = {
    "AKIALONGTERM": MskIamKey("long-term-secret", None, "User:long"),
    "ASIATEMPORARY": MskIamKey("temporary-secret", "the-session-token", ""),
}


def verifier(now: float = NOW, region: str = "eu-west-1") -> MskIamVerifier:
    return MskIamVerifier(region, KEYS, clock=lambda: now)


def token(access_key: str = "AKIALONGTERM", secret: str = "long-term-secret",
          session: str | None = None, region: str = "eu-west-1",
          signed_at: dt.datetime = SIGNED_AT) -> str:
    return connect_token(presign_connect_url(
        AwsCredentials(access_key, secret, session), region, signed_at))


def rewritten(original: str, **changes: str) -> str:
    """The same token with query parameters changed (the signature kept)."""
    url = base64.urlsafe_b64decode(original + "=" * (-len(original) % 4)).decode()
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(changes)
    return connect_token(parts._replace(query=urlencode(query)).geturl())


def test_a_good_token_proves_its_principal() -> None:
    assert verifier().verify(token()) == "User:long"
    temporary = token("ASIATEMPORARY", "temporary-secret", "the-session-token")
    assert verifier().verify(temporary) == "ASIATEMPORARY"  # no principal: the key id


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: token(secret="wrong-secret"), "signature does not match"),
    (lambda: token("AKIAUNKNOWN"), "unknown access key id"),
    (lambda: token(region="us-east-1"), "URL is not https://kafka.eu-west-1.amazonaws.com/"),
    (lambda: rewritten(token(), **{
        "X-Amz-Credential": "AKIALONGTERM/20261127/us-east-1/kafka-cluster/aws4_request"}),
     "credential scope is not"),
    (lambda: token("ASIATEMPORARY", "temporary-secret", None), "session token missing or wrong"),
    (lambda: token("ASIATEMPORARY", "temporary-secret", "other"), "session token missing or wrong"),
    (lambda: token(signed_at=SIGNED_AT + dt.timedelta(minutes=10)), "in the future: clock skew"),
    (lambda: token(signed_at=SIGNED_AT - dt.timedelta(minutes=20)), "expired"),
    (lambda: rewritten(token(), Action="kafka-cluster:AlterCluster"), "Action is not"),
    (lambda: rewritten(token(), **{"X-Amz-Expires": "3600"}), "signature does not match"),
    (lambda: "not base64 at all!", "token is not base64url of a URL"),
])
def test_refusals_name_why(make: object, reason: str) -> None:
    with pytest.raises(TokenRefused, match=reason):
        verifier().verify(make())  # type: ignore[operator]


def test_user_agent_is_not_signed() -> None:
    assert verifier().verify(rewritten(token(), **{"User-Agent": "another/1.0"})) == "User:long"


def test_a_token_signed_within_the_skew_allowance_is_accepted() -> None:
    assert verifier().verify(token(signed_at=SIGNED_AT + dt.timedelta(minutes=4)))


def test_refusal_exchange_follows_kafkas_oauthbearer_server() -> None:
    authority = MskIamAuthority(verifier())
    server = authority.new_server("OAUTHBEARER")
    message = f"n,,\x01auth=Bearer {token(secret='wrong')}\x01\x01".encode()
    assert server.evaluate(message) == INVALID_TOKEN.encode()  # a challenge, not yet a failure
    assert not server.complete
    with pytest.raises(SaslAuthenticationFailed, match=r'^\{"status":"invalid_token"\}$'):
        server.evaluate(b"\x01")
    assert authority.refusals == ["signature does not match"]

    good = authority.new_server("OAUTHBEARER")
    assert good.evaluate(f"n,,\x01auth=Bearer {token()}\x01\x01".encode()) == b""
    assert good.complete and good.username == "User:long"
