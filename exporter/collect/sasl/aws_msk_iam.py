"""AWS MSK IAM access control, spoken as SASL/OAUTHBEARER with a SigV4-signed token.

MSK accepts two wire forms of the same proof: its own `AWS_MSK_IAM` mechanism (a JSON document
of SigV4 fields) and OAUTHBEARER whose bearer token is a presigned `kafka-cluster:Connect` URL,
base64url-encoded without padding. The second is the one AWS's signer libraries for non-Java
clients produce and recommend; it also lets kafka-python's mechanism take a token prepared once
per cluster (its own AWS_MSK_IAM class resolves credentials again, blocking, on every
connection, with no region, profile or role setting). The token format is described in
docs/kafka-semantics.md.

Credentials come from botocore's standard chain (environment, shared config/credentials files
and profiles, web identity token as EKS IRSA mounts it, container endpoint as ECS and EKS Pod
Identity serve it, EC2 instance metadata), optionally exchanged for a role with STS AssumeRole.
botocore refreshes temporary credentials itself, 15 minutes before they expire (10 minutes
at the latest). A token is reused for `TOKEN_REUSE_SECONDS`, a third of its lifetime, so one
token serves every connection of the cluster and is replaced long before it expires (and
before the credentials that signed it can).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter import __version__
from exporter.collect.connection import AuthenticationFailed, RequestTimeout
from exporter.settings import AwsMskIamSettings, SaslSettings

WIRE_MECHANISM = "OAUTHBEARER"
SIGNING_SERVICE = "kafka-cluster"
CONNECT_ACTION = "kafka-cluster:Connect"
SIGNING_ALGORITHM = "AWS4-HMAC-SHA256"
TOKEN_EXPIRES_SECONDS = 900
"""X-Amz-Expires of every token: 15 minutes, as AWS's signer libraries use."""
TOKEN_REUSE_SECONDS = 300.0
"""A token is handed to new connections for at most this long, then a new one is signed."""
TOKEN_LAST_RESORT_SECONDS = 720.0
"""When no new token can be signed (credentials unavailable: STS or the metadata endpoint
down), the last one is still handed out until it is this old: 3 of its 15 minutes are left for
the session it opens."""
CREDENTIALS_TIMEOUT_SECONDS = 30.0
"""Bound on obtaining credentials (metadata, container or STS endpoints) for one login."""
USER_AGENT = f"kafka-txn-exporter/{__version__}"
QUIET_LOGGERS = ("botocore", "urllib3")
"""Libraries of the credential chain whose records are kept at WARNING and above."""
_EMPTY_PAYLOAD_SHA256 = hashlib.sha256(b"").hexdigest()
_UNRESERVED = "-_.~"  # RFC 3986 unreserved besides letters and digits: never percent-encoded


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    access_key: str
    secret_key: str = ""
    session_token: str | None = None

    def __repr__(self) -> str:  # never the secret or the session token
        return f"AwsCredentials(access_key={self.access_key!r})"


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe=_UNRESERVED)


def _hmac_sha256(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def presign_connect_url(
    credentials: AwsCredentials,
    region: str,
    signed_at: datetime.datetime,
    expires_seconds: int = TOKEN_EXPIRES_SECONDS,
    user_agent: str = USER_AGENT,
) -> str:
    """The SigV4 query-string-signed URL of `kafka-cluster:Connect` for `region` at
    `signed_at` (UTC): what MSK verifies. User-Agent is appended after signing, unsigned."""
    host = f"kafka.{region}.amazonaws.com"
    stamp = signed_at.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/{region}/{SIGNING_SERVICE}/aws4_request"
    params = {
        "Action": CONNECT_ACTION,
        "X-Amz-Algorithm": SIGNING_ALGORITHM,
        "X-Amz-Credential": f"{credentials.access_key}/{scope}",
        "X-Amz-Date": stamp,
        "X-Amz-Expires": str(expires_seconds),
        "X-Amz-SignedHeaders": "host",
    }
    if credentials.session_token:
        params["X-Amz-Security-Token"] = credentials.session_token
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))
    canonical_request = f"GET\n/\n{query}\nhost:{host}\n\nhost\n{_EMPTY_PAYLOAD_SHA256}"
    string_to_sign = "\n".join((
        SIGNING_ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest()
    ))
    key = ("AWS4" + credentials.secret_key).encode()
    for part in (stamp[:8], region, SIGNING_SERVICE, "aws4_request"):
        key = _hmac_sha256(key, part)
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    return f"https://{host}/?{query}&X-Amz-Signature={signature}&User-Agent={_quote(user_agent)}"


