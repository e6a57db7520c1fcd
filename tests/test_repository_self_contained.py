"""The repository is self-contained: no file points at a path of one developer's machine.

Code, docs and tests cite the repository's own files (e.g. docs/kafka-semantics.md,
tests/data/real-kafka-4.0/) by relative path, so a fresh clone has everything they refer to.
Paths *inside the container image or a pod* (`/opt/venv`, `/etc/kafka-txn-exporter`, `/tmp`,
`/usr/...`) are the product's own layout and stay allowed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Roots that only exist on a particular workstation or CI runner, never in the product's image.
# Spelled in pieces so this file does not match itself.
_MACHINE_ROOTS = ("wo" + "rk", "ho" + "me", "ro" + "ot", "Us" + "ers", "mn" + "t", "med" + "ia",
                  "scr" + "atch")
MACHINE_PATH = re.compile(
    r"(?<![\w.~$/-])/(?:" + "|".join(_MACHINE_ROOTS) + r")/[\w.-]"
    r"|\b[A-Za-z]:\\(?:" + "Us" + r"ers|Documents and Settings)\\"
)


def repository_files() -> list[Path]:
    """Tracked files plus new files not ignored (so a path is caught before it is committed)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot list the repository's files with git: {exc}")
    names = sorted({n for n in out.decode().split("\0") if n})
    return [REPO / n for n in names if (REPO / n).is_file()]


def test_pattern_catches_machine_paths_and_allows_container_paths() -> None:
    machine = ["/" + "work/main/x.py", "see /" + "home/alice/notes.md", "(/" + "root/.cache/pip)",
               "C:\\" + "Users\\bob\\repo", "/" + "Users/carol/src"]
    product = ["/opt/venv/bin/python", "/etc/kafka-txn-exporter/config.yaml", "/tmp/x",
               "/usr/share/prometheus", "docs/kafka-semantics.md", "tests/data/real-kafka-4.0/",
               "https://example.org/home/page", "${HOME}/x", "~/work/x", "/var/run/secrets"]
    assert [s for s in machine if not MACHINE_PATH.search(s)] == []
    assert [s for s in product if MACHINE_PATH.search(s)] == []


def test_no_file_names_a_path_of_a_developer_machine() -> None:
    files = repository_files()
    assert len(files) > 50, "the file listing is implausibly small"
    offenders: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
        for lineno, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:120]}")
    assert offenders == [], "absolute paths of a machine:\n" + "\n".join(offenders[:50])


def test_cited_semantics_anchors_exist() -> None:
    """Every section of docs/kafka-semantics.md cited (`...md#name`) exists."""
    semantics = (REPO / "docs" / "kafka-semantics.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', semantics))
    assert {"find-hanging", "late-transactions", "abort"} <= anchors
    cited: set[tuple[str, str]] = set()
    for path in repository_files():
        if path.suffix not in {".py", ".md", ".yaml", ".toml"}:
            continue
        text = path.read_text(encoding="utf-8")
        for anchor in re.findall(r"kafka-semantics\.md#([\w-]+)", text):
            cited.add((str(path.relative_to(REPO)), anchor))
    assert cited, "nothing cites docs/kafka-semantics.md"
    assert sorted((f, a) for f, a in cited if a not in anchors) == []
