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


# The project's own tracker: an issue's number in prose (also wrapped onto the next line), in an
# anchor or in a file name, and the numbered items of such an issue. Third-party references stay
# allowed: a KIP (KIP-664), a Jira id (KAFKA-12345), a URL of another project's issue list.
# Spelled in pieces so this file does not match itself.
_ISSUE = "iss" + "ue"
_ITEM = "ite" + "m"
TRACKER_REFERENCE = re.compile(
    r"(?<![/\w])" + _ISSUE + r"s?(?:[ _-]|\n[ \t#*>/-]*)?#?\d+"  # also wrapped onto the next line
    r"|\bite" + r"ms? \d+\b"
    r"|\bro" + r"und (?:one|two|three|four|five|\d+)\b",
    re.IGNORECASE,
)
TEST_NAMED_AFTER_TRACKER = re.compile(
    r"(?:^|_)(?:" + _ISSUE + r"|ro" + r"und|ite" + r"m)[_-]?\d+|def test\w*_" + _ISSUE + r"\b",
    re.IGNORECASE,
)


def test_tracker_pattern_catches_our_issue_numbers_and_allows_public_references() -> None:
    ours = [_ISSUE + " 30", "(" + _ISSUE + " 28 " + _ITEM + " 5)", _ISSUE.title() + " 18:",
            _ISSUE + "s 17 and 18", "#5-" + _ISSUE + "-17-item-1-blocked", _ISSUE + "30",
            "the server that " + _ISSUE + "\n30 replaced", "(" + _ISSUE + " 26\n" + _ITEM + " 5)",
            "# see " + _ISSUE + "\n# 30",
            _ITEM + " 3: unknown is absent", "ro" + "und two"]
    public = ["KIP-664", "KAFKA-12345", "https://github.com/apache/kafka/" + _ISSUE + "s/123",
              "FLINK-38213", "a round trip", "round-robin over the leaders", "the issuer (iss)",
              "producer_epoch 30", "error 35"]
    assert [s for s in ours if not TRACKER_REFERENCE.search(s)] == []
    assert [s for s in public if TRACKER_REFERENCE.search(s)] == []
    assert TEST_NAMED_AFTER_TRACKER.search("tests/test_hostile_" + _ISSUE + "30.py")
    assert TEST_NAMED_AFTER_TRACKER.search("def test_panels_the_" + _ISSUE + "(")
    assert not TEST_NAMED_AFTER_TRACKER.search("tests/sim/test_fetch_sessions.py")


def test_no_file_names_an_issue_of_the_project_tracker() -> None:
    """Names say what things do: an issue number means nothing to a user and dates."""
    files = repository_files()
    assert len(files) > 50, "the file listing is implausibly small"
    offenders: list[str] = []
    for path in files:
        rel = str(path.relative_to(REPO))
        if rel.startswith("tests/") and TEST_NAMED_AFTER_TRACKER.search(path.name):
            offenders.append(f"{rel}: a test file named after an issue")
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
        hits = [m.start() for m in TRACKER_REFERENCE.finditer(text)]
        if rel.startswith("tests/"):
            hits += [m.start() for m in TEST_NAMED_AFTER_TRACKER.finditer(text)]
        lines = text.splitlines()
        for lineno in sorted({text.count("\n", 0, start) + 1 for start in hits}):
            offenders.append(f"{rel}:{lineno}: {lines[lineno - 1].strip()[:120]}")
    assert offenders == [], (
        f"{len(offenders)} references to the project's tracker (say the behaviour instead):\n"
        + "\n".join(offenders[:60])
    )


def _github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_cited_benchmark_results_anchors_exist() -> None:
    """A renamed heading of benchmarks/RESULTS.md takes every link to it along."""
    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    anchors = {_github_slug(h) for h in re.findall(r"^#+ (.*)$", results, re.M)}
    anchors |= set(re.findall(r'<a id="([\w-]+)"></a>', results))
    assert "5-blocked-consumer-groups-requests-and-cpu-per-poll" in anchors
    cited: set[tuple[str, str]] = set()
    for path in repository_files():
        if path.suffix not in {".py", ".md", ".yaml", ".toml", ".json"}:
            continue
        text = path.read_text(encoding="utf-8")
        for anchor in re.findall(r"RESULTS\.md#([\w-]+)", text):
            cited.add((str(path.relative_to(REPO)), anchor))
    assert cited, "nothing cites benchmarks/RESULTS.md by anchor"
    assert sorted((f, a) for f, a in cited if a not in anchors) == []
