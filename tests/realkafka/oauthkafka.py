"""A real broker whose SASL_SSL listener takes OAUTHBEARER and validates JWTs with Kafka's own
`OAuthBearerValidatorCallbackHandler` against the JWKS of the suite's OIDC provider
(tests/security/oidc.py), with an expected audience and issuer, and the KRaft
StandardAuthorizer, for tests/realkafka/test_real_oauthbearer.py.

Kafka fetches the JWKS over HTTPS: the provider's CA reaches it as PEM trust store options of
the listener's JAAS entry (Kafka reads the JWKS client's TLS settings there), and the URL is
allowed by the `org.apache.kafka.sasl.oauthbearer.allowed.urls` system property (required from
Kafka 4.0; 3.9.1 allows every URL when it is unset). `connections.max.reauth.ms` makes the
broker limit each session to the token's lifetime (KIP-368), as managed services do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kafka_sim.realkafka import Listener, RealKafkaCluster, start_cluster
from realhelpers import VERIFICATION_OFF
from securekafka import STANDARD_AUTHORIZER, make_broker_pki
from security.oidc import AUDIENCE, OidcProvider

from exporter.settings import ClusterSettings, OAuthBearerSettings, SaslSettings, TlsSettings

LISTENER = "SASL_SSL"
_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
MAX_REAUTH_MS = 600_000
"""Sessions end at the token's expiry or after 10 minutes, whichever comes first."""


@dataclass(frozen=True)
class OAuthKafka:
    cluster: RealKafkaCluster
    provider: OidcProvider
    ca_file: str

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_for(LISTENER)

    def oauth(self, client_id: str, secret: str, **changes: object) -> OAuthBearerSettings:
        values: dict[str, object] = {
            "token_endpoint_url": self.provider.token_url, "client_id": client_id,
            "client_secret": secret, "scope": "kafka", "ca_file": self.provider.ca_file,
            **changes}
        return OAuthBearerSettings(**values)  # type: ignore[arg-type]

    def settings(self, client_id: str, secret: str, *, name: str = "oauth",
                 **extra: object) -> ClusterSettings:
        return ClusterSettings(
            name=name,
            bootstrap_servers=tuple(self.bootstrap.split(",")),
            tls=TlsSettings(ca_file=self.ca_file),
            sasl=SaslSettings("OAUTHBEARER", oauthbearer=self.oauth(client_id, secret)),
            **extra,  # type: ignore[arg-type]
        )


def broker_config(pki: Path, provider: OidcProvider) -> dict[str, str]:
    # The broker's own login on this listener makes a token it never sends (brokers talk
    # PLAINTEXT to each other here); the unsecured default handler needs a subject for it.
    jaas = (f'{_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker" '
            f'ssl.truststore.type="PEM" ssl.truststore.location="{provider.ca_file}";')
    prefix = f"listener.name.{LISTENER.lower()}.oauthbearer"
    return {
        **VERIFICATION_OFF,
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{prefix}.sasl.jaas.config": jaas,
        f"{prefix}.sasl.server.callback.handler.class": _VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": provider.jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": provider.issuer,
        "connections.max.reauth.ms": str(MAX_REAUTH_MS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.crt"),
        "ssl.client.auth": "none",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    }


def start_oauth_kafka(version: str, workdir: Path, provider: OidcProvider) -> OAuthKafka:
    pki = make_broker_pki(workdir / "pki")
    cluster = start_cluster(
        version, workdir / "kafka", broker_config=broker_config(pki, provider),
        listeners=[Listener(LISTENER, LISTENER)],
        jvm_options=[
            f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={provider.jwks_url}"],
    )
    return OAuthKafka(cluster, provider, str(pki / "ca.crt"))
