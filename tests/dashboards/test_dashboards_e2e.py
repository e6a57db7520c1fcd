"""End to end: simulated cluster -> exporter -> Prometheus -> Alertmanager -> webhook.

One stack per module (it takes a few seconds to start): a 3-broker `SimCluster`, the exporter's
own `serve()` polling it every second, the Debian `prometheus` binary scraping it every second
and evaluating the generated alert rules, the Debian `alertmanager` binary, and a webhook
receiver in this process. Everything listens on 127.0.0.1 port 0.

A hanging transaction is made through the wire protocol exactly like the real-broker capture's
hang-1 (`workload.hanging_transaction`: a transactional Produce to a partition never added with
AddPartitionsToTxn, so the coordinator keeps the id Empty). With
transaction.max.timeout.ms = 2000 and late_buffer_seconds = 1, it is late 3 s after its
record's CreateTime (the broker's late rule: now - T > transaction.max.timeout.ms + buffer,
docs/kafka-semantics.md#late-transactions).

The rules are the generated ones with `for:` shortened to 1 s (`--set
KafkaLateTransactions.for=1s --set KafkaHangingTransaction.for=1s`): the measured page latency
is the pipeline's own (poll + scrape + evaluation + delivery); in production add the configured
`for:` (5m late, 1m hanging).

A second test runs the exporter as its own process and stops it with SIGTERM while a hanging
transaction pages: the absence must page, and the hanging page must not resolve.

There is no `kafka-txn-exporter abort` command yet, so the abort step does what
`kafka-transactions.sh abort` does: DescribeProducers on the leader, pick the producer whose
CurrentTxnStartOffset is the start offset, WriteTxnMarkers(ABORT) with its id, epoch and
coordinator epoch (0 when absent).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest
from kafka_sim.client import RawKafkaClient, parse_bootstrap
from kafka_sim.cluster import SimCluster
from kafka_sim.consumer import commit_offset
from kafka_sim.producer import hanging_transaction, open_transaction
from promstack import Alertmanager, Notification, Prometheus, WebhookReceiver
from waits import SUBPROCESS_HANG_S, wait_for

from exporter.app import serve
from exporter.expose.http import MetricsServer
from exporter.settings import ClusterSettings, ExporterSettings, WebSettings

pytestmark = [pytest.mark.slow, pytest.mark.system_tools]  # prometheus, alertmanager

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = [
    REPO / "dashboards" / "kafka-transactions-overview.json",
    REPO / "dashboards" / "kafka-txn-exporter-health.json",
]

CLUSTER = "e2e"
TOPIC = "payments"
PARTITION = 0
TRANSACTIONAL_ID = "e2e-hanging-1"
BLOCKED_GROUP = "e2e-readers"
TRANSACTION_MAX_TIMEOUT_MS = 2000
LATE_BUFFER_SECONDS = 1.0
POLL_INTERVAL_SECONDS = 1.0
LIST_TRANSACTIONS = 66
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval
WAIT_SECONDS = 60.0
REPLICAS = 2


@dataclass
class Stack:
    sim: SimCluster
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: WebhookReceiver
    producer_id: int
    producer_epoch: int
    start_offset: int
    late_at: float
    """time.time() at which the hanging transaction became late."""


def _generate_rules(out_dir: Path) -> Path:
    result = subprocess.run(
        [
            sys.executable, "-m", "dashboards.generate", "--out-dir", str(out_dir),
            "--set", "KafkaLateTransactions.for=1s", "--set", "KafkaHangingTransaction.for=1s",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out_dir / "alerts" / "rules.yaml"


def _start_exporter(bootstrap: str) -> tuple[threading.Event, threading.Thread, int]:
    settings = ExporterSettings(
        clusters=(
            ClusterSettings(
                name=CLUSTER,
                bootstrap_servers=tuple(bootstrap.split(",")),
                poll_interval_seconds=POLL_INTERVAL_SECONDS,
                request_timeout_seconds=2.0,
                late_buffer_seconds=LATE_BUFFER_SECONDS,
                min_reported_duration_seconds=0.0,
            ),
        ),
        web=WebSettings(listen_address="127.0.0.1", port=0),
    )
    stop = threading.Event()
    started: list[MetricsServer] = []
    ready = threading.Event()

    def on_started(server: MetricsServer) -> None:
        started.append(server)
        ready.set()

    thread = threading.Thread(
        target=serve, args=(settings,), kwargs={"stop": stop, "on_started": on_started},
        name="exporter-serve", daemon=True,
    )  # fmt: skip
    thread.start()
    assert ready.wait(20), "exporter did not start"
    return stop, thread, started[0].port


def _wait(what: str, check: Any, timeout_seconds: float = WAIT_SECONDS) -> Any:
    return wait_for(what, check, timeout_seconds)


def _alert_notification(
    webhook: WebhookReceiver,
    alertname: str,
    status: str,
    timeout_seconds: float = WAIT_SECONDS,
    since: float = 0.0,
) -> Notification:
    def match(n: Notification) -> bool:
        return n.received_at >= since and n.status == status and any(
            a["labels"].get("alertname") == alertname and a["status"] == status for a in n.alerts
        )

    notification = webhook.wait_for(match, timeout_seconds)
    assert notification is not None, (
        f"no {status} {alertname} notification; got "
        f"{[(n.status, [a['labels'] for a in n.alerts]) for n in webhook.notifications]}"
    )
    return notification


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("e2e")
    rules = _generate_rules(work / "generated")
    sim = SimCluster(
        brokers=3,
        topics={TOPIC: 3, "orders": 3},
        broker_config={
            "transaction.max.timeout.ms": str(TRANSACTION_MAX_TIMEOUT_MS),
            # Like the real-broker capture: lets hang-1's un-added Produce through (KIP-890).
            "transaction.partition.verification.enable": "false",
            # A two-phase-commit transaction (KIP-939) for its own table.
            "transaction.two.phase.commit.enable": "true",
        },
        profile="4.4-two-phase",
    ).start()
    exporters: list[tuple[threading.Event, threading.Thread, int]] = []
    webhook = alertmanager = prometheus = None
    try:
        # Two replicas polling the same cluster, as a highly available deployment runs them:
        # the rules must page once and count each late partition once.
        for _ in range(REPLICAS):
            exporters.append(_start_exporter(sim.bootstrap_servers))
        webhook = WebhookReceiver()
        alertmanager = Alertmanager(work / "alertmanager", webhook.url)
        prometheus = Prometheus(
            work / "prometheus",
            targets=[f"127.0.0.1:{port}" for _, _, port in exporters],
            rule_files=[rules],
            alertmanager=alertmanager.address,
        )
        prom = prometheus
        _wait(
            "Prometheus to scrape a successful poll",
            lambda: (
                len(prom.query(f'kafka_txn_exporter_up{{cluster="{CLUSTER}"}} == 1')) == REPLICAS
            ),
        )
        # One spoiled ListTransactions answer, so the request-error panel has a series (every
        # poll asks it of every broker; DescribeProducers is not asked of a screened partition).
        # Wait for the exporter to meet it, or this test's own request could get it.
        sim.fail_next_responses("malformed", api_key=LIST_TRANSACTIONS, count=1)
        _wait(
            "the exporter to count a request error",
            lambda: prom.query(f'kafka_txn_exporter_request_errors_total{{cluster="{CLUSTER}"}}'),
        )

        producer_id, producer_epoch, start_offset = hanging_transaction(
            sim.bootstrap_servers, TRANSACTIONAL_ID, TOPIC, PARTITION,
            transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS,
        )  # fmt: skip
        # A prepared two-phase-commit transaction: never late, in its own table.
        open_transaction(sim.bootstrap_servers, "flink-sink-0", "orders", [2],
                         two_phase=True).close_quietly()
        # A consumer group stopped behind it: committed at its start offset (= the LSO; the
        # high watermark is past it), as a read_committed consumer leaves it.
        commit_offset(sim.bootstrap_servers, BLOCKED_GROUP, TOPIC, PARTITION, start_offset)
        record_time_ms = _record_create_time_ms(sim, producer_id)
        late_at = (record_time_ms + TRANSACTION_MAX_TIMEOUT_MS) / 1000 + LATE_BUFFER_SECONDS
        yield Stack(
            sim=sim,
            prometheus=prometheus,
            alertmanager=alertmanager,
            webhook=webhook,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            start_offset=start_offset,
            late_at=late_at,
        )
    finally:
        for thing in (prometheus, alertmanager, webhook):
            if thing is not None:
                thing.stop()
        for stop_exporter, _, _ in exporters:
            stop_exporter.set()
        for _, exporter_thread, _ in exporters:
            exporter_thread.join(timeout=10)
        sim.close()


def _leader_client(sim: SimCluster) -> RawKafkaClient:
    host, port = parse_bootstrap(sim.bootstrap_servers)[0]
    with RawKafkaClient(host, port) as any_broker:
        metadata = any_broker.request(
            MetadataRequest[8](
                topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                allow_auto_topic_creation=False,
            )
        )
    nodes = {b.node_id: (b.host, b.port) for b in metadata.brokers}
    (topic,) = metadata.topics
    leader = next(p.leader_id for p in topic.partitions if p.partition_index == PARTITION)
    return RawKafkaClient(*nodes[leader])


def _describe_producers(sim: SimCluster) -> list[Any]:
    with _leader_client(sim) as leader:
        response = leader.request(
            DescribeProducersRequest[0](
                topics=[
                    DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[PARTITION])
                ]
            )
        )
    (partition,) = response.topics[0].partitions
    assert partition.error_code == 0, partition
    return list(partition.active_producers)


def _record_create_time_ms(sim: SimCluster, producer_id: int) -> int:
    """DescribeProducers LastTimestamp = the hanging batch's max CreateTime (capture file 27)."""
    (producer,) = [p for p in _describe_producers(sim) if p.producer_id == producer_id]
    assert producer.current_txn_start_offset >= 0, "the transaction must be open"
    return int(producer.last_timestamp)


