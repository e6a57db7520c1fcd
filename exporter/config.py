"""Load and validate the exporter's configuration into `settings.ExporterSettings`.

Sources, lowest to highest precedence: built-in defaults, ONE YAML file, environment variables
(`KTE_*`), command-line flags. Everything is checked at start-up so a typo stops the exporter
with a message naming the field (`clusters[0].poll_interval_seconds: expected ...`) instead of
surfacing as a wrong metric hours later.

Environment scheme (documented in README and `--help`):

- `KTE_CONFIG` - path of the YAML file (same as `--config`).
- `KTE_WEB_LISTEN_ADDRESS`, `KTE_WEB_PORT`, `KTE_WEB_TELEMETRY_PATH`, `KTE_WEB_CONFIG_FILE`,
  `KTE_LOG_FORMAT`, `KTE_LOG_LEVEL` - the web listener and logging.
- `KTE_CLUSTER_<FIELD>` - a field of the single cluster, e.g. `KTE_CLUSTER_BOOTSTRAP_SERVERS`,
  `KTE_CLUSTER_POLL_INTERVAL_SECONDS`, `KTE_CLUSTER_TLS_CA_FILE`,
  `KTE_CLUSTER_SASL_PASSWORD_FILE`, `KTE_CLUSTER_LABELS=env=prod,dc=eu1`. They define the cluster
  when the file has none, override it when the file has exactly one, and are an error when the
  file has several (which cluster would they mean?).

An unknown `KTE_*` variable is an error (a typo must not be silently ignored); the one exception
is a variable named by a `password_env`, which may use any name.
"""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.applications import PatternError, compile_pattern
from exporter.errors import ConfigError as ConfigError  # re-exported: the config layer's error
from exporter.errors import describe
from exporter.metrics import RESERVED_LABELS
from exporter.settings import (
    AwsMskIamSettings,
    ClusterSettings,
    ExporterSettings,
    GssapiSettings,
    HistorySettings,
    OAuthBearerSettings,
    SaslSettings,
    TlsSettings,
    WebSettings,
)

ENV_PREFIX = "KTE_"
CLUSTER_ENV_PREFIX = "KTE_CLUSTER_"

LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM",
                   "GSSAPI")

_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_CLUSTER_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


# --------------------------------------------------------------------------- value parsers
# Each parser takes (value, path) and returns the typed value or raises ConfigError. Values
# from the YAML file arrive typed; values from env/flags arrive as strings, so every parser
# also accepts a string spelling of its type.

Parser = Callable[[Any, str], Any]


_describe = describe


def parse_duration_seconds(value: Any, path: str) -> float:
    """Seconds as a number, or a string like '30', '30s', '500ms', '5m', '1h'."""
    if isinstance(value, bool):
        raise ConfigError(f"{path}: expected a number of seconds or a duration like '30s', "
                          f"got {_describe(value)}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION_RE.match(value)):
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    else:
        raise ConfigError(
            f"{path}: expected a number of seconds or a duration like '30s'/'5m', "
            f"got {_describe(value)}"
        )
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ConfigError(f"{path}: expected a finite duration, got {_describe(value)}")
    return seconds


DAY_SECONDS = 86_400.0


def _bounded_duration(low: float, high: float) -> Parser:
    def parse(value: Any, path: str) -> float:
        seconds = parse_duration_seconds(value, path)
        if not low <= seconds <= high:
            raise ConfigError(f"{path}: must be between {low:g} and {high:g} seconds, "
                              f"got {_describe(value)}")
        return seconds

    return parse


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{path}: expected an integer, got {_describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ConfigError(f"{path}: expected an integer, got {_describe(value)}")


def _positive_int(value: Any, path: str) -> int:
    number = _int(value, path)
    if number <= 0:
        raise ConfigError(f"{path}: must be greater than 0, got {number}")
    return number


def parse_port(value: Any, path: str) -> int:
    number = _int(value, path)
    if not 0 <= number <= 65535:
        raise ConfigError(f"{path}: expected a TCP port 0-65535, got {number}")
    return number


def _bounded_int(low: int, high: int) -> Parser:
    def parse(value: Any, path: str) -> int:
        number = _int(value, path)
        if not low <= number <= high:
            raise ConfigError(f"{path}: must be between {low} and {high}, got {number}")
        return number

    return parse


def _optional_bounded_int(low: int, high: int) -> Parser:
    parse = _bounded_int(low, high)
    return lambda value, path: None if value is None else parse(value, path)


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{path}: expected a string, got {_describe(value)}")
    if not value.strip():
        raise ConfigError(f"{path}: must not be empty")
    if "\0" in value:
        raise ConfigError(f"{path}: must not contain a NUL character")
    return value


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def _env_var_name(value: Any, path: str) -> str | None:
    """The NAME of a variable holding a secret; never echoed (it may be a misplaced secret)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _ENV_NAME_RE.fullmatch(value):
        raise ConfigError(f"{path}: expected the name of an environment variable (letters, "
                          "digits and _; the value is not shown in case it is a secret)")
    return value


def _secret_file_name(value: Any, path: str) -> str | None:
    """The path of a file holding a secret; never echoed (it may be a misplaced secret)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"{path}: expected a file name (the value is not shown in case it "
                          "is a secret)")
    return value


def _read_secret_file(name: str, path: str) -> str:
    """A password/passphrase file; errors say neither its name nor any of its bytes."""
    if not Path(name).is_file():
        raise ConfigError(f"{path}: the file it names does not exist or is not a regular file "
                          "(the name is not shown in case it is a secret)")
    from exporter.yamlfile import read_password_file  # PyYAML: only when a file is named

    try:
        return read_password_file(name, path)
    except ConfigError as exc:
        # read_password_file names the file; say only what went wrong.
        reason = str(exc).removeprefix(f"{path}: ").replace(repr(name), "the file")
        raise ConfigError(f"{path}: {reason}") from None


def _optional_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _existing_file(value: Any, path: str) -> str | None:
    if value is None:
        return None
    name = _str(value, path)
    if not Path(name).is_file():
        if Path(name).exists():  # a FIFO, a device, a directory: never waited on
            raise ConfigError(f"{path}: {name!r} is not a regular file")
        raise ConfigError(f"{path}: file not found: {name!r}")
    return name


def parse_listen_address(value: Any, path: str) -> tuple[str, int | None]:
    """`ADDRESS` or exporter-toolkit's `[host]:port`: `:9981`, `0.0.0.0:9981`, `[::1]:9981`.

    A bare IPv6 address (`::`, `::1`) keeps meaning an address; an empty host means every
    IPv4 interface (0.0.0.0), the default address.
    """
    text = _str(value, path).strip()
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in text):
        raise ConfigError(f"{path}: must not contain spaces or control characters")
    port_text: str | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ConfigError(f"{path}: expected [host]:port, got {_describe(value)}")
        port_text = rest[1:] if rest else None
        if rest and not port_text:
            raise ConfigError(f"{path}: expected a port after ':', got {_describe(value)}")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if not port_text:
            raise ConfigError(f"{path}: expected a port after ':', got {_describe(value)}")
    else:
        host = text
    host = host or "0.0.0.0"
    port = parse_port(port_text, path) if port_text is not None else None
    return host, port


RESERVED_PATHS = ("/", "/healthz", "/readyz")


def _telemetry_path(value: Any, path: str) -> str:
    text = _str(value, path).strip()
    if not text.startswith("/") or len(text) > 200 or any(
        ord(ch) < 0x21 or ord(ch) == 0x7F or ch in "?#" for ch in text
    ):
        raise ConfigError(f"{path}: expected a URL path like /metrics (no spaces, query or "
                          f"fragment), got {_describe(value)}")
    if text in RESERVED_PATHS:
        raise ConfigError(f"{path}: {text} is served by the exporter itself "
                          f"({', '.join(RESERVED_PATHS)})")
    return text


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
    raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")


