"""The OAUTHBEARER login's token life cycle with a fake clock (refresh point, jitter, back-off,
expiry), its token requests against the suite's HTTPS OIDC provider, the token file, and what
kafka-python's mechanism sends. Kafka's rules: docs/kafka-semantics.md#oauthbearer."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kafka.net.sasl import get_sasl_mechanism
from security.oidc import AUDIENCE, Client, OidcProvider, b64url

from exporter.collect.failures import AuthenticationFailed, RequestTimeout, TlsFailed
from exporter.collect.sasl.logins import make_login
from exporter.collect.sasl.oauthbearer import (
    RELOGIN_DELAY_SECONDS,
    RETRY_BACKOFF_MAX_SECONDS,
    AccessToken,
    ClientCredentialsSource,
    OAuthBearerLogin,
    jwt_claims,
    refresh_time,
)
from exporter.settings import OAuthBearerSettings, SaslSettings

SECRET = "s3cret-client-secret-7d1f"
HOUR = 3600.0


def unsigned_jwt(claims: Mapping[str, Any]) -> str:
    """A JWT-shaped token (the client never checks the signature; the broker does)."""
    return ".".join((b64url(b'{"alg":"none"}'), b64url(json.dumps(dict(claims)).encode()),
                     b64url(b"signature")))


# --------------------------------------------------------------------------- refresh point

def token(issued_at: float, lifetime: float) -> AccessToken:
    return AccessToken("t", expires_at=issued_at + lifetime, issued_at=issued_at)


def test_refresh_at_the_window_factor_plus_jitter_of_the_lifetime() -> None:
    now = 1_000_000.0
    assert refresh_time(token(now, HOUR), now, 0.0) == pytest.approx(now + 0.80 * HOUR)
    assert refresh_time(token(now, HOUR), now, 0.5) == pytest.approx(now + 0.825 * HOUR)
    assert refresh_time(token(now, HOUR), now, 0.999) == pytest.approx(now + 0.85 * HOUR, abs=5)


def test_refresh_stays_out_of_the_last_300_seconds() -> None:
    now = 1_000_000.0
    # 10 minutes: 80 % is 480 s, inside the last 300 s: refreshed at 300 s.
    assert refresh_time(token(now, 600), now, 0.0) == pytest.approx(now + 300)


def test_refresh_is_at_least_60_seconds_away() -> None:
    now = 1_000_000.0
    # Issued long ago: 80 % of its lifetime is already past.
    old = AccessToken("t", expires_at=now + 500, issued_at=now - 3500)
    assert refresh_time(old, now, 0.0) == pytest.approx(now + 60)


def test_a_token_too_short_for_both_margins_is_refreshed_at_the_factor_of_what_is_left() -> None:
    now = 1_000_000.0
    assert refresh_time(token(now, 20), now, 0.0) == pytest.approx(now + 16)
    assert refresh_time(token(now, 20), now, 0.999) == pytest.approx(now + 17, abs=0.01)


# --------------------------------------------------------------------------- fakes

class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FakeEndpoint:
    """The token endpoint as the login's `post` sees it: answers or failures in turn."""

    def __init__(self, clock: FakeClock, lifetime: float = HOUR) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.failure: BaseException | None = None
        self.status = 200
        self.calls: list[tuple[str, bytes, dict[str, str]]] = []
        self.issued: list[str] = []

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str],
                 context: ssl.SSLContext, timeout: float) -> tuple[int, bytes]:
        self.calls.append((url, body, dict(headers)))
        if self.failure is not None:
            raise self.failure
        if self.status != 200:
            return self.status, b'{"error":"temporarily_unavailable"}'
        value = unsigned_jwt({"sub": "exporter", "iat": int(self.clock.now),
                              "exp": int(self.clock.now + self.lifetime),
                              "n": len(self.issued)})
        self.issued.append(value)
        return 200, json.dumps({"access_token": value, "token_type": "Bearer",
                                "expires_in": int(self.lifetime)}).encode()


