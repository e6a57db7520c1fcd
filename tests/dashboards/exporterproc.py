"""`kafka-txn-exporter serve` as a child process on a fixed loopback port, for end-to-end tests
that stop it the way an operator or Kubernetes does (SIGTERM, SIGKILL) and start it again on
the same address (a restart in place) or on another one (a rollout's new pod).

Processes are stopped by their own handle only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

START_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    """A loopback port nothing listens on now (the exporter binds it with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ExporterProcess:
    """One `serve` process with its own config file (`config` plus web and log sections)."""

    def __init__(self, workdir: Path, name: str, port: int, config: dict[str, Any]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = port
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(json.dumps({
            **config,
            "web": {"listen_address": "127.0.0.1", "port": port},
            "log": {"format": "json", "level": "info"},
        }), encoding="utf-8")
        self._workdir = workdir
        self._runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{name}.log"

    def start(self) -> ExporterProcess:
        """Start (again) and wait until it listens; a port still held by the previous run of
        the same address is retried until the deadline."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            self._runs += 1
            self.log_path = self._workdir / f"{self.name}.{self._runs}.log"
            with self.log_path.open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "exporter", "serve", "--config",
                     str(self.config_path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=self._workdir, env=os.environ.copy(),
                )  # fmt: skip
            while time.monotonic() < deadline:
                text = self.log_text()
                if '"exporter_started"' in text:
                    return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            if self.proc.poll() is None or time.monotonic() >= deadline:
                self.stop(signal.SIGKILL)
                raise AssertionError(f"exporter {self.name} did not start:\n{self.log_text()}")
            if "cannot listen" not in self.log_text():
                raise AssertionError(f"exporter {self.name} exited:\n{self.log_text()}")
            time.sleep(0.2)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Send `sig` and wait for the exit; returns the exit status (None if not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)