def _cluster_name(value: Any, path: str) -> str:
    name = _str(value, path)
    if not _CLUSTER_NAME_RE.match(name):
        raise ConfigError(
            f"{path}: expected letters, digits and _.:- only (it becomes the 'cluster' label), "
            f"got {name!r}"
        )
    return name


MAX_HOST_NAME_CHARS = 253
"""The longest DNS name (RFC 1035: 255 octets on the wire, 253 characters written)."""


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _bootstrap_servers(value: Any, path: str) -> tuple[str, ...]:
    """A list of host:port, or one comma-separated string (the env/flag form)."""
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ConfigError(
            f"{path}: expected a list of host:port strings, got {_describe(value)}"
        )
    if not items:
        raise ConfigError(f"{path}: at least one bootstrap server is required")
    servers: list[str] = []
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]" if isinstance(value, list) else path
        server = _str(item, item_path).strip()
        host, sep, port = server.rpartition(":")
        if len(host.strip("[]")) > MAX_HOST_NAME_CHARS:
            # Longer than any DNS name; it would be repeated in every log line.
            raise ConfigError(
                f"{item_path}: host name longer than {MAX_HOST_NAME_CHARS} characters "
                f"(got {len(host)})"
            )
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"{item_path}: expected host:port, got {_clip(server)}")
        servers.append(server)
    return tuple(servers)


MAX_CLIENT_ID_BYTES = 2**15 - 1
"""Kafka's request header carries client_id as a nullable string with an int16 length: at most
32,767 bytes of UTF-8. The protocol's own bound, not a stricter one: any id a broker accepts
is accepted; a longer one cannot be encoded, and every request (so every poll) would fail."""


def _client_id(value: Any, path: str) -> str:
    text = _str(value, path)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CLIENT_ID_BYTES:
        raise ConfigError(f"{path}: at most {MAX_CLIENT_ID_BYTES} bytes in UTF-8 (Kafka's "
                          f"request header gives it an int16 length), got {size}")
    return text


MAX_APPLICATION_PATTERNS = 100


def _application_patterns(value: Any, path: str) -> tuple[str, ...]:
    """A list of regexes, each with a named group `application`; a string (the env/flag form)
    holds one pattern per line."""
    if isinstance(value, str):
        items: list[Any] = [line.strip() for line in value.splitlines() if line.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ConfigError(f"{path}: expected a list of regular expressions, "
                          f"got {_describe(value)}")
    if len(items) > MAX_APPLICATION_PATTERNS:
        raise ConfigError(f"{path}: at most {MAX_APPLICATION_PATTERNS} patterns, "
                          f"got {len(items)}")
    patterns: list[str] = []
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]"
        pattern = _str(item, item_path)
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise ConfigError(f"{item_path}: {exc}, got {_clip(pattern)}") from None
        patterns.append(pattern)
    return tuple(patterns)


def _pairs(value: Any, path: str) -> Any:
    """'name=value,name=value' (the env/flag form of a mapping) as a dict; anything else as
    it is, for the caller to check."""
    if not isinstance(value, str):
        return value
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise ConfigError(f"{path}: expected name=value pairs, got {_clip(part)}")
        pairs[key.strip()] = val.strip()
    return pairs


def _labels(value: Any, path: str) -> dict[str, str]:
    """A mapping of static labels, or 'k=v,k2=v2' (the env/flag form)."""
    value = _pairs(value, path)
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping of label name to value, "
                          f"got {_describe(value)}")
    labels: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _LABEL_NAME_RE.match(key) or key.startswith("__"):
            raise ConfigError(f"{path}: invalid Prometheus label name {key!r}")
        if key in RESERVED_LABELS:
            raise ConfigError(f"{path}.{key}: label name is used by the exporter's own metrics")
        if isinstance(val, bool) or not isinstance(val, str | int | float):
            raise ConfigError(f"{path}.{key}: expected a string, got {_describe(val)}")
        labels[key] = str(val)
    return labels


def _choice(choices: tuple[str, ...], *, upper: bool = False) -> Parser:
    def parse(value: Any, path: str) -> str:
        text = _str(value, path).strip()
        text = text.upper() if upper else text.lower()
        if text not in choices:
            raise ConfigError(f"{path}: expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


# --------------------------------------------------------------------------- schema

_AWS_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
_ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_ROLE_SESSION_NAME_RE = re.compile(r"^[\w+=,.@-]{2,64}$")


def _pattern(regex: re.Pattern[str], expected: str) -> Parser:
    def parse(value: Any, path: str) -> str:
        text = _str(value, path).strip()
        if not regex.match(text):
            raise ConfigError(f"{path}: expected {expected}, got {_clip(text)}")
        return text

    return parse


_EXTENSION_KEY_RE = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE_RE = re.compile(r"[\x21-\x7E \t\r\n]+")


def _sasl_extensions(value: Any, path: str) -> dict[str, str]:
    """KIP-342 SASL extensions: keys of letters only, other than `auth` (RFC 7628's key for
    the token itself); values of printable ASCII (Kafka refuses anything else). The env form
    is 'name=value,name=value'."""
    value = _pairs(value, path)
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping of extension name to value, "
                          f"got {_describe(value)}")
    extensions: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _EXTENSION_KEY_RE.fullmatch(key) or key == "auth":
            raise ConfigError(f"{path}: invalid SASL extension name {_clip(str(key))} "
                              "(letters only, not 'auth')")
        if isinstance(val, bool) or not isinstance(val, str | int):
            raise ConfigError(f"{path}.{key}: expected a string, got {_describe(val)}")
        text = str(val)
        if not _EXTENSION_VALUE_RE.fullmatch(text):
            raise ConfigError(f"{path}.{key}: must be printable ASCII and not empty")
        extensions[key] = text
    return extensions


def _https_url(value: Any, path: str) -> str:
    """A token endpoint: https only (a client secret is never sent in clear text)."""
    text = _str(value, path).strip()
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or 0 < parts.port <= 65535
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme.lower() != "https" or not parts.hostname or not port_ok:
        raise ConfigError(f"{path}: expected an https:// URL, got {_clip(text)}")
    if parts.username or parts.password:
        raise ConfigError(f"{path}: must not carry credentials (use client_id and "
                          "client_secret_file or client_secret_env)")
    return text


def _oauthbearer_section(value: Any, path: str) -> dict[str, Any]:
    if isinstance(value, dict) and "client_secret" in value:
        raise ConfigError(f"{path}.client_secret: inline secrets are not allowed; "
                          "use client_secret_file or client_secret_env")
    return _parse_section(value, _OAUTHBEARER_FIELDS, path)


_KERBEROS_NAME_RE = re.compile(r"[^\s@/]+(/[^\s@/]+)*(@[^\s@/]+)?")


def _kerberos_principal(value: Any, path: str) -> str:
    text = _str(value, path).strip()
    if not _KERBEROS_NAME_RE.fullmatch(text):
        raise ConfigError(f"{path}: expected a Kerberos principal like name@REALM or "
                          f"name/host@REALM, got {_clip(text)}")
    return text