def _abort_like_kafka_transactions_sh(sim: SimCluster, start_offset: int) -> None:
    """kafka-transactions.sh abort --topic --partition --start-offset, step by step."""
    producers = [p for p in _describe_producers(sim) if p.current_txn_start_offset == start_offset]
    assert len(producers) == 1, producers
    producer = producers[0]
    with _leader_client(sim) as leader:
        response = leader.request(
            WriteTxnMarkersRequest[1](
                markers=[
                    WriteTxnMarkersRequest.WritableTxnMarker(
                        producer_id=producer.producer_id,
                        producer_epoch=producer.producer_epoch,
                        transaction_result=False,  # ABORT
                        topics=[
                            WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                                name=TOPIC, partition_indexes=[PARTITION]
                            )
                        ],
                        coordinator_epoch=max(producer.coordinator_epoch, 0),
                    )
                ]
            )
        )
    errors = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    assert errors == [0], response


def _dashboard_targets() -> list[tuple[str, str, dict[str, Any]]]:
    targets = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                targets.append((path.name, panel["title"], target))
    return targets


def _substitute(expr: str) -> str:
    return expr.replace("$cluster", CLUSTER).replace("$__rate_interval", RATE_INTERVAL)


def test_every_dashboard_query_returns_data_from_a_real_prometheus(stack: Stack) -> None:
    prom = stack.prometheus
    # The table and the hanging panels need the transaction to be late first.
    _wait(
        "the hanging transaction to be scraped",
        lambda: prom.query(
            f'kafka_late_transaction_age_seconds{{cluster="{CLUSTER}",classification="hanging"}}'
        ),
    )
    targets = _dashboard_targets()
    assert len(targets) >= 15

    def empty_queries() -> list[str]:
        now = time.time()
        empty = []
        for board, title, target in targets:
            expr = _substitute(target["expr"])
            if target.get("instant"):
                result = prom.query(expr)
            else:
                result = prom.query_range(expr, now - 5, now)
            if not result:
                empty.append(f"{board} / {title}: {expr}")
        return empty

    deadline = time.monotonic() + 30
    empty = empty_queries()
    while empty and time.monotonic() < deadline:
        time.sleep(1)
        empty = empty_queries()
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)
    # The late transactions table shows the one transaction, once, with what abort needs.
    (table,) = [t for _, title, t in targets if title == "Late transactions"]
    (row,) = prom.query(_substitute(table["expr"]))
    assert row["metric"] == {
        "cluster": CLUSTER,
        "topic": TOPIC,
        "partition": str(PARTITION),
        "producer_id": str(stack.producer_id),
        "producer_epoch": str(stack.producer_epoch),
        "coordinator_epoch": "-1",
        "start_offset": str(stack.start_offset),
        "transactional_id": TRANSACTIONAL_ID,
        "classification": "hanging",
    }
    # The blocked groups table names the group stopped at the hanging transaction's offset.
    (blocked,) = [t for _, title, t in targets if title.startswith("Consumer groups blocked")]
    # The two replicas poll at their own times: for a moment one may still call the
    # transaction orphaned (not yet late) while the other calls it hanging; one row once they
    # agree.
    (row,) = _wait("the replicas to agree on the blocking transaction", lambda: (
        rows if len(rows := prom.query(_substitute(blocked["expr"]))) == 1 else None))
    # ... with the blocking transaction's id and classification (its application: none).
    assert row["metric"] == {"cluster": CLUSTER, "group": BLOCKED_GROUP, "topic": TOPIC,
                             "partition": str(PARTITION), "transactional_id": TRANSACTIONAL_ID,
                             "classification": "hanging"}
    assert CLUSTER in prom.label_values("cluster", "kafka_txn_exporter_up")


