"""`spark scan`: Spark tasks run the project's own ClusterPoller + analyze.

- analyze run by Spark executors equals analyze in-process on generated observations;
- a fleet of three simulated clusters (two with a hanging transaction made like the real
  capture's hang-1: transactional Produce to a partition never added to the transaction, which
  a broker accepts only with transaction.partition.verification.enable=false) is scanned as one
  job; the textfile holds the daemon's metric families and a real Pushgateway receives them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import histgen
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from exporter.analyze import analyze
from exporter.spark.cli import run_spark
from exporter.spark.scan_job import analyze_on_spark

pytestmark = pytest.mark.system_tools  # Java (Spark) and prometheus-pushgateway

BROKER_CONFIG = {
    "transaction.partition.verification.enable": "false",
    "transaction.max.timeout.ms": "60000",
}
BACKDATE_MS = 400_000  # > 60 s max timeout + 300 s late buffer: late at the first poll


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plans=st.lists(histgen.cluster_plans("c"), min_size=1, max_size=4))
def test_analyze_on_spark_equals_in_process(
    spark: SparkSession, plans: list[histgen.ClusterPlan]
) -> None:
    items = [(obs, plan.settings) for plan in plans for obs in histgen.observations(plan)]
    assert analyze_on_spark(spark, items) == [analyze(obs, s) for obs, s in items]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture()
def pushgateway(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
    assert binary, "prometheus-pushgateway missing: run scripts/install-spark-deps"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "pushgateway.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "pushgateway.log").read_text()
                assert time.monotonic() < deadline, "pushgateway did not become ready"
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def samples(text: str, name: str) -> dict[str, float]:
    """cluster label -> value of every sample named `name` (family or sample name)."""
    return {
        s.labels["cluster"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def test_scan_fleet_of_three_simulated_clusters(
    spark: SparkSession, pushgateway: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ExitStack() as stack:
        sims = {
            name: stack.enter_context(
                SimCluster(brokers=2, topics={"hang-test": 3}, broker_config=BROKER_CONFIG)
            )
            for name in ("c1", "c2", "c3")
        }
        for name in ("c1", "c3"):
            hanging_transaction(sims[name].bootstrap_servers, f"hang-{name}", "hang-test", 0,
                                backdate_ms=BACKDATE_MS)
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text("clusters:\n" + "".join(
            f"  - name: {name}\n    bootstrap_servers: \"{sim.bootstrap_servers}\"\n"
            f"    request_timeout_seconds: 5\n    labels: {{fleet: test}}\n"
            for name, sim in sims.items()
        ))
        textfile = tmp_path / "textfile" / "kafka_txn.prom"
        code = run_spark(["scan", "--fleet", str(fleet), "--textfile", str(textfile),
                          "--pushgateway", pushgateway, "--job", "kte-spark"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "c1: up=1 late=1 hanging=1" in printed
    assert "c2: up=1 late=0 hanging=0" in printed

    text = textfile.read_text()
    hanging = {"c1": 0.0, "c2": 0.0, "c3": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "kafka_partitions_with_hanging_transactions":
                hanging[s.labels["cluster"]] += s.value
    assert hanging == {"c1": 1.0, "c2": 0.0, "c3": 1.0}
    assert samples(text, "kafka_txn_exporter_up") == {"c1": 1.0, "c2": 1.0, "c3": 1.0}
    ages = samples(text, "kafka_late_transaction_age_seconds")
    assert set(ages) == {"c1", "c3"}
    assert all(BACKDATE_MS / 1000 <= age < BACKDATE_MS / 1000 + 60 for age in ages.values())

    with urllib.request.urlopen(f"{pushgateway}/metrics", timeout=5) as resp:
        pushed = resp.read().decode()
    late_pushed = [
        s for fam in text_string_to_metric_families(pushed) for s in fam.samples
        if s.name == "kafka_late_transaction_age_seconds"
    ]
    assert sorted(s.labels["cluster"] for s in late_pushed) == ["c1", "c3"]
    assert {s.labels["job"] for s in late_pushed} == {"kte-spark"}
    assert {s.labels["classification"] for s in late_pushed} == {"hanging"}
    assert {s.labels["fleet"] for s in late_pushed} == {"test"}


@pytest.mark.parametrize("orphan_check_seconds", ["0.3", "0"])
def test_scan_confirms_an_orphaned_transaction_not_yet_late(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    orphan_check_seconds: str,
) -> None:
    """A fresh transaction its coordinator does not track: the task polls again to confirm it
    orphaned, as `scan` does; with 0 it polls once and leaves orphaned unchecked."""
    with SimCluster(brokers=2, topics={"t": 2}, broker_config=BROKER_CONFIG) as sim:
        hanging_transaction(sim.bootstrap_servers, "young", "t", 1)
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(f"clusters:\n  - name: c1\n    bootstrap_servers: "
                         f"\"{sim.bootstrap_servers}\"\n")
        textfile = tmp_path / "m.prom"
        code = run_spark(["scan", "--fleet", str(fleet), "--textfile", str(textfile),
                          "--orphan-check-seconds", orphan_check_seconds])
    printed = capsys.readouterr().out
    assert code == 0, printed
    text = textfile.read_text()
    orphaned_ages = samples(text, "kafka_orphaned_transaction_age_seconds")
    if orphan_check_seconds == "0":
        assert "c1: up=1 late=0 hanging=0 orphaned=unchecked" in printed
        assert orphaned_ages == {}
    else:
        assert "c1: up=1 late=0 hanging=0 orphaned=1" in printed
        assert set(orphaned_ages) == {"c1"} and orphaned_ages["c1"] < 60


def test_scan_reports_an_unreachable_cluster_as_down(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"clusters:\n  - name: gone\n    bootstrap_servers: [\"127.0.0.1:{free_port()}\"]\n"
        "    request_timeout_seconds: 1\n"
    )
    textfile = tmp_path / "m.prom"
    code = run_spark(["scan", "--fleet", str(fleet), "--textfile", str(textfile)])
    assert samples(textfile.read_text(), "kafka_txn_exporter_up") == {"gone": 0.0}
    assert "kafka_partitions_with_late_transactions" not in textfile.read_text().replace(
        "# HELP kafka_partitions_with_late_transactions", "").replace(
        "# TYPE kafka_partitions_with_late_transactions", "")
    assert code == 1
    assert "gone: up=0" in capsys.readouterr().out


def test_scan_needs_an_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_spark(["scan", "--fleet", str(tmp_path / "f.yaml")]) == 2
    assert "--textfile" in capsys.readouterr().err
