"""What a newcomer reads and runs first is true.

- `--help` of every script in scripts/ answers with its own name and without side effects: no
  installer, package manager or sudo runs, no file appears in the clone, $HOME or the cache.
- `--help` of every command names the command the user typed.
- The README's CLI synopses list exactly the options `--help` lists.
- exporter.example.yaml and the README's "Default" columns agree with the code's defaults, and
  the example's comments about the admin section say what `abort` does.
- Every test that runs promtool is marked `system_tools` (so `scripts/test --quick` passes on a
  machine without it).
- The simulator's kafka-python consumers (the demo's) warn about a slow I/O step only for a real
  stall, not for a GIL wait.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.abort.settings import admin_cluster_settings, load_admin_settings
from exporter.config import load_settings

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p.name for p in (REPO / "scripts").iterdir() if p.is_file() and os.access(p, os.X_OK)
)
# What an installer would run: each is replaced by a stub that records the call and fails.
SIDE_EFFECT_PROGRAMS = (
    "sudo", "apt-get", "apt", "dpkg", "pip", "pip3", "npm", "npx", "node", "mvn", "java",
    "javac", "buildah", "debootstrap", "curl", "wget", "git",
)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_with_its_name_and_no_side_effect(
    script: str, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "scripts", clone / "scripts")
    for name in ("pyproject.toml", "simulator/pyproject.toml"):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, clone / name)
    stubs, calls = tmp_path / "stubs", tmp_path / "calls.log"
    stubs.mkdir()
    for program in SIDE_EFFECT_PROGRAMS:
        stub = stubs / program
        stub.write_text(f'#!/bin/sh\necho "{program} $*" >> "{calls}"\nexit 97\n')
        stub.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    watched = {"clone": clone, "home": home}
    before = {name: _files(root) for name, root in watched.items()}
    env = {
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHON": sys.executable,
        "LANG": "C.UTF-8",
    }

    result = subprocess.run([str(clone / "scripts" / script), "--help"], capture_output=True,
                            text=True, timeout=60, env=env, cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"scripts/{script}" in result.stdout, result.stdout
    assert not calls.exists(), calls.read_text()
    assert {name: _files(root) for name, root in watched.items()} == before


COMMANDS = [
    ([], "kafka-txn-exporter"),
    *(([c], f"kafka-txn-exporter {c}")
      for c in ("serve", "scan", "abort", "demo", "sim", "probe", "spark")),
]


@pytest.mark.parametrize(("words", "name"), COMMANDS, ids=[n for _, n in COMMANDS])
def test_every_command_answers_help_with_its_own_name(
    words: list[str], name: str, tmp_path: Path
) -> None:
    result = subprocess.run([sys.executable, "-m", "exporter", *words, "--help"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {name} "), result.stdout[:200]
    assert list(tmp_path.iterdir()) == []


def test_the_simulators_console_script_answers_help_with_its_own_name() -> None:
    code = ("import sys; sys.argv = ['kafka-txn-sim', '--help']; "
            "from kafka_sim.main import main; main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kafka-txn-sim "), result.stdout[:200]


# --------------------------------------------------------------------------- README synopses


def _readme_synopses() -> dict[str, set[str]]:
    """Command -> the long options of its synopsis in the README's CLI block ("..." skipped)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("## CLI"):]
    block = block[block.index("```\n") + 4:]
    block = block[:block.index("```")]
    synopses: dict[str, str] = {}
    command = ""
    for line in block.splitlines():
        match = re.match(r"kafka-txn-exporter (\w+)", line)
        if match:
            command = match.group(1)
            synopses[command] = line[match.end():]
        elif line.startswith(" ") and command:
            synopses[command] += line
    # `sim ...` and `spark history|scan ...` defer to their own --help.
    return {c: set(re.findall(r"--[a-z][a-z0-9.-]*", text))
            for c, text in synopses.items() if not re.search(r"(^|\s)\.\.\.(\s|$)", text)}


