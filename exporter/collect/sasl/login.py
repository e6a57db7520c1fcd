"""The contract between a connection and its cluster's SASL login."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from exporter.settings import SaslSettings


class SaslLogin(Protocol):
    """Credentials for one cluster, shared by every connection to it."""

    @property
    def mechanism(self) -> str:
        """The SASL mechanism name sent in SaslHandshake (e.g. "SCRAM-SHA-512")."""
        ...

    async def mechanism_options(self) -> dict[str, Any]:
        """Keyword options for kafka-python's mechanism class for the next authentication.

        Raises a `CollectError` (AuthenticationFailed, BrokerUnreachable, RequestTimeout) that
        names the cause, never a credential."""
        ...


PASSWORD_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})


@dataclass(frozen=True, slots=True)
class PasswordLogin:
    """PLAIN and SCRAM: a user name and a password, nothing to renew."""

    sasl: SaslSettings

    @property
    def mechanism(self) -> str:
        return self.sasl.mechanism

    async def mechanism_options(self) -> dict[str, Any]:
        return {
            "sasl_plain_username": self.sasl.username,
            "sasl_plain_password": self.sasl.password,
        }
