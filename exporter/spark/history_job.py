"""`spark history`: the history report of `exporter.spark.report`, computed by Spark SQL.

Same tables, columns and rules as the pandas reference (tests hold them equal); this path exists
for histories too large for one process. Late/hanging/age are read as the daemon stored them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from exporter.history import OPEN_TRANSACTIONS_DIR, POLLS_DIR
from exporter.spark.report import (
    DEFAULT_TOP_N,
    HANGING,
    INCIDENT_COLUMNS,
    INCIDENT_KEY,
    LATE_MINUTES_COLUMNS,
    MINUTE_MS,
    TOP_IDS_COLUMNS,
    HistoryNotFound,
    ReportCounts,
)


@dataclass(frozen=True)
class SparkHistoryReport:
    incidents: DataFrame
    late_minutes: DataFrame
    top_transactional_ids: DataFrame
    rows: DataFrame
    polls: DataFrame

    def tables(self) -> dict[str, DataFrame]:
        return {
            "incidents": self.incidents,
            "late_minutes": self.late_minutes,
            "top_transactional_ids": self.top_transactional_ids,
        }

    def counts(self) -> ReportCounts:
        inc = self.incidents.agg(
            F.count(F.lit(1)).alias("n"),
            F.countDistinct("cluster").alias("clusters"),
            F.sum(F.col("late").cast("long")).alias("late"),
            F.sum(F.col("hanging").cast("long")).alias("hanging"),
            F.sum((~F.col("ended")).cast("long")).alias("not_ended"),
        ).first()
        assert inc is not None
        return ReportCounts(
            rows_read=self.rows.count(),
            polls_read=self.polls.count(),
            clusters=int(inc["clusters"]),
            incidents=int(inc["n"]),
            late=int(inc["late"] or 0),
            hanging=int(inc["hanging"] or 0),
            not_ended=int(inc["not_ended"] or 0),
        )


def _read(spark: SparkSession, root: str, name: str) -> DataFrame:
    path = f"{root.rstrip('/')}/{name}"
    # Local paths are checked for a clear message; hdfs://, s3a://... are left to Spark.
    if "://" not in root and not Path(path).is_dir():
        raise HistoryNotFound(f"{path}: no such directory (is {root} a history directory?)")
    return spark.read.option("basePath", path).parquet(path)


def read_history(
    spark: SparkSession, directory: str | os.PathLike[str]
) -> tuple[DataFrame, DataFrame]:
    root = os.fspath(directory)
    return _read(spark, root, OPEN_TRANSACTIONS_DIR), _read(spark, root, POLLS_DIR)


def _ended_at(incidents: DataFrame, polls: DataFrame) -> DataFrame:
    """Adds ended_at_ms: the first later up poll of the cluster that observed the partition.

    Common case in O(n log n): the next up poll, found with a window over incidents and polls
    ordered newest first (a growing frame, not an O(n^2) unbounded-following one). Only
    incidents whose partition that poll did not observe take the slower range join.
    """
    ok = polls.where(F.col("up")).select("cluster", F.col("observed_at_ms").alias("t"))
    events = incidents.select(
        *INCIDENT_KEY, F.col("last_seen_ms").alias("t"), F.lit(1).alias("kind")
    ).unionByName(ok.withColumn("kind", F.lit(0)), allowMissingColumns=True)
    # Newest first; at equal t the incident precedes the poll, so that poll is not "later".
    newest_first = (
        Window.partitionBy("cluster")
        .orderBy(F.col("t").desc(), F.col("kind").desc())
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    nxt = (
        events.withColumn("next_t", F.min(F.when(F.col("kind") == 0, F.col("t"))).over(
            newest_first))
        .where(F.col("kind") == 1)
        .select(*INCIDENT_KEY, "next_t")
    )
    unobserved = (
        polls.where(F.col("up"))
        .select("cluster", F.col("observed_at_ms").alias("t"), F.explode("unobserved").alias("u"))
        .select("cluster", "t", F.col("u.topic").alias("topic"),
                F.col("u.partition").alias("partition"))
    )
    flagged = nxt.join(
        unobserved.withColumnRenamed("t", "next_t"),
        on=["cluster", "next_t", "topic", "partition"],
        how="left_semi",
    )
    redo = (
        flagged.join(incidents.select(*INCIDENT_KEY, "last_seen_ms"), on=list(INCIDENT_KEY))
        .join(ok, on="cluster")
        .where(F.col("t") > F.col("last_seen_ms"))
        .join(unobserved, on=["cluster", "t", "topic", "partition"], how="left_anti")
        .groupBy(*INCIDENT_KEY)
        .agg(F.min("t").alias("redo_t"))
    )
    flagged_keys = flagged.select(*INCIDENT_KEY).withColumn("flagged", F.lit(True))
    resolved = (
        nxt.join(flagged_keys, on=list(INCIDENT_KEY), how="left")
        .join(redo, on=list(INCIDENT_KEY), how="left")
        .select(
            *INCIDENT_KEY,
            F.when(F.col("flagged"), F.col("redo_t")).otherwise(F.col("next_t"))
            .alias("ended_at_ms"),
        )
    )
    return incidents.join(resolved, on=list(INCIDENT_KEY), how="left")


def incidents_from(rows: DataFrame, polls: DataFrame) -> DataFrame:
    late: Column = F.coalesce(F.col("late"), F.lit(False))
    inc = rows.groupBy(*INCIDENT_KEY).agg(
        F.max("transactional_id").alias("transactional_id"),
        F.min("start_time_ms").alias("start_time_ms"),
        F.min("observed_at_ms").alias("first_seen_ms"),
        F.max("observed_at_ms").alias("last_seen_ms"),
        F.count(F.lit(1)).alias("polls_seen"),
        F.max("age_seconds").alias("max_age_seconds"),
        F.max(late).alias("late"),
        F.min(F.when(late, F.col("observed_at_ms"))).alias("first_late_ms"),
        F.max(F.coalesce(F.col("classification") == HANGING, F.lit(False))).alias("hanging"),
    )
    inc = _ended_at(inc, polls).withColumn("ended", F.col("ended_at_ms").isNotNull())
    return inc.select(*INCIDENT_COLUMNS)


def late_minutes_from(rows: DataFrame) -> DataFrame:
    late = rows.where(F.coalesce(F.col("late"), F.lit(False)))
    per_minute = late.groupBy(
        "cluster", "topic", "date", "partition",
        F.floor(F.col("observed_at_ms") / MINUTE_MS).alias("minute"),
    ).agg(F.max(F.coalesce(F.col("classification") == HANGING, F.lit(False))).alias("h"))
    return per_minute.groupBy("cluster", "topic", "date").agg(
        F.count(F.lit(1)).alias("late_minutes"),
        F.sum(F.col("h").cast("long")).alias("hanging_minutes"),
    ).select(*LATE_MINUTES_COLUMNS)


def top_transactional_ids_from(incidents: DataFrame, top_n: int) -> DataFrame:
    agg = incidents.where(F.col("late")).groupBy("cluster", "transactional_id").agg(
        F.count(F.lit(1)).alias("late_incidents"),
        F.sum(F.col("hanging").cast("long")).alias("hanging_incidents"),
        F.max("max_age_seconds").alias("max_age_seconds"),
    )
    order = Window.partitionBy("cluster").orderBy(
        F.col("late_incidents").desc(),
        F.col("hanging_incidents").desc(),
        F.col("max_age_seconds").desc(),
        F.col("transactional_id").asc(),
    )
    return (
        agg.withColumn("rank", F.row_number().over(order).cast("long"))
        .where(F.col("rank") <= top_n)
        .select(*TOP_IDS_COLUMNS)
    )


def build_report(
    spark: SparkSession, directory: str | os.PathLike[str], top_n: int = DEFAULT_TOP_N
) -> SparkHistoryReport:
    rows, polls = read_history(spark, directory)
    incidents = incidents_from(rows, polls).cache()
    return SparkHistoryReport(
        incidents=incidents,
        late_minutes=late_minutes_from(rows),
        top_transactional_ids=top_transactional_ids_from(incidents, top_n),
        rows=rows,
        polls=polls,
    )


def write_tables(tables: dict[str, DataFrame], output: str | os.PathLike[str]) -> None:
    """OUT/<name>.parquet/ (Spark part files) and OUT/<name>.csv/ (one part file, header)."""
    out = os.fspath(output).rstrip("/")
    for name, frame in tables.items():
        frame.write.mode("overwrite").parquet(f"{out}/{name}.parquet")
        frame.coalesce(1).write.mode("overwrite").option("header", True).csv(f"{out}/{name}.csv")
