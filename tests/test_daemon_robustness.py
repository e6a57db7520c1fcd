"""The daemon under signals, broken logging and encrypted keys.

- A log line that cannot be written never changes a metric or stops the daemon; it is
  dropped and counted, also when stderr is unwritable from the start.
- Encrypted private keys (web TLS, Kafka client) never prompt: `key_password_file`, or exit 2
  naming the field and the file.
- SIGHUP reloads the configuration; a bad one keeps the old running, logged and counted.
  SIGUSR1/SIGUSR2 do not kill the daemon.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from exporter_factories import broker, in_thread, observation, snapshot

from exporter.collect.connection import build_ssl_context
from exporter.config import ConfigError
from exporter.expose.http import MetricsServer
from exporter.expose.registry import build_registry
from exporter.logs import configure_logging, dropped_log_messages
from exporter.scheduler import ClusterJob, PollScheduler
from exporter.settings import ClusterSettings, TlsSettings, WebSettings
from exporter.snapshots import SnapshotStore
from exporter.webconfig import parse_web_config_file

pytestmark = pytest.mark.usefixtures("reset_logging")  # tests/conftest.py

PASSPHRASE = "correct horse battery staple"


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def sample(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def cluster_yaml(*names: str) -> str:
    """Clusters that refuse connections at once (port 1): polls fail fast, the daemon lives."""
    return "clusters:\n" + "".join(
        f"  - {{name: {n}, bootstrap_servers: ['127.0.0.1:1'], poll_interval_seconds: 1, "
        "request_timeout_seconds: 1}\n" for n in names
    )


class Daemon:
    def __init__(self, config: Path, port: int, stderr: int | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
        env["KTE_LOG_FORMAT"] = "json"
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config),
             "--web.listen-address", f"127.0.0.1:{port}", *extra],
            stdout=subprocess.DEVNULL, stderr=stderr if stderr is not None else subprocess.PIPE,
            stdin=subprocess.DEVNULL, env=env, text=True,
        )

    def metrics(self, path: str = "/metrics") -> str:
        status, body = get(f"http://127.0.0.1:{self.port}{path}")
        assert status == 200, status
        return body

    def wait_up(self) -> None:
        wait_for(lambda: get(f"http://127.0.0.1:{self.port}/healthz", 1.0)[0] == 200)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err or ""


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.communicate()


# ---------------------------------------------------------------------------------- logging


class _RefusingStream:
    """A stderr that refuses every write, as a closed pipe or a full disk does."""

    def write(self, _text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


def test_a_failed_log_write_never_fails_the_poll() -> None:
    configure_logging("json", "info", stream=_RefusingStream())  # type: ignore[arg-type]
    try:
        settings = ClusterSettings(name="c1", bootstrap_servers=("h:1",))
        store = SnapshotStore([settings])
        job = ClusterJob(settings, poll=in_thread(lambda: observation("c1")),
                         analyze=lambda obs: snapshot("c1", brokers=[broker(1, open_=2)]))
        before = dropped_log_messages()
        PollScheduler([job], store).run_once(job)
        state = store.states()["c1"]
        assert state.up is True and state.snapshot is not None and state.last_error is None
        assert dropped_log_messages() > before  # the poll_completed line, dropped and counted
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()


def test_unwritable_stderr_at_start_up_keeps_serving_and_counts(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(cluster_yaml("a"))
    read_only = os.open(os.devnull, os.O_RDONLY)  # writes fail with EBADF
    try:
        daemon = Daemon(config, free_port(), stderr=read_only)
    finally:
        os.close(read_only)
    daemons.append(daemon)
    daemon.wait_up()

    def dropped() -> float:
        return sample(daemon.metrics(), "kafka_txn_exporter_log_messages_dropped_total") or 0.0

    wait_for(lambda: dropped() >= 2)  # exporter_started and at least one poll's line
    assert daemon.proc.poll() is None
    assert 'kafka_txn_exporter_up{cluster="a"} 0.0' in daemon.metrics()  # port 1: no Kafka
    code, _ = daemon.stop()
    assert code == 0


# ---------------------------------------------------------------------------------- keys


def _encrypted_pair(directory: Path, passphrase: str | None) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
        else serialization.NoEncryption())
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8, encryption))
    return cert_path, key_path


def test_web_tls_encrypted_key_with_key_password_file_serves_https(tmp_path: Path) -> None:
    cert, _ = _encrypted_pair(tmp_path, PASSPHRASE)
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: tls.crt, key_file: tls.key, "
                   "key_password_file: pass}\n")
    parsed = parse_web_config_file(str(web))
    assert parsed.tls is not None and PASSPHRASE not in repr(parsed)
    store = SnapshotStore([ClusterSettings(name="c", bootstrap_servers=("h:1",))])
    server = MetricsServer(WebSettings("127.0.0.1", 0, str(web), parsed),
                           build_registry(store), store)
    server.start()
    try:
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(f"https://localhost:{server.port}/healthz",
                                    context=context, timeout=5) as resp:
            assert resp.status == 200
    finally:
        server.stop()


@pytest.mark.parametrize(("password_line", "expected"), [
    (None, "tls_server_config.key_file: '{key}' is an encrypted private key; give its "
           "passphrase in a file with key_password_file"),
    ("wrong passphrase", "tls_server_config.key_password_file: cannot decrypt '{key}'"),
])
def test_web_tls_encrypted_key_without_the_right_passphrase_names_the_file(
    tmp_path: Path, password_line: str | None, expected: str
) -> None:
    _, key = _encrypted_pair(tmp_path, PASSPHRASE)
    extra = ""
    if password_line is not None:
        (tmp_path / "pass").write_text(password_line)
        extra = ", key_password_file: pass"
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: tls.crt, key_file: tls.key{extra}}}\n")
    store = SnapshotStore([])
    with pytest.raises(ConfigError) as info:
        MetricsServer(WebSettings("127.0.0.1", 0, str(web)), build_registry(store), store)
    assert expected.format(key=key) in str(info.value)
    assert "wrong passphrase" not in str(info.value)


def test_kafka_client_encrypted_key_needs_its_passphrase(tmp_path: Path) -> None:
    cert, key = _encrypted_pair(tmp_path, PASSPHRASE)
    with pytest.raises(ConfigError, match=r"^tls\.key_file: .* is an encrypted private key"):
        build_ssl_context(TlsSettings(cert_file=str(cert), key_file=str(key)))
    context = build_ssl_context(TlsSettings(cert_file=str(cert), key_file=str(key),
                                            key_password=PASSPHRASE))
    assert isinstance(context, ssl.SSLContext)


def test_key_password_file_is_read_from_config_never_shown(tmp_path: Path) -> None:
    from exporter.config import load_settings

    cert, key = _encrypted_pair(tmp_path, PASSPHRASE)
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    config = tmp_path / "c.yaml"
    password = tmp_path / "pass"
    config.write_text(f"clusters: [{{name: a, bootstrap_servers: ['h:1'], tls: {{cert_file: "
                      f"'{cert}', key_file: '{key}', key_password_file: '{password}'}}}}]\n")
    settings = load_settings(str(config), env={})
    tls = settings.clusters[0].tls
    assert tls is not None and tls.key_password == PASSPHRASE
    assert PASSPHRASE not in repr(settings)


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a tty")
def test_serve_on_a_terminal_never_prompts_for_a_passphrase(tmp_path: Path) -> None:
    """On a real terminal OpenSSL's default would print "Enter PEM pass phrase:" and block."""
    cert, key = _encrypted_pair(tmp_path, PASSPHRASE)
    config = tmp_path / "c.yaml"
    config.write_text(f"clusters: [{{name: a, bootstrap_servers: ['127.0.0.1:1'], tls: "
                      f"{{cert_file: '{cert}', key_file: '{key}'}}}}]\n")
    command = f"{sys.executable} -m exporter serve --config {config} --web.port 0; echo rc=$?"
    done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if not k.startswith("KTE_")})
    assert "pass phrase" not in done.stdout.lower()
    assert "rc=2" in done.stdout, done.stdout
    assert "is an encrypted private key" in done.stdout and "key_password_file" in done.stdout


