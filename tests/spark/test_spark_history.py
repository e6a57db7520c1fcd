"""`spark history`: Spark SQL and the in-process pandas reference give the same tables on
generated histories; a crafted history gives the expected incidents and late minutes."""

from __future__ import annotations

from pathlib import Path

import histgen
import pandas as pd
import pytest
from compare import records
from hypothesis import HealthCheck, given, settings
from pyspark.sql import SparkSession

from exporter.analyze import analyze
from exporter.history import HistoryWriter
from exporter.model import (
    BrokerStatus,
    ClusterObservation,
    OpenTransaction,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
)
from exporter.settings import ClusterSettings
from exporter.spark import history_job, report
from exporter.spark.cli import run_spark

pytestmark = pytest.mark.system_tools  # Java (Spark)


def write_plans(directory: Path, plans: tuple[histgen.ClusterPlan, ...]) -> None:
    writer = HistoryWriter(directory, retention_days=3650, buffer_polls=3)
    for plan in plans:
        for obs in histgen.observations(plan):
            writer.append(obs, analyze(obs, plan.settings))
    writer.close()


def assert_same(local: report.HistoryReport, spark_report: history_job.SparkHistoryReport) -> None:
    for name, expected in local.tables().items():
        got = spark_report.tables()[name].toPandas()
        assert list(got.columns) == list(expected.columns), name
        assert records(got, expected.columns) == records(expected, expected.columns), name


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plans=histgen.fleet_plans)
def test_spark_history_equals_in_process_on_generated_histories(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
    plans: tuple[histgen.ClusterPlan, ...],
) -> None:
    directory = tmp_path_factory.mktemp("history")
    write_plans(directory, plans)
    local = report.report_from_directory(directory, top_n=2)
    assert_same(local, history_job.build_report(spark, directory, top_n=2))


# --- a crafted history --------------------------------------------------------------------

T0 = 1_795_219_140_000  # 2026-11-20 23:59:00 UTC: the polls cross midnight
STEP = 30_000
SETTINGS = ClusterSettings(name="c1", bootstrap_servers=("127.0.0.1:1",), late_buffer_seconds=0)


def txn(topic: str, partition: int, pid: int, start_ms: int) -> OpenTransaction:
    return OpenTransaction(topic, partition, 1, pid, 0, 0, 5, start_ms, start_ms,
                           StartTimeSource.BATCH_TIMESTAMP)


A = txn("hang-test", 0, 3, T0 - 50_000)  # no transactional id: hanging once late
B = txn("orders", 1, 7, T0 - 5_000)  # ends after poll 1
C = txn("orders", 2, 8, T0)  # age 60 s at poll 2: not late (strict >); unobserved at poll 3
D = txn("payments", 0, 9, T0 - 100_000)  # late from poll 0, tracked by its coordinator
PRESENT = {0: (A, B, C, D), 1: (A, B, C, D), 2: (A, C, D), 3: (A,), 4: (A,)}


def crafted_observations() -> list[ClusterObservation]:
    ids = {7: "app-1", 8: "app-1", 9: "app-2"}
    desc = {
        "app-1": TransactionDescription("app-1", "Ongoing", 60_000, T0, 7, 0, frozenset(
            {TopicPartition("orders", 1), TopicPartition("orders", 2)})),
        "app-2": TransactionDescription("app-2", "Ongoing", 60_000, T0, 9, 0, frozenset(
            {TopicPartition("payments", 0)})),
    }
    result = []
    for i in range(6):
        now = T0 + i * STEP
        if i == 5:  # cluster down: tells nothing about D or anyone
            result.append(ClusterObservation("c1", now, (BrokerStatus(1, False, "down"),), {}, ()))
            continue
        unobserved = {TopicPartition("orders", 2): "NOT_LEADER_OR_FOLLOWER"} if i == 3 else {}
        result.append(ClusterObservation(
            "c1", now, (BrokerStatus(1, True, None, 60_000),), {}, PRESENT[i],
            unobserved=unobserved, transactional_ids=ids, descriptions=desc,
        ))
    return result


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("crafted")
    writer = HistoryWriter(directory, retention_days=3650)
    for obs in crafted_observations():
        writer.append(obs, analyze(obs, SETTINGS))
    return directory


