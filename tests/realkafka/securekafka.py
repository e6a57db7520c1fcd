"""A real broker with a SASL_SSL listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the KRaft
StandardAuthorizer, for tests/realkafka/test_real_security.py.

The broker certificate comes from a test CA made with `cryptography` (tests/security/pki.py's
`issue`), given to Kafka as PEM (ssl.keystore.type=PEM: one file with the private key and the
certificate chain; ssl.truststore.type=PEM). The PLAINTEXT listener the harness uses (topics,
ACLs, SCRAM credentials, the raw producer) stays unauthenticated, its principal User:ANONYMOUS
a super user like User:admin; every other principal gets only the ACLs a test grants.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka_sim.realkafka import Listener, RealKafkaCluster, start_cluster
from realhelpers import REPO, VERIFICATION_OFF
from security.pki import issue

from exporter.settings import ClusterSettings, SaslSettings, TlsSettings

LISTENER = "SASL_SSL"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = {
    "admin": "admin-pw-9f3c",
    "exporter": "exporter-pw-71ab",
    "limited": "limited-pw-44de",
}
"""SASL users: the same password for PLAIN (JAAS) and both SCRAM mechanisms."""

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class SecureKafka:
    """The running broker and what a client needs to reach its SASL_SSL listener."""

    cluster: RealKafkaCluster
    ca_file: str
    other_ca_file: str
    """A CA that did not sign the broker certificate."""

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return self.cluster.bootstrap_for(LISTENER)

    def settings(
        self,
        user: str,
        mechanism: str = "SCRAM-SHA-512",
        *,
        password: str | None = None,
        ca_file: str | None = None,
        bootstrap: str | None = None,
        name: str = "secure",
        **extra: object,
    ) -> ClusterSettings:
        """The exporter's cluster settings for `user` over SASL_SSL, CA and hostname checked."""
        return ClusterSettings(
            name=name,
            bootstrap_servers=tuple((bootstrap or self.sasl_ssl_bootstrap).split(",")),
            tls=TlsSettings(ca_file=ca_file or self.ca_file, check_hostname=True),
            sasl=SaslSettings(mechanism, user, PASSWORDS[user] if password is None else password),
            **extra,  # type: ignore[arg-type]
        )


def _jaas(module: str, options: Mapping[str, str] | None = None) -> str:
    args = "".join(f' {key}="{value}"' for key, value in (options or {}).items())
    return f"{module} required{args};"


def broker_config(pki: Path) -> dict[str, str]:
    """server.properties for the SASL_SSL listener, the mechanisms and the authorizer."""
    plain_users = {f"user_{user}": password for user, password in PASSWORDS.items()}
    prefix = f"listener.name.{LISTENER.lower()}"
    return {
        **VERIFICATION_OFF,
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        f"{prefix}.plain.sasl.jaas.config": _jaas(_PLAIN_MODULE, plain_users),
        f"{prefix}.scram-sha-256.sasl.jaas.config": _jaas(_SCRAM_MODULE),
        f"{prefix}.scram-sha-512.sasl.jaas.config": _jaas(_SCRAM_MODULE),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.crt"),
        "ssl.client.auth": "none",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS;User:admin",
    }


def make_broker_pki(directory: Path) -> Path:
    """ca, other-ca and a broker certificate for 127.0.0.1 only (so `localhost` fails the
    hostname check); broker.pem = key + certificate + CA (Kafka's PEM keystore)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = issue(directory, "ca", None, ca=True)
    issue(directory, "other-ca", None, ca=True)
    issue(directory, "broker", ca, ips=("127.0.0.1",))
    (directory / "broker.pem").write_bytes(
        (directory / "broker.key").read_bytes()
        + (directory / "broker.crt").read_bytes()
        + (directory / "ca.crt").read_bytes()
    )
    return directory


def admin_client(cluster: RealKafkaCluster) -> KafkaAdminClient:
    """kafka-python's admin client on the PLAINTEXT listener (User:ANONYMOUS, a super user)."""
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)


