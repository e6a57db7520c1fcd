"""The MSK IAM token: SigV4 known answers, the token's documented shape, reuse and refresh.

The expected signatures are computed by `reference_presigned_url` below, written from AWS's
published Signature Version 4 steps (canonical request, string to sign, derived key), not by
the exporter's code; it is first checked against AWS's own published example of a presigned
URL. The exporter's URL is also checked against botocore's SigV4QueryAuth (AWS's SDK).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import threading
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

from exporter import __version__
from exporter.collect.connection import AuthenticationFailed
from exporter.collect.sasl.aws_msk_iam import (
    TOKEN_LAST_RESORT_SECONDS,
    TOKEN_REUSE_SECONDS,
    AwsCredentials,
    AwsMskIamLogin,
    connect_token,
    presign_connect_url,
)
from exporter.settings import AwsMskIamSettings, SaslSettings

AKID = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SIGNED_AT = dt.datetime(2026, 11, 27, 6, 30, 5, tzinfo=dt.UTC)


def reference_presigned_url(
    *, secret: str, host: str, path: str, params: dict[str, str], region: str, service: str,
    amz_date: str, payload_hash: str,
) -> tuple[str, str]:
    """(canonical query string, signature) by AWS's SigV4 steps for a query-signed GET whose
    only signed header is host. `params` includes every X-Amz-* except the signature."""

    def enc(text: str) -> str:
        unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"
        return "".join(ch if ch in unreserved else "".join(
            f"%{byte:02X}" for byte in ch.encode()) for ch in text)

    pairs = sorted((enc(k), enc(v)) for k, v in params.items())
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    canonical_request = "\n".join(
        ["GET", path, canonical_query, f"host:{host}", "", "host", payload_hash]
    )
    scope = "/".join([amz_date[:8], region, service, "aws4_request"])
    string_to_sign = "\n".join([
        "AWS4-HMAC-SHA256", amz_date, scope,
        hashlib.sha256(canonical_request.encode("utf-8")).hexdigest(),
    ])
    k_date = hmac.new(f"AWS4{secret}".encode(), amz_date[:8].encode(), "sha256").digest()
    k_region = hmac.new(k_date, region.encode(), "sha256").digest()
    k_service = hmac.new(k_region, service.encode(), "sha256").digest()
    k_signing = hmac.new(k_service, b"aws4_request", "sha256").digest()
    signature = hmac.new(k_signing, string_to_sign.encode(), "sha256").hexdigest()
    return canonical_query, signature


def test_reference_signer_reproduces_aws_published_presigned_url_example() -> None:
    # AWS's documented example of a presigned GET (Signature Version 4, query parameters):
    # examplebucket/test.txt, 24 May 2013 00:00:00 UTC, us-east-1, expires in 86400 s.
    _, signature = reference_presigned_url(
        secret=SECRET,
        host="examplebucket.s3.amazonaws.com",
        path="/test.txt",
        params={
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
            "X-Amz-Credential": f"{AKID}/20130524/us-east-1/s3/aws4_request",
            "X-Amz-Date": "20130524T000000Z",
            "X-Amz-Expires": "86400",
            "X-Amz-SignedHeaders": "host",
        },
        region="us-east-1",
        service="s3",
        amz_date="20130524T000000Z",
        payload_hash="UNSIGNED-PAYLOAD",
    )
    assert signature == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"


@pytest.mark.parametrize("session_token", [None, "FQoGZXIvYXdzEBYaDH+/session=token&x"])
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_presigned_connect_url_is_the_known_answer(region: str, session_token: str | None) -> None:
    url = presign_connect_url(AwsCredentials(AKID, SECRET, session_token), region, SIGNED_AT)

    params = {
        "Action": "kafka-cluster:Connect",
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{AKID}/20261127/{region}/kafka-cluster/aws4_request",
        "X-Amz-Date": "20261127T063005Z",
        "X-Amz-Expires": "900",
        "X-Amz-SignedHeaders": "host",
    }
    if session_token:
        params["X-Amz-Security-Token"] = session_token
    query, signature = reference_presigned_url(
        secret=SECRET, host=f"kafka.{region}.amazonaws.com", path="/", params=params,
        region=region, service="kafka-cluster", amz_date="20261127T063005Z",
        payload_hash=hashlib.sha256(b"").hexdigest(),
    )
    user_agent = quote(f"kafka-txn-exporter/{__version__}", safe="")
    assert url == (f"https://kafka.{region}.amazonaws.com/?{query}"
                   f"&X-Amz-Signature={signature}&User-Agent={user_agent}")


def test_presigned_connect_url_matches_botocore_sigv4_query_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AWS's own SDK signs the same request to the same signature (its clock pinned)."""
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda remove_tzinfo=True: SIGNED_AT.replace(tzinfo=None))
    request = AWSRequest(method="GET", url="https://kafka.eu-west-1.amazonaws.com/",
                         params={"Action": "kafka-cluster:Connect"})
    botocore.auth.SigV4QueryAuth(
        Credentials(AKID, SECRET, "session-token"), "kafka-cluster", "eu-west-1", expires=900
    ).add_auth(request)
    sdk = dict(parse_qsl(urlsplit(request.prepare().url).query))

    ours = dict(parse_qsl(urlsplit(presign_connect_url(
        AwsCredentials(AKID, SECRET, "session-token"), "eu-west-1", SIGNED_AT)).query))
    assert ours.pop("User-Agent") == f"kafka-txn-exporter/{__version__}"
    assert ours == sdk


