"""Validated configuration records (loaded and checked by `exporter.config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TlsSettings:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True
    key_password: str | None = field(default=None, repr=False)
    """Passphrase of an encrypted key_file (read from key_password_file)."""


@dataclass(frozen=True, slots=True)
class AwsMskIamSettings:
    """AWS MSK IAM: credentials from the standard AWS chain (or `profile`), optionally a role
    assumed with them, signing a `kafka-cluster:Connect` token for `region`."""

    region: str
    profile: str | None = None
    role_arn: str | None = None
    role_session_name: str = "kafka-txn-exporter"


@dataclass(frozen=True, slots=True)
class OAuthBearerSettings:
    """OAUTHBEARER: a token fetched with OIDC client credentials from `token_endpoint_url`
    (as Kafka's own login handler does), or one a platform mounts in `token_file`."""

    token_endpoint_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)
    """SASL extensions sent with the token (KIP-342), e.g. logicalCluster, identityPoolId."""
    ca_file: str | None = None
    """CA bundle for the token endpoint's TLS certificate (the system store otherwise)."""
    token_file: str | None = None
    """A token a platform mounts and rotates; read again whenever the file changes."""


@dataclass(frozen=True, slots=True)
class GssapiSettings:
    """Kerberos: a principal with its keytab (tickets renewed from it), or an existing
    credential cache someone else keeps fresh (kinit, a sidecar)."""

    principal: str | None = None
    """None: the default principal of `ccache` (only without a keytab)."""
    keytab_file: str | None = None
    ccache: str | None = None
    """A credential cache name (FILE:/path, DIR:..., KEYRING:...); None with a keytab means a
    private in-memory cache per cluster."""
    service_name: str = "kafka"
    """First part of the brokers' service principal: <service_name>/<broker host>@REALM."""
    krb5_conf_file: str | None = None


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """`mechanism` picks which of the other fields apply: `username` and `password` for PLAIN
    and SCRAM; each other mechanism has a record of its own below."""

    mechanism: str
    username: str = ""
    password: str = field(default="", repr=False)
    aws_msk_iam: AwsMskIamSettings | None = None
    oauthbearer: OAuthBearerSettings | None = None
    gssapi: GssapiSettings | None = None


DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    name: str
    bootstrap_servers: tuple[str, ...]
    client_id: str = "kafka-txn-exporter"
    tls: TlsSettings | None = None
    sasl: SaslSettings | None = None
    poll_interval_seconds: float = 30.0
    request_timeout_seconds: float = 10.0
    describe_producers_batch_size: int = 500
    late_buffer_seconds: float = 300.0
    """Added to transaction.max.timeout.ms, like the broker's LATE_TRANSACTION_BUFFER_MS."""
    min_reported_duration_seconds: float = 60.0
    two_phase_late_seconds: float = 3600.0
    """Age past which a KIP-939 two-phase-commit transaction counts as stuck (its coordinator
    never times it out; docs/kafka-semantics.md#two-phase-commit explains the default)."""
    blocked_groups_min_age_seconds: float = 120.0
    """Open transactions at least this old get their blocked consumer groups read, late or not
    (README explains the default: four polls at the default interval)."""
    application_patterns: tuple[str, ...] = ()
    """Regexes with a named group `application`, tried on transactional ids before the built-in
    Kafka Streams and Flink patterns (`exporter.applications`)."""
    max_applications: int = 100
    """Distinct `application` label values per cluster and poll; the rest are folded into one."""
    transaction_max_timeout_ms: int | None = None
    """Override for principals that may not DescribeConfigs; skips the lookup."""
    config_refresh_seconds: float = 3600.0
    metadata_max_age_seconds: float = 300.0
    """Longest a poll reuses an earlier poll's Metadata answer while nothing says it changed
    (`exporter.collect.metadata_age`); new topics and partitions are found only through
    Metadata, so this bounds how late they are seen. 0: Metadata every poll."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """Largest response frame read from a broker; a larger one fails that connection before
    anything is buffered (a Metadata answer for 1M partitions is ~60 MiB)."""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WebTlsSettings:
    """`tls_server_config` of the web config file; file names are resolved already."""

    cert_file: str
    key_file: str
    key_password: str | None = field(default=None, repr=False)
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True, slots=True)
class WebConfigSettings:
    """The exporter-toolkit web config file, parsed once (exporter.webconfig)."""

    tls: WebTlsSettings | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """user -> bcrypt hash; empty means no authentication."""


@dataclass(frozen=True, slots=True)
class WebSettings:
    listen_address: str = "0.0.0.0"
    port: int = 9981
    web_config_file: str | None = None
    """Prometheus exporter-toolkit web config (tls_server_config, basic_auth_users)."""
    web_config: WebConfigSettings | None = None
    """`web_config_file` parsed; None when no file is given (plain HTTP, no auth)."""
    telemetry_path: str = "/metrics"


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Optional Parquet history of every poll's open transactions (read by `spark history`)."""

    directory: str | None = None
    retention_days: int = 30


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    clusters: tuple[ClusterSettings, ...]
    web: WebSettings = field(default_factory=WebSettings)
    history: HistorySettings = field(default_factory=HistorySettings)
    log_format: str = "auto"  # auto | json | console
    log_level: str = "info"
