"""`kafka-txn-exporter demo`: the exporter on an embedded simulated cluster with live traffic.

What it runs: a 3-broker `SimCluster` (transaction.max.timeout.ms = 60000, like the reference
capture's broker), a `Workload` of committed, aborted and long-running transactions, and after
`HANGING_AFTER_SECONDS` one hanging transaction made like the capture's hang-1 (a transactional
Produce to a partition never added with AddPartitionsToTxn, so the coordinator never tracks it).
With `late_buffer_seconds` = 15 the hanging transaction is late once it is older than
60 s + 15 s (the broker's late rule, now - T > transaction.max.timeout.ms + buffer;
docs/kafka-semantics.md#late-transactions),
so `kafka_partitions_with_late_transactions` turns 1 about 95 s after start. The hanging
transaction's topic gets committed transactions too, read by the consumer group
`DEMO_CONSUMER_GROUP` (read_committed, `assign()` + commit): on the hanging partition its
committed offset stops at the last stable offset while the high watermark moves on.

The demo writes its cluster as a config file (`demo.yaml` in a temporary directory, removed on
exit, with an `admin` entry for the PLAINTEXT simulator): the status page's abort command
points at it with `--config`, so the command runs as printed.

`--kafka real` runs the same demo on a real single-node Apache Kafka broker started from the
jars scripts/install-kafka installed (kafka_sim.realkafka), with the same two broker settings.
A real broker's clock cannot be moved, so there the hanging transaction is made after
`REAL_HANGING_AFTER_SECONDS` with its CreateTime backdated by `REAL_HANGING_BACKDATE_MS`
(older than the late threshold at once; only a broker with partition verification off
accepts it).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, TextIO

import yaml

from exporter.config import parse_listen_address, parse_port
from exporter.errors import ConfigError
from exporter.expose.http import MetricsServer
from exporter.logs import configure_logging, get_logger
from exporter.settings import ClusterSettings, ExporterSettings, WebSettings

DEMO_TRANSACTION_MAX_TIMEOUT_MS = 60_000
DEMO_LATE_BUFFER_SECONDS = 15.0
DEMO_POLL_INTERVAL_SECONDS = 5.0
HANGING_AFTER_SECONDS = 15.0
WORKLOAD_TOPIC = "demo-orders"
WORKLOAD_PARTITIONS = 6
HANGING_TOPIC = "demo-payments"
HANGING_PARTITIONS = 3
DEMO_CONSUMER_GROUP = "demo-payments-readers"
DEMO_BROKER_CONFIG = {
    "transaction.max.timeout.ms": str(DEMO_TRANSACTION_MAX_TIMEOUT_MS),
    # As the reference capture's broker: otherwise the broker refuses the Produce that
    # makes the hanging transaction (it verifies partitions with the coordinator).
    "transaction.partition.verification.enable": "false",
}
REAL_HANGING_AFTER_SECONDS = 3.0
REAL_HANGING_BACKDATE_MS = (
    DEMO_TRANSACTION_MAX_TIMEOUT_MS + int(DEMO_LATE_BUFFER_SECONDS * 1000) + 30_000
)
KAFKA_MODES = ("sim", "real")


def demo_cluster_settings(bootstrap_servers: str) -> ClusterSettings:
    return ClusterSettings(
        name="demo",
        bootstrap_servers=tuple(bootstrap_servers.split(",")),
        client_id="kafka-txn-exporter-demo",
        poll_interval_seconds=DEMO_POLL_INTERVAL_SECONDS,
        request_timeout_seconds=5.0,
        late_buffer_seconds=DEMO_LATE_BUFFER_SECONDS,
        min_reported_duration_seconds=5.0,
        config_refresh_seconds=300.0,
        labels={"env": "demo"},
    )


def demo_config(cluster: ClusterSettings) -> dict[str, Any]:
    """The demo's cluster as a config file's content, with the `admin` entry that `abort`
    needs (the simulator has no authentication: the admin principal is anonymous)."""
    entry: dict[str, Any] = {
        "name": cluster.name,
        "bootstrap_servers": list(cluster.bootstrap_servers),
        "client_id": cluster.client_id,
        "poll_interval_seconds": cluster.poll_interval_seconds,
        "request_timeout_seconds": cluster.request_timeout_seconds,
        "late_buffer_seconds": cluster.late_buffer_seconds,
        "min_reported_duration_seconds": cluster.min_reported_duration_seconds,
        "config_refresh_seconds": cluster.config_refresh_seconds,
        "labels": dict(cluster.labels),
    }
    return {"clusters": [entry], "admin": {"clusters": [{"name": cluster.name}]}}


def write_demo_config(directory: str, cluster: ClusterSettings) -> str:
    """Write `demo_config` to `directory`/demo.yaml; returns its absolute path."""
    path = os.path.abspath(os.path.join(directory, "demo.yaml"))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# Written by `kafka-txn-exporter demo` for the status page's abort "
                     "command; removed when the demo stops.\n")
        yaml.safe_dump(demo_config(cluster), handle, sort_keys=False)
    return path


def _banner(url_base: str, config_file: str, out: TextIO, kafka: str = "sim") -> None:
    late_after = DEMO_TRANSACTION_MAX_TIMEOUT_MS // 1000 + DEMO_LATE_BUFFER_SECONDS
    if kafka == "real":
        when = (f"a hanging transaction, backdated {REAL_HANGING_BACKDATE_MS // 1000}s, starts "
                f"after ~{REAL_HANGING_AFTER_SECONDS:.0f}s\nand is late at once")
        on = "a real Apache Kafka broker"
    else:
        when = (f"a hanging transaction starts after ~{HANGING_AFTER_SECONDS:.0f}s and\n"
                f"becomes late after ~{late_after:.0f}s more")
        on = "the embedded simulator"
    out.write(
        f"""