def test_hanging_transaction_pages_with_its_labels_and_resolves_after_abort(
    stack: Stack,
) -> None:
    hanging = _alert_notification(stack.webhook, "KafkaHangingTransaction", "firing")
    late = _alert_notification(stack.webhook, "KafkaLateTransactions", "firing")
    # One alert for the transaction although both replicas report it.
    (alert,) = hanging.alerts
    assert alert["labels"] == {
        "alertname": "KafkaHangingTransaction",
        "severity": "critical",
        "job": "kafka-txn-exporter",
        "cluster": CLUSTER,
        "topic": TOPIC,
        "partition": str(PARTITION),
        "producer_id": str(stack.producer_id),
        "producer_epoch": str(stack.producer_epoch),
        "coordinator_epoch": "-1",  # no marker was ever written (capture file 27)
        "start_offset": str(stack.start_offset),
        "transactional_id": TRANSACTIONAL_ID,
    }
    assert alert["annotations"]["runbook_url"].endswith("docs/runbook.md#kafkahangingtransaction")
    assert f"--start-offset {stack.start_offset}" in alert["annotations"]["description"]
    assert "1 consumer group(s) are blocked there" in alert["annotations"]["description"]
    (late_alert,) = late.alerts
    assert late_alert["labels"] == {
        "alertname": "KafkaLateTransactions",
        "severity": "critical",
        "job": "kafka-txn-exporter",
        "cluster": CLUSTER,
    }
    # Counted once, not once per replica (max across replicas, not sum).
    assert late_alert["annotations"]["summary"].startswith(
        f"1 partition(s) of Kafka cluster {CLUSTER}"
    )
    hanging_latency = hanging.received_at - stack.late_at
    late_latency = late.received_at - stack.late_at
    print(
        f"\nPAGE LATENCY (transaction late -> webhook, rules with for: 1s, poll 1 s, scrape 1 s,"
        f" evaluation 1 s): KafkaHangingTransaction {hanging_latency:.1f} s, "
        f"KafkaLateTransactions {late_latency:.1f} s"
    )
    assert 0 < hanging_latency < 30
    assert 0 < late_latency < 30

    aborted_at = time.time()
    _abort_like_kafka_transactions_sh(stack.sim, stack.start_offset)
    assert all(p.current_txn_start_offset == -1 for p in _describe_producers(stack.sim))
    resolved = _alert_notification(stack.webhook, "KafkaHangingTransaction", "resolved")
    (resolved_alert,) = [
        a for a in resolved.alerts if a["labels"]["alertname"] == "KafkaHangingTransaction"
    ]
    assert resolved_alert["labels"] == alert["labels"]
    _alert_notification(stack.webhook, "KafkaLateTransactions", "resolved")
    resolve_latency = resolved.received_at - aborted_at
    print(f"RESOLVE LATENCY (abort -> resolved notification): {resolve_latency:.1f} s")


