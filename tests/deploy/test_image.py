"""The container image, built from the repository's Dockerfile and run, without a Docker engine.

Build: scripts/build-image, i.e. buildah (`--isolation chroot`, vfs storage in a scratch
directory; no daemon) runs the Dockerfile unchanged. The base is the official
`python:3.11-slim-bookworm` where a registry is reachable; here none is, so scripts/image-base
makes its stand-in from Debian's packages (debootstrap; cached between runs) and the build gets
it with `--build-arg PYTHON_IMAGE=...`, the Dockerfile's own switch. pip inside the build reads
this host's pip configuration (CA bundle, wheel directories, index mirrors), mounted read-only
into the build's RUN steps only (`buildah bud --volume`), which leaves no trace in the image.

Run: the image's own configuration (`buildah inspect`: User, Env, WorkingDir, Entrypoint, Cmd,
Healthcheck) is applied the way a container runtime does, with the tools a runtime uses: new
mount and PID namespaces (`unshare`), the container's root filesystem bind-mounted READ-ONLY
(as `docker run --read-only`), /proc and a minimal /dev, the config file and the secret
bind-mounted read-only, then `chroot` to it as the image's user. The network namespace is the
host's (as `docker run --network host`): the exporter reaches the simulated Kafka cluster
(`kafka-txn-sim`, run on loopback by the test; the image holds only the exporter) and the test
scrapes the container on loopback. The HEALTHCHECK runs inside the running container's
namespaces (`nsenter`, as `docker exec`). Every check is made from outside: /proc of the
container's process, its HTTP answers, its exit status and output.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_sim.producer import hanging_transaction
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
BIN_DIR = Path(sys.executable).parent
SUDO = [] if os.geteuid() == 0 else ["sudo", "-n"]
IMAGE = "localhost/kafka-txn-exporter:test"
CONFIG_PATH = "/etc/kafka-txn-exporter/exporter.yaml"  # the image's CMD reads it
HANG_TOPIC = "payments"
# `python -m venv` puts these into every virtual environment (ensurepip): not ours to declare.
VENV_BOOTSTRAP = {"pip", "setuptools"}


# --------------------------------------------------------------------------- Dockerfile text


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


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(
        (REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project


# --------------------------------------------------------------------------- buildah


@dataclass(frozen=True)
class Store:
    """A private buildah storage (vfs driver) under a scratch directory."""

    root: Path

    def args(self) -> list[str]:
        return ["--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
                "--storage-driver", "vfs"]

    def buildah(self, *args: str, timeout: float = 120) -> str:
        run = subprocess.run(
            [*SUDO, "buildah", *self.args(), *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        assert run.returncode == 0, f"buildah {' '.join(args)}: {run.stdout}{run.stderr}"
        return run.stdout


@dataclass(frozen=True)
class Image:
    store: Store
    revision: str
    version: str
    inspect: dict[str, Any]

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.inspect["Docker"]["config"]
        return config


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """The image built from the Dockerfile by buildah, on the local bookworm base."""
    for tool in ("buildah", "debootstrap", "unshare", "nsenter", "chroot"):
        assert shutil.which(tool) or Path("/usr/sbin", tool).exists(), (
            f"{tool} is missing: scripts/install-image-deps installs it")
    scratch = tmp_path_factory.mktemp("image")
    store = Store(scratch / "buildah")
    built = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build-image"), "--tag", IMAGE,
         "--root", str(store.root / "storage"), "--runroot", str(store.root / "run")],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.strip() == IMAGE
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    (inspect,) = [json.loads(store.buildah("inspect", "--type", "image", IMAGE))]
    try:
        yield Image(store, revision, _project()["version"], inspect)
    finally:
        subprocess.run([*SUDO, "buildah", *store.args(), "rm", "--all"],
                       capture_output=True, timeout=120, check=False)
        subprocess.run([*SUDO, "rm", "-rf", str(store.root)], timeout=300, check=False)


@dataclass
class Container:
    """A root filesystem of the image (a buildah working container) and how to run it."""

    image: Image
    rootfs: Path

    def _mount_points(self, mounts: dict[str, Path]) -> None:
        # Made in the container's own writable layer, as a runtime does, before the root
        # filesystem is remounted read-only for the run.
        for target, source in mounts.items():
            where = self.rootfs / target.lstrip("/")
            if source.is_dir():
                subprocess.run([*SUDO, "mkdir", "-p", str(where)], check=True, timeout=30)
            else:
                subprocess.run([*SUDO, "mkdir", "-p", str(where.parent)], check=True, timeout=30)
                subprocess.run([*SUDO, "touch", str(where)], check=True, timeout=30)

    def _env(self, extra: dict[str, str]) -> list[str]:
        env = dict(e.split("=", 1) for e in self.image.config.get("Env") or [])
        # As Docker: HOME from the image's passwd entry of the user, else "/".
        uid = (self.image.config["User"] or "0").partition(":")[0]
        homes = {f[2]: f[5] for f in (line.split(":") for line in
                 (self.rootfs / "etc" / "passwd").read_text().splitlines()) if len(f) > 5}
        env.setdefault("HOME", homes.get(uid, "/"))
        env.update(extra)
        return [f"{k}={v}" for k, v in env.items()]

    def command(self, argv: Sequence[str] | None = None, *, entrypoint: Sequence[str] | None =
                None, mounts: dict[str, Path] | None = None,
                env: dict[str, str] | None = None) -> list[str]:
        """The argv that runs the container like `docker run --read-only --network host
        [-v SRC:TARGET:ro ...] [-e K=V ...] [--entrypoint ...] IMAGE [argv]`."""
        config = self.image.config
        mounts = mounts or {}
        self._mount_points(mounts)
        process = [*(entrypoint if entrypoint is not None else config["Entrypoint"] or []),
                   *(argv if argv is not None else config["Cmd"] or [])]
        user = config["User"] or "0:0"
        workdir = config.get("WorkingDir") or "/"
        q = shlex.quote
        root = q(str(self.rootfs))
        lines = [
            "set -eu",
            f"mount --bind {root} {root}",
            f"mount -t proc -o nosuid,nodev,noexec proc {root}/proc",
            f"mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs {root}/dev",
            "for d in null zero full random urandom; do"
            f' : > {root}/dev/$d; mount --bind /dev/$d {root}/dev/$d; done',
        ]
        for target, source in mounts.items():
            where = q(str(self.rootfs / target.lstrip("/")))
            lines.append(f"mount --bind {q(str(source))} {where}")
            lines.append(f"mount -o remount,bind,ro {where}")
        lines.append(f"mount -o remount,bind,ro {root}")
        inner = ["/usr/bin/env", "-i", "-C", workdir, *self._env(env or {}), *process]
        lines.append(
            f"exec chroot --userspec={q(user)} --groups= {root} {shlex.join(inner)}")
        return [*SUDO, "unshare", "--mount", "--pid", "--fork", "--kill-child",
                "--propagation", "private", "sh", "-c", "\n".join(lines)]

    def run(self, argv: Sequence[str] | None = None, *, timeout: float = 60,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(argv, **kwargs), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def exec_in(self, pid: int, argv: Sequence[str],
                env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """`docker exec`: the running container's namespaces, root and user."""
        user, _, group = (self.image.config["User"] or "0:0").partition(":")
        return subprocess.run(
            [*SUDO, "nsenter", f"--target={pid}", "--mount", "--pid", "--root", "--wd",
             f"--setuid={user}", f"--setgid={group or user}",
             "/usr/bin/env", "-i", *self._env(env), *argv],
            capture_output=True, text=True, timeout=60, check=False,
        )


