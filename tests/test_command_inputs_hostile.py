"""Bad flags on the other commands: one line, exit 2, no traceback."""

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


def one_line_2(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-1000:])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


SECRET = "hunter2-do-not-echo"


@pytest.mark.parametrize("args, says", [
    (["--port-base", "70000"], "--port-base"),
    (["--sasl-mechanisms", "BOGUS"], "--sasl-mechanisms"),
    (["--config", "transaction.max.timeout.ms=abc"], "transaction.max.timeout.ms"),
    (["--config", "transaction.max.timeout.ms=0"], "transaction.max.timeout.ms"),
    (["--sasl-user", f"u:{SECRET}"], "--sasl-user"),
    (["--sasl-user", SECRET], "--sasl-user"),
    (["--host", "no-such-host.invalid"], "--host 'no-such-host.invalid': cannot be resolved"),
    (["--host", "x" * 100_000], "--host"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.pem"], "--tls-cert"),
    (["--brokers", "0"], "--brokers"),
])
def test_sim_bad_input_is_one_line_exit_2_without_secrets(args: list[str], says: str) -> None:
    line = one_line_2(run("sim", *args))
    assert says in line and SECRET not in line and len(line) < 500


def test_sim_garbage_tls_files_and_a_port_in_use(tmp_path: object) -> None:
    import socket
    from pathlib import Path

    garbage = Path(str(tmp_path)) / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert "--tls-cert/--tls-key: cannot load" in one_line_2(
        run("sim", "--tls-cert", str(garbage), "--tls-key", str(garbage)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert "address already in use" in one_line_2(
            run("sim", "--brokers", "1", "--port-base", str(port)))


def test_a_bootstrap_host_longer_than_a_dns_name_is_refused() -> None:
    line = one_line_2(run("scan", "--bootstrap-servers", "h" * 100_000 + ":9092"))
    assert "253" in line and len(line) < 300


def test_scan_unknown_cluster_among_10k_is_a_short_line(tmp_path: object) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "c.yaml"
    config.write_text("clusters:\n" + "".join(
        f"  - {{name: c{i}, bootstrap_servers: ['127.0.0.1:1']}}\n" for i in range(10_000)))
    line = one_line_2(run("scan", "--config", str(config), "--cluster", "nope"))
    assert "'nope'" in line and "and 9990 more" in line and len(line) < 1000
