"""The login for each SASL mechanism the exporter speaks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.collect.sasl.login import SaslLogin
from exporter.collect.sasl.oauthbearer import OAuthBearerLogin
from exporter.settings import SaslSettings


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


def _aws_msk_iam_login(sasl: SaslSettings) -> SaslLogin:
    from exporter.collect.sasl.aws_msk_iam import AwsMskIamLogin  # botocore: an optional extra

    return AwsMskIamLogin(sasl)


LOGINS: dict[str, Callable[[SaslSettings], SaslLogin]] = {
    "PLAIN": PasswordLogin,
    "SCRAM-SHA-256": PasswordLogin,
    "SCRAM-SHA-512": PasswordLogin,
    "AWS_MSK_IAM": _aws_msk_iam_login,
    "OAUTHBEARER": OAuthBearerLogin,
}


def make_login(sasl: SaslSettings) -> SaslLogin:
    """The cluster's login; make it once per cluster and pass it to every connection."""
    return LOGINS[sasl.mechanism](sasl)
