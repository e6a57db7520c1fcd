"""Command line: `serve`, `scan`, `demo`, `sim`, `abort`, `probe`, `spark`, `--version`.

A thin shell: parse flags, load settings (exit 2 with the field named on a bad config),
configure logging, then hand over to the application (exporter.app), the scanner, the demo or
the simulator. Each command imports what it runs only when it runs: `scan` and `--version`
load neither the HTTP server nor the scheduler.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any

from exporter.config import Overrides, env_help, load_settings
from exporter.errors import EXIT_CONFIG_ERROR, EXIT_INTERRUPTED, ConfigError, say
from exporter.scan import EXIT_STATUS_HELP, add_orphan_check_argument
from exporter.version import PROG

_CONFIG_HELP = """\
Configuration: one YAML file (--config or KTE_CONFIG) with `clusters` (a list), `web`, `log`,
`history` and `admin` sections; see exporter.example.yaml and README.md for every key.
Precedence: flags > environment > file > defaults. A bad value stops start-up with exit
status 2 and the field path, e.g.
  clusters[0].poll_interval_seconds: expected a number of seconds or a duration like '30s'/'5m'
"""


# --------------------------------------------------------------------------- argument parsing


def _some(names: Sequence[str], limit: int = 10) -> str:
    """At most `limit` names, each clipped, and how many more: one short line whatever the
    number of clusters (10,000 clusters made a 69 KB line)."""
    shown = ", ".join(repr(n if len(n) <= 60 else n[:57] + "...") for n in names[:limit])
    more = len(names) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (argparse exits 2 naming the flag otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, got {text[:40]!r}") from None
    if not (0 < value < float("inf")):  # also rejects nan
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds > 0, got {text[:40]!r}")
    return value


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("configuration")
    group.add_argument("--config", "-c", metavar="FILE",
                       help="YAML config file (env KTE_CONFIG): a regular file of at most "
                            "4 MiB, read within 2 s (not a pipe or device)")
    group.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]",
        help="single cluster: bootstrap servers (env KTE_CLUSTER_BOOTSTRAP_SERVERS); defines the "
             "cluster when the file has none",
    )
    group.add_argument("--cluster-name", metavar="NAME",
                       help="single cluster: its 'cluster' label (env KTE_CLUSTER_NAME, "
                            "default 'default')")
    group.add_argument("--log.format", dest="log_format", choices=("auto", "json", "console"),
                       help="log format (env KTE_LOG_FORMAT; default auto: console on a TTY, "
                            "else JSON)")
    group.add_argument("--log.level", dest="log_level",
                       choices=("debug", "info", "warning", "error", "critical"),
                       help="log level (env KTE_LOG_LEVEL; default info)")


def _add_web_args(parser: argparse.ArgumentParser, default_port: str = "9981 or config") -> None:
    group = parser.add_argument_group("web")
    group.add_argument("--web.listen-address", dest="web_listen_address",
                       metavar="[HOST]:PORT|ADDRESS",
                       help="where to listen, as exporter-toolkit: ':9981', '0.0.0.0:9981', "
                            "'[::1]:9981', or an address alone with --web.port (env "
                            "KTE_WEB_LISTEN_ADDRESS; default 0.0.0.0)")
    group.add_argument("--web.port", dest="web_port", metavar="PORT",
                       help=f"port for /metrics, /healthz, /readyz (env KTE_WEB_PORT; default "
                            f"{default_port})")
    group.add_argument("--web.telemetry-path", dest="web_telemetry_path", metavar="PATH",
                       help="path of the metrics (env KTE_WEB_TELEMETRY_PATH; default /metrics)")
    group.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                       help="exporter-toolkit web config file: tls_server_config (TLS, "
                            "client certificates), basic_auth_users (bcrypt hashes; /metrics "
                            "and / need them, /healthz and /readyz stay open) and "
                            "http_server_config.headers (env KTE_WEB_CONFIG_FILE)")


class _VersionAction(argparse.Action):
    """`--version`, resolved only when asked (the revision may need a `git` call)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> None:
        from exporter.version import version_line

        sys.stdout.write(version_line() + "\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Prometheus exporter for late and hanging Kafka transactions (KIP-664).",
        epilog=_CONFIG_HELP + "\n" + env_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="print the version, the source revision and the Python version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve_p = sub.add_parser(
        "serve",
        help="run the exporter (HTTP /metrics, /healthz, /readyz)",
        description=(
            "Poll every configured cluster on its interval and serve the metrics. Signals: "
            "SIGTERM/SIGINT stop within 5 s; SIGHUP reloads the configuration (a bad one keeps "
            "the running one, counted in kafka_txn_exporter_config_reload_total); SIGUSR1/SIGUSR2 "
            "are ignored."
        ),
        epilog=_CONFIG_HELP + "\n" + env_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_args(serve_p)
    _add_web_args(serve_p)

    scan_p = sub.add_parser(
        "scan",
        help="list late and orphaned transactions (like kafka-transactions.sh find-hanging)",
        description=(
            "Poll each cluster and print its late open transactions, and the orphaned ones not "
            "yet late, with find-hanging's "
            "columns (Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset "
            "LastTimestamp Duration(min)) plus Age, TransactionalId, Classification, "
            "BlockedGroups (consumer groups stopped at its start offset; - none, ? unknown) and "
            "Application (the one its transactional id names; - unknown). Also rows for other "
            "transactions at least blocked_groups_min_age_seconds old that stop a consumer "
            "group (a lingering one is coordinator_tracked; they do not change the exit "
            "status). "
            "When it sees open transactions not yet late it polls again at once to ask their "
            "coordinators, "
            "and once more --orphan-check-seconds later only to confirm one found not tracked. "
            + EXIT_STATUS_HELP
        ),
        epilog=_CONFIG_HELP + "\n" + env_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_args(scan_p)
    scan_p.add_argument("--output", "-o", choices=("table", "json"), default="table",
                        help="output format (default table)")
    scan_p.add_argument("--cluster", action="append", metavar="NAME",
                        help="scan only this cluster (repeatable; default all)")
    add_orphan_check_argument(scan_p)

    demo_p = sub.add_parser(
        "demo",
        help="start a simulated cluster with a live transactional workload and export it",
        description=(
            "Start the embedded simulated Kafka cluster, run committed, aborted and long-running "
            "transactions plus (after a short while) a hanging one, and serve the exporter on "
            "it. kafka_partitions_with_late_transactions turns 1 within about two minutes. "
            "With --kafka real, the same on a real local Apache Kafka broker "
            "(scripts/install-kafka), its hanging transaction backdated: late at once."
        ),
    )
    demo_p.add_argument("--web.listen-address", dest="web_listen_address", default="127.0.0.1",
                        metavar="[HOST]:PORT|ADDRESS",
                        help="where to listen: an address, or [host]:port (default 127.0.0.1)")
    demo_p.add_argument("--web.port", dest="web_port", default="9981", metavar="PORT",
                        help="port for /metrics (default 9981)")
    demo_p.add_argument("--log.format", dest="log_format", default="auto",
                        choices=("auto", "json", "console"))
    demo_p.add_argument("--log.level", dest="log_level", default="info",
                        choices=("debug", "info", "warning", "error", "critical"))
    demo_p.add_argument("--duration", metavar="SECONDS", type=_positive_seconds, default=None,
                        help="stop after this many seconds (default: run until Ctrl-C)")
    demo_p.add_argument("--kafka", default="sim", choices=("sim", "real"),
                        help="sim: the embedded simulator (default); real: a local Apache Kafka "
                             "broker from the jars scripts/install-kafka installed (needs Java)")
    demo_p.add_argument("--kafka.version", dest="kafka_version", default=None, metavar="VERSION",
                        help="with --kafka real: which installed version (default: the newest)")

    sub.add_parser(
        "abort",
        help="abort ONE hanging transaction (dry run unless --yes; own admin credentials; "
             "try `abort --help`)",
        add_help=False,
    )
    sub.add_parser(
        "sim",
        help="run the Kafka simulator alone (arguments go to it; try `sim --help`)",
        add_help=False,
    )
    sub.add_parser(
        "probe",
        help="GET the exporter's /healthz or /readyz with a client certificate (an exec probe "
             "for a web port with mutual TLS; try `probe --help`)",
        add_help=False,
    )
    sub.add_parser(
        "spark",
        help="fleet scans and transaction history on Spark (needs .[spark]; try `spark --help`)",
        add_help=False,
    )
    return parser


def _overrides(args: argparse.Namespace) -> Overrides:
    return Overrides(
        web_listen_address=getattr(args, "web_listen_address", None),
        web_port=getattr(args, "web_port", None),
        web_telemetry_path=getattr(args, "web_telemetry_path", None),
        web_config_file=getattr(args, "web_config_file", None),
        log_format=args.log_format,
        log_level=args.log_level,
        cluster_name=args.cluster_name,
        bootstrap_servers=args.bootstrap_servers,
    )


def _config_error(exc: ConfigError) -> int:
    say(f"config error: {exc}")
    return EXIT_CONFIG_ERROR


def _simulator_installed() -> bool:
    """`demo` and `sim` run on the simulator, a distribution of its own: say how to get it."""
    if importlib.util.find_spec("kafka_sim") is not None:
        return True
    say("the Kafka simulator (package kafka-txn-sim) is not installed; from a clone of "
        "the repository: pip install ./simulator (scripts/demo does this for you)")
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Ctrl-C (outside `serve`, which handles it) prints one line, not a
    traceback, and exits at once with 130 (128 + SIGINT, as shells report it): a poll's threads
    or pending requests must neither keep the process alive nor print at shutdown."""
    try:
        return _run(argv)
    except KeyboardInterrupt:
        say("interrupted")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(EXIT_INTERRUPTED)


def _run(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command, rest = (args_list[0], args_list[1:]) if args_list else ("", [])
    if command == "sim":
        if not _simulator_installed():
            return EXIT_CONFIG_ERROR
        from kafka_sim.main import run_sim

        return run_sim(rest)
    if command == "abort":
        # Imported only here: the daemon's code paths never load the writing module.
        from exporter.abort import run_abort

        return run_abort(rest)
    if command == "probe":
        # Imported only here: an exec probe starts a process every few seconds.
        from exporter.probe import run_probe

        return run_probe(rest)
    if command == "spark":
        # Imported only here: pyspark is an optional extra.
        from exporter.spark.cli import run_spark

        return run_spark(rest)

    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG_ERROR

    if args.command == "demo":
        if not _simulator_installed():
            return EXIT_CONFIG_ERROR
        from exporter.demo import run_demo

        try:
            return run_demo(
                listen_address=args.web_listen_address,
                port=args.web_port,
                log_format=args.log_format,
                log_level=args.log_level,
                duration_seconds=args.duration,
                kafka=args.kafka,
                kafka_version=args.kafka_version,
            )
        except ConfigError as exc:
            return _config_error(exc)

    try:
        settings = load_settings(args.config, overrides=_overrides(args))
    except ConfigError as exc:
        return _config_error(exc)
    from exporter.logs import configure_logging  # structlog: not needed for --help/--version

    configure_logging(settings.log_format, settings.log_level)

    if args.command == "scan":
        from exporter.scan import run_scan

        clusters = settings.clusters
        if args.cluster:
            known = {c.name for c in clusters}
            missing = [name for name in args.cluster if name not in known]
            if missing:
                return _config_error(ConfigError(
                    f"--cluster: unknown cluster(s) {_some(missing)} "
                    f"(configured: {_some(sorted(known))})"
                ))
            clusters = tuple(c for c in clusters if c.name in args.cluster)
        return run_scan(clusters, args.output, sys.stdout, sys.stderr,
                        orphan_check_seconds=args.orphan_check_seconds)

    from exporter.app import serve

    config_file = args.config or os.environ.get("KTE_CONFIG")
    overrides = _overrides(args)
    return serve(
        settings,
        config_file=os.path.abspath(config_file) if config_file else None,
        reload=lambda: load_settings(args.config, overrides=overrides),
    )
