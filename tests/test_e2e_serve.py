"""End to end: the real CLI (`serve`, `scan`, `demo`) as a subprocess against a SimCluster.

The hanging transaction is made like the real-broker capture's hang-1 (a transactional Produce
to a partition never added with AddPartitionsToTxn; docs/kafka-semantics.md#how-hanging-arises), so
the coordinator lists the id as Empty with no partitions: find-hanging step 5 says hanging.
Its record CreateTime is backdated past transaction.max.timeout.ms (60 s, the simulator's
4.0 default as in the capture) + the late buffer, so it is late on the first poll.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import committed_transaction, hanging_transaction, open_transaction
from prometheus_client.parser import text_string_to_metric_families
from simhelpers import CAPTURE_BROKER_CONFIG

pytestmark = pytest.mark.slow

TOPIC = "orders"
HANG_TOPIC = "payments"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    cluster = SimCluster(
        brokers=3,
        topics={TOPIC: 3, HANG_TOPIC: 2},
        # as the capture's broker: a hanging transaction needs verification off
        broker_config=CAPTURE_BROKER_CONFIG,
    ).start()
    try:
        bootstrap = cluster.bootstrap_servers
        committed_transaction(bootstrap, "e2e-committed", TOPIC, [0])
        hanging_transaction(bootstrap, "e2e-hang-1", HANG_TOPIC, 1, backdate_ms=400_000)
        # Hanging too, but young: orphaned long before it is late (60 s + the 10 s buffer).
        hanging_transaction(bootstrap, "e2e-orphan-1", HANG_TOPIC, 0)
        txn = open_transaction(bootstrap, "e2e-open-1", TOPIC, [2], transaction_timeout_ms=60_000)
        yield cluster
        txn.close_quietly()
    finally:
        cluster.close()


def environ_without_kte() -> dict[str, str]:
    """This process's environment minus KTE_* settings, so that only the test's own apply."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}


def cli_env(sim: SimCluster, **extra: str) -> dict[str, str]:
    env = environ_without_kte()
    env.update(
        KTE_CLUSTER_NAME="sim",
        KTE_CLUSTER_BOOTSTRAP_SERVERS=sim.bootstrap_servers,
        KTE_CLUSTER_POLL_INTERVAL_SECONDS="1s",
        KTE_CLUSTER_REQUEST_TIMEOUT_SECONDS="5s",
        KTE_CLUSTER_LATE_BUFFER_SECONDS="10s",
        KTE_CLUSTER_MIN_REPORTED_DURATION_SECONDS="0",
        KTE_CLUSTER_LABELS="env=e2e",
        KTE_LOG_FORMAT="json",
    )
    env.update(extra)
    return env


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def read_listen_url(proc: subprocess.Popen[str], timeout: float = 15.0) -> str:
    """The `exporter_started` log event carries the bound URL (we listen on port 0)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if '"exporter_started"' in line:
            return str(json.loads(line)["listen"]).removesuffix("/metrics")
    raise AssertionError("exporter did not log exporter_started")


def start_serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`exporter serve` listening on 127.0.0.1 port 0 (see read_listen_url), logs on stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", *args, "--web.listen-address", "127.0.0.1",
         "--web.port", "0"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )


def stop(proc: subprocess.Popen[str], sig: signal.Signals, timeout: float) -> int:
    """Send `sig` and return the exit code; a process still running after `timeout` is killed."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_reports_the_hanging_transaction_and_stops_on_sigterm(sim: SimCluster) -> None:
    proc = start_serve(cli_env(sim))
    try:
        base = read_listen_url(proc)
        wait_until(lambda: http_get(base + "/readyz")[0] == 200, 20, "/readyz 200")
        _, text = http_get(base + "/metrics")
        s = samples(text)
        assert s[("kafka_txn_exporter_up", frozenset({("cluster", "sim"), ("env", "e2e")}))] == 1
        late = {
            dict(labels)["broker"]: value
            for (name, labels), value in s.items()
            if name == "kafka_partitions_with_late_transactions"
        }
        assert sorted(late) == ["1", "2", "3"]  # 0 for every broker polled OK ...
        assert sum(late.values()) == 1  # ... and 1 for the leader of payments-1
        hanging = sum(v for (n, _), v in s.items()
                      if n == "kafka_partitions_with_hanging_transactions")
        assert hanging == 1
        (age_labels,) = [dict(labels) for (n, labels) in s
                         if n == "kafka_late_transaction_age_seconds"]
        assert age_labels["topic"] == HANG_TOPIC and age_labels["partition"] == "1"
        assert age_labels["classification"] == "hanging"
        assert age_labels["transactional_id"] in ("", "e2e-hang-1")
        assert age_labels["env"] == "e2e"
        cluster_max = s[("kafka_cluster_max_active_transaction_duration_seconds",
                         frozenset({("cluster", "sim"), ("env", "e2e")}))]
        assert cluster_max >= 400
        open_partitions = {dict(labels)["topic"] + "-" + dict(labels)["partition"]
                           for (n, labels) in s
                           if n == "kafka_partition_max_active_transaction_duration_seconds"}
        assert {"payments-1", "orders-2"} <= open_partitions
        # Exposure: verification off on every broker, transaction.version 2 (as a 4.0 broker
        # answers), and the late transaction's topic read once: not compacted.
        assert {dict(labels)["broker"]: v for (n, labels), v in s.items()
                if n == "kafka_transaction_partition_verification_enabled"} == {
            "1": 0.0, "2": 0.0, "3": 0.0}
        assert s[("kafka_finalized_transaction_version",
                  frozenset({("cluster", "sim"), ("env", "e2e")}))] == 2
        assert {dict(labels)["topic"]: v for (n, labels), v in s.items()
                if n == "kafka_topic_compacted"} == {HANG_TOPIC: 0.0}
        # Orphaned: both hanging transactions once the coordinator was asked on two polls
        # (the young one is not late), never the healthy open one on orders-2.
        def orphaned() -> dict[str, float]:
            return {
                dict(labels)["topic"] + "-" + dict(labels)["partition"]: value
                for (n, labels), value in samples(http_get(base + "/metrics")[1]).items()
                if n == "kafka_orphaned_transaction_age_seconds"
            }

        wait_until(lambda: len(orphaned()) == 2, 20, "two orphaned transactions")
        young = orphaned()
        assert set(young) == {"payments-0", "payments-1"}
        assert young["payments-0"] < 60 <= young["payments-1"]
        s = samples(http_get(base + "/metrics")[1])
        assert sum(v for (n, _), v in s.items()
                   if n == "kafka_partitions_with_orphaned_transactions") == 2
        assert [dict(labels)["partition"] for (n, labels) in s
                if n == "kafka_late_transaction_age_seconds"] == ["1"]
    finally:
        began = time.monotonic()
        code = stop(proc, signal.SIGTERM, 10)
    assert code == 0
    assert time.monotonic() - began < 5.0


