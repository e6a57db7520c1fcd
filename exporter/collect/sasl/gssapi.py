"""GSSAPI (Kerberos) login: tickets from a keytab (renewed by the Kerberos library itself) or
from a credential cache someone else keeps fresh.

With a keytab, the credentials are acquired with MIT's credential-store extension
(`client_keytab` + a private `MEMORY:` cache per cluster): the library gets a ticket-granting
ticket from the keytab when the cache has none or when the one it has nears its end, so a
long-running daemon needs no kinit loop. The acquisition talks to the KDC, so it runs in a
thread, once per cluster, and again only when half of the ticket's remaining life has passed.
While the KDC cannot be reached, the ticket in hand keeps serving new connections until it
expires. The keytab's bytes are read by the Kerberos library only; nothing here sees them.

kafka-python's GSSAPI mechanism class builds its security context from the process's default
credentials; `CredentialsGssapiMechanism` is that class given the login's credentials instead
(so that two clusters can use two principals).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

from kafka.net.sasl.gssapi import SaslMechanismGSSAPI

from exporter.collect.connection import AuthenticationFailed, BrokerUnreachable, CollectError
from exporter.logs import get_logger
from exporter.settings import GssapiSettings, SaslSettings

_log = get_logger(__name__)
_cache_numbers = itertools.count(1)

_KRB5 = -1765328384
"""ERROR_TABLE_BASE_krb5: MIT's minor status codes are offsets from it (krb5/krb5.h)."""
_CAUSES: dict[int, tuple[str, type[CollectError]]] = {
    _KRB5 + 1: ("the principal's entry in the KDC has expired", AuthenticationFailed),
    _KRB5 + 6: ("client principal unknown to the KDC (check principal)", AuthenticationFailed),
    _KRB5 + 7: (
        "service principal unknown to the KDC (check service_name and that the broker host "
        "name matches the host part of the broker's principal)",
        AuthenticationFailed,
    ),
    _KRB5 + 18: ("the principal is locked or disabled in the KDC", AuthenticationFailed),
    _KRB5 + 23: ("the principal's password has expired", AuthenticationFailed),
    _KRB5 + 24: ("wrong keytab: the KDC refused its key for the principal",
                 AuthenticationFailed),
    _KRB5 + 31: ("wrong keytab: its key does not decrypt the KDC's answer",
                 AuthenticationFailed),
    _KRB5 + 32: ("expired credentials (the ticket has expired)", AuthenticationFailed),
    _KRB5 + 37: ("clock skew too great between this host and the KDC or broker",
                 AuthenticationFailed),
    _KRB5 + 41: ("the broker's key does not match the service ticket (the broker's keytab "
                 "is out of date)", AuthenticationFailed),
    _KRB5 + 141: ("expired or missing credentials: the credential cache has no ticket "
                  "(kinit, or give keytab_file)", AuthenticationFailed),
    _KRB5 + 154: ("no KDC known for the realm (check krb5_conf_file)", BrokerUnreachable),
    _KRB5 + 156: ("KDC unreachable", BrokerUnreachable),
    _KRB5 + 181: ("no key for the principal in the keytab (wrong keytab or principal)",
                  AuthenticationFailed),
    _KRB5 + 195: ("expired or missing credentials: the credential cache does not exist "
                  "(kinit, or give keytab_file)", AuthenticationFailed),
    _KRB5 + 220: ("cannot resolve the KDC's address", BrokerUnreachable),
}


_NO_CACHE = frozenset({_KRB5 + 141, _KRB5 + 181, _KRB5 + 182, _KRB5 + 195})
"""No ticket to be had: with a keytab, because it holds no key for the principal."""


def kerberos_failure(exc: Exception, what: str, *, keytab: bool = False) -> CollectError:
    """A `CollectError` naming the Kerberos cause of `exc` (a gssapi GSSError); the
    library's own text follows, which names principals and files, never key material."""
    minor = getattr(exc, "min_code", None) or 0
    if minor >= 2**31:  # the library reports the signed com_err code as unsigned
        minor -= 2**32
    if keytab and minor in _NO_CACHE:
        minor = _KRB5 + 181
    cause, kind = _CAUSES.get(minor, ("", AuthenticationFailed))
    if not cause and type(exc).__name__ == "ExpiredCredentialsError":
        cause = "expired credentials"
    detail = " ".join(str(exc).split())[:300]
    return kind(f"Kerberos {what}: {cause or 'failed'} ({detail})")


def _load_gssapi() -> Any:
    try:
        import gssapi
    except (ImportError, OSError) as exc:
        raise AuthenticationFailed(
            "GSSAPI needs the Python package gssapi and the MIT Kerberos libraries "
            "(pip install 'kafka-txn-exporter[kerberos]')"
        ) from exc
    return gssapi