def connect_token(url: str) -> str:
    """The OAUTHBEARER token MSK takes: the presigned URL, base64url without padding."""
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


CredentialsSource = Callable[[], AwsCredentials]


class AwsMskIamLogin:
    """One cluster's MSK IAM login: one token at a time, shared by all its connections.

    Thread-safe: the scheduler may poll the cluster from any thread; botocore's blocking calls
    run in a worker thread so the event loop never waits on a metadata or STS endpoint."""

    def __init__(
        self,
        sasl: SaslSettings,
        *,
        clock: Callable[[], float] = time.time,
        credentials_source: CredentialsSource | None = None,
    ) -> None:
        assert sasl.aws_msk_iam is not None
        self._settings: AwsMskIamSettings = sasl.aws_msk_iam
        self._clock = clock
        self._source = credentials_source or BotocoreCredentials(self._settings)
        self._lock = threading.Lock()
        self._token: str | None = None
        self._signed_at = 0.0
        self.tokens_signed = 0
        """How many tokens this login has signed (one per `TOKEN_REUSE_SECONDS` at most)."""

    @property
    def mechanism(self) -> str:
        return WIRE_MECHANISM

    async def mechanism_options(self) -> dict[str, Any]:
        try:
            token = await asyncio.wait_for(
                asyncio.to_thread(self.token), CREDENTIALS_TIMEOUT_SECONDS
            )
        except TimeoutError:
            raise RequestTimeout(
                f"AWS_MSK_IAM: no AWS credentials within {CREDENTIALS_TIMEOUT_SECONDS:g} s "
                "(metadata, container or STS endpoint not answering)"
            ) from None
        return {"sasl_oauth_token_provider": _fixed_token_provider(token)}

    def token(self) -> str:
        """The current token, signed anew once the last one is `TOKEN_REUSE_SECONDS` old."""
        with self._lock:
            now = self._clock()
            age = now - self._signed_at
            if self._token is not None and 0 <= age < TOKEN_REUSE_SECONDS:
                return self._token
            try:
                credentials = self._source()
            except AuthenticationFailed:
                if self._token is not None and 0 <= age < TOKEN_LAST_RESORT_SECONDS:
                    return self._token  # still valid; asked again for the next connection
                raise
            signed_at = datetime.datetime.fromtimestamp(now, datetime.UTC)
            self._token = connect_token(
                presign_connect_url(credentials, self._settings.region, signed_at)
            )
            self._signed_at = now
            self.tokens_signed += 1
            return self._token