kafka-txn-exporter demo is running (on {on}).
  status:    {url_base}/
  metrics:   {url_base}/metrics
  readiness: {url_base}/readyz
  config:    {config_file} (the status page's abort command uses it)
Watch the interesting series ({when}):
  curl -s {url_base}/metrics | grep -E '^kafka_(partitions_with_|late_transaction|cluster_max)'
Stop with Ctrl-C.

"""
    )
    out.flush()


def _installed_kafka_versions() -> list[str]:
    """The versions scripts/install-kafka completed in its cache, oldest first."""
    from kafka_sim.realkafka import kafka_home

    home = kafka_home()
    found = [d.name for d in home.iterdir() if (d / "complete").exists()] if home.is_dir() else []

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))

    return sorted(found, key=key)


def start_real_kafka(
    version: str | None, broker_config: dict[str, str], topics: dict[str, int]
) -> tuple[str, Callable[[], None]]:
    """A single-node real broker (the newest installed version unless `version`), its topics
    created -> (bootstrap servers, stop-and-clean-up). Not installed -> ConfigError (exit 2)."""
    import shutil
    import tempfile
    import time
    from pathlib import Path

    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka_sim.realkafka import KafkaNotInstalled, java_command, start_cluster

    install = "run scripts/install-kafka"
    try:
        java_command()
    except KafkaNotInstalled:
        raise ConfigError(f"--kafka real: no java found: {install}") from None
    installed = _installed_kafka_versions()
    if version is None:
        if not installed:
            raise ConfigError(f"--kafka real: Apache Kafka is not installed: {install}")
        version = installed[-1]
    elif version not in installed:
        raise ConfigError(f"--kafka.version: Kafka {version} is not installed: {install} {version}")
    workdir = Path(tempfile.mkdtemp(prefix="kte-demo-kafka-"))
    try:
        cluster = start_cluster(version, workdir, broker_config=broker_config)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise

    def close() -> None:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    try:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(name, n, 1) for name, n in topics.items()])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ready = True
                for name, count in topics.items():
                    parts = admin.describe_topics([name])[0].get("partitions") or []
                    ready = ready and len(parts) == count
                    ready = ready and all(p.get("leader_id", -1) >= 0 for p in parts)
                if ready:
                    break
                time.sleep(0.2)
        finally:
            admin.close()
    except BaseException:
        close()
        raise
    get_logger("exporter.demo").info(
        "demo_real_kafka_started", kafka_version=version, bootstrap_servers=cluster.bootstrap
    )
    return cluster.bootstrap, close


def run_demo(
    *,
    listen_address: str = "127.0.0.1",
    port: str | int = 9981,
    log_format: str = "auto",
    log_level: str = "info",
    duration_seconds: float | None = None,
    stop: threading.Event | None = None,
    out: TextIO | None = None,
    on_started: Callable[[MetricsServer], None] | None = None,
    kafka: str = "sim",
    kafka_version: str | None = None,
) -> int:
    """Start the simulator (or a real broker), the workload and the exporter; clean
    everything up on exit."""
    from kafka_sim.producer import hanging_transaction
    from kafka_sim.workload import Workload

    from exporter.app import serve

    listen_address, port_in_address = parse_listen_address(listen_address, "--web.listen-address")
    web_port = port_in_address if port_in_address is not None else parse_port(port, "--web.port")
    if log_level not in ("debug", "info", "warning", "error", "critical"):
        raise ConfigError(f"--log.level: unknown level {log_level!r}")
    configure_logging(log_format, log_level)
    log = get_logger("exporter.demo")
    out = sys.stdout if out is None else out
    stop = stop or threading.Event()

    if kafka not in KAFKA_MODES:
        raise ConfigError(f"--kafka: {kafka!r} is not one of {', '.join(KAFKA_MODES)}")
    topics = {WORKLOAD_TOPIC: WORKLOAD_PARTITIONS, HANGING_TOPIC: HANGING_PARTITIONS}
    hanging_after_s, backdate_ms = HANGING_AFTER_SECONDS, 0
    if kafka == "real":
        bootstrap, close_cluster = start_real_kafka(kafka_version, DEMO_BROKER_CONFIG, topics)
        hanging_after_s, backdate_ms = REAL_HANGING_AFTER_SECONDS, REAL_HANGING_BACKDATE_MS
    else:
        from kafka_sim.cluster import SimCluster

        sim = SimCluster(brokers=3, topics=topics, broker_config=DEMO_BROKER_CONFIG).start()
        bootstrap, close_cluster = sim.bootstrap_servers, sim.close
    workload: Workload | None = None
    payments: Workload | None = None
    timers: list[threading.Timer] = []
    config_dir = tempfile.mkdtemp(prefix="kafka-txn-exporter-demo-")
    try:
        cluster = demo_cluster_settings(bootstrap)
        config_file = write_demo_config(config_dir, cluster)
        log.info("demo_cluster_started", bootstrap_servers=bootstrap, kafka=kafka,
                 config_file=config_file)
        workload = Workload(
            bootstrap,
            WORKLOAD_TOPIC,
            partitions=range(WORKLOAD_PARTITIONS),
            transactions_per_second=2.0,
            abort_ratio=0.2,
            long_running_ratio=0.15,
            long_running_ms=40_000,
            max_open_long_running=3,
            transaction_timeout_ms=DEMO_TRANSACTION_MAX_TIMEOUT_MS,
            id_prefix="demo",
        )
        workload.start()
        payments = Workload(
            bootstrap,
            HANGING_TOPIC,
            partitions=range(HANGING_PARTITIONS),
            transactions_per_second=1.0,
            abort_ratio=0.0,
            long_running_ratio=0.0,
            transaction_timeout_ms=DEMO_TRANSACTION_MAX_TIMEOUT_MS,
            id_prefix="demo-payments",
            consumer_group=DEMO_CONSUMER_GROUP,
        )
        payments.start()

        def make_hanging() -> None:
            try:
                pid, epoch, offset = hanging_transaction(
                    bootstrap, "demo-hanging-1", HANGING_TOPIC, 0, backdate_ms=backdate_ms
                )
                log.info("demo_hanging_transaction_created", topic=HANGING_TOPIC, partition=0,
                         producer_id=pid, producer_epoch=epoch, start_offset=offset)
            except Exception:
                log.error("demo_hanging_transaction_failed", exc_info=True)

        timers.append(threading.Timer(hanging_after_s, make_hanging))
        if duration_seconds is not None:
            timers.append(threading.Timer(duration_seconds, stop.set))
        for timer in timers:
            timer.daemon = True
            timer.start()

        settings = ExporterSettings(
            clusters=(cluster,),
            web=WebSettings(listen_address=listen_address, port=web_port),
            log_format=log_format,
            log_level=log_level,
        )

        def started(server: MetricsServer) -> None:
            host = server.address
            host = "127.0.0.1" if host in ("0.0.0.0", "") else host
            host = f"[{host}]" if ":" in host else host
            _banner(f"http://{host}:{server.port}", config_file, out, kafka)
            if on_started is not None:
                on_started(server)

        return serve(settings, stop=stop, on_started=started, config_file=config_file)
    finally:
        for timer in timers:
            timer.cancel()
        for running in (workload, payments):
            if running is not None:
                running.stop(timeout_s=5.0)
        close_cluster()
        shutil.rmtree(config_dir, ignore_errors=True)
