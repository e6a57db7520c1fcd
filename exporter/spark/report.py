"""History report definitions and the in-process (pandas) implementation.

The Spark job (`exporter.spark.history_job`) computes the same three tables; tests hold the two
equal. Neither re-judges late/hanging/age: those columns were written by the daemon from
`exporter.analyze` at poll time, and both paths only aggregate them.

- incidents: one row per open transaction per partition, keyed like the poller's start-time
  cache (topic, partition, producer id, epoch, CurrentTxnStartOffset) plus the cluster.
- late_minutes: per cluster/topic/UTC day, the number of distinct (partition, minute) pairs in
  which a poll saw a late (resp. hanging) open transaction.
- top_transactional_ids: per cluster, the ids with the most late incidents.

"Ended" is known only from a later poll that looked: an incident ended at the first later poll
of its cluster that was up and observed the partition (not in that poll's `unobserved`) without
it. With no such poll it is still open (or its end was not seen), `ended` false.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.dataset as ds  # type: ignore[import-untyped]

from exporter.history import OPEN_TRANSACTIONS_DIR, PARTITION_SCHEMA, POLLS_DIR

INCIDENT_KEY = (
    "cluster",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "current_txn_start_offset",
)
INCIDENT_COLUMNS = (
    *INCIDENT_KEY,
    "transactional_id",
    "start_time_ms",
    "first_seen_ms",
    "last_seen_ms",
    "polls_seen",
    "max_age_seconds",
    "late",
    "first_late_ms",
    "hanging",
    "ended",
    "ended_at_ms",
)
LATE_MINUTES_COLUMNS = ("cluster", "topic", "date", "late_minutes", "hanging_minutes")
TOP_IDS_COLUMNS = (
    "cluster",
    "rank",
    "transactional_id",
    "late_incidents",
    "hanging_incidents",
    "max_age_seconds",
)
DEFAULT_TOP_N = 20
MINUTE_MS = 60_000
HANGING = "hanging"


class HistoryNotFound(Exception):
    """The input directory holds no history dataset."""


@dataclass(frozen=True)
class HistoryReport:
    incidents: pd.DataFrame
    late_minutes: pd.DataFrame
    top_transactional_ids: pd.DataFrame
    rows_read: int
    polls_read: int

    def tables(self) -> Mapping[str, pd.DataFrame]:
        return {
            "incidents": self.incidents,
            "late_minutes": self.late_minutes,
            "top_transactional_ids": self.top_transactional_ids,
        }


def _dataset(root: Path, name: str) -> ds.Dataset:
    path = root / name
    if not path.is_dir():
        raise HistoryNotFound(f"{path}: no such directory (is {root} a history directory?)")
    return ds.dataset(
        str(path), format="parquet", partitioning=ds.HivePartitioning(PARTITION_SCHEMA)
    )


def read_history(directory: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(open transaction rows, poll rows) with `cluster` and `date` columns, via pyarrow."""
    root = Path(directory)
    txns = _dataset(root, OPEN_TRANSACTIONS_DIR).to_table(
        columns=[
            "cluster", "date", "observed_at_ms", *INCIDENT_KEY[1:], "transactional_id",
            "start_time_ms", "age_seconds", "late", "classification",
        ]
    )
    polls = _dataset(root, POLLS_DIR).to_table(
        columns=["cluster", "observed_at_ms", "up", "unobserved"]
    )
    return _to_pandas(txns), _to_pandas(polls)


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper={pa.string(): pd.StringDtype("python")}.get)