# ----------------------------------------------------------------------------------- signals


def test_sighup_reloads_a_bad_config_keeps_the_old_one_and_usr1_is_harmless(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(cluster_yaml("a"))
    daemon = Daemon(config, free_port())
    daemons.append(daemon)
    daemon.wait_up()
    success = 'kafka_txn_exporter_config_reload_total{result="success"}'
    failure = 'kafka_txn_exporter_config_reload_total{result="failure"}'
    text = daemon.metrics()
    assert sample(text, success) == 0.0 and sample(text, failure) == 0.0
    started_at = sample(text, "kafka_txn_exporter_config_last_reload_success_timestamp_seconds")
    assert started_at is not None and abs(started_at - time.time()) < 60

    # A good new config: cluster b appears, a stays.
    config.write_text(cluster_yaml("a", "b"))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sample(daemon.metrics(), success) == 1.0)
    wait_for(lambda: 'kafka_txn_exporter_up{cluster="b"}' in daemon.metrics())
    assert sample(daemon.metrics(), "kafka_txn_exporter_config_last_reload_successful") == 1.0

    # A bad one (duplicate key): counted, logged, and a + b keep being polled.
    config.write_text(cluster_yaml("c") + "clusters: []\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sample(daemon.metrics(), failure) == 1.0)
    text = daemon.metrics()
    assert sample(text, "kafka_txn_exporter_config_last_reload_successful") == 0.0
    assert 'kafka_txn_exporter_up{cluster="b"}' in text
    assert 'cluster="c"' not in text

    # SIGUSR1/SIGUSR2 used to kill the process (their default action).
    daemon.proc.send_signal(signal.SIGUSR1)
    daemon.proc.send_signal(signal.SIGUSR2)
    time.sleep(1.0)
    assert daemon.proc.poll() is None
    assert daemon.metrics()

    # Removing a cluster by reload drops its series.
    config.write_text(cluster_yaml("b"))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sample(daemon.metrics(), success) == 2.0)
    wait_for(lambda: 'cluster="a"' not in daemon.metrics())

    code, err = daemon.stop()
    assert code == 0
    assert '"event": "config_reload_failed"' in err
    assert "duplicate key 'clusters'" in err
    assert '"event": "signal_ignored"' in err


