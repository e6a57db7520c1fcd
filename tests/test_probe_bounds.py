"""`probe` is as careful as `serve`: `--timeout` bounds the whole probe (a server trickling its
answer cannot stretch it), a FIFO as --cert or --key is refused before it is opened, and an
encrypted key is an error naming the flag (exit 2), never OpenSSL's passphrase prompt, also
on a terminal."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PROBE = [sys.executable, "-m", "exporter", "probe"]


@contextmanager
def _trickling_server() -> Iterator[int]:
    """Answers every request with a status line sent one byte every 0.3 s, for ever."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 100_000:
                    if stop.wait(0.3):
                        break
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_timeout_bounds_the_whole_probe_against_a_trickling_server() -> None:
    with _trickling_server() as port:
        started = time.monotonic()
        done = subprocess.run([*PROBE, f"http://127.0.0.1:{port}/healthz", "--timeout", "2"],
                              capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "no complete answer within 2 s" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    # 2 s for the request plus the interpreter's start on a busy machine; the socket timeout
    # alone never fires here (a byte comes every 0.3 s).
    assert elapsed < 30


@pytest.mark.parametrize("flag", ["--cert", "--key"])
def test_a_fifo_as_cert_or_key_is_refused_not_waited_on(tmp_path: Path, flag: str) -> None:
    cert, key = _pair(tmp_path, None)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    files = {"--cert": str(cert), "--key": str(key), flag: str(fifo)}
    done = subprocess.run([*PROBE, "https://127.0.0.1:1/healthz", "--cert", files["--cert"],
                           "--key", files["--key"], "--timeout", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"kafka-txn-exporter probe: {flag}: '{fifo}' is not a " \
                                  "regular file"


def test_an_encrypted_key_is_an_error_naming_the_flag(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path, "correct horse")
    done = subprocess.run([*PROBE, "https://127.0.0.1:1/healthz", "--cert", str(cert),
                           "--key", str(key)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("kafka-txn-exporter probe: --key: ")
    assert "is an encrypted private key" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_an_encrypted_key_never_prompts_on_a_terminal(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path, "correct horse")
    command = (f"{sys.executable} -m exporter probe https://127.0.0.1:1/healthz "
               f"--cert {cert} --key {key}; echo rc=$?")
    done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "pass phrase" not in done.stdout.lower()
    assert "rc=2" in done.stdout, done.stdout
    assert "--key: " in done.stdout


def _pair(directory: Path, passphrase: str | None) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
        else serialization.NoEncryption())
    cert_path, key_path = directory / "probe.crt", directory / "probe.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8, encryption))
    return cert_path, key_path