def _kerberos_service_name(value: Any, path: str) -> str:
    text = _str(value, path).strip()
    if not re.fullmatch(r"[^\s@/]+", text):
        raise ConfigError(f"{path}: expected the first part of the brokers' principal (like "
                          f"kafka, without / or @), got {_clip(text)}")
    return text


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key, declared once. The settings record (`exporter.settings`) holds
    its name, type and default; this says how it is read (the file, a `KTE_*` variable, a
    flag), what bounds it has and what the README's configuration tables say of it
    (tests/test_config_readme_tables.py renders those rows from these declarations)."""

    key: str
    """Dotted path inside its section: `poll_interval_seconds`, `tls.ca_file`."""
    parse: Parser
    """(value, where) -> the typed value, or ConfigError naming `where` (the file path, the
    variable or the flag): every source is checked by the same function."""
    help: str
    """The README's Meaning cell; `{bounds}` stands for the bounds, `{choices}` the choices."""
    env: str | None = None
    """The environment variable (filled in by `_declare` from the section's prefix)."""
    flag: str | None = None
    """The command-line flag; its `Overrides` attribute is the flag's name in snake case."""
    bounds: tuple[float, float] | None = None
    """Inclusive bounds (`parse` enforces them; documented from here)."""
    unit: str = ""
    choices: tuple[str, ...] = ()
    default: str | None = None
    """The README's Default cell when it is words (required, system CAs); None: the record's
    default value, rendered."""
    env_doc: str = "`{env}`"
    """How the README's Env cell shows the variable (an example value, a note)."""

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.key.split("."))

    @property
    def override(self) -> str | None:
        """The `Overrides` attribute holding the flag's value."""
        return None if self.flag is None else re.sub(r"[.-]", "_", self.flag.lstrip("-"))

    def bounds_text(self) -> str:
        if self.bounds is None:
            return ""
        low, high = self.bounds
        unit = f" {self.unit}" if self.unit else ""
        return f"{_number_text(self.key, low)} to {_number_text(self.key, high)}{unit}"

    def meaning(self) -> str:
        choices = [f"`{choice}`" for choice in self.choices]
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else ""
        return self.help.replace("{bounds}", self.bounds_text()).replace("{choices}", listed)


MIB = 1024 * 1024


def _number_text(key: str, number: float) -> str:
    """A bound as the README writes it: sizes in bytes also in MiB."""
    return (f"{number:g}" if isinstance(number, float) else str(number)) + size_note(key, number)


def size_note(key: str, number: Any) -> str:
    """` (100 MiB)` after a whole number of MiB given in bytes (a `_bytes` key), else ''."""
    if not key.endswith("_bytes") or isinstance(number, bool) or not isinstance(number, int):
        return ""
    return f" ({number // MIB} MiB)" if number >= MIB and number % MIB == 0 else ""


def _duration(key: str, low: float, high: float, help: str, **more: Any) -> Setting:
    return Setting(key, _bounded_duration(low, high), help, bounds=(low, high), unit="s", **more)


def _integer(key: str, low: int, high: int, help: str, *, optional: bool = False,
             **more: Any) -> Setting:
    parse = (_optional_bounded_int if optional else _bounded_int)(low, high)
    return Setting(key, parse, help, bounds=(low, high), **more)


def _one_of(key: str, choices: tuple[str, ...], help: str, *, upper: bool = False,
            **more: Any) -> Setting:
    return Setting(key, _choice(choices, upper=upper), help, choices=choices, **more)


def _declare(env_prefix: str | None, *settings: Setting,
             file_only: tuple[str, ...] = ()) -> tuple[Setting, ...]:
    """Fill in each setting's environment variable: the prefix and its path in capitals
    (`tls.ca_file` -> `KTE_CLUSTER_TLS_CA_FILE`), unless it names its own or lies under a
    section in `file_only` (a mechanism's mapping given in the file only)."""
    declared = []
    for setting in settings:
        env = setting.env
        if env is None and env_prefix is not None and not setting.key.startswith(file_only):
            env = env_prefix + "_".join(setting.path).upper()
        declared.append(dataclasses.replace(setting, env=env))
    return tuple(declared)