def test_signals_landing_anywhere_never_hang_or_crash_the_daemon(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    """A signal handler runs between two bytecodes of the main thread, wherever it is: in the
    first log line (importing structlog), in the stop Event's wait. A handler that logged or
    set an Event there crashed the daemon with a traceback or deadlocked its stop (SIGKILL
    after the grace period). Signals fired without pause from start-up on reach those spots."""
    config = tmp_path / "c.yaml"
    config.write_text(cluster_yaml("a"))
    for _attempt in range(3):
        daemon = Daemon(config, free_port())
        daemons.append(daemon)
        wait_for_signal_handlers(daemon.proc.pid)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
                daemon.proc.send_signal(sig)
            time.sleep(0.0005)
        assert daemon.proc.poll() is None, daemon.stop()[1][-2000:]
        daemon.wait_up()
        started = time.monotonic()
        code, err = daemon.stop()
        assert code == 0, err[-2000:]
        assert time.monotonic() - started < 5.0
        assert "Traceback" not in err
        assert '"event": "signal_ignored"' in err and '"event": "exporter_stopped"' in err


def wait_for_signal_handlers(pid: int) -> None:
    """Until the daemon handles SIGUSR1 (SigCgt in Linux's /proc/PID/status): before, a
    signal's default action would end the process."""

    def caught() -> bool:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
        return False

    wait_for(caught)


def test_telemetry_path_serves_the_metrics_there(tmp_path: Path, daemons: list[Daemon]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(cluster_yaml("a"))
    daemon = Daemon(config, free_port(), extra=("--web.telemetry-path", "/probe/metrics"))
    daemons.append(daemon)
    daemon.wait_up()
    assert "kafka_txn_exporter_up" in daemon.metrics("/probe/metrics")
    assert get(f"http://127.0.0.1:{daemon.port}/metrics")[0] == 404
    status, page = get(f"http://127.0.0.1:{daemon.port}/")
    assert status == 200 and '<a href="probe/metrics">/probe/metrics</a>' in page
    assert daemon.stop()[0] == 0


def test_store_follows_a_reloaded_cluster_list() -> None:
    a = ClusterSettings(name="a", bootstrap_servers=("h:1",), labels={"env": "x"})
    b = ClusterSettings(name="b", bootstrap_servers=("h:1",))
    store = SnapshotStore([a, b])
    store.publish(snapshot("a", brokers=[broker(1)]))
    store.set_clusters([ClusterSettings(name="a", bootstrap_servers=("h:1",),
                                        labels={"env": "y"}, poll_interval_seconds=5.0)])
    state = store.states()["a"]
    assert set(store.states()) == {"a"}
    assert state.snapshot is not None  # kept across the reload
    assert dict(state.labels) == {"env": "y"} and state.poll_interval_seconds == 5.0
    store.publish(snapshot("b", brokers=[broker(1)]))  # a poll of b that was still running
    store.record_failure("b", "late", 1.0)
    assert set(store.states()) == {"a"}
