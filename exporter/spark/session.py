"""Build (or join) the SparkSession the jobs run on, and ship the exporter's code to it.

Under `spark-submit` a session already exists and its master wins; run directly, the jobs embed
Spark with `local[*]` unless `--master` says otherwise.

On a real cluster the executors' Python has no `exporter` installed: the Python tasks of
`spark scan` import it (cloudpickle refers to functions by module). So every session gets a
zip of the running `exporter` package through `SparkContext.addPyFile`, which Spark copies to
each executor and puts on its Python path. Executors still need Python and the exporter's
runtime dependencies (see docs/spark.md).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
APP_NAME = "kafka-txn-exporter"

BASE_CONFIG: Mapping[str, str] = {
    # Partition values are cluster names and dates: strings, never inferred as numbers/dates.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}

_ship_lock = threading.Lock()
_shipped: dict[int, str] = {}  # id(SparkContext) -> zip added to it
_zip_path: Path | None = None


def get_session(
    master: str | None = None,
    config: Mapping[str, str] | None = None,
    app_name: str = APP_NAME,
) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif SparkSession.getActiveSession() is None and not _submitted():
        builder = builder.master(DEFAULT_MASTER)
    for key, value in {**BASE_CONFIG, **(config or {})}.items():
        builder = builder.config(key, value)
    # PySpark tells the executors which Python to start from PYSPARK_PYTHON as it is when the
    # SparkContext is created (`python3` when unset).
    executor_python = (config or {}).get("spark.pyspark.python")
    if executor_python and "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = executor_python
    elif _embedded_local(master):
        # local[*]: the Python workers run on this machine and can be this very interpreter
        # (the venv that has the exporter's dependencies), not whatever `python3` is first on
        # PATH. On a cluster the executors' Python is the deployment's choice, never a path
        # of the driver's machine.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    for key, value in BASE_CONFIG.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)  # also on a session spark-submit created
    ship_package(spark.sparkContext)
    return spark


def ship_package(sc: SparkContext) -> str:
    """Add a zip of the running `exporter` package to `sc` (once per context); returns its path.

    Spark copies the file to every executor and prepends it to the Python path of its tasks,
    so the executors run exactly the driver's code, whatever is installed there."""
    with _ship_lock:
        key = id(sc)
        if key not in _shipped:
            path = str(package_zip())
            sc.addPyFile(path)
            _shipped[key] = path
        return _shipped[key]


def package_zip() -> Path:
    """A zip of the `exporter` package's Python sources, built once per process.

    Named by a hash of its content, so executors never confuse two builds."""
    global _zip_path
    if _zip_path is not None and _zip_path.is_file():
        return _zip_path
    package_dir = Path(__file__).resolve().parents[1]  # .../exporter
    files = sorted(
        p for p in package_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".pyo"}
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(package_dir.parent)).encode())
        digest.update(path.read_bytes())
    directory = Path(tempfile.mkdtemp(prefix="kte-spark-"))
    atexit.register(shutil.rmtree, directory, True)
    target = directory / f"kafka_txn_exporter-{digest.hexdigest()[:16]}.zip"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, str(path.relative_to(package_dir.parent)))
        # zipimport knows no namespace packages: a directory without __init__.py (e.g.
        # exporter/expose) would not be importable from the zip.
        for directory in sorted({p.parent for p in files if p.suffix == ".py"}):
            if not (directory / "__init__.py").is_file():
                archive.writestr(str((directory / "__init__.py").relative_to(package_dir.parent)),
                                 "")
    _zip_path = target
    return target


def _embedded_local(master: str | None) -> bool:
    """True when this process embeds Spark in local mode (workers on this machine)."""
    if master is not None:
        return master == "local" or master.startswith("local[")
    return SparkSession.getActiveSession() is None and not _submitted()


def _submitted() -> bool:
    """True under spark-submit/pyspark shell, which pass the master through the environment."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_MASTER" in os.environ
