"""The abort command's config section: `admin: {clusters: [{name, client_id?, tls?, sasl?}]}`,
the principal allowed to write markers for each cluster. Validated through config's public
API, so its fields follow the same rules and messages as a cluster's."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.config import (
    ConfigError,
    load_settings,
    parse_client_entry,
    read_config_file,
    require_tls_for_sasl,
)
from exporter.settings import ClusterSettings, ExporterSettings, SaslSettings, TlsSettings

ADMIN_SECTION = "admin"


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The admin principal for one cluster: who may write markers (ALTER on the cluster).

    `tls` None means "use the cluster's tls"; `sasl` None means no SASL (PLAINTEXT, or a
    principal taken from the mTLS certificate)."""

    cluster: str
    client_id: str | None = None
    tls: TlsSettings | None = None
    sasl: SaslSettings | None = None


def parse_admin(
    raw: Any, clusters: Sequence[ClusterSettings], env: Mapping[str, str]
) -> dict[str, AdminSettings]:
    """`admin: {clusters: [...]}` -> AdminSettings by cluster name."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{ADMIN_SECTION}: expected a mapping with a 'clusters' list")
    unknown = set(raw) - {"clusters"}
    if unknown:
        raise ConfigError(f"{ADMIN_SECTION}: unknown key {sorted(unknown)[0]!r} (known: clusters)")
    entries = raw.get("clusters") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{ADMIN_SECTION}.clusters: expected a list")
    known = {c.name for c in clusters}
    result: dict[str, AdminSettings] = {}
    for index, entry in enumerate(entries):
        path = f"{ADMIN_SECTION}.clusters[{index}]"
        client = parse_client_entry(entry, path, env)
        if client.name not in known:
            raise ConfigError(
                f"{path}.name: no cluster named {client.name!r} in clusters "
                f"(configured: {', '.join(sorted(known))})"
            )
        if client.name in result:
            raise ConfigError(f"{path}.name: duplicate admin entry for {client.name!r}")
        cluster_tls = next(c.tls for c in clusters if c.name == client.name)
        require_tls_for_sasl(client.sasl, client.tls or cluster_tls, path)
        result[client.name] = AdminSettings(
            cluster=client.name, client_id=client.client_id, tls=client.tls, sasl=client.sasl
        )
    return result


def _admin_password_envs(raw: Any) -> set[str]:
    """Names of the admin passwords' variables: the daemon loader must not see them as typos."""
    names: set[str] = set()
    if isinstance(raw, dict) and isinstance(raw.get("clusters"), list):
        for entry in raw["clusters"]:
            sasl = entry.get("sasl") if isinstance(entry, dict) else None
            if isinstance(sasl, dict) and isinstance(sasl.get("password_env"), str):
                names.add(sasl["password_env"])
    return names


def load_admin_settings(
    config_file: str | None, env: Mapping[str, str] | None = None
) -> tuple[ExporterSettings, dict[str, AdminSettings]]:
    """The exporter's settings plus the `admin` section, or raise ConfigError."""
    env = dict(os.environ) if env is None else dict(env)
    if config_file is None and env.get("KTE_CONFIG"):
        config_file = env["KTE_CONFIG"]
    if not config_file:
        raise ConfigError(
            "--config: required (the abort command reads its credentials from the config "
            "file's 'admin' section)"
        )
    # Read once (a pipe such as /dev/stdin can be read only once), within the file deadline.
    data = read_config_file(config_file, allow_pipe=True)
    raw_admin = data.get(ADMIN_SECTION)
    base_env = {k: v for k, v in env.items() if k not in _admin_password_envs(raw_admin)}
    settings = load_settings(config_file, env=base_env, file_data=data)
    return settings, parse_admin(raw_admin, settings.clusters, env)


def admin_cluster_settings(cluster: ClusterSettings, admin: AdminSettings) -> ClusterSettings:
    """The cluster's settings with the admin principal's client id, TLS and SASL."""
    return dataclasses.replace(
        cluster,
        client_id=admin.client_id or f"{cluster.client_id}-admin",
        tls=admin.tls if admin.tls is not None else cluster.tls,
        sasl=admin.sasl,
    )
