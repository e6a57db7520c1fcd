"""The Spark jobs on a real Spark standalone cluster whose executors do not have the exporter.

A standalone master and one worker run as separate JVM processes on loopback (the pip
distribution's `spark-class ...deploy.master.Master` / `...deploy.worker.Worker`). The
executors' Python (PYSPARK_PYTHON) is a fresh virtual environment holding the exporter's runtime
dependencies but **not** the exporter itself (checked first), so the jobs only succeed if they
ship their own code (the package zip `exporter.spark.session` adds to every session).

- `spark scan` is submitted with `spark-submit` (driver = `exporter/spark/main.py`) over a fleet
  of simulated clusters (two with a hanging transaction made like the real capture's hang-1,
  one clean, one unreachable); its metrics equal the in-process scan of the same clusters.
- `spark history` runs as `kafka-txn-exporter spark history --master spark://...` on a
  generated history; its tables equal the in-process (pandas) reference.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import histgen
import pandas as pd
import pyspark
import pytest
from compare import records
from hypothesis import HealthCheck, given, settings
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from packaging.requirements import Requirement
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from waits import SUBPROCESS_HANG_S

from exporter.analyze import analyze
from exporter.config import load_settings
from exporter.history import HistoryWriter
from exporter.spark import report, scan_job

pytestmark = pytest.mark.system_tools  # Java (Spark)

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
BROKER_CONFIG = {
    "transaction.partition.verification.enable": "false",
    "transaction.max.timeout.ms": "60000",
}
SASL_USER, SASL_PASSWORD = "kte-spark", "Spark-S3cret-Pässword"
PASSWORD_ENV = "SPARK_TEST_KAFKA_PASSWORD"
BACKDATE_MS = 400_000  # > 60 s max timeout + 300 s late buffer: late at the first poll
# Series whose value is a time or a duration of this run: compared by label set only (ages
# within the time between the two scans).
AGE_SERIES = {
    "kafka_late_transaction_age_seconds",
    "kafka_partition_max_active_transaction_duration_seconds",
    "kafka_cluster_max_active_transaction_duration_seconds",
}
# Short-lived JVMs on 2 cores: the C1 compiler alone and the serial GC start much faster.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
PHASE_SERIES = "kafka_txn_exporter_poll_phase_duration_seconds"
RUN_SERIES_PREFIXES = (
    "kafka_txn_exporter_poll_duration_seconds",
    "kafka_txn_exporter_last_successful_poll_timestamp_seconds",
    PHASE_SERIES,  # each run's own timing; the phases measured must be the same
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process of the cluster: nothing of this venv leaks through."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "PYSPARK_GATEWAY_PORT", "SPARK_MASTER", "PYTHONHOME"}}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", PYTHONHASHSEED="0")
    env.update(extra)
    return env


# --------------------------------------------------------------------- the executors' Python


def runtime_distributions() -> list[md.Distribution]:
    """The exporter's runtime dependencies (no extras), transitively; not the exporter."""
    seen: dict[str, md.Distribution] = {}
    todo = [Requirement(r) for r in md.requires("kafka-txn-exporter") or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = req.name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = md.distribution(req.name)
        seen[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def link_distribution(dist: md.Distribution, target: Path) -> None:
    """Symlink a distribution's top-level modules and its metadata into `target`."""
    site = Path(str(dist.locate_file("")))
    tops = {Path(str(f)).parts[0] for f in dist.files or []}
    for top in sorted(tops):
        if top in {"..", "__pycache__"} or top.endswith(".pth"):
            continue
        source = site / top
        if source.exists() and not (target / top).exists():
            (target / top).symlink_to(source)


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the exporter's runtime dependencies linked in, without the exporter."""
    root = tmp_path_factory.mktemp("executor-venv")
    venv.create(root / "venv", with_pip=False, symlinks=True)
    python = root / "venv" / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    deps = root / "deps"
    deps.mkdir()
    for dist in runtime_distributions():
        link_distribution(dist, deps)
    (purelib / "runtime-deps.pth").write_text(f"{deps}\n")

    probe = subprocess.run(
        [str(python), "-c", "import kafka, prometheus_client, structlog, yaml, apscheduler\n"
         "try:\n import exporter\nexcept ModuleNotFoundError:\n print('no exporter')\n"
         "else:\n print('exporter at', exporter.__file__)"],
        capture_output=True, text=True, env=clean_env(), cwd=root, timeout=SUBPROCESS_HANG_S,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "no exporter"
    assert sysconfig.get_paths()["purelib"] != str(purelib)
    return python


# ------------------------------------------------------------------ the standalone cluster


@dataclass(frozen=True)
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # master web UI (JSON at /json/)
    logs: Path
    work: Path  # the worker's work directory (executors' stdout/stderr)


def _wait_for_worker(cluster: Standalone, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    while True:
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail("a Spark daemon exited:\n" + _tail_logs(cluster.logs))
        try:
            with urllib.request.urlopen(f"{cluster.ui}/json/", timeout=2) as resp:
                state = json.load(resp)
            if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                return
        except (OSError, ValueError):  # not up yet; while starting, /json/ may answer HTML
            pass
        if time.monotonic() > deadline:
            pytest.fail("no worker registered with the master:\n" + _tail_logs(cluster.logs))
        time.sleep(0.25)


def _tail_logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                     for p in sorted(directory.glob("*.log")))


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    assert shutil.which("java"), "java missing: run scripts/install-spark-deps"
    root = tmp_path_factory.mktemp("standalone")
    logs = root / "logs"
    logs.mkdir()
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", logs,
                         root / "work")
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = clean_env(SPARK_WORKER_DIR=str(root / "work"), SPARK_LOG_DIR=str(logs),
                    SPARK_DAEMON_MEMORY="384m", SPARK_DAEMON_JAVA_OPTS=FAST_JVM)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui_port)],
            env=env, cwd=root, stdout=(logs / "master.log").open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        ))
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui_port),
             "--work-dir", str(root / "work"), cluster.url],
            env=env, cwd=root, stdout=(logs / "worker.log").open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        ))
        _wait_for_worker(cluster, procs)
        yield cluster
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def app_conf(executor_python: Path) -> list[str]:
    conf = {
        "spark.pyspark.python": str(executor_python),
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.cores.max": "2",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": FAST_JVM,
        "spark.executor.extraJavaOptions": FAST_JVM,
    }
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def run_driver(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=240)


