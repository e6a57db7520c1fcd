"""HistoryWriter (pyarrow only): layout, schema, late flags from the snapshot, retention."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from exporter.analyze import analyze
from exporter.history import (
    OPEN_TRANSACTIONS_SCHEMA,
    PARTITION_SCHEMA,
    POLLS_SCHEMA,
    HistoryWriter,
    cluster_from_dir,
)
from exporter.model import BrokerStatus, ClusterObservation, TopicPartition
from exporter.settings import ClusterSettings
from tests.exporter_factories import NOW_MS, open_txn

SETTINGS = ClusterSettings(name="eu:prod", bootstrap_servers=("127.0.0.1:1",))


def observation(now_ms: int = NOW_MS, **kw: object) -> ClusterObservation:
    hanging = open_txn("hang-test", 0, producer_id=3, age_ms=400_000)  # > 60 s + 300 s
    young = open_txn("txn-open", 1, producer_id=2, age_ms=10_000)
    args: dict[str, object] = dict(
        cluster="eu:prod",
        observed_at_ms=now_ms,
        brokers=(BrokerStatus(1, True, None, 60_000),),
        leaders={TopicPartition("hang-test", 0): 1, TopicPartition("txn-open", 1): 1},
        open_transactions=(hanging, young),
        transactional_ids={2: "tx-open-1"},
        descriptions={},
    )
    args.update(kw)
    return ClusterObservation(**args)  # type: ignore[arg-type]


def read(root: Path, name: str) -> list[dict[str, object]]:
    table = ds.dataset(
        str(root / name), format="parquet", partitioning=ds.HivePartitioning(PARTITION_SCHEMA)
    ).to_table()
    return sorted(table.to_pylist(), key=repr)


def test_rows_carry_analyze_verdicts_and_partition_columns(tmp_path: Path) -> None:
    obs = observation()
    writer = HistoryWriter(tmp_path, retention_days=7)
    writer.append(obs, analyze(obs, SETTINGS))
    rows = read(tmp_path, "open_transactions")
    assert [(r["topic"], r["late"], r["classification"], r["age_seconds"]) for r in rows] == [
        ("hang-test", True, "hanging", 400.0),
        ("txn-open", False, None, 10.0),
    ]
    assert {r["cluster"] for r in rows} == {"eu:prod"}  # ':' escaped on disk, restored on read
    assert rows[1]["transactional_id"] == "tx-open-1"
    assert [d.name for d in (tmp_path / "open_transactions").iterdir()] == ["cluster=eu%3Aprod"]
    assert cluster_from_dir("cluster=eu%3Aprod") == "eu:prod"
    polls = read(tmp_path, "polls")
    assert [(p["up"], p["open_transactions"], p["late_transactions"]) for p in polls] == [
        (True, 2, 1)
    ]


def test_file_schemas_are_the_documented_ones(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    obs = observation(unobserved={TopicPartition("t", 4): "NOT_LEADER_OR_FOLLOWER"})
    HistoryWriter(tmp_path).append(obs, analyze(obs, SETTINGS))
    (txn_file,) = (tmp_path / "open_transactions").rglob("*.parquet")
    (poll_file,) = (tmp_path / "polls").rglob("*.parquet")
    assert pq.read_schema(txn_file).remove_metadata() == OPEN_TRANSACTIONS_SCHEMA
    assert pq.read_schema(poll_file).remove_metadata() == POLLS_SCHEMA
    assert pq.read_table(poll_file).column("unobserved").to_pylist() == [
        [{"topic": "t", "partition": 4}]
    ]


def test_without_snapshot_late_is_unknown_not_false(tmp_path: Path) -> None:
    HistoryWriter(tmp_path).append(observation())
    assert {r["late"] for r in read(tmp_path, "open_transactions")} == {None}


def test_buffered_polls_share_a_file_and_flush_on_close(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path, buffer_polls=3)
    for i in range(4):
        writer.append(observation(NOW_MS + i * 30_000))
    assert len(list((tmp_path / "polls").rglob("*.parquet"))) == 1
    writer.close()
    assert len(list((tmp_path / "polls").rglob("*.parquet"))) == 2
    assert len(read(tmp_path, "polls")) == 4


def test_retention_drops_old_days_when_a_new_day_starts(tmp_path: Path) -> None:
    day_ms = 86_400_000
    writer = HistoryWriter(tmp_path, retention_days=2)
    for d in range(4):
        writer.append(observation(NOW_MS + d * day_ms))
    days = sorted(p.name for p in (tmp_path / "polls").glob("cluster=*/date=*"))
    assert days == ["date=2026-11-22", "date=2026-11-23"]
    assert writer.prune(date(2026, 11, 24)) != []
    assert sorted(p.name for p in (tmp_path / "polls").glob("cluster=*/date=*")) == [
        "date=2026-11-23"
    ]


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        HistoryWriter(tmp_path, retention_days=0)
    other = observation(cluster="other")
    with pytest.raises(ValueError):
        HistoryWriter(tmp_path).append(other, analyze(observation(), SETTINGS))
