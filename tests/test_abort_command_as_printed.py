"""Every command the product prints runs as printed: the status page's abort
command, from `serve` and from `demo`, copied off the served page and run in a shell-less
subprocess exactly as written -- from another directory, with a PATH that does not hold the
exporter's bin/ -- against the simulator: the dry run as printed, then with `--yes`.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from waits import wait_for

import exporter.demo as demo
from exporter.expose.http import MetricsServer

TRANSACTION_MAX_TIMEOUT_MS = 2000
COMMAND = re.compile(r'<code class="cmd">(.*?)</code>', re.S)
PLAIN_PATH = "/usr/bin:/bin"
"""No virtualenv bin/ on it: the command must name its executable by a path that works."""


def _page(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        text: str = response.read().decode("utf-8")
        return text


def _commands_on_page(port: int) -> list[str]:
    return [html.unescape(c) for c in COMMAND.findall(_page(port))]


def _run_as_printed(command: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": PLAIN_PATH, "HOME": str(cwd), "LANG": "C.UTF-8"}
    if "PYTHONPATH" in os.environ:  # the checkout under test, as scripts/test sets it
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([*shlex.split(command), *extra], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _check_and_run(command: str, start_offset: int, cwd: Path) -> None:
    """The command's config file exists, its dry run as printed succeeds, `--yes` aborts."""
    argv = shlex.split(command)
    assert Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK), argv[0]
    config = argv[argv.index("--config") + 1]
    assert Path(config).is_absolute() and Path(config).is_file(), config
    assert f"--start-offset {start_offset}" in command
    dry = _run_as_printed(command, cwd)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "Dry run: would write this ABORT marker" in dry.stdout
    done = _run_as_printed(command, cwd, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Writing this ABORT marker" in done.stdout


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    config = {"transaction.max.timeout.ms": str(TRANSACTION_MAX_TIMEOUT_MS),
              "transaction.partition.verification.enable": "false"}
    with SimCluster(brokers=3, topics={"t": 3}, broker_config=config) as cluster:
        yield cluster


def test_serve_status_page_abort_command_runs_as_printed(sim: SimCluster, tmp_path: Path) -> None:
    config_file = tmp_path / "conf dir" / "exporter.yaml"
    config_file.parent.mkdir()
    config_file.write_text(json.dumps({
        "clusters": [{"name": "sim", "bootstrap_servers": sim.bootstrap_servers.split(","),
                      "poll_interval_seconds": 1, "late_buffer_seconds": 1,
                      "request_timeout_seconds": 2}],
        "admin": {"clusters": [{"name": "sim"}]},
        "web": {"listen_address": "127.0.0.1", "port": 0},
        "log": {"format": "json", "level": "info"},
    }), encoding="utf-8")
    log_path = tmp_path / "serve.log"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with log_path.open("wb") as log:
        # Started by a relative --config from its own directory: the page must say where.
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", "exporter.yaml"],
            cwd=config_file.parent, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        def port() -> int | None:
            for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
                if '"exporter_started"' in line:
                    return int(json.loads(line)["listen"].rsplit(":", 1)[1].split("/", 1)[0])
            assert proc.poll() is None, log_path.read_text(encoding="utf-8", errors="replace")
            return None

        web_port = wait_for("serve to listen", port, 30)
        _, _, start = hanging_transaction(sim.bootstrap_servers, "hang-serve", "t", 1,
                                          transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS)
        (command,) = wait_for("the abort command on the page", lambda: _commands_on_page(web_port))
        assert shlex.split(command)[shlex.split(command).index("--config") + 1] == str(
            config_file)
        _check_and_run(command, start, elsewhere)
        wait_for("the page to show the transaction gone",
                 lambda: "No late transactions." in _page(web_port))
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_demo_status_page_abort_command_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo as shipped, only faster: its hanging transaction is made at once and backdated
    10 minutes (late at the first poll instead of after 75 s), polls every second."""
    monkeypatch.setattr(demo, "HANGING_AFTER_SECONDS", 0.5)
    monkeypatch.setattr(demo, "DEMO_POLL_INTERVAL_SECONDS", 1.0)
    made: list[tuple[int, int, int]] = []
    original = hanging_transaction

    def backdated(bootstrap: str, transactional_id: str, topic: str, partition: int,
                  **kwargs: Any) -> tuple[int, int, int]:
        kwargs["backdate_ms"] = 600_000
        made.append(original(bootstrap, transactional_id, topic, partition, **kwargs))
        return made[-1]

    monkeypatch.setattr("kafka_sim.producer.hanging_transaction", backdated)
    stop = threading.Event()
    servers: list[MetricsServer] = []
    codes: list[int] = []
    banner = io.StringIO()

    def run() -> None:
        codes.append(demo.run_demo(port=0, log_format="json", log_level="warning", stop=stop,
                                   out=banner, on_started=servers.append))

    thread = threading.Thread(target=run, name="demo", daemon=True)
    thread.start()
    try:
        wait_for("the demo to start", lambda: servers, 60)
        web_port = servers[0].port
        (command,) = wait_for("the abort command on the page", lambda: _commands_on_page(web_port))
        config = shlex.split(command)[shlex.split(command).index("--config") + 1]
        assert f"config:    {config}" in banner.getvalue()  # the banner says where it is
        assert made, "the demo made no hanging transaction"
        _check_and_run(command, made[0][2], tmp_path)
        wait_for("the page to show the transaction gone",
                 lambda: "No late transactions." in _page(web_port))
    finally:
        stop.set()
        thread.join(timeout=60)
    assert codes == [0]
    assert not Path(config).exists(), "the demo leaves its config file behind"