def ended_at(
    incidents: pd.DataFrame, polls: pd.DataFrame
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per incident: observed_at_ms of the first later up poll that observed its partition."""
    result = np.full(len(incidents), np.nan)
    ok = polls[polls["up"].astype(bool)]
    for cluster, cluster_polls in ok.groupby("cluster", sort=False):
        times = np.sort(cluster_polls["observed_at_ms"].to_numpy(dtype=np.int64))
        skip: set[tuple[int, str, int]] = {
            (int(t), u["topic"], int(u["partition"]))
            for t, unobserved in zip(
                cluster_polls["observed_at_ms"], cluster_polls["unobserved"], strict=True
            )
            for u in (unobserved if unobserved is not None else ())
        }
        mask = (incidents["cluster"] == cluster).to_numpy()
        rows = np.flatnonzero(mask)
        idx = np.searchsorted(times, incidents["last_seen_ms"].to_numpy()[rows], side="right")
        if skip:
            topics = incidents["topic"].to_numpy()[rows]
            partitions = incidents["partition"].to_numpy()[rows]
            for i in range(len(rows)):
                while idx[i] < len(times) and (
                    int(times[idx[i]]), topics[i], int(partitions[i])
                ) in skip:
                    idx[i] += 1
        found = idx < len(times)
        result[rows[found]] = times[idx[found]]
    return result


def incidents_from(txns: pd.DataFrame, polls: pd.DataFrame) -> pd.DataFrame:
    late = txns["late"].fillna(False).astype(bool)
    frame = txns.assign(
        late_=late,
        hanging_=(txns["classification"] == HANGING).fillna(False).astype(bool),
        late_at_=txns["observed_at_ms"].where(late),
    )
    grouped = frame.groupby(list(INCIDENT_KEY), sort=False, dropna=False)
    inc = grouped.agg(
        transactional_id=("transactional_id", "max"),
        start_time_ms=("start_time_ms", "min"),
        first_seen_ms=("observed_at_ms", "min"),
        last_seen_ms=("observed_at_ms", "max"),
        polls_seen=("observed_at_ms", "size"),
        max_age_seconds=("age_seconds", "max"),
        late=("late_", "any"),
        first_late_ms=("late_at_", "min"),
        hanging=("hanging_", "any"),
    ).reset_index()
    ended_ms = ended_at(inc, polls)
    inc["ended"] = ~np.isnan(ended_ms)
    inc["ended_at_ms"] = pd.array(
        np.where(np.isnan(ended_ms), 0, ended_ms).astype(np.int64), dtype="Int64"
    )
    inc.loc[~inc["ended"], "ended_at_ms"] = pd.NA
    inc["first_late_ms"] = inc["first_late_ms"].astype("Int64")
    inc["polls_seen"] = inc["polls_seen"].astype(np.int64)
    return _sorted(inc[list(INCIDENT_COLUMNS)], ["cluster", "topic", "partition", "first_seen_ms",
                                                 "producer_id", "current_txn_start_offset"])


def late_minutes_from(txns: pd.DataFrame) -> pd.DataFrame:
    late = txns[txns["late"].fillna(False).astype(bool)]
    minutes = late.assign(
        minute=late["observed_at_ms"] // MINUTE_MS,
        hanging_=(late["classification"] == HANGING).fillna(False).astype(bool),
    )
    per_minute = minutes.groupby(
        ["cluster", "topic", "date", "partition", "minute"], sort=False
    )["hanging_"].any().reset_index()
    out = per_minute.groupby(["cluster", "topic", "date"], sort=False).agg(
        late_minutes=("minute", "size"), hanging_minutes=("hanging_", "sum")
    ).reset_index()
    out["late_minutes"] = out["late_minutes"].astype(np.int64)
    out["hanging_minutes"] = out["hanging_minutes"].astype(np.int64)
    return _sorted(out[list(LATE_MINUTES_COLUMNS)], ["cluster", "date", "topic"])


def top_transactional_ids_from(incidents: pd.DataFrame, top_n: int) -> pd.DataFrame:
    late = incidents[incidents["late"]]
    agg = late.groupby(["cluster", "transactional_id"], sort=False).agg(
        late_incidents=("late", "size"),
        hanging_incidents=("hanging", "sum"),
        max_age_seconds=("max_age_seconds", "max"),
    ).reset_index()
    agg["late_incidents"] = agg["late_incidents"].astype(np.int64)
    agg["hanging_incidents"] = agg["hanging_incidents"].astype(np.int64)
    agg = agg.sort_values(
        ["cluster", "late_incidents", "hanging_incidents", "max_age_seconds", "transactional_id"],
        ascending=[True, False, False, False, True],
        kind="mergesort",
    )
    agg["rank"] = agg.groupby("cluster").cumcount().astype(np.int64) + 1
    agg = agg[agg["rank"] <= top_n]
    return agg[list(TOP_IDS_COLUMNS)].reset_index(drop=True)


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, kind="mergesort").reset_index(drop=True)


def build_report(
    txns: pd.DataFrame, polls: pd.DataFrame, top_n: int = DEFAULT_TOP_N
) -> HistoryReport:
    incidents = incidents_from(txns, polls)
    return HistoryReport(
        incidents=incidents,
        late_minutes=late_minutes_from(txns),
        top_transactional_ids=top_transactional_ids_from(incidents, top_n),
        rows_read=len(txns),
        polls_read=len(polls),
    )


def report_from_directory(
    directory: str | os.PathLike[str], top_n: int = DEFAULT_TOP_N
) -> HistoryReport:
    txns, polls = read_history(directory)
    return build_report(txns, polls, top_n)


@dataclass(frozen=True)
class ReportCounts:
    rows_read: int
    polls_read: int
    clusters: int
    incidents: int
    late: int
    hanging: int
    not_ended: int


def counts_of(report: HistoryReport) -> ReportCounts:
    inc = report.incidents
    return ReportCounts(
        rows_read=report.rows_read,
        polls_read=report.polls_read,
        clusters=int(inc["cluster"].nunique()),
        incidents=len(inc),
        late=int(inc["late"].sum()),
        hanging=int(inc["hanging"].sum()),
        not_ended=int((~inc["ended"]).sum()),
    )


def summary_lines(
    counts: ReportCounts, late_minutes: pd.DataFrame, top_ids: pd.DataFrame, limit: int = 5
) -> list[str]:
    """The short human summary both paths print."""
    lines = [
        f"history: {counts.rows_read} open-transaction rows from {counts.polls_read} polls; "
        f"{counts.clusters} cluster(s) with open transactions",
        f"incidents: {counts.incidents} (late {counts.late}, hanging {counts.hanging}, "
        f"not seen ending {counts.not_ended})",
    ]
    worst = late_minutes.sort_values(
        ["late_minutes", "cluster", "topic", "date"],
        ascending=[False, True, True, True],
        kind="mergesort",
    ).head(limit)
    for row in worst.itertuples(index=False):
        lines.append(
            f"  late minutes {row.late_minutes:>6} (hanging {row.hanging_minutes:>6})  "
            f"{row.cluster}/{row.topic} {row.date}"
        )
    for row in top_ids[top_ids["rank"] <= limit].itertuples(index=False):
        tid = row.transactional_id or "(no transactional id)"
        lines.append(
            f"  top #{row.rank} {row.cluster}: {tid} late {row.late_incidents} hanging "
            f"{row.hanging_incidents} max age {row.max_age_seconds:.0f}s"
        )
    return lines


def write_tables(tables: Mapping[str, pd.DataFrame], output: str | os.PathLike[str]) -> None:
    """Single-file Parquet and CSV per table: OUT/<name>.parquet and OUT/<name>.csv."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_parquet(out / f"{name}.parquet", index=False)
        frame.to_csv(out / f"{name}.csv", index=False)