CLUSTER_SETTINGS: tuple[Setting, ...] = _declare(
    CLUSTER_ENV_PREFIX,
    Setting("name", _cluster_name,
            "The `cluster` label. Letters, digits, `_.:-`. Unique.",
            flag="--cluster-name", default="required (`default` from env/flags)"),
    Setting("bootstrap_servers", _bootstrap_servers,
            "List of `host:port` (env/flag: comma-separated).",
            flag="--bootstrap-servers", default="required"),
    Setting("client_id", _client_id,
            "Kafka client id (shows in broker request logs and quotas). At most 32,767 bytes "
            "of UTF-8: the request header gives it an int16 length, so a longer one could "
            "never be sent."),
    _duration("poll_interval_seconds", 0.5, DAY_SECONDS,
              "Time between poll starts, {bounds}. The first poll starts at once; later ones "
              "at a phase within the interval fixed by a hash of the cluster name, so clusters "
              "do not all poll at the same instant. A poll that runs longer is never "
              "overlapped; missed runs coalesce."),
    _duration("request_timeout_seconds", 0.1, 600.0, "Per-request timeout, {bounds}."),
    _integer("describe_producers_batch_size", 1, 100_000,
             "Partitions per DescribeProducers request (as `kafka-transactions.sh`), {bounds}."),
    _duration("late_buffer_seconds", 0.0, 7 * DAY_SECONDS,
              "Added to `transaction.max.timeout.ms` to decide \"late\" (the broker uses "
              "5 min), {bounds}."),
    _duration("min_reported_duration_seconds", 0.0, 7 * DAY_SECONDS,
              "Partitions whose oldest open transaction is younger get no "
              "`kafka_partition_max_active_transaction_duration_seconds` series (keeps "
              "cardinality low), {bounds}."),
    _duration("two_phase_late_seconds", 1.0, 7 * DAY_SECONDS,
              "Age past which a two-phase-commit (KIP-939) transaction is stuck "
              "(`stuck=\"true\"`, alert `KafkaTwoPhaseTransactionStuck`), {bounds}. Kafka never "
              "times such a transaction out; one hour is far beyond a normal external commit "
              "(a Flink checkpoint) and still the same hour for its read_committed consumers "
              "([why](docs/kafka-semantics.md#two-phase-commit))."),
    _duration("blocked_groups_min_age_seconds", 1.0, 7 * DAY_SECONDS,
              "Open transactions at least this old get their blocked consumer groups read even "
              "when neither late nor orphaned (a lingering Flink transaction; see [Blocked "
              "consumer groups](#blocked-consumer-groups)), {bounds}. The default is four polls "
              "at the default interval: transactions that end within a poll or two cost "
              "nothing, a lingering one is seen within minutes. Raise it with "
              "`poll_interval_seconds`."),
    Setting("application_patterns", _application_patterns,
            "Regular expressions (Python syntax) with a named group `application`, tried in "
            "order on each reported transactional id before the built-in Kafka Streams and "
            "Flink shapes ([Who owns a transaction](#who-owns-a-transaction)); at most "
            f"{MAX_APPLICATION_PATTERNS}. A pattern that does not compile or lacks the group is "
            "a configuration error (exit 2, naming `clusters[N].application_patterns[M]`).",
            env_doc="`{env}` (one pattern per line)"),
    _integer("max_applications", 1, 10_000,
             "Distinct `application` label values per cluster and poll, {bounds}; beyond it "
             "`_overflow` (counted in `kafka_txn_exporter_applications_overflowed`)."),
    _integer("transaction_max_timeout_ms", 1, 2**31 - 1,
             "Override the brokers' `transaction.max.timeout.ms`, {bounds}. DescribeConfigs "
             "then asks only for `transaction.partition.verification.enable`; a refusal "
             "(`CLUSTER_AUTHORIZATION_FAILED`) is asked again every `config_refresh_seconds`, "
             "not every poll.", optional=True),
    _duration("config_refresh_seconds", 1.0, 7 * DAY_SECONDS,
              "How often broker configs, finalized features (ApiVersions) and the cleanup "
              "policy of topics with late transactions are re-read, {bounds}."),
    _duration("metadata_max_age_seconds", 0.0, 3600.0,
              "Longest a poll reuses the previous poll's Metadata answer, {bounds}. Metadata "
              "is asked again at once when the poll before saw anything that says it changed "
              "(a leader moved, an unknown topic or partition, a broker that failed, a moved "
              "coordinator, a partition without a leader, a replica's broker missing from "
              "Metadata); only new topics and partitions "
              "wait for this age. The default is the Java client's `metadata.max.age.ms`; "
              "a transaction's age is read from its first batch, so one on a new topic is "
              "late on time once seen. 0: Metadata every poll "
              "([why](docs/kafka-semantics.md#metadata-between-polls))."),
    _integer("max_response_bytes", MIB, 512 * MIB,
             "Largest response frame accepted from a broker, {bounds}. A larger frame fails "
             "that broker's connection (`DECODE_ERROR`) as soon as its 4-byte length is read, "
             "before anything is buffered. A Metadata answer for a million partitions is about "
             "60 MiB."),
    Setting("labels", _labels,
            "Static labels added to every series of this cluster. Names used by the exporter "
            "(`cluster`, `topic`, `broker`, …) are rejected.",
            env_doc="`{env}=env=prod,dc=eu1`"),
    Setting("tls.ca_file", _existing_file,
            "CA bundle (PEM). Giving a `tls` section enables TLS.", default="system CAs"),
    Setting("tls.cert_file", _existing_file,
            "Client certificate (PEM) for mutual TLS, with `key_file` (both or neither)."),
    Setting("tls.key_file", _existing_file,
            "Private key (PEM) of `cert_file` for mutual TLS (both or neither)."),
    Setting("tls.key_password_file", _secret_file_name,
            "File holding the passphrase of an encrypted `key_file` (UTF-8, trailing newline "
            "stripped). The exporter never prompts for a passphrase: an encrypted key without "
            "it, or with a wrong one, stops start-up with exit 2 naming the field.",
            default="unset"),
    Setting("tls.check_hostname", _bool, "Verify the broker's hostname."),
    _one_of("sasl.mechanism", SASL_MECHANISMS,
            "{choices} (see [Authentication](#authentication) and [Kerberos](#kerberos)).",
            upper=True, default="required with `sasl`"),
    Setting("sasl.username", _str, "SASL user.",
            default="required with `sasl` (PLAIN, SCRAM)"),
    Setting("sasl.password_file", _secret_file_name,
            "File holding the password (UTF-8, one line, trailing newline stripped).",
            default="—"),
    Setting("sasl.password_env", _env_var_name,
            "Name of the environment variable holding the password. Exactly one of "
            "`password_file`/`password_env`.", default="—"),
    Setting("sasl.oauthbearer.token_endpoint_url", _https_url,
            "The OIDC provider's token endpoint, `https://` only (Kafka's "
            "`sasl.oauthbearer.token.endpoint.url`).",
            default="required with `OAUTHBEARER` (or `token_file`)"),
    Setting("sasl.oauthbearer.client_id", _str,
            "OAuth client id (client-credentials grant).",
            default="required with `token_endpoint_url`"),
    Setting("sasl.oauthbearer.client_secret_file", _secret_file_name,
            "File holding the client secret (one line, trailing newline stripped). Never "
            "inline (`client_secret` is rejected).",
            default="exactly one of it and `client_secret_env` with `token_endpoint_url`"),
    Setting("sasl.oauthbearer.client_secret_env", _env_var_name,
            "Name of the environment variable holding the client secret.",
            default="exactly one of it and `client_secret_file` with `token_endpoint_url`"),
    Setting("sasl.oauthbearer.scope", _str,
            "`scope` of the token request (space-separated scopes)."),
    Setting("sasl.oauthbearer.extensions", _sasl_extensions,
            "SASL extensions sent with the token (KIP-342), e.g. Confluent Cloud's "
            "`logicalCluster` and `identityPoolId`. Names of letters only (not `auth`), "
            "printable ASCII values.",
            env_doc="`{env}=logicalCluster=lkc-1,identityPoolId=pool-2`"),
    Setting("sasl.oauthbearer.ca_file", _existing_file,
            "CA bundle (PEM) for the token endpoint's certificate (its hostname is always "
            "checked).", default="system CAs"),
    Setting("sasl.oauthbearer.token_file", _existing_file,
            "Instead of a token endpoint: a file holding the token, which a platform mounts "
            "and renews; read again whenever it changes."),
    Setting("sasl.aws_msk_iam.region", _pattern(_AWS_REGION_RE, "an AWS region like eu-west-1"),
            "`AWS_MSK_IAM`: the cluster's AWS region (required if neither variable is set).",
            default="the variable `AWS_REGION`, else `AWS_DEFAULT_REGION`"),
    Setting("sasl.aws_msk_iam.profile", _str,
            "`AWS_MSK_IAM`: a profile of the shared AWS config/credentials files.",
            default="unset (the default chain)"),
    Setting("sasl.aws_msk_iam.role_arn",
            _pattern(_ROLE_ARN_RE, "an IAM role ARN like arn:aws:iam::123456789012:role/NAME"),
            "`AWS_MSK_IAM`: an IAM role to assume (STS AssumeRole) with the chain's "
            "credentials; refreshed before it expires."),
    Setting("sasl.aws_msk_iam.role_session_name",
            _pattern(_ROLE_SESSION_NAME_RE, "2 to 64 letters, digits or +=,.@_-"),
            "`AWS_MSK_IAM`: session name of the assumed role (needs `role_arn`).",
            default="with `role_arn`: `kafka-txn-exporter`"),
    Setting("sasl.gssapi.principal", _kerberos_principal,
            "The exporter's principal, `name@REALM` (a `name/host@REALM` too).",
            default="required with `keytab_file`"),
    Setting("sasl.gssapi.keytab_file", _existing_file,
            "Keytab holding the principal's key. Tickets are obtained from it and **renewed by "
            "the Kerberos library itself** (once half of a ticket's life has passed, and "
            "whenever one has expired): no `kinit` loop or sidecar. They live in a private "
            "in-memory credential cache per cluster unless `ccache` names one."),
    Setting("sasl.gssapi.ccache", _str,
            "A credential cache (`FILE:/tmp/krb5cc_exporter`, `DIR:...`, `KEYRING:...`). "
            "Without `keytab_file` the exporter only reads it: whoever fills it (`kinit`, a "
            "sidecar) must keep it fresh. With neither key, the process's default cache "
            "(`KRB5CCNAME`)."),
    Setting("sasl.gssapi.service_name", _kerberos_service_name,
            "The first part of the brokers' principal: the exporter asks for a ticket to "
            "`<service_name>/<broker host>@REALM`, the host exactly as the broker advertises "
            "it ([details](docs/kafka-semantics.md#kerberos-gssapi))."),
    Setting("sasl.gssapi.krb5_conf_file", _existing_file,
            "krb5.conf with the realm's KDCs. One per process: every cluster must name the "
            "same file (list every realm in it).",
            default="the system's (`/etc/krb5.conf`, `KRB5_CONFIG`)"),
    file_only=("sasl.gssapi.",),
)
"""Every key of a `clusters[]` entry, in the README's order. `KTE_CLUSTER_*` set the single
cluster's; Kerberos (`sasl.gssapi`) is a mapping given in the file only."""

