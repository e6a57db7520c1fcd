"""The README's configuration tables are the declarations (`exporter.config.*_SETTINGS`),
rendered: key, default (the settings record's own, or the declared words), environment
variable, flag, meaning with its bounds. A declaration changed without the README fails here
with the table to paste; every field of the settings records is declared, and every declared
flag is one the command line has and `Overrides` carries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from exporter import config
from exporter import settings as records
from exporter.cli import build_parser
from exporter.config import Overrides, Setting

README = Path(__file__).resolve().parents[1] / "README.md"

RECORDS: dict[str, tuple[type, str]] = {
    "clusters[]": (records.ClusterSettings, ""),
    "clusters[].tls": (records.TlsSettings, ""),
    "clusters[].sasl": (records.SaslSettings, ""),
    "clusters[].sasl.aws_msk_iam": (records.AwsMskIamSettings, ""),
    "clusters[].sasl.oauthbearer": (records.OAuthBearerSettings, ""),
    "clusters[].sasl.gssapi": (records.GssapiSettings, ""),
    "web": (records.WebSettings, ""),
    "history": (records.HistorySettings, ""),
    "log": (records.ExporterSettings, "log_"),
}
"""Section -> the record holding its values, and the prefix of their names there."""

SECTIONS = {"clusters[]": config.CLUSTER_SETTINGS, "web": config.WEB_SETTINGS,
            "log": config.LOG_SETTINGS, "history": config.HISTORY_SETTINGS}

READ_INTO = {
    "clusters[].tls.key_password": ("key_password_file",),
    "clusters[].sasl.password": ("password_file", "password_env"),
    "clusters[].sasl.oauthbearer.client_secret": ("client_secret_file", "client_secret_env"),
}
"""Record fields filled from a secret the declared keys point at (never given inline)."""


@dataclasses.dataclass(frozen=True)
class Table:
    heading: str
    section: str
    """Where the keys live: `clusters[]` shows full dotted keys, `clusters[].sasl.gssapi` its
    own keys only."""
    columns: tuple[str, ...]
    exclude: str | None = None


TABLES = (
    Table("### `clusters[]` (one entry per Kafka cluster)", "clusters[]",
          ("Key", "Default", "Env (single cluster)", "Meaning"), exclude="sasl.gssapi."),
    Table("### `web`", "web", ("Key", "Default", "Env", "Flag", "Meaning")),
    Table("### `history`", "history", ("Key", "Default", "Meaning")),
    Table("### `log`", "log", ("Key", "Default", "Env", "Flag", "Meaning")),
    Table("### Kerberos", "clusters[].sasl.gssapi", ("Key", "Default", "Meaning")),
)


def _split(section: str) -> tuple[str, str]:
    """`clusters[].sasl.gssapi` -> (`clusters[]`, `sasl.gssapi`)."""
    top, _, inner = section.partition(".")
    return top, inner


def _settings(table: Table) -> list[tuple[str, Setting]]:
    """(key as the table shows it, declaration) for every row of `table`."""
    top, inner = _split(table.section)
    prefix = f"{inner}." if inner else ""
    rows = []
    for setting in SECTIONS[top]:
        if not setting.key.startswith(prefix):
            continue
        if table.exclude and setting.key.startswith(table.exclude):
            continue
        rows.append((setting.key[len(prefix):], setting))
    return rows


def _record_default(top: str, setting: Setting) -> Any:
    """The default of the record field `setting` fills; a `dataclasses.MISSING` when none."""
    *parents, name = setting.path
    record, prefix = RECORDS[".".join([top, *parents])]
    field = {f.name: f for f in dataclasses.fields(record)}.get(prefix + name)
    if field is None:
        return dataclasses.MISSING
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _default_cell(top: str, setting: Setting) -> str:
    if setting.default is not None:
        return setting.default
    value = _record_default(top, setting)
    assert value is not dataclasses.MISSING, (
        f"{top}.{setting.key}: no default in its record; declare the README's words")
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, tuple | list):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`" + config.size_note(setting.key, value)


def _cell(table: Table, column: str, key: str, setting: Setting) -> str:
    top, _ = _split(table.section)
    env = setting.env_doc.format(env=setting.env) if setting.env else "—"
    flag = f"`{setting.flag}`" if setting.flag else "—"
    if "Flag" not in table.columns and setting.flag:
        env += f", {flag}"  # one column for both where the table has no Flag column
    return {"Key": f"`{key}`", "Default": _default_cell(top, setting), "Flag": flag,
            "Meaning": setting.meaning()}.get(column, env)


def render(table: Table) -> list[str]:
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    for key, setting in _settings(table):
        cells = [_cell(table, column, key, setting) for column in table.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def readme_table(text: str, heading: str) -> list[str]:
    """The first table after `heading`, line by line."""
    assert heading + "\n" in text, f"README lost the heading {heading!r}"
    lines = text[text.index(heading + "\n"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("table", TABLES, ids=[t.section for t in TABLES])
def test_the_readme_table_is_the_declarations(table: Table) -> None:
    expected = render(table)
    actual = readme_table(README.read_text(encoding="utf-8"), table.heading)
    assert actual == expected, (
        f"README.md's table under {table.heading!r} differs from the declarations in "
        "exporter/config.py; the table they declare:\n" + "\n".join(expected))


def test_every_key_has_a_row_in_one_table() -> None:
    shown = [(_split(t.section)[0], s.key) for t in TABLES for _, s in _settings(t)]
    declared = [(top, s.key) for top, settings in SECTIONS.items() for s in settings]
    assert sorted(shown) == sorted(declared)


def _record_fields(section: str) -> list[str]:
    record, prefix = RECORDS[section]
    return [f.name.removeprefix(prefix) for f in dataclasses.fields(record)
            if f.name.startswith(prefix)]


@pytest.mark.parametrize("section", list(RECORDS))
def test_every_record_field_is_declared(section: str) -> None:
    """A field added to a settings record without a declaration cannot be configured."""
    top, inner = _split(section)
    declared = {s.key for s in SECTIONS[top]}
    nested = {name.removeprefix(f"{section}.").split(".")[0] for name in RECORDS
              if name.startswith(f"{section}.")}
    derived = {"web_config"} if section == "web" else set()  # the parsed web_config_file
    prefix = f"{inner}." if inner else ""
    for name in _record_fields(section):
        if name in nested or name in derived:
            continue
        keys = READ_INTO.get(f"{section}.{name}", (name,))
        missing = [key for key in keys if prefix + key not in declared]
        assert not missing, f"{section}.{name}: no declaration for {missing}"


def test_every_declared_flag_is_on_the_command_line_and_in_overrides() -> None:
    declared = [s for settings in SECTIONS.values() for s in settings if s.flag is not None]
    assert sorted(str(s.override) for s in declared) == sorted(
        f.name for f in dataclasses.fields(Overrides))
    for setting in declared:
        value = setting.choices[0] if setting.choices else "x"
        args = build_parser().parse_args(["serve", str(setting.flag), value])
        assert getattr(args, str(setting.override)) == value, setting.flag
