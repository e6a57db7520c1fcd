"""Parse the Prometheus exporter-toolkit web config file into a `WebConfigSettings` record.

The same file node_exporter & co take with --web.config.file. Parsed once, at configuration
time, by this module alone; `exporter.expose.http` builds the TLS context and the basic-auth
check from the record. Implemented: tls_server_config (cert_file, key_file, client_auth_type,
client_ca_file, min_version, max_version, and `key_password_file`, an extension for encrypted
keys), http_server_config.headers (http2 is accepted and moot) and basic_auth_users (user ->
bcrypt hash). Any other key is rejected, never ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from exporter.errors import ConfigError, bounded_repr, describe
from exporter.settings import WebConfigSettings, WebTlsSettings
from exporter.yamlfile import read_password_file, read_yaml_file

PREFIX = "web.web_config_file"
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
TLS_KEYS = ("cert_file", "key_file", "key_password_file", "client_auth_type", "client_ca_file",
            "min_version", "max_version")
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP header name (RFC 9110 token)."""
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "content-type",
                              "www-authenticate"})
"""Set by the server itself; a second copy would corrupt or contradict the response."""
_BCRYPT_HASH_RE = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def _resolve(base: Path, name: Any, where: str) -> str:
    if not isinstance(name, str) or not name or "\0" in name:
        raise ConfigError(f"{where}: expected a file name, got {describe(name)}")
    path = Path(name) if Path(name).is_absolute() else base / name  # relative to the file
    if not path.is_file():
        raise ConfigError(f"{where}: file not found: {str(path)!r}")
    return str(path)


def _read_key_password(base: Path, name: Any, where: str) -> str:
    """The passphrase file; errors never show its name (it may be a misplaced passphrase)."""
    hidden = "(the value is not shown in case it is a secret)"
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        raise ConfigError(f"{where}: expected a file name {hidden}")
    path = Path(name) if Path(name).is_absolute() else base / name
    if not path.is_file():
        raise ConfigError(f"{where}: the file it names does not exist {hidden}")
    try:
        return read_password_file(str(path), where)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(repr(str(path)), "the file")) from None


def parse_headers(raw: Any, where: str) -> dict[str, str]:
    """Response headers: valid names, no CR/LF/NUL in values (no response splitting)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of header name to string value")
    headers: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _TOKEN_RE.fullmatch(name):
            raise ConfigError(f"{where}: invalid header name {describe(name)}")
        if name.lower() in _FRAMING_HEADERS:
            raise ConfigError(f"{where}.{name}: set by the server itself, cannot be configured")
        if not isinstance(value, str):
            raise ConfigError(f"{where}.{name}: expected a string, got {describe(value)}")
        if any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F for ch in value):
            raise ConfigError(f"{where}.{name}: control characters (CR, LF, NUL...) are not "
                              "allowed in a header value")
        headers[name] = value
    return headers


def parse_basic_auth_users(raw: Any, where: str) -> dict[str, bytes]:
    """`{user: bcrypt hash}`; errors name the user, never echo the hash."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of user name to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(f"{where}: invalid user name {bounded_repr(user)} (a non-empty "
                              "string without ':')")
        if not isinstance(hashed, str) or not _BCRYPT_HASH_RE.fullmatch(hashed):
            raise ConfigError(f"{where}.{user}: expected a bcrypt hash ($2a$, $2b$ or $2y$, "
                              "60 characters, e.g. from `htpasswd -nBC 10 USER`)")
        users[user] = hashed.encode("ascii")
    return users


def _parse_tls(raw: Any, base: Path, where: str) -> WebTlsSettings:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    for key in raw:
        if key not in TLS_KEYS:
            raise ConfigError(f"{where}: unsupported key {describe(key)} (supported: "
                              f"{', '.join(TLS_KEYS)})")
    if "cert_file" not in raw or "key_file" not in raw:
        raise ConfigError(f"{where}: cert_file and key_file are required")
    versions: dict[str, str | None] = {}
    for name in ("min_version", "max_version"):
        value = raw.get(name)
        if value is not None and value not in TLS_VERSIONS:
            raise ConfigError(f"{where}.{name}: expected one of {', '.join(TLS_VERSIONS)}, "
                              f"got {describe(value)}")
        versions[name] = value
    min_version = versions["min_version"] or "TLS12"
    max_version = versions["max_version"]
    if max_version is not None and TLS_VERSIONS.index(max_version) < TLS_VERSIONS.index(
        min_version
    ):
        raise ConfigError(f"{where}.max_version: {max_version} is below min_version "
                          f"{min_version}: no handshake could succeed")
    auth = raw.get("client_auth_type", "NoClientCert")
    if auth in _UNSUPPORTED_CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: {auth} (a client certificate without "
                          "verification) is not supported; use RequireAndVerifyClientCert")
    if auth not in CLIENT_AUTH_TYPES:
        raise ConfigError(f"{where}.client_auth_type: expected one of "
                          f"{', '.join(CLIENT_AUTH_TYPES)}, got {describe(auth)}")
    client_ca = None
    if auth != "NoClientCert":
        if "client_ca_file" not in raw:
            raise ConfigError(f"{where}.client_ca_file: required with client_auth_type {auth}")
        client_ca = _resolve(base, raw["client_ca_file"], f"{where}.client_ca_file")
    key_password = None
    if raw.get("key_password_file") is not None:
        key_password = _read_key_password(base, raw["key_password_file"],
                                          f"{where}.key_password_file")
    return WebTlsSettings(
        cert_file=_resolve(base, raw["cert_file"], f"{where}.cert_file"),
        key_file=_resolve(base, raw["key_file"], f"{where}.key_file"),
        key_password=key_password,
        client_auth_type=auth,
        client_ca_file=client_ca,
        min_version=min_version,
        max_version=max_version,
    )


def parse_web_config_file(path: str) -> WebConfigSettings:
    """Parse and check a web config file; ConfigError names the key, never a secret."""
    data = read_yaml_file(path, PREFIX) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{PREFIX}: expected a mapping in {path!r}")
    for key in data:
        if key not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise ConfigError(f"{PREFIX}: unknown key {describe(key)}")
    users = parse_basic_auth_users(data.get("basic_auth_users"), f"{PREFIX}: basic_auth_users")
    headers: dict[str, str] = {}
    http_cfg = data.get("http_server_config") or {}
    if not isinstance(http_cfg, dict):
        raise ConfigError(f"{PREFIX}: http_server_config: expected a mapping")
    for key, value in http_cfg.items():
        if key == "headers":
            headers = parse_headers(value, f"{PREFIX}: http_server_config.headers")
        elif key != "http2":  # HTTP/2 is not offered by this server; the flag is moot
            raise ConfigError(f"{PREFIX}: http_server_config: unknown key {describe(key)}")
    tls_cfg = data.get("tls_server_config")
    tls = None
    if tls_cfg is not None:
        tls = _parse_tls(tls_cfg, Path(path).parent, f"{PREFIX}: tls_server_config")
    return WebConfigSettings(tls=tls, headers=headers, basic_auth_users=users)