EXPECTED_INCIDENTS = [
    # topic, partition, tid, first_seen, last_seen, polls, max_age, late, first_late, hanging,
    # ended, ended_at
    ("hang-test", 0, "", T0, T0 + 4 * STEP, 5, 170.0, True, T0 + STEP, True, False, None),
    ("orders", 1, "app-1", T0, T0 + STEP, 2, 35.0, False, None, False, True, T0 + 2 * STEP),
    # poll 3 could not see orders-2, so the end is only known at poll 4
    ("orders", 2, "app-1", T0, T0 + 2 * STEP, 3, 60.0, False, None, False, True, T0 + 4 * STEP),
    ("payments", 0, "app-2", T0, T0 + 2 * STEP, 3, 160.0, True, T0, False, True, T0 + 3 * STEP),
]
INCIDENT_VIEW = ("topic", "partition", "transactional_id", "first_seen_ms", "last_seen_ms",
                 "polls_seen", "max_age_seconds", "late", "first_late_ms", "hanging", "ended",
                 "ended_at_ms")
EXPECTED_LATE_MINUTES = [
    # hang-test late at polls 1-4: 23:59 on the 20th, 00:00 (two polls) and 00:01 on the 21st
    ("c1", "hang-test", "2026-11-20", 1, 1),
    ("c1", "hang-test", "2026-11-21", 2, 2),
    ("c1", "payments", "2026-11-20", 1, 0),
    ("c1", "payments", "2026-11-21", 1, 0),
]
EXPECTED_TOP = [("c1", 1, "", 1, 1, 170.0), ("c1", 2, "app-2", 1, 0, 160.0)]


def check_crafted(incidents: pd.DataFrame, late_minutes: pd.DataFrame, top: pd.DataFrame) -> None:
    assert records(incidents, INCIDENT_VIEW) == sorted(EXPECTED_INCIDENTS, key=repr)
    assert records(late_minutes, report.LATE_MINUTES_COLUMNS) == sorted(
        EXPECTED_LATE_MINUTES, key=repr)
    assert records(top, report.TOP_IDS_COLUMNS) == sorted(EXPECTED_TOP, key=repr)


def test_crafted_history_in_process(crafted: Path) -> None:
    result = report.report_from_directory(crafted)
    check_crafted(result.incidents, result.late_minutes, result.top_transactional_ids)


def test_crafted_history_on_spark(spark: SparkSession, crafted: Path) -> None:
    result = history_job.build_report(spark, crafted)
    check_crafted(result.incidents.toPandas(), result.late_minutes.toPandas(),
                  result.top_transactional_ids.toPandas())


@pytest.mark.parametrize("engine", ["spark", "pandas"])
def test_cli_writes_parquet_and_csv_and_prints_a_summary(
    spark: SparkSession, crafted: Path, tmp_path: Path, engine: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    code = run_spark(["history", "--input", str(crafted), "--output", str(out),
                      "--engine", engine])
    assert code == 0
    printed = capsys.readouterr().out
    assert "incidents: 4 (late 2, hanging 1, not seen ending 1)" in printed
    assert "late minutes      2 (hanging      2)  c1/hang-test 2026-11-21" in printed
    for name in ("incidents", "late_minutes", "top_transactional_ids"):
        assert len(pd.read_parquet(out / f"{name}.parquet")) > 0
        csv = out / f"{name}.csv"
        csv_files = [csv] if csv.is_file() else list(csv.glob("part-*.csv"))
        assert len(csv_files) == 1
        assert pd.read_csv(csv_files[0]).shape[0] == len(pd.read_parquet(out / f"{name}.parquet"))
    check_crafted(pd.read_parquet(out / "incidents.parquet"),
                  pd.read_parquet(out / "late_minutes.parquet"),
                  pd.read_parquet(out / "top_transactional_ids.parquet"))


def test_cli_reports_a_missing_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_spark(["history", "--input", str(tmp_path), "--output", str(tmp_path / "o"),
                      "--engine", "pandas"])
    assert code == 2
    assert "no such directory" in capsys.readouterr().err
