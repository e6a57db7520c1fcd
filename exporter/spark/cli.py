"""`kafka-txn-exporter spark history|scan`; the lead wires `run_spark` into exporter/cli.py.

Exit status: 0 done; 1 `scan` found at least one cluster down or unpollable (its metrics still
say up 0);
2 usage, config or input error.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import TextIO

from exporter.scan import add_orphan_check_argument

EXIT_OK = 0
EXIT_CLUSTER_FAILED = 1
EXIT_ERROR = 2
PROG = "kafka-txn-exporter spark"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Batch jobs on Apache Spark (embedded local[*] by default, or spark-submit).",
    )
    sub = parser.add_subparsers(dest="job", metavar="JOB")

    hist = sub.add_parser(
        "history",
        help="incidents and late-minute summaries from the Parquet history",
        description=(
            "Read the history dataset the daemon writes (exporter.history) and write the "
            "incidents, late_minutes and top_transactional_ids tables as Parquet and CSV."
        ),
    )
    hist.add_argument("--input", required=True, metavar="DIR", help="history directory")
    hist.add_argument("--output", required=True, metavar="DIR", help="output directory")
    hist.add_argument("--top", type=int, default=20, metavar="N",
                      help="transactional ids per cluster in top_transactional_ids (default 20)")
    hist.add_argument("--engine", choices=("spark", "pandas"), default="spark",
                      help="spark (default) or the in-process pandas reference")
    hist.add_argument("--master", metavar="URL",
                      help="Spark master (default local[*]; ignored under spark-submit)")
    _add_conf(hist)

    scan = sub.add_parser(
        "scan",
        help="poll many clusters as one Spark job; write a textfile and/or push the metrics",
        description=(
            "Poll every cluster in the fleet file (the exporter's YAML config format), one "
            "Spark task per cluster, and write the exporter's metrics in Prometheus text format. "
            "Like `scan`, a task that sees open transactions not yet late polls again at once "
            "to ask their coordinators, and once more --orphan-check-seconds later only to "
            "confirm one found not tracked (orphaned)."
        ),
    )
    scan.add_argument("--fleet", required=True, metavar="FILE", help="YAML file with `clusters`")
    scan.add_argument("--textfile", metavar="FILE",
                      help="write metrics here atomically (node_exporter textfile collector; "
                           "name it *.prom)")
    scan.add_argument("--pushgateway", metavar="URL",
                      help="push the metrics to this Pushgateway (e.g. http://pgw:9091)")
    scan.add_argument("--job", default="kafka-txn-exporter",
                      help="Pushgateway job label (default kafka-txn-exporter)")
    scan.add_argument("--cluster", action="append", metavar="NAME",
                      help="scan only this cluster (repeatable)")
    scan.add_argument("--master", metavar="URL",
                      help="Spark master (default local[*]; ignored under spark-submit)")
    add_orphan_check_argument(scan)
    _add_conf(scan)
    return parser


def _add_conf(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="Spark property, repeatable, as spark-submit's --conf (e.g. "
             "spark.pyspark.python=/opt/venv/bin/python for the executors' Python)",
    )


def job_failure(exc: BaseException, limit: int = 300) -> str:
    """The root cause of a failed Spark job in one bounded line.

    Py4J/PySpark errors carry whole JVM and Python stack traces; the last `...Error: ...` /
    `...Exception: ...` line is the cause (e.g. an executor's ModuleNotFoundError)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines
              if re.match(r"^[\w.]*(Error|Exception)\b", line) and ":" in line]
    text = causes[-1] if causes else (lines[0] if lines else type(exc).__name__)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _spark_conf(values: Sequence[str], err: TextIO) -> dict[str, str] | None:
    """`--conf KEY=VALUE` pairs; None (after a message) when one is malformed."""
    conf: dict[str, str] = {}
    for number, item in enumerate(values, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # The value is not echoed: it may hold a secret typed in the wrong place.
            err.write(f"{PROG}: --conf #{number}: expected KEY=VALUE\n")
            return None
        conf[key.strip()] = value
    return conf


def run_spark(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.job is None:
        parser.print_help(err)
        return EXIT_ERROR
    conf = _spark_conf(args.conf, err)
    if conf is None:
        return EXIT_ERROR
    try:
        if args.job == "history":
            return _history(args, conf, out, err)
        return _scan(args, conf, out, err)
    except ModuleNotFoundError as exc:
        # The spark extra is not installed (numpy, pandas, pyspark): one line, exit 2.
        err.write(f"{PROG} {args.job}: needs the spark extra (pip install "
                  f"'kafka-txn-exporter[spark]'): missing module {exc.name}\n")
        return EXIT_ERROR


def _history(
    args: argparse.Namespace, conf: dict[str, str], out: TextIO, err: TextIO
) -> int:
    from exporter.spark import report

    if args.top < 1:
        err.write(f"{PROG} history: --top must be at least 1\n")
        return EXIT_ERROR
    try:
        if args.engine == "pandas":
            local = report.report_from_directory(args.input, args.top)
            report.write_tables(local.tables(), args.output)
            lines = report.summary_lines(
                report.counts_of(local), local.late_minutes, local.top_transactional_ids
            )
        else:
            from exporter.spark import history_job
            from exporter.spark.session import get_session

            spark = get_session(args.master, conf)
            result = history_job.build_report(spark, args.input, args.top)
            history_job.write_tables(result.tables(), args.output)
            lines = report.summary_lines(
                result.counts(),
                result.late_minutes.toPandas(),
                result.top_transactional_ids.toPandas(),
            )
    except report.HistoryNotFound as exc:
        err.write(f"{PROG} history: {exc}\n")
        return EXIT_ERROR
    except Exception as exc:  # a failed Spark job: one line, not a JVM stack trace
        err.write(f"{PROG} history: the Spark job failed: {job_failure(exc)}\n")
        return EXIT_ERROR
    out.write("\n".join(lines) + f"\nwritten to {args.output}\n")
    return EXIT_OK


def _scan(
    args: argparse.Namespace, conf: dict[str, str], out: TextIO, err: TextIO
) -> int:
    from exporter.config import ConfigError, load_settings

    if not args.textfile and not args.pushgateway:
        err.write(f"{PROG} scan: give --textfile and/or --pushgateway\n")
        return EXIT_ERROR
    try:
        settings = load_settings(args.fleet)
    except ConfigError as exc:
        err.write(f"{PROG} scan: config error: {exc}\n")
        return EXIT_ERROR
    clusters = settings.clusters
    if args.cluster:
        unknown = sorted(set(args.cluster) - {c.name for c in clusters})
        if unknown:
            err.write(f"{PROG} scan: unknown cluster(s) {', '.join(unknown)}\n")
            return EXIT_ERROR
        clusters = tuple(c for c in clusters if c.name in args.cluster)
    if not clusters:
        err.write(f"{PROG} scan: {args.fleet} defines no clusters\n")
        return EXIT_ERROR

    from exporter.spark import scan_job
    from exporter.spark.session import get_session

    try:
        spark = get_session(args.master, conf)
        scans = scan_job.scan_fleet(spark, clusters, args.orphan_check_seconds)
    except Exception as exc:  # a failed Spark job: one line, not a JVM stack trace
        err.write(f"{PROG} scan: the Spark job failed: {job_failure(exc)}\n")
        return EXIT_ERROR
    registry = scan_job.registry_for(clusters, scans)
    if args.textfile:
        scan_job.write_textfile(registry, args.textfile)
    if args.pushgateway:
        try:
            scan_job.push(registry, args.pushgateway, args.job)
        except OSError as exc:
            err.write(f"{PROG} scan: push to {args.pushgateway} failed: {exc}\n")
            return EXIT_ERROR
    failed = 0
    for scan in scans:
        if scan.snapshot is None:
            failed += 1
            out.write(f"{scan.cluster}: up=0 (poll failed: {scan.error})\n")
            continue
        snap = scan.snapshot
        if not snap.up:
            # Nothing is known about its transactions: no counts, rather than false zeros.
            failed += 1
            out.write(f"{scan.cluster}: up=0 (not polled: transactions unknown)"
                      f" ({scan.duration_seconds:.2f}s)\n")
            continue
        hanging = sum(1 for lt in snap.late_transactions if lt.classification == "hanging")
        oldest_seconds = snap.cluster_max_active_transaction_duration_seconds
        oldest = "unknown" if oldest_seconds is None else f"{oldest_seconds:.0f}s"
        # One poll cannot confirm an orphaned transaction: not checked, rather than a false 0.
        orphaned = (len(snap.orphaned_transactions) if args.orphan_check_seconds > 0
                    else "unchecked")
        out.write(
            f"{scan.cluster}: up={int(snap.up)} late={len(snap.late_transactions)} "
            f"hanging={hanging} orphaned={orphaned} oldest={oldest}"
            f" ({scan.duration_seconds:.2f}s)\n"
        )
    return EXIT_CLUSTER_FAILED if failed else EXIT_OK
