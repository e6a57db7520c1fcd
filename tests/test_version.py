"""Where `--version` and build_info find the source revision: build file, git, else unknown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import exporter
from exporter import version

PACKAGE = Path(exporter.__file__).parent


def _installed_copy(tmp_path: Path, revision_file: str | None) -> Path:
    """The package as pip installs it: outside any git checkout, optionally with _revision.py."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__", "_revision.py", "spark"))
    if revision_file is not None:
        (site / "exporter" / "_revision.py").write_text(revision_file)
    return site


def _revision_of(site: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", "from exporter.version import revision; print(revision())"],
        capture_output=True, text=True, env=env, cwd=site, timeout=30, check=True,
    )
    return done.stdout.strip()


def test_build_time_revision_file_wins(tmp_path: Path) -> None:
    site = _installed_copy(tmp_path, 'REVISION = "0123456789abcdef0123456789abcdef01234567"\n')
    assert _revision_of(site) == "0123456789abcdef0123456789abcdef01234567"


def test_without_build_file_or_git_the_revision_is_unknown(tmp_path: Path) -> None:
    assert _revision_of(_installed_copy(tmp_path, None)) == "unknown"


def test_an_odd_build_value_is_not_trusted(tmp_path: Path) -> None:
    site = _installed_copy(tmp_path, 'REVISION = "abc; rm -rf / \\n<script>"\n')
    assert _revision_of(site) == "unknown"


def test_in_a_checkout_the_revision_is_git_head() -> None:
    head = subprocess.run(["git", "-C", str(PACKAGE.parent), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert version.revision() == head
    assert version.version_line().startswith(f"kafka-txn-exporter {exporter.__version__} "
                                             f"(revision {head}, python 3.")
