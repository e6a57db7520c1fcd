"""The package zip every Spark session ships to its executors (no JVM needed here).

The standalone-cluster test proves the executors run from it; these pin what it must hold.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from waits import SUBPROCESS_HANG_S

from exporter.spark.session import package_zip

PACKAGE = Path(__file__).resolve().parents[2] / "exporter"


def test_zip_holds_every_module_of_the_package_and_nothing_compiled() -> None:
    names = set(zipfile.ZipFile(package_zip()).namelist())
    sources = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources <= names
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]
    # zipimport has no namespace packages: every directory with modules gets an __init__.py.
    packages = {str(Path(n).parent) for n in names if n.endswith(".py")}
    assert {f"{p}/__init__.py" for p in packages} <= names
    assert "exporter/expose/__init__.py" in names


def test_a_python_without_the_exporter_imports_it_from_the_zip() -> None:
    """`-S`: no site-packages, so neither the installed exporter nor any dependency: only the
    pure modules (model, settings, analyze) and the package layout can be imported."""
    zip_path = package_zip()
    probe = subprocess.run(
        [sys.executable, "-S", "-c",
         "import sys; sys.path.insert(0, sys.argv[1])\n"
         "import exporter.analyze, exporter.expose\n"
         "print(exporter.analyze.__file__)\nprint(exporter.expose.__file__)", str(zip_path)],
        capture_output=True, text=True, timeout=SUBPROCESS_HANG_S, cwd="/",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == [
        f"{zip_path}/exporter/analyze.py", f"{zip_path}/exporter/expose/__init__.py",
    ]


def test_the_zip_is_built_once_and_named_by_its_content() -> None:
    first = package_zip()
    assert package_zip() == first
    assert first.name.startswith("kafka_txn_exporter-") and first.suffix == ".zip"


def test_a_malformed_conf_exits_2_without_echoing_the_value(tmp_path: Path) -> None:
    import io

    from exporter.spark.cli import run_spark

    out, err = io.StringIO(), io.StringIO()
    code = run_spark(["scan", "--fleet", str(tmp_path / "f.yaml"), "--textfile",
                      str(tmp_path / "m.prom"), "--conf", "a=b", "--conf", "hunter2"],
                     out=out, err=err)
    assert code == 2
    assert err.getvalue() == "kafka-txn-exporter spark: --conf #2: expected KEY=VALUE\n"
    assert "hunter2" not in out.getvalue() + err.getvalue()


def test_a_failed_job_is_reported_as_its_root_cause_in_one_bounded_line() -> None:
    from exporter.spark.cli import job_failure

    trace = ("An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collect.\n"
             ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 ...\n"
             "  File \"/w/pyspark.zip/pyspark/worker.py\", line 1, in main\n"
             "ModuleNotFoundError: No module named 'exporter'\n"
             "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException\n")
    assert job_failure(RuntimeError(trace)) == "ModuleNotFoundError: No module named 'exporter'"
    assert len(job_failure(RuntimeError("x" * 5000))) == 300