def _fixed_token_provider(token: str) -> Any:
    """kafka-python's OAUTHBEARER mechanism wants an AbstractTokenProvider instance."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class FixedToken(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return token

        def __repr__(self) -> str:
            return "FixedToken(<redacted>)"

    return FixedToken()


class BotocoreCredentials:
    """Credentials from botocore's standard chain (or `profile`), optionally exchanged for
    `role_arn`; errors become `AuthenticationFailed` naming the cause, never a credential."""

    def __init__(self, settings: AwsMskIamSettings) -> None:
        self._settings = settings
        self._credentials: Any = None  # botocore (Refreshable)Credentials, resolved once
        # botocore's (and its HTTP stack's) debug records carry request bodies, signed headers
        # and STS answers: a web identity token, keys, session tokens. They never reach our log
        # even with log.level debug; their warnings still do.
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

    def __call__(self) -> AwsCredentials:
        try:
            if self._credentials is None:
                self._credentials = self._resolve()
            frozen = self._credentials.get_frozen_credentials()
        except AuthenticationFailed:
            raise
        except Exception as exc:  # botocore's and its HTTP stack's, all named below
            raise AuthenticationFailed(f"AWS_MSK_IAM: {describe_aws_error(exc)}") from None
        if not frozen.access_key or not frozen.secret_key:
            raise AuthenticationFailed("AWS_MSK_IAM: the AWS credentials found are empty")
        return AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token or None)

    def _resolve(self) -> Any:
        from botocore.session import Session

        session = Session(profile=self._settings.profile)
        session.set_config_variable("region", self._settings.region)
        credentials = session.get_credentials()
        if credentials is None:
            raise AuthenticationFailed(
                "AWS_MSK_IAM: no AWS credentials found (looked in the environment, the shared "
                "credentials and config files, a web identity token file (EKS IRSA), the "
                "container endpoint (ECS, EKS Pod Identity) and the EC2 instance metadata)"
            )
        if self._settings.role_arn is None:
            return credentials
        return self._assumed_role(session)

    def _assumed_role(self, session: Any) -> Any:
        from botocore.config import Config
        from botocore.credentials import RefreshableCredentials

        sts = session.create_client(
            "sts",
            region_name=self._settings.region,
            config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
        )

        def assume() -> dict[str, Any]:
            answer = sts.assume_role(
                RoleArn=self._settings.role_arn,
                RoleSessionName=self._settings.role_session_name,
            )["Credentials"]
            return {
                "access_key": answer["AccessKeyId"],
                "secret_key": answer["SecretAccessKey"],
                "token": answer["SessionToken"],
                "expiry_time": answer["Expiration"].isoformat(),
            }

        return RefreshableCredentials.create_from_metadata(assume(), assume, "assume-role")


_EXPIRED_CODES = frozenset({
    "ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired",
})


def describe_aws_error(exc: BaseException) -> str:
    """One line naming why credentials could not be had: the botocore error class and, for an
    AWS answer, its operation and error code; never a key, token or response body."""
    from botocore import exceptions as aws

    if isinstance(exc, aws.NoCredentialsError):
        return "no AWS credentials found"
    if isinstance(exc, aws.ProfileNotFound):
        return f"AWS profile {exc.kwargs.get('profile')!r} not found in the shared config files"
    if isinstance(exc, aws.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "unknown"))
        if code in _EXPIRED_CODES:
            cause = "expired credentials"
        elif code == "SignatureDoesNotMatch" or "Skew" in code:
            cause = "signature refused (wrong secret key, or this host's clock is off)"
        elif code in ("AccessDenied", "AccessDeniedException"):
            cause = "access denied (check the role's trust policy and sts:AssumeRole* grants)"
        elif code in ("InvalidIdentityToken", "InvalidIdentityTokenException"):
            cause = "the web identity token was refused (expired, or wrong audience/issuer)"
        else:
            cause = "refused"
        return f"STS {exc.operation_name} {cause}: {code}"
    if isinstance(exc, aws.ConnectTimeoutError | aws.ReadTimeoutError):
        return f"timed out reaching {exc.kwargs.get('endpoint_url', 'an AWS endpoint')}"
    if isinstance(exc, aws.EndpointConnectionError):
        return f"could not reach {exc.kwargs.get('endpoint_url', 'an AWS endpoint')}"
    if isinstance(exc, aws.CredentialRetrievalError):
        return (f"could not obtain credentials from the {exc.kwargs.get('provider', 'AWS')} "
                "provider (endpoint refused or answered an error)")
    if isinstance(exc, aws.PartialCredentialsError):
        return (f"incomplete AWS credentials from the {exc.kwargs.get('provider', 'AWS')} "
                f"provider (missing {exc.kwargs.get('cred_var', 'a value')})")
    if isinstance(exc, RuntimeError) and "expired" in str(exc).lower():
        return "expired credentials (refreshing them failed)"
    return f"could not obtain AWS credentials ({type(exc).__name__})"