WEB_SETTINGS: tuple[Setting, ...] = _declare(
    "KTE_WEB_",
    Setting("listen_address", parse_listen_address,
            "Address to bind (`::` for IPv6), or exporter-toolkit's `[host]:port`: `:9981` "
            "(every IPv4 interface), `0.0.0.0:9981`, `[::1]:9981`. A port given this way is the "
            "port; the same source giving a different `port` is an error.",
            flag="--web.listen-address"),
    Setting("port", parse_port, "Port for `/metrics`, `/healthz`, `/readyz`.",
            flag="--web.port"),
    Setting("telemetry_path", _telemetry_path,
            "Path of the metrics (not `/`, `/healthz`, `/readyz`).",
            flag="--web.telemetry-path"),
    Setting("web_config_file", _existing_file,
            "[exporter-toolkit web config](https://github.com/prometheus/exporter-toolkit/blob/"
            "master/docs/web-configuration.md) file, parsed once at start-up. Supported: "
            "`tls_server_config` (`cert_file`, `key_file`, `client_auth_type` = "
            "`NoClientCert` / `VerifyClientCertIfGiven` / `RequireAndVerifyClientCert`, "
            "`client_ca_file`, `min_version` (default `TLS12`), `max_version` (not below "
            "`min_version`); relative paths are relative to the web config file; plus "
            "`key_password_file`, an extension of this exporter for an encrypted `key_file`, "
            "never an interactive prompt) and `http_server_config.headers` (valid header "
            "names; CR, LF and other control characters in values are rejected; "
            "`Content-Length`, `Content-Type`, `Transfer-Encoding`, `Connection`, "
            "`WWW-Authenticate` are the server's own). `basic_auth_users` (bcrypt hashes; see "
            "Security notes). Other keys are **rejected** (never silently ignored).",
            env="KTE_WEB_CONFIG_FILE", flag="--web.config.file"),
)
LOG_SETTINGS: tuple[Setting, ...] = _declare(
    "KTE_LOG_",
    _one_of("format", LOG_FORMATS,
            "`json` (one JSON object per line), `console` (readable), `auto` (console when "
            "stderr is a TTY, else JSON).", flag="--log.format"),
    _one_of("level", LOG_LEVELS, "{choices}.", flag="--log.level"),
)
HISTORY_SETTINGS: tuple[Setting, ...] = _declare(
    None,
    Setting("directory", _optional_str,
            "Append every poll's open transactions (with their late/hanging verdict) to a "
            "Parquet dataset here, partitioned by cluster and UTC date; read by "
            "`kafka-txn-exporter spark history`. Needs pyarrow: `pip install "
            "'kafka-txn-exporter[history]'`. Schema: [docs/spark.md](docs/spark.md).",
            default="unset (off)"),
    _integer("retention_days", 1, 36_500,
             "Date partitions older than this are deleted, {bounds}."),
)


def _section_fields(settings: tuple[Setting, ...], section: str) -> dict[str, Parser]:
    """The parsers of one mapping's own keys (`tls` -> ca_file, cert_file, ...)."""
    prefix = f"{section}." if section else ""
    depth = prefix.count(".")
    return {s.key[len(prefix):]: s.parse for s in settings
            if s.key.startswith(prefix) and s.key.count(".") == depth}


_CLUSTER_FIELDS = _section_fields(CLUSTER_SETTINGS, "")
_TLS_FIELDS = _section_fields(CLUSTER_SETTINGS, "tls")
_AWS_MSK_IAM_FIELDS = _section_fields(CLUSTER_SETTINGS, "sasl.aws_msk_iam")
_OAUTHBEARER_FIELDS = _section_fields(CLUSTER_SETTINGS, "sasl.oauthbearer")
_GSSAPI_FIELDS = _section_fields(CLUSTER_SETTINGS, "sasl.gssapi")
_SASL_SECTION_FIELDS: dict[str, Parser] = {
    "oauthbearer": lambda value, path: _oauthbearer_section(value, path),
    "aws_msk_iam": lambda value, path: _parse_section(
        {} if value is None else value, _AWS_MSK_IAM_FIELDS, path
    ),
    "gssapi": lambda value, path: _parse_section(value, _GSSAPI_FIELDS, path),
}
"""Keys of `sasl` that hold a mechanism's own mapping (its keys are declared above), in the
order a misplaced one is named."""
_SASL_SECTIONS = tuple(_SASL_SECTION_FIELDS)
_SASL_FIELDS = _section_fields(CLUSTER_SETTINGS, "sasl") | _SASL_SECTION_FIELDS
_NESTED_CLUSTER_FIELDS: dict[str, dict[str, Parser]] = {"tls": _TLS_FIELDS, "sasl": _SASL_FIELDS}
_CLUSTER_FILE_FIELDS = _CLUSTER_FIELDS | dict.fromkeys(_NESTED_CLUSTER_FIELDS, _str)
"""A cluster's keys as the file gives them (the nested mappings are parsed on their own)."""
_WEB_FIELDS = _section_fields(WEB_SETTINGS, "")
_LOG_FIELDS = _section_fields(LOG_SETTINGS, "")
_HISTORY_FIELDS = _section_fields(HISTORY_SETTINGS, "")
DURATION_BOUNDS_SECONDS: dict[str, tuple[float, float]] = {
    s.key: s.bounds for s in CLUSTER_SETTINGS if s.bounds is not None and s.unit == "s"}
"""Inclusive bounds of every interval: below them the exporter would flood the brokers, above
them it would never poll or never time out."""
_TOP_LEVEL_KEYS = ("clusters", "web", "log", "history", "admin")
"""`admin` holds the abort command's credentials; it is validated by `exporter.abort` (the
daemon never imports that module) and ignored by `serve`/`scan`."""


_CLUSTER_SETTING_BY_ENV = {s.env: s for s in CLUSTER_SETTINGS if s.env is not None}


def cluster_env_vars() -> dict[str, tuple[str, ...]]:
    """Every `KTE_CLUSTER_*` variable and the cluster field path it sets (one, two or three
    keys deep)."""
    return {name: setting.path for name, setting in _CLUSTER_SETTING_BY_ENV.items()}


WEB_LOG_ENV_VARS: dict[str, tuple[str, str]] = {
    s.env: (section, s.key)
    for section, settings in (("web", WEB_SETTINGS), ("log", LOG_SETTINGS))
    for s in settings if s.env is not None
}


@dataclass(frozen=True, slots=True)
class Overrides:
    """Values given on the command line (None = not given); strings like env values."""

    web_listen_address: str | None = None
    web_port: str | None = None
    web_telemetry_path: str | None = None
    web_config_file: str | None = None
    log_format: str | None = None
    log_level: str | None = None
    cluster_name: str | None = None
    bootstrap_servers: str | None = None


# --------------------------------------------------------------------------- loading


def _read_yaml(path: str, allow_pipe: bool = False) -> dict[str, Any]:
    """The config file (UTF-8; duplicate keys, deep nesting and alias bombs are errors)."""
    from exporter.yamlfile import read_yaml_file  # PyYAML: only when there is a file

    data = read_yaml_file(path, "config file", allow_pipe=allow_pipe)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    return data