def test_scan_finds_the_hanging_transaction(sim: SimCluster) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--output", "json"],
        env=cli_env(sim), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    rows = [r for r in data["transactions"] if r["classification"] == "hanging"]
    assert [(r["topic"], r["partition"]) for r in rows] == [(HANG_TOPIC, 1)]
    assert rows[0]["duration_minutes"] >= 6  # backdated 400 s, like the capture's find-hanging
    assert rows[0]["topic_compacted"] is False
    # The young hanging transaction: orphaned, found by the extra polls (--orphan-check-seconds).
    orphans = [r for r in data["transactions"] if r["classification"] == "orphaned"]
    assert [(r["topic"], r["partition"]) for r in orphans] == [(HANG_TOPIC, 0)]
    assert data["orphaned"] is True and data["hanging"] is True
    assert data["exposure"] == {"sim": {
        "finalized_transaction_version": 2,
        "partition_verification": {"1": "disabled", "2": "disabled", "3": "disabled"}}}

    table = subprocess.run(
        [sys.executable, "-m", "exporter", "scan"],
        env=cli_env(sim), capture_output=True, text=True, timeout=60,
    )
    assert table.returncode == 1
    header, *lines = table.stdout.strip().splitlines()
    assert header.split()[:8] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                  "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                                  "Duration(min)"]
    assert any(re.match(rf"{HANG_TOPIC}\s+1\s", line) for line in lines)


def test_demo_starts_serves_and_stops() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--web.port", "0", "--duration", "30",
         "--log.format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=environ_without_kte(),
    )
    try:
        assert proc.stdout is not None
        base = ""
        deadline = time.monotonic() + 20
        while not base and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if match := re.search(r"metrics:\s+(http://\S+)/metrics", line):
                base = match.group(1)
        assert base, "demo did not print its metrics URL"
        wait_until(lambda: http_get(base + "/readyz")[0] == 200, 20, "demo /readyz 200")
        text = http_get(base + "/metrics")[1]
        assert 'kafka_txn_exporter_up{cluster="demo",env="demo"} 1.0' in text
        assert 'kafka_transaction_max_timeout_seconds{broker="1",cluster="demo",env="demo"} 60.0' \
            in text
        # The demo's brokers run with verification off (so its transaction can hang).
        for broker in ("1", "2", "3"):
            assert ('kafka_transaction_partition_verification_enabled{broker="' + broker
                    + '",cluster="demo",env="demo"} 0.0') in text
        assert 'kafka_finalized_transaction_version{cluster="demo",env="demo"} 2.0' in text
    finally:
        code = stop(proc, signal.SIGINT, 15)
    assert code == 0


def test_sigterm_during_a_stuck_poll_exits_within_5_seconds() -> None:
    """Every response delayed 30 s: the first poll hangs in a request when SIGTERM arrives."""
    with SimCluster(brokers=1, topics={TOPIC: 1}) as slow:
        slow.set_latency(30_000)
        env = environ_without_kte()
        env.update(KTE_CLUSTER_BOOTSTRAP_SERVERS=slow.bootstrap_servers,
                   KTE_CLUSTER_REQUEST_TIMEOUT_SECONDS="60", KTE_LOG_FORMAT="json")
        proc = start_serve(env)
        try:
            base = read_listen_url(proc)
            time.sleep(0.5)  # let the first poll reach its (delayed) request
            assert http_get(base + "/readyz")[0] == 503  # the poll is still running
        finally:
            began = time.monotonic()
            code = stop(proc, signal.SIGTERM, 10)
            elapsed = time.monotonic() - began
        assert code == 0
        assert elapsed < 5.0


def test_serve_appends_history_that_spark_history_reads(sim: SimCluster, tmp_path: Path) -> None:
    """history.directory in the config: each poll lands in the Parquet history."""
    from exporter.spark.report import build_report, read_history

    config = tmp_path / "exporter.yaml"
    history_dir = tmp_path / "history"
    config.write_text(f"history:\n  directory: {history_dir}\n  retention_days: 7\n")
    proc = start_serve(cli_env(sim), "--config", str(config))
    try:
        read_listen_url(proc)
        wait_until(lambda: len(list(history_dir.glob("polls/**/*.parquet"))) >= 2, 20,
                   "two polls in the history")
    finally:
        assert stop(proc, signal.SIGTERM, 10) == 0
    report = build_report(*read_history(history_dir))
    hanging = report.incidents[report.incidents["hanging"]]
    assert [(r.topic, r.partition) for r in hanging.itertuples()] == [(HANG_TOPIC, 1)]
    assert set(report.incidents["cluster"]) == {"sim"}
