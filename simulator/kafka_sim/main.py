"""`kafka-txn-exporter sim ...`: run a simulated cluster until SIGINT/SIGTERM.

Prints the bootstrap string (one line, flushed) so scripts can read it, then serves.
SASL passwords never appear on the command line: `--sasl-user NAME:ENV_VAR` reads NAME's
password from the environment variable ENV_VAR.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.sasl import SUPPORTED_MECHANISMS
from kafka_sim.versions import PROFILES


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


def _parser(prog: str = SIM_PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    if not specs:
        return None
    users: dict[str, str] = {}
    for spec in specs:
        name, sep, env_var = spec.partition(":")
        if not sep or not name or not env_var:
            parser.error(f"--sasl-user expects NAME:ENV_VAR, got {spec!r}")
        password = os.environ.get(env_var)
        if not password:
            parser.error(f"--sasl-user {name}: environment variable {env_var} is not set")
        users[name] = password
    return users


def run_sim(argv: Sequence[str], prog: str = SIM_PROG) -> int:
    """Parse `argv` (the arguments after `sim`), serve until SIGINT/SIGTERM, return 0; usage
    and errors name `prog`, the command the user typed."""
    parser = _parser(prog)
    args = parser.parse_args(list(argv))
    if args.brokers < 1:
        parser.error("--brokers must be >= 1")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    tls = None
    if args.tls_cert is not None:
        tls = SimTls(args.tls_cert, args.tls_key, args.tls_ca, args.tls_client_auth)
    ports = None
    if args.port_base:
        ports = [args.port_base + i for i in range(args.brokers)]
    mechanisms = tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip())

    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only note it: setting an Event here can deadlock when the signal lands while the main
        # thread holds that Event's lock inside its own wait().
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with SimCluster(
            brokers=args.brokers,
            topics=args.topics,
            broker_config=dict(args.config),
            profile=args.profile,
            tls=tls,
            sasl_users=_sasl_users(parser, args.sasl_user),
            sasl_mechanisms=mechanisms,
            host=args.host,
            ports=ports,
        ) as sim:
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main() -> int:
    """Entry point of the `kafka-txn-sim` console script."""
    return run_sim(sys.argv[1:], prog=CONSOLE_PROG)


if __name__ == "__main__":
    raise SystemExit(main())