def _parse_section(raw: Any, fields: Mapping[str, Parser], path: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping, got {_describe(raw)}")
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            if path.endswith("sasl") and key == "password":
                raise ConfigError(
                    f"{path}.password: inline passwords are not allowed; "
                    "use password_file or password_env"
                )
            raise ConfigError(f"{path}: unknown key {key!r} "
                              f"(known: {', '.join(sorted(fields))})")
        parsed[key] = fields[key](value, f"{path}.{key}")
    return parsed


def _parse_cluster_file(raw: Any, path: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping, got {_describe(raw)}")
    flat = {k: v for k, v in raw.items() if k not in _NESTED_CLUSTER_FIELDS}
    parsed = _parse_section(flat, _CLUSTER_FILE_FIELDS, path)
    for section, fields in _NESTED_CLUSTER_FIELDS.items():
        if section in raw:
            value = raw[section]
            parsed[section] = {} if value is None else _parse_section(
                value, fields, f"{path}.{section}"
            )
    return parsed


def _build_sasl(raw: dict[str, Any], path: str, env: Mapping[str, str]) -> SaslSettings:
    if "mechanism" not in raw:
        raise ConfigError(f"{path}.mechanism: required when sasl is configured")
    return _SASL_BUILDERS[raw["mechanism"]](raw, path, env)


def _build_password_sasl(raw: dict[str, Any], path: str, env: Mapping[str, str]) -> SaslSettings:
    """PLAIN and SCRAM: a user name and a password from a file or an environment variable."""
    for section in _SASL_SECTIONS:
        if section in raw:
            raise ConfigError(f"{path}.{section}: only with mechanism {section.upper()}, "
                              f"not {raw['mechanism']}")
    if "username" not in raw:
        raise ConfigError(f"{path}.username: required when sasl is configured")
    password = _one_secret(raw, path, env, "password", "password")
    return SaslSettings(mechanism=raw["mechanism"], username=raw["username"], password=password)


def _one_secret(
    section: Mapping[str, Any], path: str, env: Mapping[str, str], name: str, what: str
) -> str:
    """The secret that exactly one of `<name>_file` (read) and `<name>_env` (a variable's
    name) points at; never empty, and neither the file's name nor the variable's is said."""
    file_key, env_key = f"{name}_file", f"{name}_env"
    secret_file, secret_env = section.get(file_key), section.get(env_key)
    if (secret_file is None) == (secret_env is None):
        raise ConfigError(f"{path}: set exactly one of {file_key} or {env_key}")
    if secret_file is not None:
        secret = _read_secret_file(secret_file, f"{path}.{file_key}")
    elif isinstance(secret_env, str) and secret_env in env:
        secret = env[secret_env]
    else:
        raise ConfigError(f"{path}.{env_key}: the environment variable it names is not set "
                          "(the name is not shown in case it is a secret)")
    if not secret:
        raise ConfigError(f"{path}: the {what} is empty")
    return secret


def _build_aws_msk_iam_sasl(
    raw: dict[str, Any], path: str, env: Mapping[str, str]
) -> SaslSettings:
    """AWS MSK IAM: no secret in the config at all; the AWS credential chain provides them.
    The region falls back to AWS_REGION / AWS_DEFAULT_REGION (set by EKS for IRSA)."""
    for key in ("username", "password_file", "password_env"):
        if key in raw:
            raise ConfigError(f"{path}.{key}: not used with AWS_MSK_IAM (the credentials come "
                              "from the AWS credential chain)")
    section = dict(raw.get("aws_msk_iam") or {})
    if "region" not in section:
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            if env.get(name):
                section["region"] = _AWS_MSK_IAM_FIELDS["region"](env[name], name)
                break
        else:
            raise ConfigError(f"{path}.aws_msk_iam.region: required with AWS_MSK_IAM (or set "
                              "AWS_REGION)")
    if "role_session_name" in section and "role_arn" not in section:
        raise ConfigError(f"{path}.aws_msk_iam.role_session_name: needs role_arn")
    import importlib.util

    if importlib.util.find_spec("botocore") is None:
        raise ConfigError(f"{path}.mechanism: AWS_MSK_IAM needs the optional 'aws' extra "
                          "(pip install 'kafka-txn-exporter[aws]'; the container image has it)")
    return SaslSettings(mechanism=raw["mechanism"], aws_msk_iam=AwsMskIamSettings(**section))


def _build_oauthbearer_sasl(
    raw: dict[str, Any], path: str, env: Mapping[str, str]
) -> SaslSettings:
    """OAUTHBEARER: client credentials for a token endpoint, or a mounted token file."""
    for key in ("username", "password_file", "password_env"):
        if key in raw:
            raise ConfigError(f"{path}.{key}: not used by OAUTHBEARER (set "
                              f"{path}.oauthbearer.client_id and its client secret)")
    if raw.get("oauthbearer") is None:
        raise ConfigError(f"{path}.oauthbearer: required with mechanism OAUTHBEARER "
                          "(token_endpoint_url and client_id, or token_file)")
    section = raw["oauthbearer"]
    sub = f"{path}.oauthbearer"
    if "token_file" in section:
        for key in ("token_endpoint_url", "client_id", "client_secret_file",
                    "client_secret_env", "scope", "ca_file"):
            if key in section:
                raise ConfigError(f"{sub}.{key}: not used with token_file (the token is read "
                                  "from the file; give one of token_file or token_endpoint_url)")
        return SaslSettings(mechanism="OAUTHBEARER", oauthbearer=OAuthBearerSettings(
            token_file=section["token_file"], extensions=section.get("extensions", {})))
    for key in ("token_endpoint_url", "client_id"):
        if key not in section:
            raise ConfigError(f"{sub}.{key}: required (or give token_file)")
    secret = _one_secret(section, sub, env, "client_secret", "client secret")
    return SaslSettings(mechanism="OAUTHBEARER", oauthbearer=OAuthBearerSettings(
        token_endpoint_url=section["token_endpoint_url"],
        client_id=section["client_id"],
        client_secret=secret,
        scope=section.get("scope"),
        extensions=section.get("extensions", {}),
        ca_file=section.get("ca_file"),
    ))


def _build_gssapi_sasl(raw: dict[str, Any], path: str, env: Mapping[str, str]) -> SaslSettings:
    """Kerberos: a principal and its keytab, or a credential cache kept fresh elsewhere."""
    for key in ("username", "password_file", "password_env"):
        if key in raw:
            raise ConfigError(f"{path}.{key}: not used by GSSAPI (give gssapi.principal and "
                              "gssapi.keytab_file)")
    section = raw.get("gssapi")
    if section is None:
        raise ConfigError(f"{path}.gssapi: required for mechanism GSSAPI (principal and "
                          "keytab_file, or ccache)")
    keytab = section.get("keytab_file")
    if keytab is not None:
        if "principal" not in section:
            raise ConfigError(f"{path}.gssapi.principal: required with keytab_file")
        if not os.access(keytab, os.R_OK):
            raise ConfigError(f"{path}.gssapi.keytab_file: {keytab!r} is not readable")
    try:
        import gssapi  # noqa: F401  (the optional extra: refuse the config without it)
    except (ImportError, OSError):
        raise ConfigError(
            f"{path}.mechanism: GSSAPI needs the Python package gssapi and the MIT Kerberos "
            "libraries (pip install 'kafka-txn-exporter[kerberos]'; the image has them)"
        ) from None
    return SaslSettings(mechanism="GSSAPI", gssapi=GssapiSettings(**section))


def _check_one_krb5_conf(clusters: tuple[ClusterSettings, ...]) -> None:
    """The Kerberos library reads one krb5.conf per process: clusters must agree on it."""
    seen: tuple[int, str] | None = None
    for index, cluster in enumerate(clusters):
        gssapi_settings = cluster.sasl.gssapi if cluster.sasl is not None else None
        conf = gssapi_settings.krb5_conf_file if gssapi_settings is not None else None
        if conf is None:
            continue
        if seen is not None and conf != seen[1]:
            raise ConfigError(
                f"clusters[{index}].sasl.gssapi.krb5_conf_file: differs from "
                f"clusters[{seen[0]}]'s; the Kerberos library reads one krb5.conf per process "
                "(list every realm in it)"
            )
        seen = (index, conf)


_SASL_BUILDERS: dict[str, Callable[[dict[str, Any], str, Mapping[str, str]], SaslSettings]] = {
    "PLAIN": _build_password_sasl,
    "SCRAM-SHA-256": _build_password_sasl,
    "SCRAM-SHA-512": _build_password_sasl,
    "AWS_MSK_IAM": _build_aws_msk_iam_sasl,
    "OAUTHBEARER": _build_oauthbearer_sasl,
    "GSSAPI": _build_gssapi_sasl,
}

SASL_MECHANISMS_NEEDING_TLS = ("AWS_MSK_IAM",)
"""MSK's IAM listeners are TLS only, and a signed token is a credential for its lifetime: it
never crosses the network in clear text."""


def require_tls_for_sasl(sasl: SaslSettings | None, tls: Any, path: str) -> None:
    """ConfigError naming `path.tls` when the mechanism needs TLS and `tls` is None."""
    if sasl is not None and sasl.mechanism in SASL_MECHANISMS_NEEDING_TLS and tls is None:
        raise ConfigError(f"{path}.tls: required with sasl.mechanism {sasl.mechanism} (its "
                          "token must not cross the network in clear text; `tls: {}` "
                          "verifies the brokers against the system CAs)")
"""One builder per mechanism of SASL_MECHANISMS; each checks the fields its mechanism needs."""


def _build_tls(raw: dict[str, Any], path: str) -> TlsSettings:
    """Client TLS. The key itself is loaded when the client is made (exporter.tlsfiles): an
    encrypted one without its passphrase stops start-up naming the field, never prompting."""
    if ("cert_file" in raw) != ("key_file" in raw):
        raise ConfigError(f"{path}: cert_file and key_file must be given together")
    values = {k: v for k, v in raw.items() if k != "key_password_file"}
    if raw.get("key_password_file") is not None:
        if "key_file" not in raw:
            raise ConfigError(f"{path}.key_password_file: needs cert_file and key_file")
        values["key_password"] = _read_secret_file(raw["key_password_file"],
                                                    f"{path}.key_password_file")
    return TlsSettings(**values)


def _build_cluster(raw: dict[str, Any], path: str, env: Mapping[str, str]) -> ClusterSettings:
    for key in ("name", "bootstrap_servers"):
        if key not in raw:
            raise ConfigError(f"{path}.{key}: required")
    values = {k: v for k, v in raw.items() if k not in _NESTED_CLUSTER_FIELDS}
    if "tls" in raw:
        values["tls"] = _build_tls(raw["tls"], f"{path}.tls")
    if "sasl" in raw:
        values["sasl"] = _build_sasl(raw["sasl"], f"{path}.sasl", env)
        require_tls_for_sasl(values["sasl"], values.get("tls"), path)
    return ClusterSettings(**values)


def load_settings(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Overrides | None = None,
    *,
    file_data: dict[str, Any] | None = None,
) -> ExporterSettings:
    """Merge file, env and flags into validated settings, or raise ConfigError.
    `file_data`: the file already read (`read_config_file`), so it is read once."""
    env = dict(os.environ) if env is None else dict(env)
    overrides = overrides or Overrides()
    data = _read_config(config_file, env, file_data)
    draft = _parse_file(data)
    cluster_env = _apply_env(draft, env, _secret_env_names(data, draft))
    _apply_flags(draft, overrides)
    _apply_single_cluster(draft, cluster_env, overrides)
    return _build(draft, env)


@dataclass(slots=True)
class _Draft:
    """Parsed values of every source so far, each checked; later sources write over them."""

    clusters: list[dict[str, Any]]
    admin: Any
    web: dict[str, Any]
    log: dict[str, Any]
    history: dict[str, Any]


def _read_config(
    config_file: str | None, env: Mapping[str, str], file_data: dict[str, Any] | None
) -> dict[str, Any]:
    """The file's top-level mapping (`--config`, else KTE_CONFIG; none: empty), its keys known."""
    if config_file is None and env.get("KTE_CONFIG"):
        config_file = env["KTE_CONFIG"]
    data = file_data if file_data is not None else (
        _read_yaml(config_file) if config_file else {})
    for key in data:
        if key not in _TOP_LEVEL_KEYS:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(_TOP_LEVEL_KEYS)})")
    return data


