"""The login for each SASL mechanism the exporter speaks."""

from __future__ import annotations

from collections.abc import Callable

from exporter.collect.sasl.login import PasswordLogin, SaslLogin
from exporter.collect.sasl.oauthbearer import OAuthBearerLogin
from exporter.settings import SaslSettings


def _gssapi_login(sasl: SaslSettings) -> SaslLogin:
    # Imported here: it loads kafka-python's network client, which only SASL needs.
    from exporter.collect.sasl.gssapi import GssapiLogin

    return GssapiLogin(sasl)


def _aws_msk_iam_login(sasl: SaslSettings) -> SaslLogin:
    from exporter.collect.sasl.aws_msk_iam import AwsMskIamLogin  # botocore: an optional extra

    return AwsMskIamLogin(sasl)


LOGINS: dict[str, Callable[[SaslSettings], SaslLogin]] = {
    "PLAIN": PasswordLogin,
    "SCRAM-SHA-256": PasswordLogin,
    "SCRAM-SHA-512": PasswordLogin,
    "AWS_MSK_IAM": _aws_msk_iam_login,
    "OAUTHBEARER": OAuthBearerLogin,
    "GSSAPI": _gssapi_login,
}


def make_login(sasl: SaslSettings) -> SaslLogin:
    """The cluster's login; make it once per cluster and pass it to every connection."""
    return LOGINS[sasl.mechanism](sasl)
