"""The contract between a connection and its cluster's SASL login."""

from __future__ import annotations

from typing import Any, Protocol


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
