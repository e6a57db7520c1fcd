"""Bad flags on the other commands (issue 30 item 6): one line, exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "0"])
def test_demo_duration_must_be_a_finite_positive_number(value: str) -> None:
    result = run("demo", "--duration", value)
    assert result.returncode == 2
    assert "--duration" in result.stderr and "Traceback" not in result.stderr


def test_spark_without_the_extra_is_one_line(tmp_path: object) -> None:
    """Without numpy/pandas/pyspark on the path: one line naming the missing module."""
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def fake(name, *a, **k):\n"
        "    if name.split('.')[0] in ('numpy', 'pandas', 'pyspark'):\n"
        "        raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = fake\n"
        "from exporter.spark.cli import run_spark\n"
        "sys.exit(run_spark(['history', '--input', '/nonexistent', '--output', '/tmp/x', "
        "'--top', '0', '--engine', 'pandas']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