SETTINGS = OAuthBearerSettings(
    token_endpoint_url="https://idp.example.invalid/realms/kafka/protocol/openid-connect/token",
    client_id="kafka-txn-exporter", client_secret=SECRET, scope="kafka",
    extensions={"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"})


def fake_login(lifetime: float = HOUR, jitter: float = 0.0,
               ) -> tuple[OAuthBearerLogin, FakeClock, FakeEndpoint]:
    clock = FakeClock()
    endpoint = FakeEndpoint(clock, lifetime)
    source = ClientCredentialsSource(SETTINGS, clock=clock, post=endpoint, sleep=clock.sleep)
    login = OAuthBearerLogin(SaslSettings("OAUTHBEARER", oauthbearer=SETTINGS), clock=clock,
                             jitter=lambda: jitter, source=source)
    return login, clock, endpoint


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# --------------------------------------------------------------------------- life cycle

def test_one_token_request_for_all_connections_until_the_refresh_point() -> None:
    login, clock, endpoint = fake_login()

    async def many() -> list[str]:
        tokens = await asyncio.gather(*(login.token() for _ in range(20)))
        return [t.value for t in tokens]

    values = run(many())
    assert len(endpoint.calls) == 1 and set(values) == {endpoint.issued[0]}
    clock.now += 0.79 * HOUR
    assert run(login.token()).value == endpoint.issued[0]
    assert len(endpoint.calls) == 1
    clock.now += 0.02 * HOUR  # past 80 %
    assert run(login.token()).value == endpoint.issued[1]
    assert len(endpoint.calls) == 2


def test_jitter_moves_the_refresh_point_within_five_percent() -> None:
    early, _, _ = fake_login(jitter=0.0)
    late, _, _ = fake_login(jitter=0.99)
    run(early.token())
    run(late.token())
    start = 1_700_000_000.0
    assert early.refresh_at == pytest.approx(start + 0.80 * HOUR)
    assert late.refresh_at == pytest.approx(start + 0.8495 * HOUR)


def test_the_request_is_kafkas_client_credentials_form_with_basic_authentication() -> None:
    login, _, endpoint = fake_login()
    run(login.token())
    ((url, body, headers),) = endpoint.calls
    assert url == SETTINGS.token_endpoint_url
    assert body == b"grant_type=client_credentials&scope=kafka"
    import base64
    assert headers["Authorization"] == "Basic " + base64.b64encode(
        f"kafka-txn-exporter:{SECRET}".encode()).decode()
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"


def test_a_failed_refresh_keeps_the_token_until_it_expires_and_backs_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    login, clock, endpoint = fake_login(lifetime=100)
    first = run(login.token()).value
    endpoint.failure = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    clock.now += 85  # past the refresh point (80-85 s): one attempt, fails, old token kept
    assert run(login.token()).value == first
    assert len(endpoint.calls) == 2
    clock.now += RELOGIN_DELAY_SECONDS / 2  # within the back-off: no request at all
    assert run(login.token()).value == first
    assert len(endpoint.calls) == 2
    clock.now += RELOGIN_DELAY_SECONDS  # 100 s: expired, and the endpoint is still down
    with pytest.raises(AuthenticationFailed) as failed:
        run(login.token())
    message = str(failed.value)
    assert "token endpoint https://idp.example.invalid/realms/kafka/protocol/openid-connect/" \
           "token unreachable" in message
    # ... after this renewal's retries (fake time) on top of the expiry.
    assert message.endswith(f"(the last token expired {sum(clock.slept):.0f} s ago)")
    assert SECRET not in message and first not in message
    # Without a token, the retries of one renewal: exponential back-off up to 10 s in all.
    assert clock.slept[0] == pytest.approx(0.1)
    assert all(b == pytest.approx(2 * a) for a, b in zip(clock.slept, clock.slept[1:],
                                                           strict=False))
    assert sum(clock.slept) <= RETRY_BACKOFF_MAX_SECONDS
    # The next connection within the back-off fails at once with the same reason.
    calls = len(endpoint.calls)
    with pytest.raises(AuthenticationFailed, match="unreachable"):
        run(login.token())
    assert len(endpoint.calls) == calls
    # The endpoint is back: the next attempt after the back-off renews.
    endpoint.failure = None
    clock.now += RELOGIN_DELAY_SECONDS
    assert run(login.token()).value == endpoint.issued[-1] != first
    # The warning of the failed renewal says why and how long the token lasts; never a secret.
    logged = capsys.readouterr()
    assert "oauthbearer_token_refresh_failed" in logged.out + logged.err
    assert "expires_in_seconds=15.0" in logged.out + logged.err
    for secret in (SECRET, *endpoint.issued):
        assert secret not in logged.out + logged.err


