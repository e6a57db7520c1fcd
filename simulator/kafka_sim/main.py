"""`kafka-txn-exporter sim ...`: run a simulated cluster until SIGINT/SIGTERM.

Prints the bootstrap string (one line, flushed) so scripts can read it, then serves.
SASL passwords never appear on the command line: `--sasl-user NAME:ENV_VAR` reads NAME's
password from the environment variable ENV_VAR.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.sasl import SUPPORTED_MECHANISMS
from kafka_sim.versions import PROFILES

EXIT_USAGE = 2
MAX_BROKERS = 64


def _start_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:200]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _topics(value: str) -> dict[str, int]:
    topics: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, partitions = item.rpartition(":")
        if not sep or not name or not partitions.isdigit() or int(partitions) < 1:
            raise argparse.ArgumentTypeError(f"expected NAME:PARTITIONS, got {item!r}")
        topics[name] = int(partitions)
    return topics


def _key_value(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


SIM_PROG = "kafka-txn-exporter sim"
"""How the exporter's CLI runs the simulator; the `kafka-txn-sim` console script is its own."""
CONSOLE_PROG = "kafka-txn-sim"


class _OneLineParser(argparse.ArgumentParser):
    """Bad input is one line naming the flag, exit 2 (no usage block: --help has it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message[:400]}\n")


def _parser(prog: str = SIM_PROG) -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog=prog,
        description="Run a simulated Kafka cluster (real wire protocol) on this host.",
    )
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument(
        "--topics", type=_topics, default={}, help="topics to create, e.g. orders:6,payments:3"
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=0,
        help="first broker's port, the next ones follow; 0 = any free ports",
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--profile",
        default="4.0",
        choices=sorted(PROFILES),
        help="API version profile (default 4.0)",
    )
    parser.add_argument(
        "--config",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config override (repeatable)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate for TLS listeners")
    parser.add_argument("--tls-key", help="PEM private key for TLS listeners")
    parser.add_argument("--tls-ca", help="PEM CA bundle to verify client certificates")
    parser.add_argument(
        "--tls-client-auth",
        choices=("none", "requested", "required"),
        default="none",
        help="Kafka's ssl.client.auth (default none)",
    )
    parser.add_argument(
        "--sasl-user",
        action="append",
        default=[],
        metavar="NAME:ENV_VAR",
        help="SASL user whose password is in environment variable ENV_VAR",
    )
    parser.add_argument(
        "--sasl-mechanisms",
        default=",".join(SUPPORTED_MECHANISMS),
        help="enabled SASL mechanisms (default: all of %(default)s)",
    )
    return parser


def _sasl_users(parser: argparse.ArgumentParser, specs: Sequence[str]) -> dict[str, str] | None:
    """NAME:ENV_VAR pairs. Neither the spec nor what follows the colon is ever echoed: people
    do type NAME:PASSWORD."""
    if not specs:
        return None
    users: dict[str, str] = {}
    for spec in specs:
        name, sep, env_var = spec.partition(":")
        if not sep or not name or not env_var:
            parser.error("--sasl-user expects NAME:ENV_VAR (the name of an environment "
                         "variable holding the password, never the password itself)")
        password = os.environ.get(env_var) if env_var.isidentifier() else None
        if not password:
            parser.error(f"--sasl-user {_short(name)}: the environment variable named after "
                         "the colon is not set or empty (NAME:ENV_VAR; the password itself "
                         "never goes on the command line)")
        users[name] = password
    return users


def _short(text: str, limit: int = 64) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _check_tls_files(parser: argparse.ArgumentParser, cert: str | None, key: str | None,
                     ca: str | None) -> None:
    """Load the TLS files once here, so that an error names its flag (and never prompts for
    a passphrase: an encrypted key is refused)."""
    def no_passphrase() -> bytes:
        raise ValueError("encrypted")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(cert, key, password=no_passphrase)
        except ValueError:
            parser.error(f"--tls-key: {_short(key)} is an encrypted private key (give an "
                         "unencrypted one)")
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or "not a PEM certificate and private key"
            parser.error(f"--tls-cert/--tls-key: cannot load {_short(cert)}, {_short(key)}: "
                         f"{reason}")
    if ca is not None:
        try:
            context.load_verify_locations(ca)
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or "not a PEM CA bundle"
            parser.error(f"--tls-ca: cannot load {_short(ca)}: {reason}")


def _check_host(parser: argparse.ArgumentParser, host: str) -> None:
    """The listen address must resolve; the error names --host (999.1.1.1 does not)."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        parser.error(f"--host {_short(host)}: cannot be resolved: {reason}")


_INTEGER_TYPES = {3: 2**31 - 1, 4: 2**15 - 1, 5: 2**63 - 1}  # INT, SHORT, LONG (ConfigType)
_BOOLEAN_TYPE, _DOUBLE_TYPE = 1, 6


