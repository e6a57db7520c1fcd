"""Files that used to hang, crash or mislead: control characters, FIFOs,
devices, 20,000 clusters, a history.directory that is a file. Each command exits 2 with one
line naming the file or field, at once, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exporter.config import ConfigError, load_settings
from exporter.yamlfile import MAX_FILE_BYTES, read_yaml_file

COMMANDS = {
    "serve": ["serve", "--web.listen-address", "127.0.0.1:0", "--config"],
    "scan": ["scan", "--config"],
    "abort": ["abort", "--cluster", "a", "--topic", "t", "--partition", "0",
              "--start-offset", "0", "--config"],
    "spark scan": ["spark", "scan", "--textfile", "/dev/null", "--fleet"],
}


def run(args: list[str], env_extra: dict[str, str] | None = None,
        timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env.update(env_extra or {})
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                            text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    return result, time.monotonic() - started


def one_line_exit_2(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-1500:])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("char", ["\x00", "\x01"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_control_characters_are_one_line_exit_2(tmp_path: Path, command: str, char: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"clusters:\n  - name: a{char}\n    bootstrap_servers: [x:1]\n")
    result, _ = run([*COMMANDS[command], str(config)])
    line = one_line_exit_2(result)
    assert f"U+{ord(char):04X}" in line and "line 2" in line


@pytest.mark.parametrize("char", ["\x00", "\x01"])
def test_control_characters_in_the_web_config_file(tmp_path: Path, char: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1']}\n")
    web = tmp_path / "web.yaml"
    web.write_text(f"basic_auth_users:\n  u{char}: x\n")
    result, _ = run(["serve", "--config", str(config), "--web.listen-address", "127.0.0.1:0",
                     "--web.config.file", str(web)])
    assert f"U+{ord(char):04X}" in one_line_exit_2(result)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_config_is_refused_at_once(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    result, took = run([*COMMANDS[command], str(fifo)], timeout=20)
    line = one_line_exit_2(result)
    if command == "abort":  # a pipe is allowed there (/dev/stdin), within the read deadline
        assert "did not finish within 2 s" in line
    else:
        assert "FIFO" in line
    assert took < 10


def test_kte_config_fifo_and_devices_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    result, _ = run(["scan"], env_extra={"KTE_CONFIG": str(fifo)}, timeout=20)
    assert "FIFO" in one_line_exit_2(result)
    for device in ("/dev/zero", "/dev/null"):
        with pytest.raises(ConfigError, match="not a regular file"):
            read_yaml_file(device, "config file")


def test_a_read_that_never_finishes_fails_within_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung mount, simulated: the read blocks forever; the caller gets an error in time."""
    import exporter.yamlfile as yamlfile

    config = tmp_path / "c.yaml"
    config.write_text("clusters: []\n")
    hung = threading.Event()
    monkeypatch.setattr(yamlfile, "READ_DEADLINE_SECONDS", 0.3)
    monkeypatch.setattr(yamlfile, "_read_regular", lambda *_: hung.wait(60) and b"")
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=r"did not finish within 0\.3 s"):
            read_yaml_file(str(config), "config file")
        assert time.monotonic() - started < 2
    finally:
        hung.set()  # the reader thread ends


def test_abort_config_from_stdin_redirected_from_a_file_is_read(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1'], "
                      "request_timeout_seconds: 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    with config.open() as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "exporter", "abort", "--cluster", "a", "--topic", "t",
             "--partition", "0", "--start-offset", "0",
             "--config", "/dev/stdin"],
            capture_output=True, text=True, timeout=60, env=env, stdin=stdin)
    assert "no cluster configured" not in result.stderr
    assert "Traceback" not in result.stderr


def test_twenty_thousand_clusters_without_aliases_are_not_an_alias_bomb(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n" + "".join(
        f"  - {{name: c{i}, bootstrap_servers: ['h{i}:9092']}}\n" for i in range(20_000)))
    assert 1_000_000 < config.stat().st_size < MAX_FILE_BYTES
    settings = load_settings(str(config))
    assert len(settings.clusters) == 20_000


def test_an_alias_bomb_is_still_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, "
              f"*a{i-1}, *a{i-1}, *a{i-1}]" for i in range(1, 9)]
    config = tmp_path / "bomb.yaml"
    config.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="expands to more than"):
        read_yaml_file(str(config), "config file")


def test_a_history_directory_that_is_a_file_stops_serve(tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.write_text("a file\n")
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1']}\n"
                      f"history: {{directory: '{history}'}}\n")
    result, _ = run(["serve", "--config", str(config), "--web.listen-address", "127.0.0.1:0"])
    assert "history.directory" in (line := one_line_exit_2(result))
    assert "is not a directory" in line


def test_sighup_reload_of_a_fifo_neither_blocks_nor_stops_sigterm(tmp_path: Path) -> None:
    import signal
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1'], "
                      "poll_interval_seconds: 1, request_timeout_seconds: 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["KTE_LOG_FORMAT"] = "json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(config),
         "--web.listen-address", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:  # serving
            assert time.monotonic() < deadline and proc.poll() is None
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        config.unlink()
        os.mkfifo(config)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None  # reload refused, still serving
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and time.monotonic() - sent < 5
        assert "FIFO" in err and "config_reload" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("field", ["ca_file", "cert_file"])
def test_a_fifo_as_a_tls_file_is_refused_not_waited_on(tmp_path: Path, field: str) -> None:
    fifo = tmp_path / "pem"
    os.mkfifo(fifo)
    tls = f"{{{field}: '{fifo}'" + (f", key_file: '{fifo}'}}" if field == "cert_file" else "}")
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1'], "
                      f"request_timeout_seconds: 1, tls: {tls}}}\n")
    result, took = run(["scan", "--config", str(config)], timeout=30)
    assert "not a regular file" in one_line_exit_2(result) and took < 15


def test_abort_config_from_a_pipe_on_stdin_is_read_once(tmp_path: Path) -> None:
    """`cat c.yaml | kafka-txn-exporter abort --config /dev/stdin ...`: a pipe can be read
    only once; the command reads it once (it used to read it twice: "no cluster configured")."""
    text = ("clusters:\n  - {name: a, bootstrap_servers: ['127.0.0.1:1'], "
            "request_timeout_seconds: 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "abort", "--cluster", "a", "--topic", "t",
         "--partition", "0", "--start-offset", "0", "--config", "/dev/stdin"],
        input=text, capture_output=True, text=True, timeout=60, env=env)
    assert "admin.clusters: no entry for cluster 'a'" in result.stderr  # the file was read
    assert result.returncode == 2 and "Traceback" not in result.stderr
