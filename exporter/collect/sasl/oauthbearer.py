"""OAUTHBEARER: one access token per cluster, shared by its connections, renewed before it
expires.

Two sources, as a Kafka client has them:
- OIDC client credentials (`token_endpoint_url`, `client_id`, the client secret, `scope`): what
  Kafka's own login handler does for `sasl.oauthbearer.token.endpoint.url` — a form POST with
  `grant_type=client_credentials` and HTTP Basic authentication, the token's lifetime from its
  `exp` claim (or `expires_in` for a token that is not a JWT);
- a token file a platform mounts and rotates (`token_file`), read again when it changes.

When to renew follows Kafka's refreshing login (docs/kafka-semantics.md#oauthbearer): at 80 %
of the token's lifetime plus up to 5 % jitter, kept out of the last 300 s and at least 60 s
away (both ignored for a token too short for them). A renewal that fails keeps the token in
hand until it expires and is tried again 10 s later, not on every connection; an HTTP attempt
that fails for a reason that may pass (unreachable, 5xx, 429) is retried with exponential
back-off (0.1 s doubling, at most 10 s in all) — Kafka's `sasl.login.retry.backoff.*`.

The renewal happens when a connection authenticates (the login runs in its cluster's poller
loop, which runs only while polling): a connection opened after the refresh point gets a new
token, and a broker that limits sessions (`connections.max.reauth.ms`) makes the connection
reconnect before its session ends (exporter/collect/connection.py), so no connection ever
needs a token past its expiry. Errors name the cause and the endpoint, never the secret or the
token.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import random
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.failures import (
    AuthenticationFailed,
    CollectError,
    RequestTimeout,
    TlsFailed,
)
from exporter.logs import get_logger
from exporter.settings import OAuthBearerSettings, SaslSettings

log = get_logger()

REFRESH_WINDOW_FACTOR = 0.8
"""Kafka's `sasl.login.refresh.window.factor` default."""
REFRESH_WINDOW_JITTER = 0.05
"""Kafka's `sasl.login.refresh.window.jitter` default: up to this much more, at random."""
REFRESH_MIN_PERIOD_SECONDS = 60.0
"""Kafka's `sasl.login.refresh.min.period.seconds` default."""
REFRESH_BUFFER_SECONDS = 300.0
"""Kafka's `sasl.login.refresh.buffer.seconds` default."""
RETRY_BACKOFF_SECONDS = 0.1
"""Kafka's `sasl.login.retry.backoff.ms` default: the first wait before an HTTP retry."""
RETRY_BACKOFF_MAX_SECONDS = 10.0
"""Kafka's `sasl.login.retry.backoff.max.ms` default: the retries of one renewal stop here."""
RELOGIN_DELAY_SECONDS = 10.0
"""After a failed renewal, the next one is not tried before this (Kafka's refresher: 10 s)."""
HTTP_TIMEOUT_SECONDS = 10.0
"""Connect and read timeout of one token request (Kafka leaves them to the JDK: unbounded)."""
MAX_RESPONSE_BYTES = 1024 * 1024

UNRETRYABLE_HTTP_CODES = frozenset(
    {400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415, 501, 505})
"""Answers a retry cannot change (Kafka's HTTP token retriever's list): the renewal fails."""


@dataclass(frozen=True, slots=True)
class AccessToken:
    value: str = field(repr=False)
    expires_at: float
    """Wall-clock seconds (the `exp` claim, or the answer's time + `expires_in`)."""
    issued_at: float
    """Wall-clock seconds (the `iat` claim, or when it was received)."""