def _parse_file(data: dict[str, Any]) -> _Draft:
    """Check every section of the file against its declarations."""
    raw_clusters = data.get("clusters")
    if raw_clusters is None:
        raw_clusters = []
    if not isinstance(raw_clusters, list):
        raise ConfigError(f"clusters: expected a list of clusters, got {_describe(raw_clusters)}")
    clusters = [_parse_cluster_file(c, f"clusters[{i}]") for i, c in enumerate(raw_clusters)]
    admin = data.get("admin")
    if admin is not None and not isinstance(admin, dict):
        raise ConfigError(f"admin: expected a mapping, got {_describe(admin)}")
    web: dict[str, Any] = {}
    _apply_web(web, _parse_section(data.get("web") or {}, _WEB_FIELDS, "web"),
               "web.listen_address", "web.port")
    log = _parse_section(data.get("log") or {}, _LOG_FIELDS, "log")
    history = _parse_section(data.get("history") or {}, _HISTORY_FIELDS, "history")
    return _Draft(clusters, admin, web, log, history)


def _secret_env_names(data: dict[str, Any], draft: _Draft) -> set[str]:
    """Variables a `password_env` or `client_secret_env` names: any name, not typos."""
    return {
        c["sasl"]["password_env"] for c in draft.clusters if c.get("sasl", {}).get("password_env")
    } | _admin_password_envs(draft.admin) | _client_secret_envs(data.get("clusters"), draft.admin)


def _apply_env(draft: _Draft, env: Mapping[str, str], secret_envs: set[str]) -> dict[str, str]:
    """Apply the web and log variables; return the single cluster's (`_apply_single_cluster`
    applies them). Any other `KTE_*` variable is a typo."""
    cluster_env: dict[str, str] = {}
    env_web: dict[str, Any] = {}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == "KTE_CONFIG":
            continue
        if name in WEB_LOG_ENV_VARS:
            section, key = WEB_LOG_ENV_VARS[name]
            fields = _WEB_FIELDS if section == "web" else _LOG_FIELDS
            (env_web if section == "web" else draft.log)[key] = fields[key](env[name], name)
        elif name in _CLUSTER_SETTING_BY_ENV:
            cluster_env[name] = env[name]
        elif name not in secret_envs and not _names_a_password_env(name, env):
            raise ConfigError(f"{name}: unknown environment variable (see --help for KTE_*)")
    _apply_web(draft.web, env_web, "KTE_WEB_LISTEN_ADDRESS", "KTE_WEB_PORT")
    return cluster_env


def _flag_values(
    settings: tuple[Setting, ...], overrides: Overrides
) -> list[tuple[Setting, str, Any]]:
    """(setting, flag, value) of each declared flag given on the command line, in order."""
    given = [(s, s.flag, getattr(overrides, s.override))
             for s in settings if s.flag is not None and s.override is not None]
    return [(setting, flag, value) for setting, flag, value in given if value is not None]


def _apply_flags(draft: _Draft, overrides: Overrides) -> None:
    """Apply the web and log flags (the highest precedence)."""
    _apply_web(draft.web, {s.key: s.parse(value, flag)
                           for s, flag, value in _flag_values(WEB_SETTINGS, overrides)},
               "--web.listen-address", "--web.port")
    for setting, flag, value in _flag_values(LOG_SETTINGS, overrides):
        draft.log[setting.key] = setting.parse(value, flag)


