"""The exporter's version and the source revision it was built from (`--version`, build_info).

Where the revision comes from, first found wins:
1. `exporter/_revision.py`, written at image build time from the `REVISION` build argument
   (see the Dockerfile) and installed with the package; it is not tracked by git.
2. `git rev-parse HEAD` when the package runs from a git checkout (an editable install).
3. Otherwise "unknown" (a wheel installed from a plain source tree).

The lookup runs once per process and never fails: a missing git, a timeout or an odd value
all give "unknown".
"""

from __future__ import annotations

import functools
import importlib
import platform
import re
import subprocess
from pathlib import Path

from exporter import __version__

PROG = "kafka-txn-exporter"
UNKNOWN = "unknown"
GIT_TIMEOUT_SECONDS = 2.0
_REVISION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")


def _clean(value: object) -> str | None:
    """A revision is a short token (a commit hash or tag); anything else is not trusted."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text == UNKNOWN or not _REVISION_RE.fullmatch(text):
        return None
    return text


def _from_build() -> str | None:
    try:
        module = importlib.import_module("exporter._revision")
    except ImportError:
        return None
    return _clean(getattr(module, "REVISION", None))


def _from_git() -> str | None:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():  # a directory in a clone, a file in a worktree
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS, check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return _clean(done.stdout) if done.returncode == 0 else None


@functools.cache
def revision() -> str:
    """The source revision (a git commit hash) or "unknown"."""
    return _from_build() or _from_git() or UNKNOWN


def python_version() -> str:
    return platform.python_version()


def version_line() -> str:
    """`--version`: `kafka-txn-exporter 0.1.0 (revision 1a2b..., python 3.11.2)`."""
    return f"{PROG} {__version__} (revision {revision()}, python {python_version()})"