def refresh_time(token: AccessToken, now: float, jitter: float) -> float:
    """When to renew `token` (wall clock), Kafka's refreshing-login rule; `jitter` in [0, 1).

    Pure, so that tests drive it with a fake clock."""
    factor = REFRESH_WINDOW_FACTOR + REFRESH_WINDOW_JITTER * jitter
    if now + REFRESH_MIN_PERIOD_SECONDS + REFRESH_BUFFER_SECONDS > token.expires_at:
        # Too short for both margins: the window factor of what is left.
        return now + (token.expires_at - now) * factor
    start = min(token.issued_at, now)
    proposed = start + (token.expires_at - start) * factor
    if proposed > token.expires_at - REFRESH_BUFFER_SECONDS:
        return token.expires_at - REFRESH_BUFFER_SECONDS
    return max(proposed, now + REFRESH_MIN_PERIOD_SECONDS)


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a compact JWS (header.payload.signature), unverified — the broker checks
    the signature; the client only reads when the token expires. None when not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        return None
    return claims if isinstance(claims, dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def parse_token(value: str, received_at: float, expires_in: Any, where: str) -> AccessToken:
    """An access token and its lifetime: the JWT's `exp` (and `iat`), else `expires_in`.
    Raises AuthenticationFailed naming `where` (never the token) when neither says when it
    expires, or when it has expired already (a clock skew between this host and the issuer)."""
    if not value or any(ord(ch) < 0x21 or ord(ch) > 0x7E for ch in value):
        raise AuthenticationFailed(f"{where}: the access token is empty or not printable ASCII")
    claims = jwt_claims(value) or {}
    expires_at = _number(claims.get("exp"))
    issued_at = _number(claims.get("iat"))
    if expires_at is None:
        lifetime = _number(expires_in)
        if lifetime is None or lifetime <= 0:
            raise AuthenticationFailed(
                f"{where}: the access token says not when it expires (no exp claim, no "
                "expires_in)")
        expires_at = received_at + lifetime
    if expires_at <= received_at:
        raise AuthenticationFailed(
            f"{where}: the access token expired {received_at - expires_at:.0f} s before it "
            "was received: is this host's clock behind or ahead of the token issuer's "
            "(clock skew)?")
    if issued_at is None or issued_at > received_at:
        issued_at = received_at
    return AccessToken(value=value, expires_at=expires_at, issued_at=issued_at)


class _RetriableFailure(Exception):
    """One HTTP attempt failed for a reason that may pass; carries the error to raise at the
    end of the retries."""

    def __init__(self, error: CollectError) -> None:
        super().__init__(str(error))
        self.error = error


def endpoint_label(url: str) -> str:
    """The endpoint as errors name it: scheme, host, port and path, no query."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _oauth_error(body: bytes) -> str:
    """The `error` (and `error_description`) of an OAuth error answer, clipped; never the
    rest of the body."""
    try:
        answer = json.loads(body[:4096])
    except (ValueError, UnicodeError):
        return ""
    if not isinstance(answer, dict) or not isinstance(answer.get("error"), str):
        return ""
    text = answer["error"]
    description = answer.get("error_description")
    if isinstance(description, str) and description:
        text += f" ({description})"
    text = "".join(ch if 0x20 <= ord(ch) < 0x7F else "?" for ch in text)
    return f": {text[:200]}"


HttpPost = Callable[[str, bytes, Mapping[str, str], "ssl.SSLContext", float], tuple[int, bytes]]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would send the client secret (the Authorization
    header) on to wherever the answer points."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        return None


def http_post(url: str, body: bytes, headers: Mapping[str, str], context: ssl.SSLContext,
              timeout: float) -> tuple[int, bytes]:
    """POST and the answer's status and body (at most MAX_RESPONSE_BYTES); a redirect is
    returned as it is. Blocking: called in a worker thread."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                         _NoRedirect())
    try:
        with opener.open(request, timeout=timeout) as answer:
            return int(answer.status), answer.read(MAX_RESPONSE_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read(MAX_RESPONSE_BYTES)


@dataclass
class ClientCredentialsSource:
    """Tokens from an OIDC token endpoint with the client-credentials grant."""

    settings: OAuthBearerSettings
    clock: Callable[[], float] = time.time
    post: HttpPost = http_post
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _context: ssl.SSLContext | None = None

    @property
    def where(self) -> str:
        assert self.settings.token_endpoint_url is not None
        return f"token endpoint {endpoint_label(self.settings.token_endpoint_url)}"

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context(cafile=self.settings.ca_file)
        return self._context

    def _request(self) -> tuple[bytes, dict[str, str]]:
        """Kafka's form: client id and secret in HTTP Basic, grant type and scope in the body."""
        settings = self.settings
        assert settings.client_id is not None and settings.client_secret is not None
        credentials = f"{settings.client_id}:{settings.client_secret}".encode()
        form = {"grant_type": "client_credentials"}
        if settings.scope:
            form["scope"] = settings.scope
        headers = {
            "Authorization": "Basic " + base64.b64encode(credentials).decode("ascii"),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            "Cache-Control": "no-cache",
        }
        return urllib.parse.urlencode(form).encode("ascii"), headers

    async def fetch(self, retry: bool) -> AccessToken:
        """One token; with `retry`, attempts that may pass are repeated with back-off while the
        next one would start within RETRY_BACKOFF_MAX_SECONDS of the first (the attempts' own
        time counts: an endpoint that never answers is tried about once). Raises
        CollectError."""
        started, backoff = self.clock(), RETRY_BACKOFF_SECONDS
        while True:
            try:
                return await self._attempt()
            except _RetriableFailure as failure:
                elapsed = self.clock() - started
                if not retry or elapsed + backoff > RETRY_BACKOFF_MAX_SECONDS:
                    raise failure.error from None
            await self.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_SECONDS)

    async def _attempt(self) -> AccessToken:
        assert self.settings.token_endpoint_url is not None
        url = self.settings.token_endpoint_url
        body, headers = self._request()
        try:
            context = self._ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise TlsFailed(f"{self.where}: cannot load ca_file: {exc}") from None
        try:
            status, answer = await asyncio.to_thread(
                self.post, url, body, headers, context, HTTP_TIMEOUT_SECONDS)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError):
                raise TlsFailed(f"TLS with the {self.where}: {reason}") from None
            if isinstance(reason, TimeoutError | socket.timeout):
                raise _RetriableFailure(RequestTimeout(
                    f"{self.where} did not answer in {HTTP_TIMEOUT_SECONDS:g} s")) from None
            raise _RetriableFailure(AuthenticationFailed(
                f"{self.where} unreachable: {reason}")) from None
        except ssl.SSLError as exc:
            raise TlsFailed(f"TLS with the {self.where}: {exc}") from None
        except TimeoutError:
            raise _RetriableFailure(RequestTimeout(
                f"{self.where} did not answer in {HTTP_TIMEOUT_SECONDS:g} s")) from None
        except (OSError, ValueError) as exc:
            raise _RetriableFailure(AuthenticationFailed(
                f"{self.where} unreachable: {exc.__class__.__name__}")) from None
        received_at = self.clock()
        if 300 <= status < 400:
            raise AuthenticationFailed(
                f"{self.where} answered HTTP {status}, a redirect: not followed (the client "
                "secret goes to token_endpoint_url only; configure the URL it points to)")
        if status != 200:
            error = AuthenticationFailed(
                f"{self.where} refused the request: HTTP {status}{_oauth_error(answer)}")
            if status in UNRETRYABLE_HTTP_CODES:
                raise error
            raise _RetriableFailure(error)
        try:
            document = json.loads(answer)
        except (ValueError, UnicodeError):
            document = None
        token = document.get("access_token") if isinstance(document, dict) else None
        if not isinstance(token, str):
            raise AuthenticationFailed(f"{self.where}: the answer holds no access_token")
        token_type = document.get("token_type") if isinstance(document, dict) else None
        if isinstance(token_type, str) and token_type.lower() != "bearer":
            raise AuthenticationFailed(
                f"{self.where}: the token type is {token_type[:20]!r}, not Bearer")
        expires_in = document.get("expires_in") if isinstance(document, dict) else None
        return parse_token(token, received_at, expires_in, self.where)


