"""The login for each SASL mechanism the exporter speaks."""

from __future__ import annotations

from collections.abc import Callable

from exporter.collect.sasl.login import PasswordLogin, SaslLogin
from exporter.settings import SaslSettings


def _gssapi_login(sasl: SaslSettings) -> SaslLogin:
    # Imported here: it loads kafka-python's network client, which only SASL needs.
    from exporter.collect.sasl.gssapi import GssapiLogin

    return GssapiLogin(sasl)


LOGINS: dict[str, Callable[[SaslSettings], SaslLogin]] = {
    "PLAIN": PasswordLogin,
    "SCRAM-SHA-256": PasswordLogin,
    "SCRAM-SHA-512": PasswordLogin,
    "GSSAPI": _gssapi_login,
}


def make_login(sasl: SaslSettings) -> SaslLogin:
    """The cluster's login; make it once per cluster and pass it to every connection."""
    return LOGINS[sasl.mechanism](sasl)
