"""`kafka-txn-exporter probe URL`: one GET of the exporter's own /healthz or /readyz, for an exec
probe (Kubernetes) where the kubelet's httpGet cannot be used.

With mutual TLS on the web port (client_auth_type RequireAndVerifyClientCert) the server refuses
every connection without a client certificate, and the kubelet's HTTP probes never send one.
Run inside the exporter's container, this command presents the certificate given by --cert and
--key. It does not verify the server's certificate: it talks to its own container over loopback,
and what it checks is the answer, not the server's name. Exit status 0 on a 2xx or 3xx answer
(the kubelet's rule for httpGet), 1 otherwise (the status or the error on one line, also when
no complete answer came within --timeout, which bounds the whole probe), 2 on bad arguments
(a --cert/--key that is not a regular file, or an encrypted key: the probe never prompts).
No state is read or written besides the request.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import stat
import sys
import threading
import urllib.parse
from typing import TextIO

from exporter.tlsfiles import NoPassphrase, password_callback
from exporter.version import PROG

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} probe",
        description=(
            "GET one URL of the exporter (e.g. https://127.0.0.1:9981/readyz) and exit 0 on a "
            "2xx/3xx answer, 1 otherwise: an exec probe for a web port that requires client "
            "certificates, which the kubelet's HTTP probes do not send. The server's "
            "certificate is not verified (loopback, same container). Exit status 2: bad "
            "arguments (also a --cert/--key that is not a regular file, or an encrypted "
            "key: the probe never asks for a passphrase)."
        ),
    )
    parser.add_argument("url", help="http:// or https:// URL of /healthz or /readyz")
    parser.add_argument("--cert", metavar="FILE", help="client certificate (PEM) to present")
    parser.add_argument("--key", metavar="FILE", help="its private key (PEM)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up after this many seconds, for the whole probe: connect, "
                             "TLS, request and answer (default 5)")
    return parser


def run_probe(argv: list[str], *, stdout: TextIO | None = None,
              stderr: TextIO | None = None) -> int:
    """The `probe` subcommand; `argv` excludes the word `probe`."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    url = urllib.parse.urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        err.write(f"{PROG} probe: url: expected http://HOST:PORT/PATH or https://..., "
                  f"got {args.url!r}\n")
        return EXIT_USAGE
    if (args.cert is None) != (args.key is None):
        err.write(f"{PROG} probe: --cert and --key: give both or neither\n")
        return EXIT_USAGE
    if not 0 < args.timeout <= 600:
        err.write(f"{PROG} probe: --timeout: expected seconds from 0 to 600, got {args.timeout}\n")
        return EXIT_USAGE
    context = None
    if args.cert is not None:
        try:
            context = _client_context(args.cert, args.key)
        except _BadFile as exc:
            err.write(f"{PROG} probe: {exc}\n")
            return EXIT_USAGE
    outcome: list[tuple[int, str] | BaseException] = []

    def get() -> None:
        try:
            outcome.append(_get(url, context, args.timeout))
        except BaseException as exc:  # handed to the main thread
            outcome.append(exc)

    # The socket timeout bounds each read, not the probe: a server sending a byte every
    # 0.3 s would keep it waiting for ever. The whole request gets `--timeout` seconds.
    worker = threading.Thread(target=get, name="probe-request", daemon=True)
    worker.start()
    worker.join(args.timeout)
    if not outcome:
        err.write(f"{PROG} probe: {args.url}: no complete answer within {args.timeout:g} s\n")
        return EXIT_FAILED
    result = outcome[0]
    if isinstance(result, (OSError, http.client.HTTPException)):
        err.write(f"{PROG} probe: {args.url}: {type(result).__name__}: {result}\n")
        return EXIT_FAILED
    if isinstance(result, BaseException):
        raise result
    status, reason = result
    line = f"{args.url}: {status} {reason}\n"
    if 200 <= status < 400:
        out.write(line)
        return EXIT_OK
    err.write(f"{PROG} probe: {line}")
    return EXIT_FAILED


class _BadFile(Exception):
    """--cert or --key cannot be used; the message names the flag."""


def _client_context(cert: str, key: str | None) -> ssl.SSLContext:
    """The client certificate, loaded as `serve` loads its keys: only regular files (OpenSSL
    would wait for ever on a FIFO) and never OpenSSL's "Enter PEM pass phrase:" prompt."""
    for flag, path in (("--cert", cert), ("--key", key)):
        if path is None:
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise _BadFile(f"{flag}: cannot read {path!r}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise _BadFile(f"{flag}: {path!r} is not a regular file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.load_cert_chain(cert, key, password=password_callback(None))
    except NoPassphrase:
        raise _BadFile(f"--key: {key!r} is an encrypted private key; the probe never asks "
                       "for a passphrase: give it an unencrypted key") from None
    except (ssl.SSLError, OSError) as exc:
        detail = getattr(exc, "reason", None) or "not a PEM certificate and private key"
        raise _BadFile(f"--cert/--key: cannot load {cert!r}, {key!r}: {detail}") from None
    return context


def _get(url: urllib.parse.SplitResult, context: ssl.SSLContext | None,
         timeout: float) -> tuple[int, str]:
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    connection: http.client.HTTPConnection
    if url.scheme == "https":
        if context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(url.hostname or "", url.port or 443,
                                                 timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(url.hostname or "", url.port or 80,
                                                timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        response.read()
        return response.status, response.reason
    finally:
        connection.close()