@dataclass
class TokenFileSource:
    """A token a platform mounts (a Kubernetes projected token, a sidecar's output); read again
    when the file changes, so its rotation is picked up without a restart."""

    path: str
    clock: Callable[[], float] = time.time
    _seen: tuple[int, int, int, int] | None = None
    _token: AccessToken | None = None

    where = "token_file"

    def read(self) -> AccessToken:
        try:
            stat = os.stat(self.path)
            key = (stat.st_ino, stat.st_dev, stat.st_size, stat.st_mtime_ns)
            if key != self._seen or self._token is None:
                with open(self.path, encoding="ascii", errors="replace") as file:
                    text = file.read(MAX_RESPONSE_BYTES).strip()
                self._token = parse_token(text, self.clock(), None, self.where)
                self._seen = key
        except OSError as exc:
            raise AuthenticationFailed(
                f"{self.where}: cannot read it: {exc.strerror or exc.__class__.__name__}"
            ) from None
        token = self._token
        if self.clock() >= token.expires_at:
            raise AuthenticationFailed(
                f"{self.where}: the token in it expired {self.clock() - token.expires_at:.0f} s "
                "ago and the file has not been renewed")
        return token


class _TokenProvider:
    """kafka-python's `AbstractTokenProvider` for one authentication: the token in hand."""

    def __init__(self, token: str, extensions: Mapping[str, str]) -> None:
        self._token = token
        self._extensions = dict(extensions)

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def __repr__(self) -> str:
        return "<OAUTHBEARER token provider>"