def test_an_unretryable_answer_fails_at_once_and_a_5xx_is_retried() -> None:
    login, clock, endpoint = fake_login()
    endpoint.status = 401
    with pytest.raises(AuthenticationFailed, match=r"refused the request: HTTP 401: "
                                                   r"temporarily_unavailable"):
        run(login.token())
    assert len(endpoint.calls) == 1 and clock.slept == []

    login, clock, endpoint = fake_login()
    endpoint.status = 503
    with pytest.raises(AuthenticationFailed, match="HTTP 503"):
        run(login.token())
    assert len(endpoint.calls) > 3 and 0 < sum(clock.slept) <= RETRY_BACKOFF_MAX_SECONDS


def test_a_timeout_of_the_token_endpoint_is_a_timeout_tried_about_once() -> None:
    """Each attempt's own time counts towards the 10 s of retries: an endpoint that never
    answers does not hold a connection for minutes."""
    login, clock, endpoint = fake_login()

    def hangs(url: str, body: bytes, headers: Mapping[str, str], context: ssl.SSLContext,
              timeout: float) -> tuple[int, bytes]:
        endpoint.calls.append((url, body, dict(headers)))
        clock.now += timeout  # the attempt's timeout, spent
        raise urllib.error.URLError(TimeoutError("timed out"))

    login._source.post = hangs  # type: ignore[union-attr]
    with pytest.raises(RequestTimeout, match="did not answer in 10 s"):
        run(login.token())
    assert len(endpoint.calls) == 1 and clock.slept == []


def test_a_token_expired_on_arrival_names_clock_skew() -> None:
    login, _clock, _endpoint = fake_login(lifetime=-30)
    with pytest.raises(AuthenticationFailed, match=r"expired 30 s before it was received.*"
                                                   r"clock skew"):
        run(login.token())


def test_a_token_without_exp_uses_expires_in_and_one_without_either_is_refused() -> None:
    login, clock, _endpoint = fake_login()

    def opaque(url: str, body: bytes, headers: Mapping[str, str], context: ssl.SSLContext,
               timeout: float) -> tuple[int, bytes]:
        return 200, b'{"access_token":"opaque-token-value","token_type":"bearer",' \
                    b'"expires_in":120}'

    login._source.post = opaque  # type: ignore[union-attr]
    assert run(login.token()).expires_at == clock.now + 120

    def endless(url: str, body: bytes, headers: Mapping[str, str], context: ssl.SSLContext,
                timeout: float) -> tuple[int, bytes]:
        return 200, b'{"access_token":"opaque-token-value","token_type":"bearer"}'

    login, _, _ = fake_login()
    login._source.post = endless  # type: ignore[union-attr]
    with pytest.raises(AuthenticationFailed, match="says not when it expires"):
        run(login.token())