def test_token_has_the_documented_shape() -> None:
    token = connect_token(presign_connect_url(
        AwsCredentials(AKID, SECRET, "tok"), "ap-southeast-2", SIGNED_AT))

    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert "=" not in token  # base64url WITHOUT padding
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "https", "kafka.ap-southeast-2.amazonaws.com", "/")
    query = dict(parse_qsl(parts.query))
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Credential"] == (
        f"{AKID}/20261127/ap-southeast-2/kafka-cluster/aws4_request")
    assert query["X-Amz-Date"] == "20261127T063005Z"
    assert query["X-Amz-Expires"] == "900"
    assert query["X-Amz-SignedHeaders"] == "host"
    assert query["X-Amz-Security-Token"] == "tok"
    assert query["User-Agent"].startswith("kafka-txn-exporter/")
    assert len(query["X-Amz-Signature"]) == 64
    assert SECRET not in url


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingCredentials:
    """A credentials source that hands out a new access key each time it is asked."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> AwsCredentials:
        with self.lock:
            self.calls += 1
            return AwsCredentials(f"ASIAEXAMPLE{self.calls:05d}", SECRET, f"session-{self.calls}")


def login(clock: Clock, source: CountingCredentials) -> AwsMskIamLogin:
    sasl = SaslSettings("AWS_MSK_IAM", aws_msk_iam=AwsMskIamSettings(region="eu-west-1"))
    return AwsMskIamLogin(sasl, clock=clock, credentials_source=source)


def decoded_query(token: str) -> dict[str, str]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    return dict(parse_qsl(urlsplit(url).query))


def test_one_token_per_cluster_reused_then_signed_again_before_it_expires() -> None:
    clock = Clock(SIGNED_AT.timestamp())
    source = CountingCredentials()
    cluster = login(clock, source)

    first = cluster.token()
    clock.now += TOKEN_REUSE_SECONDS - 1
    assert cluster.token() == first  # every connection in the window gets the same token
    assert (source.calls, cluster.tokens_signed) == (1, 1)

    clock.now += 1
    second = cluster.token()
    assert second != first
    assert (source.calls, cluster.tokens_signed) == (2, 2)
    query = decoded_query(second)
    assert query["X-Amz-Date"] == "20261127T063505Z"  # signed at the new time
    assert query["X-Amz-Credential"].startswith("ASIAEXAMPLE00002/")  # refreshed credentials
    # The reused token always had most of its life left: reuse ends at a third of it.
    assert int(query["X-Amz-Expires"]) / 3 >= TOKEN_REUSE_SECONDS


def test_a_clock_stepping_back_signs_a_new_token() -> None:
    clock = Clock(SIGNED_AT.timestamp())
    cluster = login(clock, CountingCredentials())
    first = cluster.token()
    clock.now -= 3600
    assert cluster.token() != first
    assert cluster.tokens_signed == 2


def test_concurrent_connections_share_one_token() -> None:
    clock = Clock(SIGNED_AT.timestamp())
    source = CountingCredentials()
    cluster = login(clock, source)
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(cluster.token())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokens)) == 1 and len(tokens) == 8
    assert source.calls == 1


def test_mechanism_options_feed_kafka_python_oauthbearer() -> None:
    from kafka.net.sasl import get_sasl_mechanism

    cluster = login(Clock(SIGNED_AT.timestamp()), CountingCredentials())
    assert cluster.mechanism == "OAUTHBEARER"
    options = asyncio.run(cluster.mechanism_options())
    mechanism = get_sasl_mechanism(cluster.mechanism)(
        host="b-1.example.kafka.eu-west-1.amazonaws.com", security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER", **options)
    first_message = mechanism.auth_bytes()
    assert first_message == f"n,,\x01auth=Bearer {cluster.token()}\x01\x01".encode()
    assert SECRET not in repr(options)


def test_while_credentials_are_unavailable_the_last_token_serves_until_it_runs_short() -> None:
    clock = Clock(SIGNED_AT.timestamp())
    source = CountingCredentials()
    cluster = login(clock, source)
    first = cluster.token()

    def unavailable() -> AwsCredentials:
        source.calls += 1
        raise AuthenticationFailed("AWS_MSK_IAM: could not reach http://sts.example/")

    cluster._source = unavailable
    clock.now += TOKEN_REUSE_SECONDS  # due for a new token, none can be signed
    assert cluster.token() == first
    clock.now = SIGNED_AT.timestamp() + TOKEN_LAST_RESORT_SECONDS - 1
    assert cluster.token() == first
    assert source.calls == 3  # asked again each time
    clock.now += 1  # 3 minutes of its 15 left: no longer handed out
    with pytest.raises(AuthenticationFailed, match="could not reach"):
        cluster.token()
    assert int(decoded_query(first)["X-Amz-Expires"]) - TOKEN_LAST_RESORT_SECONDS == 180