def _provider_class() -> type:
    """The provider as a subclass of kafka-python's ABC (its mechanism checks isinstance);
    imported here, as the connection imports kafka.net only for SASL."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class TokenProvider(_TokenProvider, AbstractTokenProvider):  # type: ignore[misc]
        pass

    return TokenProvider


class OAuthBearerLogin:
    """The cluster's OAUTHBEARER login: one token in hand, renewed at Kafka's refresh point,
    kept while a renewal fails until it expires."""

    mechanism = "OAUTHBEARER"

    def __init__(
        self,
        sasl: SaslSettings,
        *,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        source: ClientCredentialsSource | TokenFileSource | None = None,
    ) -> None:
        settings = sasl.oauthbearer
        if settings is None:
            raise ValueError("OAUTHBEARER needs its oauthbearer settings")
        self._settings = settings
        self._clock = clock
        self._jitter = jitter
        if source is None:
            source = (TokenFileSource(settings.token_file, clock=clock)
                      if settings.token_file is not None
                      else ClientCredentialsSource(settings, clock=clock))
        self._source = source
        self._token: AccessToken | None = None
        self._refresh_at = 0.0
        self._next_attempt_at = 0.0
        self._last_error: CollectError | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._provider_class: type | None = None

    @property
    def refresh_at(self) -> float:
        return self._refresh_at

    async def mechanism_options(self) -> dict[str, Any]:
        token = await self.token()
        if self._provider_class is None:
            self._provider_class = _provider_class()
        provider = self._provider_class(token.value, self._settings.extensions)
        return {"sasl_oauth_token_provider": provider}

    def _usable(self, now: float) -> AccessToken | None:
        token = self._token
        return token if token is not None and now < token.expires_at else None

    async def token(self) -> AccessToken:
        """The token for the next authentication. Raises CollectError naming the cause."""
        if isinstance(self._source, TokenFileSource):
            return self._source.read()
        now = self._clock()
        usable = self._usable(now)
        if usable is not None and now < self._refresh_at:
            return usable
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            # Another connection may have renewed it, or failed to, while this one waited.
            now = self._clock()
            usable = self._usable(now)
            if usable is not None and now < self._refresh_at:
                return usable
            if now < self._next_attempt_at:
                if usable is not None:
                    return usable
                raise self._expired_error()
            return await self._renew(usable)

    async def _renew(self, usable: AccessToken | None) -> AccessToken:
        assert isinstance(self._source, ClientCredentialsSource)
        try:
            # With a token still in hand, one attempt (the connection waits for it); without,
            # Kafka's retries with back-off.
            token = await self._source.fetch(retry=usable is None)
        except CollectError as exc:
            now = self._clock()
            self._next_attempt_at = now + RELOGIN_DELAY_SECONDS
            self._last_error = exc
            usable = self._usable(now)
            if usable is not None:
                log.warning("oauthbearer_token_refresh_failed", error=str(exc),
                            expires_in_seconds=round(usable.expires_at - now, 1),
                            next_attempt_in_seconds=RELOGIN_DELAY_SECONDS)
                return usable
            raise self._expired_error() from None
        now = self._clock()
        self._token = token
        self._refresh_at = refresh_time(token, now, self._jitter())
        self._next_attempt_at = 0.0
        self._last_error = None
        return token

    def _expired_error(self) -> CollectError:
        """The last failure, a new instance each time, saying when the last token expired."""
        error = self._last_error or AuthenticationFailed("no access token")
        message = str(error)
        if self._token is not None:
            ago = self._clock() - self._token.expires_at
            message += f" (the last token expired {ago:.0f} s ago)"
        return type(error)(message)