@pytest.fixture(scope="module")
def container(image: Image) -> Iterator[Container]:
    name = "kte-image-test"
    image.store.buildah("from", "--name", name, "--pull=never", IMAGE)
    try:
        rootfs = Path(image.store.buildah("mount", name).strip())
        yield Container(image, rootfs)
    finally:
        subprocess.run([*SUDO, "buildah", *image.store.args(), "umount", name],
                       capture_output=True, timeout=60, check=False)


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def _wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _child_pid(parent: int, timeout: float = 10) -> int:
    """The container's first process: the one child of `unshare --fork`."""
    children = Path(f"/proc/{parent}/task/{parent}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = children.read_text().split() if children.exists() else []
        if found:
            return int(found[0])
        time.sleep(0.05)
    raise AssertionError("the container's process did not start")


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _start_simulator(*args: str, env: dict[str, str] | None = None,
                     ) -> tuple[subprocess.Popen[str], str]:
    """`kafka-txn-sim` (the simulator's own distribution, from this venv) on loopback."""
    proc = subprocess.Popen(
        [str(BIN_DIR / "kafka-txn-sim"), "--host", "127.0.0.1", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert proc.stdout is not None
    bootstrap = proc.stdout.readline().strip()
    assert re.fullmatch(r"127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+)*", bootstrap), bootstrap
    return proc, bootstrap


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def simulator() -> Iterator[str]:
    """Three brokers with one hanging transaction on payments-1 backdated 400 s (past
    transaction.max.timeout.ms 60 s + the late buffer), made as the real-broker capture's hang-1
    (see tests/test_e2e_serve.py)."""
    proc, bootstrap = _start_simulator(
        "--brokers", "3", "--topics", f"orders:3,{HANG_TOPIC}:2",
        "--config", "transaction.max.timeout.ms=60000",
        "--config", "transaction.partition.verification.enable=false")
    try:
        hanging_transaction(bootstrap, "image-hang-1", HANG_TOPIC, 1, backdate_ms=400_000)
        yield bootstrap
    finally:
        _stop(proc)


def _config_dir(tmp_path: Path, bootstrap: str, port: int, cluster_extra: str = "") -> Path:
    """A directory to mount at /etc/kafka-txn-exporter, readable by the image's user."""
    config = tmp_path / "etc"
    config.mkdir(mode=0o755)
    (config / "exporter.yaml").write_text(
        "clusters:\n"
        "  - name: sim\n"
        f"    bootstrap_servers: {json.dumps(bootstrap.split(','))}\n"
        "    poll_interval_seconds: 1s\n"
        "    request_timeout_seconds: 5s\n"
        "    late_buffer_seconds: 10s\n"
        "    min_reported_duration_seconds: 0\n"
        "    labels: {env: image}\n"
        f"{cluster_extra}"
        f"web:\n  listen_address: 127.0.0.1\n  port: {port}\n"
        "log:\n  format: json\n"
    )
    return config


@dataclass
class Serving:
    proc: subprocess.Popen[str]
    pid: int
    base: str
    log: Path

    def logged(self) -> str:
        return self.log.read_text()[-3000:]


@contextmanager
def _serve(container: Container, tmp_path: Path, port: int, mounts: dict[str, Path],
           env: dict[str, str]) -> Iterator[Serving]:
    """`docker run --read-only --network host -v ... -e ... IMAGE`: the image's own
    ENTRYPOINT + CMD (serve --config /etc/kafka-txn-exporter/exporter.yaml), ready."""
    log = tmp_path / "container.log"
    with log.open("w") as out:
        proc = subprocess.Popen(container.command(mounts=mounts, env=env),
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    pid: int | None = None
    try:
        pid = _child_pid(proc.pid)
        serving = Serving(proc, pid, f"http://127.0.0.1:{port}", log)
        _wait_until(lambda: _http_get(serving.base + "/readyz")[0] == 200
                    or proc.poll() is not None, 60, "/readyz 200")
        assert proc.poll() is None, serving.logged()
        yield serving
    finally:
        if proc.poll() is None:
            # `unshare --kill-child` cannot stop it: chroot --userspec changes the process's
            # credentials, which clears its parent-death signal. Killing the container's PID 1
            # ends its PID namespace, as `docker kill` does.
            if pid is not None:
                subprocess.run([*SUDO, "kill", "-KILL", str(pid)], check=False, timeout=30)
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- the running image


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_image_serves_the_hanging_transaction_as_uid_10001_from_a_read_only_root(
    container: Container, simulator: str, tmp_path: Path
) -> None:
    port = _free_port()
    config = _config_dir(tmp_path, simulator, port)
    health_env = {"KAFKA_TXN_EXPORTER_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"}
    with _serve(container, tmp_path, port, {"/etc/kafka-txn-exporter": config},
                health_env) as serving:
        pid, base = serving.pid, serving.base
        # Non-root: the process's real, effective, saved and filesystem ids, read from outside.
        status = _proc_status(pid)
        assert status["Uid"].split() == ["10001"] * 4, status["Uid"]
        assert status["Gid"].split() == ["10001"] * 4, status["Gid"]
        assert status["Groups"] in ("", "10001"), status["Groups"]
        assert status["NSpid"].split()[-1] == "1"  # PID 1 of its own namespace, as in Docker
        # Its root filesystem is mounted read-only (what the process itself sees as "/").
        root_mount = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text()
                      .splitlines() if line.split()[4] == "/"]
        assert root_mount and "ro" in root_mount[-1][5].split(","), root_mount

        _wait_until(lambda: "kafka_partitions_with_hanging_transactions{" in
                    _http_get(base + "/metrics")[1], 30, "the hanging series")
        code, text = _http_get(base + "/metrics")
        assert code == 200
        s = _samples(text)
        assert s[("kafka_txn_exporter_up", frozenset({("cluster", "sim"), ("env", "image")}))] == 1
        late = {dict(labels)["broker"]: value for (name, labels), value in s.items()
                if name == "kafka_partitions_with_late_transactions"}
        assert sorted(late) == ["1", "2", "3"] and sum(late.values()) == 1
        assert sum(v for (n, _), v in s.items()
                   if n == "kafka_partitions_with_hanging_transactions") == 1
        (age_labels,) = [dict(labels) for (n, labels) in s
                         if n == "kafka_late_transaction_age_seconds"]
        assert (age_labels["topic"], age_labels["partition"]) == (HANG_TOPIC, "1")
        assert age_labels["classification"] == "hanging"

        # HEALTHCHECK, as the engine runs it: inside the container, as its user, with its env.
        test = container.image.config["Healthcheck"]["Test"]
        assert test[0] == "CMD"
        healthy = container.exec_in(pid, test[1:], health_env)
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        # ... and it fails when /healthz does not answer (a wrong port here).
        wrong = {"KAFKA_TXN_EXPORTER_HEALTHCHECK_URL": f"http://127.0.0.1:{_free_port()}/healthz"}
        assert container.exec_in(pid, test[1:], wrong).returncode != 0

        # docker stop: SIGTERM to PID 1.
        os.kill(pid, signal.SIGTERM)
        assert serving.proc.wait(timeout=15) == 0, serving.logged()
    logged = serving.log.read_text()
    assert "Traceback" not in logged and "Read-only file system" not in logged, logged[-3000:]


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_image_reads_the_kafka_password_from_a_mounted_secret(
    container: Container, tmp_path: Path
) -> None:
    """SCRAM-SHA-512 with `password_file` on a read-only secret mount (/run/secrets), readable
    only by the image's uid, as `docker run -v ...:/run/secrets/kafka-password:ro`."""
    password = "image-test-" + os.urandom(8).hex()
    sim, bootstrap = _start_simulator(
        "--brokers", "1", "--topics", "orders:1", "--sasl-mechanisms", "SCRAM-SHA-512",
        "--sasl-user", "txn-exporter:KTE_IMAGE_TEST_PASSWORD",
        env=dict(os.environ, KTE_IMAGE_TEST_PASSWORD=password))
    try:
        secrets = tmp_path / "secrets"
        secrets.mkdir(mode=0o755)
        (secrets / "kafka-password").write_text(password + "\n")
        secret = str(secrets / "kafka-password")
        subprocess.run([*SUDO, "chown", "10001:10001", secret], check=True, timeout=30)
        subprocess.run([*SUDO, "chmod", "0400", secret], check=True, timeout=30)
        port = _free_port()
        config = _config_dir(tmp_path, bootstrap, port, (
            "    sasl:\n"
            "      mechanism: SCRAM-SHA-512\n"
            "      username: txn-exporter\n"
            "      password_file: /run/secrets/kafka-password\n"))
        mounts = {"/etc/kafka-txn-exporter": config, "/run/secrets": secrets}
        with _serve(container, tmp_path, port, mounts, {}) as serving:
            text = _http_get(serving.base + "/metrics")[1]
            s = _samples(text)
            assert s[("kafka_txn_exporter_up",
                      frozenset({("cluster", "sim"), ("env", "image")}))] == 1
            assert "AUTHENTICATION_FAILED" not in text
            assert password not in text
        assert password not in serving.log.read_text()
    finally:
        _stop(sim)


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_version_prints_the_version_and_revision_of_its_labels(container: Container) -> None:
    image = container.image
    labels = image.config["Labels"]
    assert labels["org.opencontainers.image.version"] == image.version
    assert labels["org.opencontainers.image.revision"] == image.revision
    # Built on the local Debian stand-in for python:3.11-slim-bookworm (scripts/image-base).
    base = json.loads(image.store.buildah(
        "inspect", "--type", "image", labels["org.opencontainers.image.base.name"]))
    assert base["Docker"]["config"]["Labels"]["org.opencontainers.image.description"] \
        .startswith("Debian bookworm (python3,python3-venv,ca-certificates,passwd)")
    run = container.run(["--version"])
    assert run.returncode == 0, run.stdout + run.stderr
    # The build argument REVISION reached the installed package (exporter/version.py).
    assert re.fullmatch(
        rf"kafka-txn-exporter {re.escape(image.version)} \(revision {image.revision},"
        r" python 3\.11\.\d+\)\n", run.stdout), run.stdout


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_config_error_exits_with_status_2_naming_the_field(
    container: Container, tmp_path: Path
) -> None:
    """The entrypoint as Kubernetes runs it: a broken config stops the pod with a clear message."""
    config = tmp_path / "etc"
    config.mkdir(mode=0o755)
    (config / "exporter.yaml").write_text(
        "clusters:\n- name: a\n  bootstrap_servers: [a:9092]\n  pol: 1\n")
    run = container.run(mounts={"/etc/kafka-txn-exporter": config})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "pol" in run.stderr and "Traceback" not in run.stderr


_LIST_DISTRIBUTIONS = """
import importlib.metadata as md, json, os, platform, sys
env = {"os_name": os.name, "sys_platform": sys.platform, "platform_machine": platform.machine(),
       "platform_system": platform.system(), "platform_release": platform.release(),
       "platform_version": platform.version(),
       "platform_python_implementation": platform.python_implementation(),
       "python_version": ".".join(platform.python_version_tuple()[:2]),
       "python_full_version": platform.python_version(),
       "implementation_name": sys.implementation.name,
       "implementation_version": platform.python_version(), "extra": ""}
dists = [{"name": d.metadata["Name"], "version": d.version, "requires": d.requires or [],
          "files": [str(f) for f in d.files or []]} for d in md.distributions()]
print(json.dumps({"env": env, "dists": dists}))
"""


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_image_venv_holds_exactly_the_exporter_and_its_runtime_dependencies(
    container: Container,
) -> None:
    run = container.run(["-c", _LIST_DISTRIBUTIONS], entrypoint=["/opt/venv/bin/python"])
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    env: dict[str, str] = listed["env"]
    installed = {canonicalize_name(d["name"]): d for d in listed["dists"]}

    # Resolve pyproject.toml's runtime dependencies and the image's extras -- kerberos (always)
    # and aws (the default EXTRAS, for AWS_MSK_IAM) -- through the installed distributions' own
    # requirements (markers evaluated for the image's interpreter, no further extras).
    project = _project()
    needed: dict[str, SpecifierSet] = {}
    extras = project["optional-dependencies"]
    todo = [Requirement(r) for r in [*project["dependencies"], *extras["kerberos"], *extras["aws"]]]
    while todo:
        req = todo.pop()
        if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
            continue
        name = canonicalize_name(req.name)
        assert name in installed, f"{req} is required but not installed in /opt/venv"
        assert req.specifier.contains(installed[name]["version"], prereleases=True), (
            req, installed[name]["version"])
        if name not in needed:
            todo.extend(Requirement(r) for r in installed[name]["requires"])
        needed[name] = needed.get(name, SpecifierSet()) & req.specifier

    ours = canonicalize_name(project["name"])
    assert installed[ours]["version"] == project["version"]
    assert set(installed) - VENV_BOOTSTRAP == {ours, *needed}
    # No simulator: neither its distribution nor its package, nor tests.
    assert "kafka-txn-sim" not in installed
    files = [f for d in installed.values() for f in d["files"]]
    assert not [f for f in files if f.startswith(("kafka_sim/", "tests/"))]
    # pip compiled the exporter's modules at install time: a read-only root never needs
    # to write __pycache__.
    assert "exporter/__pycache__/config.cpython-311.pyc" in installed[ours]["files"] or any(
        re.fullmatch(r"exporter/__pycache__/config\.cpython-311\.pyc", f)
        for f in installed[ours]["files"])

    check = container.run(["-m", "pip", "check"], entrypoint=["/opt/venv/bin/python"])
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
@pytest.mark.system_tools  # buildah, debootstrap
def test_image_configuration(image: Image) -> None:
    config = image.config
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["kafka-txn-exporter"]
    assert config["Cmd"] == ["serve", "--config", CONFIG_PATH]
    assert "9981/tcp" in config["ExposedPorts"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert env["KAFKA_TXN_EXPORTER_HEALTHCHECK_URL"] == "http://127.0.0.1:9981/healthz"
    health = config["Healthcheck"]
    assert health["Test"][:3] == ["CMD", "python", "-c"]


# --------------------------------------------------------------------------- build context


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


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_command_reflects_healthz_status(status: int, healthy: bool) -> None:
    """The HEALTHCHECK's exit status follows /healthz's HTTP status (the running image's
    check above sees only a healthy exporter or none)."""
    healthcheck = next(a for k, a in _stages()[-1] if k == "HEALTHCHECK")
    command = _exec_form(healthcheck.split("CMD", 1)[1].strip())
    assert command[:2] == ["python", "-c"] and "urllib" in command[2]
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