def _apply_single_cluster(
    draft: _Draft, cluster_env: dict[str, str], overrides: Overrides
) -> None:
    """`KTE_CLUSTER_*` then the cluster flags: they define the cluster when the file has none,
    override it when it has one, and are an error when it has several."""
    given_flags = _flag_values(CLUSTER_SETTINGS, overrides)
    if not cluster_env and not given_flags:
        return
    if len(draft.clusters) > 1:
        first = next(iter(cluster_env), None) or given_flags[0][1]
        raise ConfigError(
            f"{first}: single-cluster overrides need exactly one cluster in the config "
            f"file, found {len(draft.clusters)}"
        )
    if not draft.clusters:
        draft.clusters.append({"name": "default"})
    target = draft.clusters[0]
    for name, value in cluster_env.items():
        setting = _CLUSTER_SETTING_BY_ENV[name]
        _set_path(target, setting.path, setting.parse(value, name))
    for setting, flag, value in given_flags:
        _set_path(target, setting.path, setting.parse(value, flag))


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def _build(draft: _Draft, env: Mapping[str, str]) -> ExporterSettings:
    """The settings records, with the checks that span fields or clusters."""
    if not draft.clusters:
        raise ConfigError(
            "clusters: no cluster configured (give --config FILE with a 'clusters' list, or "
            "--bootstrap-servers / KTE_CLUSTER_BOOTSTRAP_SERVERS)"
        )
    built = tuple(_build_cluster(c, f"clusters[{i}]", env) for i, c in enumerate(draft.clusters))
    _check_one_krb5_conf(built)
    seen: set[str] = set()
    for index, cluster in enumerate(built):
        if cluster.name in seen:
            raise ConfigError(f"clusters[{index}].name: duplicate cluster name {cluster.name!r}")
        seen.add(cluster.name)

    web_settings = WebSettings(**draft.web)
    if web_settings.web_config_file is not None:
        # Parsed once, here, so a bad one stops start-up; the HTTP layer uses the record.
        from exporter.webconfig import parse_web_config_file

        web_settings = WebSettings(
            **draft.web, web_config=parse_web_config_file(web_settings.web_config_file)
        )
    return ExporterSettings(
        clusters=built,
        web=web_settings,
        history=HistorySettings(**draft.history),
        log_format=draft.log.get("format", "auto"),
        log_level=draft.log.get("level", "info"),
    )


def _apply_web(
    web: dict[str, Any], layer: dict[str, Any], address_name: str, port_name: str
) -> None:
    """Merge one source's web values (file, env or flags) over the lower ones.

    A port inside a `[host]:port` listen address is that source's port; the same source
    giving two different ports is an error.
    """
    parsed = layer.get("listen_address")
    if parsed is not None:
        host, port = parsed
        layer["listen_address"] = host
        if port is not None:
            if layer.get("port", port) != port:
                raise ConfigError(f"{address_name}: its port {port} differs from {port_name} "
                                  f"{layer['port']}; give the port once")
            layer["port"] = port
    web.update(layer)


def _admin_password_envs(admin: Any) -> set[str]:
    """Variables named by admin.clusters[].sasl.password_env are not typos either."""
    names: set[str] = set()
    entries = admin.get("clusters") if isinstance(admin, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        sasl = entry.get("sasl") if isinstance(entry, dict) else None
        if isinstance(sasl, dict) and isinstance(sasl.get("password_env"), str):
            names.add(sasl["password_env"])
    return names


def _client_secret_envs(raw_clusters: Any, admin: Any) -> set[str]:
    """Variables named by a `sasl.oauthbearer.client_secret_env` (clusters[] and
    admin.clusters[]) are not typos either."""
    entries = list(raw_clusters) if isinstance(raw_clusters, list) else []
    admin_entries = admin.get("clusters") if isinstance(admin, dict) else None
    entries += admin_entries if isinstance(admin_entries, list) else []
    names: set[str] = set()
    for entry in entries:
        sasl = entry.get("sasl") if isinstance(entry, dict) else None
        oauth = sasl.get("oauthbearer") if isinstance(sasl, dict) else None
        if isinstance(oauth, dict) and isinstance(oauth.get("client_secret_env"), str):
            names.add(oauth["client_secret_env"])
    return names


def _names_a_password_env(name: str, env: Mapping[str, str]) -> bool:
    """True when KTE_CLUSTER_SASL_PASSWORD_ENV (or the OAUTHBEARER client secret's
    KTE_CLUSTER_SASL_OAUTHBEARER_CLIENT_SECRET_ENV) points at this variable."""
    return name in (env.get("KTE_CLUSTER_SASL_PASSWORD_ENV"),
                    env.get("KTE_CLUSTER_SASL_OAUTHBEARER_CLIENT_SECRET_ENV"))


def env_help() -> str:
    """The environment variables, for `--help`."""
    indent = "    "
    cluster = textwrap.fill(", ".join(sorted(cluster_env_vars())), width=92,
                            initial_indent=indent, subsequent_indent=indent)
    web_log = textwrap.fill(", ".join(WEB_LOG_ENV_VARS), width=92,
                            initial_indent=indent, subsequent_indent=indent)
    return (
        "Environment variables (flags override env, env overrides the file):\n"
        "  KTE_CONFIG                  path of the YAML config file\n"
        f"  web and log:\n{web_log}\n"
        "  single cluster (define it when the file has none, override it when the file has\n"
        f"  exactly one):\n{cluster}\n"
        "  KTE_CLUSTER_LABELS takes name=value,name=value; KTE_CLUSTER_BOOTSTRAP_SERVERS takes\n"
        "  host:port,host:port. Passwords are never given inline: use\n"
        "  KTE_CLUSTER_SASL_PASSWORD_FILE or KTE_CLUSTER_SASL_PASSWORD_ENV (name of the variable\n"
        "  holding it); the same for the OAUTHBEARER client secret\n"
        "  (KTE_CLUSTER_SASL_OAUTHBEARER_CLIENT_SECRET_FILE or _ENV), whose SASL extensions take\n"
        "  name=value,name=value. Durations accept seconds or strings like 30s, 5m, 1h. Kerberos\n"
        "  (sasl.mechanism GSSAPI: principal, keytab_file, ccache, service_name, krb5_conf_file)\n"
        "  is configured in the file's sasl.gssapi section."
    )


# --------------------------------------------------------------------------- for other commands


def read_config_file(path: str, *, allow_pipe: bool = False) -> dict[str, Any]:
    """The config file's top-level mapping, for a command that validates a section of its own
    (`abort` reads `admin`); raises ConfigError exactly as `load_settings` would."""
    return _read_yaml(path, allow_pipe)


@dataclass(frozen=True, slots=True)
class ClientEntry:
    """A validated `{name, client_id?, tls?, sasl?}` entry: another principal for a
    configured cluster (the abort command's `admin.clusters[]`)."""

    name: str
    client_id: str | None
    tls: TlsSettings | None
    sasl: SaslSettings | None


_CLIENT_ENTRY_FIELDS = {key: _CLUSTER_FIELDS[key] for key in ("name", "client_id")}


def parse_client_entry(raw: Any, path: str, env: Mapping[str, str]) -> ClientEntry:
    """Validate one client entry with the same rules (and messages) as a cluster's fields."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping, got {_describe(raw)}")
    flat = {k: v for k, v in raw.items() if k not in _NESTED_CLUSTER_FIELDS}
    parsed = _parse_section(flat, _CLIENT_ENTRY_FIELDS, path)
    if "name" not in parsed:
        raise ConfigError(f"{path}.name: required")
    tls = None
    if raw.get("tls") is not None:
        tls = _build_tls(_parse_section(raw["tls"], _TLS_FIELDS, f"{path}.tls"), f"{path}.tls")
    sasl = None
    if raw.get("sasl") is not None:
        sasl = _build_sasl(
            _parse_section(raw["sasl"], _SASL_FIELDS, f"{path}.sasl"), f"{path}.sasl", env
        )
    return ClientEntry(parsed["name"], parsed.get("client_id"), tls, sasl)