def _check_broker_config(parser: argparse.ArgumentParser, overrides: Sequence[tuple[str, str]]
                         ) -> None:
    """A value of a known key must parse as Kafka would (an INT, LONG, BOOLEAN, DOUBLE); the
    keys the simulator itself reads as numbers must be positive."""
    from kafka_sim.broker_configs_4_0 import CAPTURED_BROKER_CONFIGS

    types = {entry[0]: entry[5] for entry in CAPTURED_BROKER_CONFIGS}
    for key, value in overrides:
        config_type = types.get(key)
        bad = False
        if config_type in _INTEGER_TYPES:
            try:
                number = int(value.strip())
            except ValueError:
                bad = True
            else:
                bad = not -_INTEGER_TYPES[config_type] - 1 <= number <= _INTEGER_TYPES[
                    config_type] or (key in _POSITIVE_KEYS and number < 1)
        elif config_type == _BOOLEAN_TYPE:
            bad = value.strip().lower() not in ("true", "false")
        elif config_type == _DOUBLE_TYPE:
            try:
                float(value)
            except ValueError:
                bad = True
        if bad:
            parser.error(f"--config {_short(key)}: invalid value {_short(value, 40)}")


_POSITIVE_KEYS = frozenset({
    "default.replication.factor", "num.partitions", "offsets.topic.num.partitions",
    "offsets.topic.replication.factor", "producer.id.expiration.ms",
    "transaction.max.timeout.ms", "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
})
"""Keys the simulator reads as numbers (ClusterState.config_int)."""


def run_sim(argv: Sequence[str], prog: str = SIM_PROG) -> int:
    """Parse `argv` (the arguments after `sim`), serve until SIGINT/SIGTERM, return 0; usage
    and errors name `prog`, the command the user typed."""
    parser = _parser(prog)
    args = parser.parse_args(list(argv))
    if not 1 <= args.brokers <= MAX_BROKERS:
        parser.error(f"--brokers must be between 1 and {MAX_BROKERS}")
    if args.port_base and not 1 <= args.port_base <= 65536 - args.brokers:
        parser.error(f"--port-base must be 0 (any free ports) or 1..{65536 - args.brokers} "
                     f"for {args.brokers} broker(s)")
    _check_broker_config(parser, args.config)
    if len(args.host) > 253:
        parser.error("--host: longer than a DNS name (253 characters)")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    tls = None
    if args.tls_cert is not None:
        tls = SimTls(args.tls_cert, args.tls_key, args.tls_ca, args.tls_client_auth)
    ports = None
    if args.port_base:
        ports = [args.port_base + i for i in range(args.brokers)]
    mechanisms = tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip())
    unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unknown or not mechanisms:
        parser.error(f"--sasl-mechanisms: expected some of {','.join(SUPPORTED_MECHANISMS)}"
                     + (f", got {_short(unknown[0], 40)}" if unknown else ""))
    sasl_users = _sasl_users(parser, args.sasl_user)
    for option in ("tls_cert", "tls_key", "tls_ca"):
        path = getattr(args, option)
        if path is not None and not os.path.isfile(path):
            parser.error(f"--{option.replace('_', '-')}: not a readable file: {_short(path)}")
    _check_tls_files(parser, args.tls_cert, args.tls_key, args.tls_ca)
    _check_host(parser, args.host)

    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only note it: setting an Event here can deadlock when the signal lands while the main
        # thread holds that Event's lock inside its own wait().
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        sim = SimCluster(
            brokers=args.brokers,
            topics=args.topics,
            broker_config=dict(args.config),
            profile=args.profile,
            tls=tls,
            sasl_users=sasl_users,
            sasl_mechanisms=mechanisms,
            host=args.host,
            ports=ports,
        )
        try:
            sim.start()
        except (OSError, ValueError, ssl.SSLError) as exc:
            # A port in use, a host that does not resolve, TLS files that are not PEM: one
            # line, exit 2 (the message names files by path only, never their content).
            sim.close()
            flags = "--host/--port-base" if isinstance(exc, OSError) and not isinstance(
                exc, ssl.SSLError) else "--tls-cert/--tls-key/--tls-ca"
            print(f"kafka-txn-exporter sim: cannot start ({flags}): {_start_error(exc)}",
                  file=sys.stderr, flush=True)
            return EXIT_USAGE
        try:
            print(sim.bootstrap_servers, flush=True)
            print(
                f"# {args.brokers} broker(s), {sim.security_protocol}, profile {args.profile};"
                " stop with Ctrl-C",
                file=sys.stderr,
                flush=True,
            )
            while not received:
                time.sleep(0.2)
        finally:
            sim.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main() -> int:
    """Entry point of the `kafka-txn-sim` console script."""
    return run_sim(sys.argv[1:], prog=CONSOLE_PROG)


if __name__ == "__main__":
    raise SystemExit(main())