def add_scram_users(cluster: RealKafkaCluster, passwords: Mapping[str, str]) -> None:
    """SCRAM-SHA-256 and -512 credentials per user (AlterUserScramCredentials, KIP-554)."""
    admin = admin_client(cluster)
    try:
        # One mechanism per request: a request may alter each user only once.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            errors = admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(user, mechanism, password, iterations=4096)
                    for user, password in passwords.items()
                ]
            )
            failed = {user: error for user, error in errors.items() if error}
            assert not failed, failed
    finally:
        admin.close()


Grant = tuple[ResourceType, str, ACLOperation]


def allow(
    cluster: RealKafkaCluster,
    principal: str,
    grants: Iterable[Grant],
    pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL,
) -> None:
    """ALLOW ACLs for `User:principal` from any host."""
    acls = [
        ACL(
            f"User:{principal}",
            "*",
            operation,
            ACLPermissionType.ALLOW,
            ResourcePattern(resource_type, name, pattern),
        )
        for resource_type, name, operation in grants
    ]
    admin = admin_client(cluster)
    try:
        result = admin.create_acls(acls)
        assert not result["failed"], result["failed"]
    finally:
        admin.close()


def acl_count(cluster: RealKafkaCluster, principal: str) -> int:
    admin = admin_client(cluster)
    try:
        found, _ = admin.describe_acls(
            ACLFilter(
                f"User:{principal}",
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
        )
        return len(found)
    finally:
        admin.close()


_RESOURCES = {
    "--topic": ResourceType.TOPIC,
    "--group": ResourceType.GROUP,
    "--transactional-id": ResourceType.TRANSACTIONAL_ID,
}
_OPERATIONS = {
    "Read": ACLOperation.READ,
    "Describe": ACLOperation.DESCRIBE,
    "DescribeConfigs": ACLOperation.DESCRIBE_CONFIGS,
}


def readme_grants() -> tuple[Grant, ...]:
    """README's "Least privilege on Kafka" `kafka-acls.sh` lines for User:exporter, parsed: the
    test grants exactly what the README tells users to grant."""
    grants: list[Grant] = []
    for line in (REPO / "README.md").read_text().splitlines():
        words = line.replace("'", "").split()
        if words[:5] != [
            "kafka-acls.sh",
            "--add",
            "--allow-principal",
            "User:exporter",
            "--operation",
        ]:
            continue
        operation, resource = _OPERATIONS[words[5]], words[6:]
        if resource == ["--cluster"]:
            grants.append((ResourceType.CLUSTER, "kafka-cluster", operation))
        else:
            grants.append((_RESOURCES[resource[0]], resource[1], operation))
    assert grants, "no kafka-acls.sh line for User:exporter in README.md"
    return tuple(grants)


README_GRANTS = readme_grants()


def start_secure_kafka(version: str, workdir: Path,
                       extra_config: Mapping[str, str] | None = None) -> SecureKafka:
    """`extra_config`: more server.properties (e.g. connections.max.reauth.ms)."""
    pki = make_broker_pki(workdir / "pki")
    cluster = start_cluster(
        version, workdir / "kafka", broker_config={**broker_config(pki), **(extra_config or {})},
        listeners=[Listener(LISTENER, LISTENER)],
    )
    try:
        add_scram_users(cluster, PASSWORDS)
    except BaseException:
        cluster.stop()
        raise
    return SecureKafka(cluster, str(pki / "ca.crt"), str(pki / "other-ca.crt"))


def wait_acls(cluster: RealKafkaCluster, principal: str, count: int, timeout: float = 30.0) -> None:
    """Until the broker lists `count` ACLs of the principal (the authorizer applies them from
    the metadata log, asynchronously)."""
    deadline = time.monotonic() + timeout
    while acl_count(cluster, principal) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"ACLs of {principal} not applied in {timeout} s")
        time.sleep(0.2)
