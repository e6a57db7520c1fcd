"""Both dashboards type-check against @grafana/schema, Grafana's own dashboard types:
the TypeScript compiler checks each generated JSON as a `Dashboard` object literal, so
a key the schema has no place for (e.g. `auto`, `auto_count`, `auto_min` on a query or data
source variable) is an error. scripts/install-grafana-schema installs both into a cache outside
the repository; scripts/test runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dashboards.generate import HEALTH_FILE, OVERVIEW_FILE, render_all

REPO = Path(__file__).resolve().parents[2]
INSTALLER = REPO / "scripts" / "install-grafana-schema"

# Enums of the schema are nominal in TypeScript; JSON carries their string values, so each
# string enum is widened to the union of its values (`${E}`), every other type kept as it is.
PRELUDE = """import type { Dashboard } from "@grafana/schema";
type Json<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]: Json<T[K]> } : T;
"""


def _schema_home() -> Path:
    result = subprocess.run([str(INSTALLER), "--print-home"], capture_output=True, text=True,
                            check=True)
    home = Path(result.stdout.strip())
    assert (home / "node_modules" / ".bin" / "tsc").exists(), (
        f"@grafana/schema and typescript are not installed in {home}: run {INSTALLER}"
    )
    return home


def _type_check(home: Path, dashboards: dict[str, str], tmp_path: Path) -> str:
    """tsc's errors (empty when every dashboard is a valid `Dashboard`)."""
    workdir = Path(os.path.realpath(home)) / "check" / tmp_path.name
    workdir.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in dashboards.items():
        ts = workdir / (Path(name).stem + ".ts")
        ts.write_text(PRELUDE + f"export const dashboard: Json<Dashboard> = {text};\n",
                      encoding="utf-8")
        files.append(ts.name)
    (workdir / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {"strict": True, "noEmit": True, "module": "nodenext",
                            "moduleResolution": "nodenext", "target": "es2022",
                            "skipLibCheck": True},
        "files": files,
    }), encoding="utf-8")
    try:
        result = subprocess.run(
            [str(home / "node_modules" / ".bin" / "tsc"), "-p", str(workdir / "tsconfig.json")],
            capture_output=True, text=True, timeout=300, cwd=workdir,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return (result.stdout + result.stderr).strip()


@pytest.mark.system_tools  # node + @grafana/schema + typescript (scripts/install-grafana-schema)
def test_both_dashboards_validate_against_grafana_schema(tmp_path: Path) -> None:
    home = _schema_home()
    generated = render_all()
    dashboards = {name: generated[name] for name in (OVERVIEW_FILE, HEALTH_FILE)}
    assert _type_check(home, dashboards, tmp_path) == ""

    # The check rejects what the schema rejects: the SDK's interval-only fields on a query variable.
    board = json.loads(dashboards[OVERVIEW_FILE])
    board["templating"]["list"][1].update(auto=False, auto_count=30, auto_min="10s")
    errors = _type_check(home, {OVERVIEW_FILE: json.dumps(board)}, tmp_path)
    assert "'\"auto\"' does not exist" in errors, errors