# --------------------------------------------------------------------------------------------
# The exporter itself dies mid-incident
# --------------------------------------------------------------------------------------------

def _start_exporter_process(bootstrap: str, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`kafka-txn-exporter serve` as its own process (so it can get a real SIGTERM)."""
    config = {
        "clusters": [
            {
                "name": CLUSTER,
                "bootstrap_servers": bootstrap.split(","),
                "poll_interval_seconds": POLL_INTERVAL_SECONDS,
                "request_timeout_seconds": 2,
                "late_buffer_seconds": LATE_BUFFER_SECONDS,
                "min_reported_duration_seconds": 0,
            }
        ],
        "web": {"listen_address": "127.0.0.1", "port": 0},
        "log": {"format": "json", "level": "info"},
    }
    config_path = work / "exporter.yaml"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    log_path = work / "exporter.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=work,
        )  # fmt: skip

    def port() -> int | None:
        for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"exporter_started"' in line:
                listen = json.loads(line)["listen"]
                return int(listen.rsplit(":", 1)[1].split("/", 1)[0])
        assert proc.poll() is None, log_path.read_text(encoding="utf-8", errors="replace")
        return None

    return proc, _wait("the exporter process to start", port, 30)


def test_sigterm_while_a_hanging_transaction_pages_pages_absence_and_never_resolves_first(
    tmp_path: Path,
) -> None:
    """Stopping the exporter must not look like "all clear".

    A hanging transaction pages; the exporter process gets SIGTERM. The webhook must receive
    KafkaTxnExporterAbsent, and no "resolved" for KafkaHangingTransaction before it (nor for a
    few seconds after it: the page holds on the last complete verdict).
    """
    generated = tmp_path / "generated"
    result = subprocess.run(
        [
            sys.executable, "-m", "dashboards.generate", "--out-dir", str(generated),
            "--set", "KafkaHangingTransaction.for=1s",
            "--set", "KafkaLateTransactions.for=1s",
            "--set", "KafkaTxnExporterAbsent.window=3s",
            "--set", "KafkaTxnExporterAbsent.for=1s",
            "--set", "KafkaTxnExporterTargetDown.for=1s",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    sim = SimCluster(
        brokers=3,
        topics={TOPIC: 3},
        broker_config={
            "transaction.max.timeout.ms": str(TRANSACTION_MAX_TIMEOUT_MS),
            "transaction.partition.verification.enable": "false",
        },
    ).start()
    proc: subprocess.Popen[bytes] | None = None
    webhook = alertmanager = prometheus = None
    try:
        proc, port = _start_exporter_process(sim.bootstrap_servers, tmp_path)
        webhook = WebhookReceiver()
        alertmanager = Alertmanager(tmp_path / "alertmanager", webhook.url)
        prometheus = Prometheus(
            tmp_path / "prometheus",
            targets=[f"127.0.0.1:{port}"],
            rule_files=[generated / "alerts" / "rules.yaml"],
            alertmanager=alertmanager.address,
        )
        prom = prometheus
        _wait(
            "every rule to evaluate without error",
            lambda: all(health == "ok" for _, health, _ in prom.rule_health()),
        )
        # A Prometheus with no samples yet finds the exporter absent: wait until it has them.
        _wait(
            "the exporter to be scraped and not absent",
            lambda: prom.query("kafka_txn_exporter_build_info")
            and not prom.query('ALERTS{alertname=~"KafkaTxnExporter.*"}'),
        )
        hanging_transaction(
            sim.bootstrap_servers, TRANSACTIONAL_ID, TOPIC, PARTITION,
            transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS,
        )  # fmt: skip
        _alert_notification(webhook, "KafkaHangingTransaction", "firing")
        # Nothing about the exporter itself while it runs.
        assert not prom.query('ALERTS{alertname=~"KafkaTxnExporter.*"}')

        stopped_at = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        absent = _alert_notification(
            webhook, "KafkaTxnExporterAbsent", "firing", since=stopped_at
        )
        (absent_alert,) = absent.alerts
        assert absent_alert["labels"] == {
            "alertname": "KafkaTxnExporterAbsent",
            "severity": "critical",
            "job": "kafka-txn-exporter",
        }
        target_down = _alert_notification(
            webhook, "KafkaTxnExporterTargetDown", "firing", since=stopped_at
        )
        time.sleep(3)  # a resolved notification racing the absence would have arrived by now

        def resolved_hanging() -> list[float]:
            return [
                n.received_at - stopped_at
                for n in webhook.notifications
                if any(a["labels"]["alertname"] == "KafkaHangingTransaction"
                       and a["status"] == "resolved" for a in n.alerts)
            ]  # fmt: skip

        assert resolved_hanging() == [], "the hanging page resolved because the exporter died"
        # Prometheus still has it firing, on the last value seen.
        firing = prometheus.query(
            'ALERTS{alertname="KafkaHangingTransaction",alertstate="firing"}'
        )
        assert len(firing) == 1, firing
        print(
            f"\nEXPORTER STOPPED (SIGTERM) -> KafkaTxnExporterAbsent notification "
            f"{absent.received_at - stopped_at:.1f} s, KafkaTxnExporterTargetDown "
            f"{target_down.received_at - stopped_at:.1f} s; KafkaHangingTransaction resolved "
            "notifications: none (held on the last complete verdict)"
        )
        assert absent.received_at - stopped_at < 30
    finally:
        for thing in (prometheus, alertmanager, webhook):
            if thing is not None:
                thing.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        sim.close()


def test_on_a_healthy_cluster_every_panel_shows_zero_or_says_why(tmp_path: Path) -> None:
    """Nothing wrong: no open transaction, no request error. A panel whose series only exist
    when something is wrong shows 0 where 0 is known, or its own noValue text -- never
    Grafana's bare "No data", which reads like a broken dashboard."""
    sim = SimCluster(brokers=3, topics={TOPIC: 3}).start()
    proc: subprocess.Popen[bytes] | None = None
    prometheus = None
    try:
        proc, port = _start_exporter_process(sim.bootstrap_servers, tmp_path)
        prometheus = Prometheus(tmp_path / "prometheus", targets=[f"127.0.0.1:{port}"])
        prom = prometheus
        _wait(
            "a few scrapes of a successful poll",
            lambda: prom.query(
                f'count_over_time(kafka_txn_exporter_up{{cluster="{CLUSTER}"}}[1m]) >= 5'
            ),
        )
        boards = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in DASHBOARDS}
        now = time.time()
        zeros: list[str] = []
        for board_name, board in boards.items():
            for panel in board["panels"]:
                targets = panel.get("targets", [])
                if not targets:
                    continue
                values: list[float] = []
                for target in targets:
                    expr = _substitute(target["expr"])
                    if target.get("instant"):
                        values += [float(r["value"][1]) for r in prom.query(expr)]
                    else:
                        values += [
                            float(v[1])
                            for r in prom.query_range(expr, now - 5, now)
                            for v in r["values"]
                        ]
                if not values:
                    no_value = panel["fieldConfig"]["defaults"].get("noValue")
                    assert no_value, f"{board_name} / {panel['title']}: 'No data' when healthy"
                elif all(v == 0 for v in values):
                    zeros.append(panel["title"])
        # The stale-poll rule compares the two sides one-to-one: on real exporter output their
        # label sets must match, or the rule could never fire. Inverted, it holds right now.
        rules = yaml.safe_load((REPO / "dashboards/alerts/rules.yaml").read_text("utf-8"))
        (stale,) = [r["expr"] for g in rules["groups"] for r in g["rules"]
                    if r.get("alert") == "KafkaTxnExporterPollsStale"]  # fmt: skip
        (fresh,) = prom.query(stale.replace(" > ", " < "))
        assert fresh["metric"] == {"cluster": CLUSTER, "job": "kafka-txn-exporter"}
        (interval,) = prom.query("kafka_txn_exporter_poll_interval_seconds")
        assert float(interval["value"][1]) == POLL_INTERVAL_SECONDS
        for title in (
            "Request errors by API and error",
            "Last stable offset lag",
            "Top partitions by max active transaction duration",
            "Partitions with late transactions",
        ):
            assert title in zeros, f"{title}: expected 0 on a healthy cluster, got {zeros}"
    finally:
        if prometheus is not None:
            prometheus.stop()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        sim.close()
