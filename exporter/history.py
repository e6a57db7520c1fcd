"""Per-poll history of open transactions as a Parquet dataset (pyarrow only, no Spark).

The daemon calls `HistoryWriter.append(observation, snapshot)` after each poll; the batch job
(`kafka-txn-exporter spark history`) turns the dataset into incidents and summaries. Two
datasets live under the directory, both Hive-partitioned by cluster and UTC date so a day or a
cluster can be read or dropped alone (schema: docs/spark.md):

    DIR/open_transactions/cluster=<c>/date=YYYY-MM-DD/<observed_at_ms>-<n>.parquet
    DIR/polls/cluster=<c>/date=YYYY-MM-DD/<observed_at_ms>-<n>.parquet

`polls` has one row per poll, also when nothing was open: without it a transaction that simply
stopped appearing could not be told apart from a poll that never happened, so "ended" would be
a guess. Late/hanging/age are written as `exporter.analyze` judged them at poll time: the batch
job never re-derives them (one set of rules).
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from exporter.analyze import transaction_age_ms
from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    LateTransaction,
    OpenTransaction,
)

OPEN_TRANSACTIONS_DIR = "open_transactions"
POLLS_DIR = "polls"

OPEN_TRANSACTIONS_SCHEMA = pa.schema(
    [
        pa.field("observed_at_ms", pa.int64(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("leader_id", pa.int32(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int32(), nullable=False),
        pa.field("coordinator_epoch", pa.int32(), nullable=False),
        pa.field("current_txn_start_offset", pa.int64(), nullable=False),
        pa.field("last_timestamp_ms", pa.int64(), nullable=False),
        pa.field("start_time_ms", pa.int64(), nullable=False),
        pa.field("start_time_source", pa.string(), nullable=False),
        pa.field("transactional_id", pa.string(), nullable=False),
        pa.field("age_seconds", pa.float64(), nullable=False),
        pa.field("late", pa.bool_(), nullable=True),
        pa.field("classification", pa.string(), nullable=True),
    ]
)
"""Columns in the files; `cluster` and `date` come from the directory names."""

UNOBSERVED_TYPE = pa.list_(
    pa.struct([pa.field("topic", pa.string()), pa.field("partition", pa.int32())])
)
POLLS_SCHEMA = pa.schema(
    [
        pa.field("observed_at_ms", pa.int64(), nullable=False),
        pa.field("up", pa.bool_(), nullable=False),
        pa.field("open_transactions", pa.int64(), nullable=False),
        pa.field("late_transactions", pa.int64(), nullable=True),
        pa.field("unobserved", UNOBSERVED_TYPE, nullable=False),
        pa.field("poll_duration_seconds", pa.float64(), nullable=False),
    ]
)

PARTITION_SCHEMA = pa.schema([pa.field("cluster", pa.string()), pa.field("date", pa.string())])
"""Partition columns, always strings (a cluster named "1" must not become an integer)."""


def utc_date(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000.0, tz=UTC).date().isoformat()


def partition_dir(root: Path, dataset: str, cluster: str, day: str) -> Path:
    """Hive-style directory; the cluster name is %-escaped like Spark's escapePathName."""
    return root / dataset / f"cluster={quote(cluster, safe='-_.')}" / f"date={day}"


def open_transaction_rows(
    observation: ClusterObservation, snapshot: ClusterSnapshot | None
) -> dict[str, list[object]]:
    """Column lists for one poll; late/classification are None when no snapshot is given."""
    late_by_txn: dict[OpenTransaction, LateTransaction] = (
        {lt.transaction: lt for lt in snapshot.late_transactions} if snapshot is not None else {}
    )
    two_phase = (
        {t.transaction for t in snapshot.two_phase_transactions} if snapshot is not None
        else set()
    )
    now_ms = observation.observed_at_ms
    cols: dict[str, list[object]] = {name: [] for name in OPEN_TRANSACTIONS_SCHEMA.names}
    ids = observation.transactional_ids
    for txn in observation.open_transactions:
        late = late_by_txn.get(txn)
        cols["observed_at_ms"].append(now_ms)
        cols["topic"].append(txn.topic)
        cols["partition"].append(txn.partition)
        cols["leader_id"].append(txn.leader_id)
        cols["producer_id"].append(txn.producer_id)
        cols["producer_epoch"].append(txn.producer_epoch)
        cols["coordinator_epoch"].append(txn.coordinator_epoch)
        cols["current_txn_start_offset"].append(txn.current_txn_start_offset)
        cols["last_timestamp_ms"].append(txn.last_timestamp_ms)
        cols["start_time_ms"].append(txn.start_time_ms)
        cols["start_time_source"].append(str(txn.start_time_source))
        cols["transactional_id"].append(
            late.transactional_id if late is not None else ids.get(txn.producer_id, "")
        )
        cols["age_seconds"].append(transaction_age_ms(txn, now_ms) / 1000.0)
        cols["late"].append(None if snapshot is None else late is not None)
        cols["classification"].append(
            str(late.classification) if late is not None
            else str(Classification.TWO_PHASE) if txn in two_phase else None
        )
    return cols


