"""Signals at any moment from the first line of Python onwards: `serve` given
SIGTERM or SIGINT exits 0 within 5 s, and SIGHUP never kills it, whether the signal lands in
the imports, while the configuration is read, or once it serves. exporter.entry installs the
handlers before any heavy import; the interpreter's own start-up (before any of our code runs)
(interpreter and site start-up, about 0.1 s measured on an idle machine, longer under load) is
out of a Python program's reach, so each run waits until the process catches SIGTERM
(/proc/PID/status SigCgt: exporter.entry's first lines), then fires at a random moment in the
next 0.6 s, which covers the heavy imports, the configuration and the first polls; the other
test checks that those first lines come before any heavy import.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RUNS = 240
PARALLEL = 8
STOP_BUDGET_SECONDS = 5.0


def _caught(pid: int, signum: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _one_run(config: Path, seed: int) -> tuple[str, float, int | None, float]:
    rng = random.Random(seed)
    sig = rng.choice([signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
    delay = rng.uniform(0.0, 0.6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["KTE_LOG_FORMAT"] = "json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while not _caught(proc.pid, signal.SIGTERM) and proc.poll() is None:
            assert time.monotonic() < deadline, "no SIGTERM handler after 20 s"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(sig)
        sent = time.monotonic()
        if sig == signal.SIGHUP:
            time.sleep(0.3)
            alive = proc.poll() is None
            proc.send_signal(signal.SIGTERM)  # then it must still stop cleanly
            sent = time.monotonic()
            if not alive:
                return (sig.name, delay, proc.returncode, 0.0)
        try:
            code: int | None = proc.wait(STOP_BUDGET_SECONDS + 5)
        except subprocess.TimeoutExpired:
            code = None
        return (sig.name, delay, code, time.monotonic() - sent)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_signals_at_random_moments_from_start_never_kill_or_hang_serve(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1'], "
        "poll_interval_seconds: 1, request_timeout_seconds: 1}\n"
    )
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda s: _one_run(config, s), range(RUNS)))
    bad = [r for r in results if r[2] != 0 or r[3] > STOP_BUDGET_SECONDS]
    assert not bad, f"{len(bad)} of {RUNS} runs (signal, delay s, exit, stop s): {bad[:10]}"
    assert {r[0] for r in results} == {"SIGTERM", "SIGINT", "SIGHUP"}


def test_the_handlers_come_before_any_heavy_import() -> None:
    """exporter.entry installs the handlers having imported only the standard library's
    signal/os/sys: nothing of the exporter's own (config, YAML, asyncio, HTTP) is loaded yet."""
    code = (
        "import sys, signal\n"
        "from exporter.entry import install_early_handlers\n"
        "install_early_handlers(['serve'])\n"
        "heavy = [m for m in ('yaml', 'asyncio', 'exporter.cli', 'exporter.config', "
        "'exporter.app', 'structlog', 'prometheus_client') if m in sys.modules]\n"
        "h = signal.getsignal(signal.SIGHUP)\n"
        "print(heavy, callable(signal.getsignal(signal.SIGTERM)), h == signal.SIG_IGN)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30).stdout.strip()
    assert out == "[] True True"
