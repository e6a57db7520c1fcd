"""Server side of AWS MSK IAM access control over SASL/OAUTHBEARER, as an MSK broker checks it.

The client's bearer token is a presigned URL for `kafka-cluster:Connect` (SigV4, query
string), base64url-encoded. The broker decodes it, checks the fields AWS's signer libraries
put there, and verifies the signature with the secret key it knows for the access key id (the
simulator stands in for IAM with a table of keys). The User-Agent parameter is appended after
signing by every signer library, so it is not part of what is verified.

A refused token follows Kafka's OAUTHBEARER server (RFC 7628): the first answer is a JSON
error status as a challenge, the client answers with a single 0x01, and the authentication then
fails with that JSON as the error message. Why the token was refused is logged, not sent.

Pure logic, no I/O; `clock` is injectable so expiry and clock skew are testable.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import hmac
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kafka_sim.sasl import SaslAuthenticationFailed

log = logging.getLogger(__name__)

MECHANISM = "OAUTHBEARER"
ACTION = "kafka-cluster:Connect"
SERVICE = "kafka-cluster"
ALGORITHM = "AWS4-HMAC-SHA256"
MAX_CLOCK_SKEW_SECONDS = 300
"""How far in the future a signing time may be (SigV4's usual five minutes)."""
INVALID_TOKEN = '{"status":"invalid_token"}'


@dataclass(frozen=True, slots=True)
class MskIamKey:
    """An IAM key as the simulator's stand-in for IAM knows it."""

    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    """Temporary credentials: the token that must accompany the key, None for a long-term key."""
    principal: str = ""
    """Kafka principal name after login (MSK uses the IAM identity); the access key if empty."""


class TokenRefused(Exception):
    """Why a token was refused (logged by the broker, never sent to the client)."""


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


class MskIamVerifier:
    """Checks `kafka-cluster:Connect` tokens for one cluster's region."""

    def __init__(
        self,
        region: str,
        keys: Mapping[str, MskIamKey],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.region = region
        self.host = f"kafka.{region}.amazonaws.com"
        self._keys = dict(keys)
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def verify(self, token: str) -> str:
        """The principal name the token proves, or raise TokenRefused naming why."""
        return self.verify_until(token)[0]

    def verify_until(self, token: str) -> tuple[str, float]:
        """(principal, the token's end of validity as a `clock` time), or raise TokenRefused."""
        try:
            url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise TokenRefused("token is not base64url of a URL") from exc
        parts = urllib.parse.urlsplit(url)
        if (parts.scheme, parts.netloc, parts.path) != ("https", self.host, "/"):
            raise TokenRefused(f"URL is not https://{self.host}/")
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        params = dict(pairs)
        if len(params) != len(pairs):
            raise TokenRefused("a query parameter is repeated")
        for name in ("Action", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date",
                     "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"):
            if name not in params:
                raise TokenRefused(f"{name} missing")
        if params["Action"] != ACTION:
            raise TokenRefused(f"Action is not {ACTION}")
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise TokenRefused(f"X-Amz-Algorithm is not {ALGORITHM}")
        if params["X-Amz-SignedHeaders"] != "host":
            raise TokenRefused("X-Amz-SignedHeaders is not host")
        amz_date = params["X-Amz-Date"]
        try:
            signed_at = float(calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ")))
            expires = int(params["X-Amz-Expires"])
        except (ValueError, OverflowError) as exc:
            raise TokenRefused("X-Amz-Date or X-Amz-Expires malformed") from exc
        access_key, _, scope = params["X-Amz-Credential"].partition("/")
        if scope != f"{amz_date[:8]}/{self.region}/{SERVICE}/aws4_request":
            raise TokenRefused("credential scope is not <date>/<region>/kafka-cluster/aws4_request "
                               "of this cluster's region and the signing date")
        now = self._clock()
        if signed_at > now + MAX_CLOCK_SKEW_SECONDS:
            raise TokenRefused(f"signed {signed_at - now:.0f} s in the future: clock skew")
        if not 0 < expires <= 604_800:
            raise TokenRefused("X-Amz-Expires out of range")
        if now > signed_at + expires:
            raise TokenRefused(f"expired {now - signed_at - expires:.0f} s ago")
        key = self._keys.get(access_key)
        if key is None:
            raise TokenRefused("unknown access key id")
        if key.session_token is not None and not hmac.compare_digest(
            params.get("X-Amz-Security-Token", ""), key.session_token
        ):
            raise TokenRefused("session token missing or wrong for this access key")
        signed = {k: v for k, v in params.items() if k not in ("X-Amz-Signature", "User-Agent")}
        query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(signed.items()))
        canonical = "\n".join(("GET", "/", query, f"host:{self.host}\n", "host",
                               hashlib.sha256(b"").hexdigest()))
        string_to_sign = "\n".join((ALGORITHM, amz_date, scope,
                                    hashlib.sha256(canonical.encode()).hexdigest()))
        signing_key = ("AWS4" + key.secret_key).encode()
        for part in (amz_date[:8], self.region, SERVICE, "aws4_request"):
            signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, params["X-Amz-Signature"]):
            raise TokenRefused("signature does not match")
        return key.principal or access_key, signed_at + expires


class MskIamAuthority:
    """A listener's SASL authority for MSK IAM: OAUTHBEARER tokens checked by the verifier."""

    mechanisms: tuple[str, ...] = (MECHANISM,)

    def __init__(self, verifier: MskIamVerifier, max_session_seconds: float | None = None) -> None:
        self.verifier = verifier
        self.max_session_seconds = max_session_seconds
        """A session ends with its token's validity, or earlier with this bound (tests)."""
        self.sessions_expired = 0
        """Connections closed because a request came after their session's end (KIP-368)."""
        self.refusals: list[str] = []
        """Why each refused token was refused, in order (what the broker would log)."""
        self.accepted = 0
        self.tokens: list[str] = []
        """Each accepted token, in order (to tell how many distinct tokens a client used)."""
        self.principals: list[str] = []
        """The principal each accepted token proved, in order."""

    def new_server(self, mechanism: str) -> MskIamServer:
        return MskIamServer(self)


class MskIamServer:
    """RFC 7628 server exchange for one connection."""

    def __init__(self, authority: MskIamAuthority) -> None:
        self._authority = authority
        self._error: str | None = None
        self.complete = False
        self.username: str | None = None
        self.session_lifetime_ms = 0
        """Announced in the successful SaslAuthenticate answer (KIP-368)."""
        self._session_end = 0.0

    def session_expired(self) -> bool:
        """True once the session is over: the broker then closes the connection on the next
        request, as Kafka does when connections.max.reauth.ms is set (MSK does for IAM)."""
        if self._authority.verifier.now() < self._session_end:
            return False
        self._authority.sessions_expired += 1
        return True

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:
            if token == b"\x01":
                raise SaslAuthenticationFailed(self._error)
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER message after an error status")
        try:
            bearer = _bearer_token(token)
            principal, valid_until = self._authority.verifier.verify_until(bearer)
        except TokenRefused as exc:
            self._authority.refusals.append(str(exc))
            log.info("MSK IAM token refused: %s", exc)
            self._error = INVALID_TOKEN
            return INVALID_TOKEN.encode()
        now = self._authority.verifier.now()
        session_end = valid_until
        if self._authority.max_session_seconds is not None:
            session_end = min(session_end, now + self._authority.max_session_seconds)
        self._session_end = session_end
        self.session_lifetime_ms = max(1, int((session_end - now) * 1000))
        self._authority.accepted += 1
        self._authority.tokens.append(bearer)
        self._authority.principals.append(principal)
        self.username = principal
        self.complete = True
        return b""


def _bearer_token(message: bytes) -> str:
    """The token of an OAUTHBEARER client-first message (`n,,` 0x01 `auth=Bearer T` 0x01 0x01)."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenRefused("client message is not UTF-8") from exc
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith("n,") or not rest.endswith("\x01\x01"):
        raise TokenRefused("client message is not an OAUTHBEARER initial response")
    pairs = dict(item.partition("=")[::2] for item in rest[:-2].split("\x01") if item)
    auth = pairs.get("auth", "")
    if not auth.startswith("Bearer ") or not auth[7:]:
        raise TokenRefused("no Bearer token in the client message")
    return auth[7:]
