"""`kafka-txn-exporter sim`: prints the bootstrap string, serves, exits 0 on SIGTERM/SIGINT."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka_sim.main import run_sim


def _api_versions_ok(host: str, port: int) -> bool:
    request = ApiVersionsRequest(version=0)
    request.with_header(correlation_id=1, client_id="main-test")
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
        raw = sock.recv(size, socket.MSG_WAITALL)
    return bool(ApiVersionsResponse.decode(raw, version=0, header=True).error_code == 0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sim_command_serves_until_signalled(sig: signal.Signals) -> None:
    env = dict(os.environ, SIM_ALICE_PASSWORD="alice-secret")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafka_sim.main", "--brokers", "2",
         "--topics", "orders:6,payments:3", "--port-base", "0",
         "--sasl-user", "alice:SIM_ALICE_PASSWORD"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        endpoints = [entry.rpartition(":") for entry in bootstrap.split(",")]
        assert len(endpoints) == 2
        assert all(host == "127.0.0.1" for host, _, _ in endpoints)
        assert all(_api_versions_ok(host, int(port)) for host, _, port in endpoints)
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize(
    "argv",
    [["--topics", "orders"], ["--tls-cert", "c.pem"], ["--sasl-user", "alice:NO_SUCH_ENV_VAR_X"],
     ["--brokers", "0"]],
)
def test_sim_command_rejects_bad_arguments(argv: list[str]) -> None:
    os.environ.pop("NO_SUCH_ENV_VAR_X", None)
    with pytest.raises(SystemExit) as exit_info:
        run_sim(argv)
    assert exit_info.value.code == 2