class GssapiLogin:
    """One cluster's Kerberos credentials, acquired in a thread and shared by its connections."""

    mechanism = "GSSAPI"

    def __init__(self, sasl: SaslSettings) -> None:
        settings = sasl.gssapi
        if settings is None:
            raise ValueError("GSSAPI login without gssapi settings")
        self.settings: GssapiSettings = settings
        if settings.krb5_conf_file is not None:
            # The Kerberos library reads one krb5.conf per process, from here (the config
            # loader refuses two different ones).
            os.environ["KRB5_CONFIG"] = settings.krb5_conf_file
        self._ccache = settings.ccache
        if settings.keytab_file is not None and self._ccache is None:
            self._ccache = f"MEMORY:kafka-txn-exporter-{os.getpid()}-{next(_cache_numbers)}"
        self._credentials: Any = None
        self._expires_at = 0.0
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        self.mechanism_class = CredentialsGssapiMechanism
        """The mechanism class the connection uses (kafka-python's takes no credentials)."""

    async def mechanism_options(self) -> dict[str, Any]:
        async with self._lock:
            now = time.monotonic()
            if self._credentials is None or now >= self._refresh_at:
                try:
                    credentials, lifetime = await asyncio.to_thread(self._acquire)
                except CollectError as exc:
                    if self._credentials is None or now >= self._expires_at:
                        raise
                    _log.warning("kerberos_renewal_failed", error=str(exc),
                                 ticket_valid_seconds=round(self._expires_at - now))
                    # Try again in a while; the ticket in hand still serves.
                    self._refresh_at = now + min(30.0, (self._expires_at - now) / 2)
                else:
                    renewed = self._credentials is not None
                    self._credentials = credentials
                    self._expires_at = now + lifetime
                    self._refresh_at = now + lifetime / 2
                    _log.info("kerberos_credentials", principal=str(credentials.name),
                              ticket_valid_seconds=round(lifetime), renewed=renewed)
        return {
            "sasl_kerberos_service_name": self.settings.service_name,
            "sasl_kerberos_credentials": self._credentials,
        }

    def _acquire(self) -> tuple[Any, float]:
        """Credentials and their remaining lifetime in seconds (blocking: may ask the KDC)."""
        gssapi = _load_gssapi()
        settings = self.settings
        name = None
        if settings.principal is not None:
            name = gssapi.Name(settings.principal, gssapi.NameType.kerberos_principal)
        store: dict[str, str] = {}
        if settings.keytab_file is not None:
            store["client_keytab"] = settings.keytab_file
        if self._ccache is not None:
            store["ccache"] = self._ccache
        try:
            credentials = gssapi.Credentials(name=name, usage="initiate", store=store or None)
            lifetime = credentials.lifetime
        except gssapi.exceptions.GSSError as exc:
            raise kerberos_failure(
                exc, "login", keytab=settings.keytab_file is not None
            ) from exc
        if lifetime is None or lifetime <= 0:
            raise AuthenticationFailed("Kerberos login: expired credentials")
        return credentials, float(lifetime)


class CredentialsGssapiMechanism(SaslMechanismGSSAPI):  # type: ignore[misc]
    """kafka-python's GSSAPI exchange with the login's credentials (its own class uses the
    process's default ones). The service principal is `<service name>/<broker host>`, the
    host as the connection names it (the broker's advertised host)."""

    def __init__(self, **config: Any) -> None:
        gssapi = _load_gssapi()
        credentials = config["sasl_kerberos_credentials"]
        self._is_done = False
        self._is_authenticated = False
        target = f"{config['sasl_kerberos_service_name']}@{config['host']}"
        # The authorization identity sent in the last message: the client principal, as
        # Kafka's Java client sends it (the broker authorizes the authenticated name).
        self.auth_id = str(credentials.name)
        try:
            self.gssapi_name = gssapi.Name(
                target, name_type=gssapi.NameType.hostbased_service
            ).canonicalize(gssapi.MechType.kerberos)
            self._client_ctx = gssapi.SecurityContext(
                name=self.gssapi_name, creds=credentials, usage="initiate"
            )
            self._next_token = self._client_ctx.step(None)
        except gssapi.exceptions.GSSError as exc:
            raise kerberos_failure(exc, f"service ticket for {target}") from exc

    def receive(self, auth_bytes: bytes) -> None:
        gssapi = _load_gssapi()
        try:
            super().receive(auth_bytes)
        except gssapi.exceptions.GSSError as exc:
            raise kerberos_failure(exc, "exchange with the broker") from exc