# -------------------------------------------------------------------------------- scan


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_spark_scan_on_standalone_equals_the_in_process_scan(
    standalone: Standalone, executor_python: Path, tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        # c2 needs SASL/SCRAM: the password reaches the executors only inside the job.
        sims = {
            name: stack.enter_context(
                SimCluster(brokers=2, topics={"hang-test": 3, "orders": 2},
                           broker_config=BROKER_CONFIG,
                           sasl_users={SASL_USER: SASL_PASSWORD} if name == "c2" else None)
            )
            for name in ("c1", "c2", "c3")
        }
        for name in ("c1", "c3"):
            hanging_transaction(sims[name].bootstrap_servers, f"hang-{name}", "hang-test", 0,
                                backdate_ms=BACKDATE_MS)
        sasl = (f"    sasl: {{mechanism: SCRAM-SHA-512, username: {SASL_USER}, "
                f"password_env: {PASSWORD_ENV}}}\n")
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text("clusters:\n" + "".join(
            f"  - name: {name}\n    bootstrap_servers: \"{sim.bootstrap_servers}\"\n"
            f"    request_timeout_seconds: 5\n    labels: {{fleet: test}}\n"
            + (sasl if name == "c2" else "")
            for name, sim in sims.items()
        ) + f"  - name: gone\n    bootstrap_servers: [\"127.0.0.1:{free_port()}\"]\n"
            "    request_timeout_seconds: 1\n")

        textfile = tmp_path / "out" / "kafka_txn.prom"
        started = time.monotonic()
        submitted = run_driver(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone.url,
             "--deploy-mode", "client", *app_conf(executor_python),
             "--conf", f"spark.pyspark.driver.python={sys.executable}",
             str(REPO / "exporter" / "spark" / "main.py"),
             "scan", "--fleet", str(fleet), "--textfile", str(textfile)],
            env=clean_env(**{PASSWORD_ENV: SASL_PASSWORD}), cwd=tmp_path,
        )
        # The in-process path over the same clusters, right after.
        clusters = load_settings(str(fleet), env={PASSWORD_ENV: SASL_PASSWORD}).clusters
        local = scan_job.registry_for(clusters, [scan_job.poll_and_analyze(c) for c in clusters])
        elapsed_seconds = time.monotonic() - started

    assert submitted.returncode == 1, submitted.stdout + submitted.stderr[-5000:]  # `gone` is down
    assert "c1: up=1 late=1 hanging=1" in submitted.stdout
    assert "c2: up=1 late=0 hanging=0" in submitted.stdout
    assert "gone: up=0" in submitted.stdout
    assert "Traceback" not in submitted.stderr

    remote = metric_samples(textfile.read_text())
    in_process = metric_samples(generate_latest(local).decode())

    def stable(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[
            tuple[str, tuple[tuple[str, str], ...]], float]:
        return {k: v for k, v in samples.items()
                if k[0] not in AGE_SERIES and not k[0].startswith(RUN_SERIES_PREFIXES)}

    assert stable(remote) == stable(in_process)
    phases_remote = {k for k in remote if k[0] == PHASE_SERIES}
    assert phases_remote and phases_remote == {k for k in in_process if k[0] == PHASE_SERIES}
    ages_remote = {k: v for k, v in remote.items() if k[0] in AGE_SERIES}
    ages_local = {k: v for k, v in in_process.items() if k[0] in AGE_SERIES}
    assert set(ages_remote) == set(ages_local)
    assert all(abs(ages_local[k] - v) <= elapsed_seconds + 1 for k, v in ages_remote.items())
    hanging = {dict(k[1])["cluster"]: v for k, v in remote.items()
               if k[0] == "kafka_late_transaction_age_seconds"}
    assert sorted(hanging) == ["c1", "c3"]
    assert all(v >= BACKDATE_MS / 1000 for v in hanging.values())
    # The job really ran on the standalone cluster's executors, not in an embedded local mode.
    app = _last_application(standalone)
    assert app["name"] == "kafka-txn-exporter"
    assert app["cores"] >= 1
    # The password was used there (c2 is up) and printed nowhere: driver output, daemon logs,
    # the executors' stdout/stderr in the worker's work directory.
    outputs = {"driver": submitted.stdout + submitted.stderr}
    for path in [*standalone.logs.glob("*.log"), *standalone.work.rglob("std*")]:
        outputs[str(path)] = path.read_text(errors="replace")
    assert any("std" in name for name in outputs), "no executor log found"
    assert [name for name, text in outputs.items() if SASL_PASSWORD in text] == []


def _last_application(cluster: Standalone) -> dict[str, object]:
    with urllib.request.urlopen(f"{cluster.ui}/json/", timeout=5) as resp:
        state = json.load(resp)
    apps = state.get("completedapps", []) + state.get("activeapps", [])
    assert apps, state
    latest: dict[str, object] = max(apps, key=lambda a: a["starttime"])
    return latest


# ----------------------------------------------------------------------------- history


@settings(max_examples=1, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plans=histgen.fleet_plans.filter(lambda ps: sum(len(p.txns) for p in ps) >= 4))
def test_spark_history_on_standalone_equals_the_in_process_report(
    standalone: Standalone, executor_python: Path, tmp_path_factory: pytest.TempPathFactory,
    plans: tuple[histgen.ClusterPlan, ...],
) -> None:
    directory = tmp_path_factory.mktemp("history")
    writer = HistoryWriter(directory, retention_days=3650, buffer_polls=3)
    for plan in plans:
        for obs in histgen.observations(plan):
            writer.append(obs, analyze(obs, plan.settings))
    writer.close()
    out = tmp_path_factory.mktemp("history-out") / "report"

    proc = run_driver(
        [sys.executable, "-m", "exporter", "spark", "history", "--master", standalone.url,
         *app_conf(executor_python), "--input", str(directory), "--output", str(out),
         "--top", "2"],
        env=clean_env(), cwd=directory.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    assert re.search(r"incidents: \d+", proc.stdout), proc.stdout

    local = report.report_from_directory(directory, top_n=2)
    for name, expected in local.tables().items():
        got = pd.read_parquet(out / f"{name}.parquet")
        assert list(got.columns) == list(expected.columns), name
        assert records(got, expected.columns) == records(expected, expected.columns), name
    assert _last_application(standalone)["name"] == "kafka-txn-exporter"