def _help_options(command: str) -> set[str]:
    result = subprocess.run([sys.executable, "-m", "exporter", command, "--help"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    usage = result.stdout.split("\n\n")[0]
    return set(re.findall(r"--[a-z][a-z0-9.-]*", usage)) - {"--help"}


def test_readme_synopses_list_exactly_the_options_of_help() -> None:
    synopses = _readme_synopses()
    assert {"serve", "scan", "abort", "demo", "probe"} <= set(synopses), synopses
    mismatched = {
        command: {"readme_only": sorted(options - help_options),
                  "help_only": sorted(help_options - options)}
        for command, options in synopses.items()
        if options != (help_options := _help_options(command))
    }
    assert mismatched == {}


# --------------------------------------------------------------------------- example + defaults


def _uncommented_example(tmp_path: Path) -> Path:
    """exporter.example.yaml with its optional sections (history, admin) uncommented and its
    absolute file paths pointing at files that exist."""
    text = (REPO / "exporter.example.yaml").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        section = re.match(r"# (history|admin):", line)
        if section or (lines and lines[-1].startswith(("history:", "  ", "admin:"))
                       and re.match(r"#   ", line)):
            line = line[2:]
        lines.append(line)
    text = "\n".join(lines) + "\n"
    for path in sorted(set(re.findall(r"(?<![\w/])/(?:etc|run|var)/[\w./-]+", text))):
        local = tmp_path / "files" / path.lstrip("/")
        if "history" in path:
            local.mkdir(parents=True, exist_ok=True)
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text("secret\n", encoding="utf-8")
        text = text.replace(path, str(local))
    out = tmp_path / "example.yaml"
    out.write_text(text, encoding="utf-8")
    return out


def _readme_defaults(section: str) -> dict[str, str]:
    """Key -> the README's Default cell, for one configuration table."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    body = readme[readme.index(f"### `{section}`"):]
    body = body[:body.index("\n### ", 5)]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`") and cells[1]:
            for key in re.findall(r"`([a-z_.]+)`", cells[0]):
                rows[key] = cells[1]
    return rows


def _literal(cell: str) -> Any:
    """A Default cell as a value: None for unset, Ellipsis for prose (required, system CAs)."""
    if cell.startswith("unset"):
        return None
    match = re.match(r"`([^`]*)`", cell)
    if not match:
        return ...  # prose (required, system CAs, ...): nothing to compare
    return yaml.safe_load(match.group(1))


@dataclasses.dataclass(frozen=True)
class LogView:
    """The `log` section of ExporterSettings, which keeps it as log_format / log_level."""

    settings: Any

    @property
    def format(self) -> Any:
        return self.settings.log_format

    @property
    def level(self) -> Any:
        return self.settings.log_level


def _value(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = None if obj is None else getattr(obj, part)
    return obj


def test_readme_defaults_are_the_codes_and_the_example_shows_them(tmp_path: Path) -> None:
    minimal = tmp_path / "minimal.yaml"
    minimal.write_text("clusters:\n  - name: a\n    bootstrap_servers: [x:1]\n"
                       "  - name: b\n    bootstrap_servers: [x:1]\n    tls: {}\n",
                       encoding="utf-8")
    defaults = load_settings(str(minimal), env={})
    example = load_settings(str(_uncommented_example(tmp_path)), env={})
    compared = []
    # The example's values are illustrations for these; every other key shows its default.
    illustrative = {"name", "bootstrap_servers", "labels", "transaction_max_timeout_ms",
                    "tls.ca_file", "directory", "application_patterns"}
    for section, default_obj, example_obj in (
        ("clusters[]", defaults.clusters[0], example.clusters[0]),
        ("web", defaults.web, example.web),
        ("history", defaults.history, example.history),
        ("log", LogView(defaults), LogView(example)),
    ):
        for key, cell in _readme_defaults(section).items():
            documented = _literal(cell)
            # sasl.* applies only with a mechanism (the minimal config has none).
            if documented is ... or key.startswith("sasl.") or (
                    key.startswith("tls.") and documented is None):
                continue
            attribute = key
            # A tls.* default applies once a `tls` section is given (cluster b has an empty one).
            owner = defaults.clusters[1] if key.startswith("tls.") else default_obj
            actual = _value(owner, attribute)
            if isinstance(documented, dict) and not documented:
                actual = dict(actual)
            if isinstance(documented, list):  # a list in YAML, a tuple in the settings
                actual = list(actual)
            assert actual == documented, f"{section}.{key}: README says {cell}, code {actual!r}"
            if key not in illustrative:
                assert _value(example_obj, attribute) == documented, (
                    f"exporter.example.yaml {section}.{key} is not the default {cell}")
            compared.append(f"{section}.{key}")
    assert len(compared) >= 15, compared  # the tables were found and read


def test_the_examples_admin_section_says_what_abort_does(tmp_path: Path) -> None:
    path = _uncommented_example(tmp_path)
    text = (REPO / "exporter.example.yaml").read_text(encoding="utf-8")
    admin_text = text[text.index("# admin:"):]
    settings, admins = load_admin_settings(str(path), {"KAFKA_ADMIN_PASSWORD": "x"})
    prod = next(c for c in settings.clusters if c.name == "prod")
    assert prod.sasl is not None and prod.tls is not None
    # As documented: tls defaults to the cluster's, sasl to none (never the cluster's).
    assert re.search(r"tls:.*default: the cluster's", admin_text)
    assert re.search(r"sasl:.*default: no SASL", admin_text)
    bare = dataclass_replace(admins["prod"], tls=None, sasl=None, client_id=None)
    effective = admin_cluster_settings(prod, bare)
    assert effective.tls == prod.tls
    assert effective.sasl is None
    # The example's client_id is the default one.
    assert admin_cluster_settings(prod, bare).client_id == admins["prod"].client_id


def dataclass_replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


# --------------------------------------------------------------------------- markers


def _runs_promtool(node: ast.AST) -> bool:
    """`node` looks promtool up (`shutil.which("promtool")`), as every test that runs it does."""
    return any(
        isinstance(n, ast.Call) and ast.unparse(n.func).endswith("which")
        and any(isinstance(a, ast.Constant) and a.value == "promtool" for a in n.args)
        for n in ast.walk(node)
    )


def test_every_test_that_runs_promtool_is_marked_system_tools() -> None:
    unmarked = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_marked = "system_tools" in "".join(
            ast.unparse(n) for n in tree.body
            if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets))
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        helpers = {name for name, fn in functions.items()
                   if not name.startswith("test_") and _runs_promtool(fn)}
        for name, fn in functions.items():
            if not name.startswith("test_") or module_marked:
                continue
            calls = {n.func.id for n in ast.walk(fn)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            runs = _runs_promtool(fn) or bool(calls & helpers)
            marked = any("system_tools" in ast.unparse(d) for d in fn.decorator_list)
            if runs and not marked:
                unmarked.append(f"{path.relative_to(REPO)}::{name}")
    assert unmarked == []


# --------------------------------------------------------------------------- demo noise


def test_demo_consumers_warn_about_a_slow_step_only_when_it_is_a_real_stall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kafka.net.compat import KafkaNetClient
    from kafka_sim.consumer import SLOW_TASK_THRESHOLD_SECONDS, in_process_client

    async def held_up() -> int:
        time.sleep(0.3)  # what a 0.3 s GIL wait looks like to the selector
        return 1

    results = {}
    for name, make in (("default", KafkaNetClient), ("in_process", in_process_client)):
        client = make(bootstrap_servers=["127.0.0.1:1"])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafka.net.selector"):
            assert client._net.run(held_up) == 1
        results[name] = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
        client.close()
    assert len(results["default"]) == 1 and "Other pollers will time out" in results["default"][0]
    assert results["in_process"] == []
    assert SLOW_TASK_THRESHOLD_SECONDS >= 1


# --------------------------------------------------------------------------- what a newcomer runs


def test_readme_never_puts_sudo_before_a_script_that_elevates_itself() -> None:
    """`sudo scripts/build-image` fails as root on a machine without sudo, and the script
    already runs its privileged steps through sudo only when not root."""
    for match in re.finditer(r"^\s*sudo (scripts/[\w.-]+)", (REPO / "README.md").read_text(),
                             re.MULTILINE):
        script = (REPO / match.group(1)).read_text()
        assert "geteuid()" not in script and "id -u" not in script, match.group(0)


def test_dashboards_generate_without_the_sdk_says_what_to_install() -> None:
    """In the demo's environment (no grafana-foundation-sdk) --help and a run give one line
    naming the extra to install, which pyproject.toml defines."""
    code = ("import runpy, sys\n"
            "sys.modules['grafana_foundation_sdk'] = None  # as if not installed\n"
            "sys.argv = ['generate', *sys.argv[1:]]\n"
            "runpy.run_module('dashboards.generate', run_name='__main__')\n")
    for args in (["--help"], ["--out-dir", "unused"]):
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "pip install -e '.[dashboards]'" in done.stderr
        assert not (REPO / "unused").exists()
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(r.startswith("grafana-foundation-sdk") for r in extras["dashboards"])


def test_generating_into_the_charts_files_is_refused_and_contributing_does_not_say_so(
) -> None:
    from dashboards.generate import CHART_FILES_DIR, main

    rules = CHART_FILES_DIR / "alerts" / "rules.yaml"
    assert not rules.exists()
    assert main(["--out-dir", str(CHART_FILES_DIR)]) == 2
    assert not rules.exists()  # the chart reads alerts/rules-template.yaml only
    assert "--out-dir deploy/helm" not in (REPO / "CONTRIBUTING.md").read_text()


def test_dashboards_generate_help_names_no_tunable_the_rules_do_not_use() -> None:
    from dashboards.generate import AlertSettings, render_rules, render_rules_template

    rules = render_rules(AlertSettings()) + render_rules_template()
    done = subprocess.run([sys.executable, "-m", "dashboards.generate", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for field in ("keep_firing_for",):
        if field not in rules:
            assert field not in done.stdout, field


def test_the_handler_contributing_shows_is_the_code() -> None:
    """"Adding a Kafka API" quotes the smallest real handler and its call: each line it shows
    stands in the module it names, so the example cannot drift from the code."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Adding a Kafka API"):text.index("## Commits and pull requests")]
    blocks = section.split("```python")[1:]
    assert len(blocks) == 2
    for block, module in zip(
        blocks, ("exporter/collect/apis/describe_cluster.py", "exporter/collect/groups.py"),
        strict=True,
    ):
        code = {line.strip() for line in (REPO / module).read_text().splitlines()}
        shown = [line.strip() for line in block.split("```")[0].splitlines() if line.strip()]
        assert shown and all(line in code for line in shown), module
