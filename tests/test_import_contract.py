"""The layers of `exporter/`, enforced on its source (every import, module level or lazy).

- `model`, `settings`, `rules`, `orphans`, `analyze` and `metrics` are pure: no I/O library,
  directly or through another exporter module.
- `collect` never imports `expose` (data flows collect -> model -> analyze -> expose).
- `collect` never imports `analyze` nor the orphan tracker (`orphans`): the poller reports
  what Kafka answered; verdicts and the memory across polls come after it.
- Only `demo` and the `sim` command (in `cli`) import the simulator (`kafka_sim`).
- No import cycles between exporter modules.
- `scan` and `--version` load neither the HTTP server nor the scheduler.

Imports under `if TYPE_CHECKING:` are for annotations only and are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import exporter

PACKAGE_DIR = Path(exporter.__file__).parent
PURE_MODULES = (
    "exporter.model", "exporter.settings", "exporter.rules", "exporter.orphans",
    "exporter.analyze", "exporter.metrics",
)
IO_LIBRARIES = frozenset({
    "socket", "ssl", "asyncio", "selectors", "http", "urllib", "wsgiref", "socketserver",
    "subprocess", "kafka", "prometheus_client", "structlog", "apscheduler", "logging", "yaml",
    "bcrypt", "pyarrow", "pyspark",
})
"""`kafka` as a whole: the pure layer uses none of kafka-python (its network client least)."""
SIMULATOR_IMPORTERS = frozenset({"exporter.demo", "exporter.cli"})


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str]) -> Iterator[str]:
    """Every module imported anywhere in `tree`, resolved to an exporter module if it is one."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (name for child in node.orelse for name in _imports(child, modules))
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield candidate if candidate in modules else node.module
        yield from _imports(node, modules)


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
    modules = set(files)
    return {
        name: set(_imports(ast.parse(path.read_text(encoding="utf-8")), modules))
        for name, path in files.items()
    }


GRAPH = import_graph()


def _internal(imported: str) -> str | None:
    """The exporter module an import names (a package's `__init__` for `exporter.x.y`)."""
    parts = imported.split(".")
    while parts:
        name = ".".join(parts)
        if name in GRAPH:
            return name
        parts.pop()
    return None


def _closure(start: str) -> dict[str, list[str]]:
    """Every import reachable from `start`, with the chain of exporter modules leading to it."""
    chains: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for imported in GRAPH[current]:
            target = _internal(imported) if imported.startswith("exporter") else None
            key = target or imported
            if key not in chains:
                chains[key] = [*chains[current], key]
                if target is not None:
                    todo.append(target)
    return chains


def test_the_graph_sees_the_package() -> None:
    assert {"exporter.cli", "exporter.app", "exporter.collect.poll", "exporter.expose.http",
            "exporter.snapshots", *PURE_MODULES} <= set(GRAPH)
    assert "exporter.snapshots" in GRAPH["exporter.scheduler"]


def test_pure_modules_import_no_io() -> None:
    problems = []
    for module in PURE_MODULES:
        for imported, chain in _closure(module).items():
            if imported.split(".")[0] in IO_LIBRARIES:
                problems.append(" -> ".join(chain))
    assert not problems, "pure modules reach I/O:\n" + "\n".join(sorted(problems))


def test_collect_does_not_import_expose() -> None:
    problems = []
    for module in (m for m in GRAPH if m.startswith("exporter.collect")):
        for imported, chain in _closure(module).items():
            if imported == "exporter.expose" or imported.startswith("exporter.expose."):
                problems.append(" -> ".join(chain))
    assert not problems, "collect reaches expose:\n" + "\n".join(sorted(problems))


def test_collect_imports_neither_analyze_nor_the_orphan_tracker() -> None:
    assert "exporter.orphans" in _closure("exporter.scan")  # the check sees through chains
    problems = []
    for module in (m for m in GRAPH if m.startswith("exporter.collect")):
        for imported, chain in _closure(module).items():
            if imported in ("exporter.analyze", "exporter.orphans"):
                problems.append(" -> ".join(chain))
    assert not problems, "collect reaches analysis:\n" + "\n".join(sorted(problems))


def test_only_demo_and_the_sim_command_import_the_simulator() -> None:
    importers = {m for m, imports in GRAPH.items()
                 if any(i == "kafka_sim" or i.startswith("kafka_sim.") for i in imports)}
    assert importers <= SIMULATOR_IMPORTERS, sorted(importers - SIMULATOR_IMPORTERS)


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for imported in GRAPH[node]:
            target = _internal(imported) if imported.startswith("exporter") else None
            if target is None or target == node:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles() -> None:
    # A package's __init__ re-exporting its own submodules is not a cycle of layers.
    cycles = [c for c in _cycles()
              if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert not cycles, f"import cycles: {cycles}"


def test_the_contract_catches_a_violation() -> None:
    """The checks above can fail: a fake pure module importing socket, a fake cycle."""
    saved = {k: set(v) for k, v in GRAPH.items()}
    try:
        GRAPH["exporter.model"].add("exporter.settings")
        GRAPH["exporter.settings"].add("exporter.model")
        GRAPH["exporter.settings"].add("socket")
        assert _cycles()
        assert "socket" in _closure("exporter.analyze")
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def _loaded_after(*argv: str) -> set[str]:
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['kafka-txn-exporter', {', '.join(repr(a) for a in argv)}]\n"
        "try:\n"
        "    runpy.run_module('exporter', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    return set(done.stdout.rsplit("MODULES ", 1)[1].split())


def test_scan_and_version_load_neither_http_server_nor_scheduler(tmp_path: Path) -> None:
    heavy = {"exporter.expose.http", "exporter.scheduler", "exporter.app", "apscheduler",
             "wsgiref.simple_server"}
    assert not heavy & _loaded_after("--version")
    config = tmp_path / "c.yaml"
    # An unreachable cluster (a closed port) and a short timeout: scan fails fast, exit 2.
    config.write_text("clusters: [{name: a, bootstrap_servers: ['127.0.0.1:1'], "
                      "request_timeout_seconds: 1}]\n")
    loaded = _loaded_after("scan", "--config", str(config))
    assert "exporter.scan" in loaded  # it really ran the scan
    assert not heavy & loaded, sorted(heavy & loaded)


def test_a_quiet_scan_loads_no_yaml_no_structlog_and_none_of_kafka_pythons_clients() -> None:
    """What `scan --bootstrap-servers` needs is the poller: no config file parser, no log
    renderer until a line is logged, none of kafka-python's clients (see
    exporter/collect/_kafka_package.py)."""
    loaded = _loaded_after("scan", "--bootstrap-servers", "127.0.0.1:1", "--log.level", "error")
    assert "exporter.collect.poll" in loaded  # it really polled
    unneeded = {"yaml", "structlog", "exporter.webconfig", "kafka.admin", "kafka.producer",
                "kafka.consumer.group", "kafka.net", "kafka.protocol.admin.acl"}
    assert not unneeded & loaded, sorted(unneeded & loaded)