def test_the_mechanism_sends_the_token_and_the_extensions() -> None:
    login, _, endpoint = fake_login()
    options = run(login.mechanism_options())
    mechanism = get_sasl_mechanism("OAUTHBEARER")(
        host="127.0.0.1", security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", **options)
    sent = mechanism.auth_bytes().decode()
    assert sent.startswith(f"n,,\x01auth=Bearer {endpoint.issued[0]}\x01")
    assert "\x01logicalCluster=lkc-abc123\x01" in sent
    assert "\x01identityPoolId=pool-xyz\x01" in sent
    assert sent.endswith("\x01\x01")
    assert endpoint.issued[0] not in repr(options)


# --------------------------------------------------------------------------- real HTTPS

@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    oidc = OidcProvider(tmp_path / "oidc")
    oidc.add_client("kafka-txn-exporter", Client(secret=SECRET, subject="exporter"))
    try:
        yield oidc
    finally:
        oidc.close()


def https_login(provider: OidcProvider, **changes: Any) -> OAuthBearerLogin:
    settings = OAuthBearerSettings(**{
        "token_endpoint_url": provider.token_url, "client_id": "kafka-txn-exporter",
        "client_secret": SECRET, "scope": "kafka", "ca_file": provider.ca_file, **changes})
    login = make_login(SaslSettings("OAUTHBEARER", oauthbearer=settings))
    assert isinstance(login, OAuthBearerLogin)
    return login


def test_a_token_from_the_https_endpoint(provider: OidcProvider) -> None:
    value = run(https_login(provider).token()).value
    claims = jwt_claims(value)
    assert claims is not None
    assert (claims["sub"], claims["aud"], claims["scope"]) == ("exporter", AUDIENCE, "kafka")
    assert provider.token_requests("kafka-txn-exporter") == [
        {"client_id": "kafka-txn-exporter", "grant_type": "client_credentials",
         "scope": "kafka", "status": 200, "expires_at": claims["exp"]}]


def test_a_revoked_secret_is_refused_without_retries(provider: OidcProvider) -> None:
    provider.revoke("kafka-txn-exporter")
    with pytest.raises(AuthenticationFailed) as failed:
        run(https_login(provider).token())
    assert str(failed.value) == (
        f"token endpoint {provider.token_url} refused the request: HTTP 401: invalid_client "
        "(Invalid client credentials)")
    assert len(provider.token_requests("kafka-txn-exporter")) == 1


def test_a_redirect_is_not_followed_with_the_secret(provider: OidcProvider) -> None:
    """urllib would send the Authorization header on to the redirect's target."""
    moved = provider.token_url.replace("/token", "/moved")
    with pytest.raises(AuthenticationFailed) as failed:
        run(https_login(provider, token_endpoint_url=moved).token())
    assert str(failed.value) == (
        f"token endpoint {moved} answered HTTP 302, a redirect: not followed (the client "
        "secret goes to token_endpoint_url only; configure the URL it points to)")
    assert provider.token_requests("kafka-txn-exporter") == []  # /token never asked


def test_an_endpoint_certificate_from_another_ca_is_a_tls_failure(
    provider: OidcProvider, tmp_path: Path
) -> None:
    from security.pki import issue

    issue(tmp_path, "other", None, ca=True)
    with pytest.raises(TlsFailed, match=r"TLS with the token endpoint .*CERTIFICATE_VERIFY"):
        run(https_login(provider, ca_file=str(tmp_path / "other.crt")).token())


def test_the_endpoint_down_is_named(provider: OidcProvider) -> None:
    provider.stop_token_endpoint()
    login = https_login(provider)
    login._source.sleep = FakeClock().sleep  # type: ignore[union-attr]
    with pytest.raises(AuthenticationFailed, match=r"unreachable: \[Errno 111\] Connection "
                                                   "refused"):
        run(login.token())


# --------------------------------------------------------------------------- token file

def test_the_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "token"
    first = unsigned_jwt({"sub": "exporter", "exp": int(clock.now + 600)})
    path.write_text(first + "\n")
    login = OAuthBearerLogin(SaslSettings("OAUTHBEARER", oauthbearer=OAuthBearerSettings(
        token_file=str(path))), clock=clock)
    from exporter.collect.sasl.oauthbearer import TokenFileSource
    login._source = TokenFileSource(str(path), clock=clock)
    assert run(login.token()).value == first
    second = unsigned_jwt({"sub": "exporter", "exp": int(clock.now + 1200), "v": 2})
    path.write_text(second)
    assert run(login.token()).value == second
    clock.now += 1300
    with pytest.raises(AuthenticationFailed) as failed:
        run(login.token())
    assert str(failed.value) == ("token_file: the token in it expired 100 s ago and the file "
                                 "has not been renewed")
    path.unlink()
    with pytest.raises(AuthenticationFailed, match="token_file: cannot read it"):
        run(login.token())