class HistoryWriter:
    """Appends each poll to the history dataset and drops days older than `retention_days`.

    `buffer_polls` > 1 groups that many polls of a cluster into one file (fewer small files, at
    the price of losing up to that many polls on a crash); `flush()`/`close()` write the rest.
    Thread-safe: the scheduler may poll clusters on several threads.
    """

    def __init__(
        self, directory: str | os.PathLike[str], retention_days: int = 30, buffer_polls: int = 1
    ) -> None:
        if retention_days < 1:
            raise ValueError("retention_days must be at least 1")
        if buffer_polls < 1:
            raise ValueError("buffer_polls must be at least 1")
        self.directory = Path(directory)
        self.retention_days = retention_days
        self.buffer_polls = buffer_polls
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], list[tuple[pa.Table, pa.Table]]] = {}
        self._last_pruned_day: str | None = None

    def append(
        self, observation: ClusterObservation, snapshot: ClusterSnapshot | None = None
    ) -> None:
        """Record one poll. Pass the poll's `analyze` snapshot so late/hanging are stored."""
        if snapshot is not None and snapshot.cluster != observation.cluster:
            raise ValueError("snapshot and observation are of different clusters")
        txns = pa.table(open_transaction_rows(observation, snapshot), OPEN_TRANSACTIONS_SCHEMA)
        up = snapshot.up if snapshot is not None else any(b.up for b in observation.brokers)
        poll = pa.table(
            {
                "observed_at_ms": [observation.observed_at_ms],
                "up": [up],
                "open_transactions": [len(observation.open_transactions)],
                "late_transactions": [
                    None if snapshot is None else len(snapshot.late_transactions)
                ],
                "unobserved": [
                    [{"topic": tp.topic, "partition": tp.partition}
                     for tp in sorted(observation.unobserved)]
                ],
                "poll_duration_seconds": [observation.poll_duration_seconds],
            },
            POLLS_SCHEMA,
        )
        key = (observation.cluster, utc_date(observation.observed_at_ms))
        with self._lock:
            # A new day flushes the old one so a file never spans two date partitions.
            for other in [k for k in self._pending if k[0] == key[0] and k != key]:
                self._write(other, self._pending.pop(other))
            batch = self._pending.setdefault(key, [])
            batch.append((txns, poll))
            if len(batch) >= self.buffer_polls:
                self._write(key, self._pending.pop(key))
            if self._last_pruned_day != key[1]:
                self._prune_locked(date.fromisoformat(key[1]))
                self._last_pruned_day = key[1]

    def flush(self) -> None:
        with self._lock:
            for key in list(self._pending):
                self._write(key, self._pending.pop(key))

    def close(self) -> None:
        self.flush()

    def prune(self, today: date | None = None) -> list[Path]:
        """Delete date partitions older than `retention_days` before `today` (UTC)."""
        with self._lock:
            return self._prune_locked(today or datetime.now(tz=UTC).date())

    def _prune_locked(self, today: date) -> list[Path]:
        oldest_kept = (today - timedelta(days=self.retention_days - 1)).isoformat()
        removed: list[Path] = []
        for dataset in (OPEN_TRANSACTIONS_DIR, POLLS_DIR):
            for day_dir in sorted((self.directory / dataset).glob("cluster=*/date=*")):
                if day_dir.name.removeprefix("date=") < oldest_kept:
                    shutil.rmtree(day_dir, ignore_errors=True)
                    removed.append(day_dir)
        return removed

    def _write(self, key: tuple[str, str], batch: list[tuple[pa.Table, pa.Table]]) -> None:
        cluster, day = key
        first_ms = batch[0][1].column("observed_at_ms")[0].as_py()
        name = f"{first_ms}-{uuid.uuid4().hex[:8]}.parquet"
        for dataset, table in (
            (OPEN_TRANSACTIONS_DIR, pa.concat_tables([t for t, _ in batch])),
            (POLLS_DIR, pa.concat_tables([p for _, p in batch])),
        ):
            target = partition_dir(self.directory, dataset, cluster, day)
            target.mkdir(parents=True, exist_ok=True)
            # Write then rename: a reader never sees half a file.
            tmp = target / f".{name}.tmp"
            pq.write_table(table, tmp, compression="zstd")
            tmp.rename(target / name)


def cluster_from_dir(name: str) -> str:
    """Inverse of `partition_dir`'s escaping for a `cluster=...` directory name."""
    return unquote(name.removeprefix("cluster="))
