"""The truth cases on real Apache Kafka: what the exporter reports against what
Kafka's own tools say (`kafka-transactions.sh find-hanging`, the broker's JMX gauges
PartitionsWithLateTransactionsCount and LastStableOffsetLag), per version of the matrix.

One scene per broker, recorded once by the module fixture and judged by the tests below, so
the JVM tools run a few times per version instead of once per case:

- `late`: a hanging transaction whose only write is older than transaction.max.timeout.ms +
  5 min, then a committed transaction after it on the same partition (records behind the
  pinned LSO);
- `fresh`: the same, plus a second batch of that transaction stamped now (same producer id,
  epoch, sequence continuing): Kafka's tools age a transaction by its producer's
  LastTimestamp and miss it (docs/kafka-semantics.md#late-transactions);
- `young`: a hanging transaction written now (orphaned, not late);
- `healthy`: an open transaction its coordinator tracks (young), an idle idempotent producer,
  a committed and an aborted transaction.

After the first observations the fixture runs the project's own `kafka-txn-exporter abort`
as a subprocess on the two late hanging transactions (and on any other late hanging one an
earlier test module left on the shared broker, so the broker-wide gauge can reach 0) and on the
young orphaned one (abort confirms it orphaned with scan's two looks, docs/abort.md), tries it
on the healthy open one (refused: its coordinator tracks it), and observes again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka_sim.producer import (
    OpenTransaction,
    ProducedBatch,
    aborted_transaction,
    committed_transaction,
    hanging_transaction,
    idempotent_producer_write,
    open_transaction,
)
from kafka_sim.realkafka import RealKafkaCluster
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from realhelpers import (
    DEFAULT_MAX_TIMEOUT_MS,
    LATE_BACKDATE_MS,
    REPO,
    HangingRow,
    create_topic,
    find_hanging,
    hanging_transaction_with_fresh_write,
    poll_env,
    unique,
)

from exporter.expose.collector import SnapshotCollector
from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    LateTransaction,
    StartTimeSource,
    TopicPartition,
)
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

BROKER_LATE_BUFFER_MS = 5 * 60_000
"""ProducerStateManager.LATE_TRANSACTION_BUFFER_MS."""
POLLS = 4
"""Observations before the abort: the young hanging transaction is orphaned from the third
(first seen, then two polls whose coordinator answers do not track it)."""
LATE_GAUGE = "kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount"
LAG_GAUGES = "kafka.cluster:type=Partition,name=LastStableOffsetLag,*"


@dataclass(frozen=True)
class Txn:
    """What a producer of the scene wrote: its identity and where its transaction starts."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    batches: tuple[ProducedBatch, ...] = ()


@dataclass
class Scene:
    """Everything the module observed on one broker, before and after the abort."""

    late: Txn
    fresh: Txn
    young: Txn
    healthy_open: Txn
    healthy_topic: str
    topics: tuple[str, ...]
    polls: list[tuple[ClusterObservation, ClusterSnapshot]] = field(default_factory=list)
    find_hanging: list[HangingRow] = field(default_factory=list)
    jmx_late: int = -1
    jmx_lag: dict[TopicPartition, int] = field(default_factory=dict)
    aborts: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    leftovers_aborted: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    after: tuple[ClusterObservation, ClusterSnapshot] | None = None
    find_hanging_after: list[HangingRow] = field(default_factory=list)
    jmx_late_after: int = -1
    jmx_lag_after: dict[TopicPartition, int] = field(default_factory=dict)
    committed_end_offsets_after: dict[TopicPartition, int] = field(default_factory=dict)
    end_offsets_after: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def last(self) -> tuple[ClusterObservation, ClusterSnapshot]:
        return self.polls[-1]


def _hanging_with_fresh_write(
    bootstrap: str, transactional_id: str, topic: str, partition: int, backdate_ms: int
) -> Txn:
    """realhelpers.hanging_transaction_with_fresh_write, as a Txn of the scene."""
    w = hanging_transaction_with_fresh_write(
        bootstrap, transactional_id, topic, partition, backdate_ms
    )
    return Txn(
        w.topic, w.partition, w.producer_id, w.producer_epoch, w.start_offset,
        (w.first, w.second),
    )  # fmt: skip


def _jmx_gauges(
    cluster: RealKafkaCluster, topics: tuple[str, ...]
) -> tuple[int, dict[TopicPartition, int]]:
    """PartitionsWithLateTransactionsCount and every LastStableOffsetLag gauge of the scene's
    topics, read with one JmxTool run (each run is a JVM start on a loaded machine)."""
    values = cluster.jmx_values(LATE_GAUGE, LAG_GAUGES)
    assert LATE_GAUGE in values, values
    lags: dict[TopicPartition, int] = {}
    for name, value in values.items():
        keys = dict(part.split("=", 1) for part in name.split(":", 1)[1].split(","))
        if keys.get("name") == "LastStableOffsetLag" and keys.get("topic") in topics:
            lags[TopicPartition(keys["topic"], int(keys["partition"]))] = int(value)
    return int(values[LATE_GAUGE]), lags


def _abort(
    config: Path, topic: str, partition: int, start_offset: int, *flags: str
) -> subprocess.CompletedProcess[str]:
    """`kafka-txn-exporter abort` as an operator runs it: its own process, a config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "simulator")])
    return subprocess.run(
        [
            sys.executable, "-m", "exporter", "abort", "--config", str(config),
            "--cluster", "real", "--topic", topic, "--partition", str(partition),
            "--start-offset", str(start_offset), *flags,
        ],
        capture_output=True, text=True, timeout=120, env=env, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _end_offsets(
    bootstrap: str, partitions: list[TopicPartition], isolation_level: str
) -> dict[TopicPartition, int]:
    """ListOffsets latest with kafka-python's consumer (read_committed: the LSO)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level)
    try:
        asked = [KafkaTopicPartition(p.topic, p.partition) for p in partitions]
        answer = consumer.end_offsets(asked)
        return {TopicPartition(tp.topic, tp.partition): int(off) for tp, off in answer.items()}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def scene(
    real_kafka: RealKafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    bootstrap = real_kafka.bootstrap
    late_topic = create_topic(real_kafka, unique("truth-late"))
    fresh_topic = create_topic(real_kafka, unique("truth-fresh"))
    young_topic = create_topic(real_kafka, unique("truth-young"))
    healthy_topic = create_topic(real_kafka, unique("truth-healthy"), partitions=4)

    pid, epoch, start = hanging_transaction(
        bootstrap, unique("late-txn"), late_topic, 0, backdate_ms=LATE_BACKDATE_MS
    )
    late = Txn(late_topic, 0, pid, epoch, start)
    # Records after the hanging one: the high watermark moves on, the LSO stays at `start`.
    committed_transaction(bootstrap, unique("after-late"), late_topic, [0], records=2)
    fresh = _hanging_with_fresh_write(
        bootstrap, unique("fresh-txn"), fresh_topic, 0, LATE_BACKDATE_MS
    )
    pid, epoch, start = hanging_transaction(bootstrap, unique("young-txn"), young_topic, 0)
    young = Txn(young_topic, 0, pid, epoch, start)
    healthy: OpenTransaction = open_transaction(
        bootstrap, unique("healthy-open"), healthy_topic, [0], transaction_timeout_ms=300_000
    )
    (batch,) = healthy.batches
    healthy_open = Txn(
        healthy_topic, 0, healthy.producer_id, healthy.producer_epoch, batch.base_offset
    )
    idempotent_producer_write(bootstrap, healthy_topic, 1)
    committed_transaction(bootstrap, unique("healthy-commit"), healthy_topic, [2])
    aborted_transaction(bootstrap, unique("healthy-abort"), healthy_topic, [3])

    topics = (late_topic, fresh_topic, young_topic, healthy_topic)
    scene = Scene(late, fresh, young, healthy_open, healthy_topic, topics)
    try:
        with poll_env(real_kafka) as env:
            for _ in range(POLLS):
                scene.polls.append(env.poll())
        scene.find_hanging = find_hanging(real_kafka)
        scene.jmx_late, scene.jmx_lag = _jmx_gauges(real_kafka, topics)

        config = tmp_path_factory.mktemp("abort") / "config.yaml"
        config.write_text(
            "clusters:\n  - name: real\n"
            f'    bootstrap_servers: "{bootstrap}"\n'
            "    request_timeout_seconds: 20\n"
            "admin:\n  clusters:\n    - name: real\n      client_id: truth-admin\n",
            encoding="utf-8",
        )
        for name, txn in (("late", late), ("fresh", fresh)):
            scene.aborts[name] = _abort(config, txn.topic, txn.partition, txn.start_offset, "--yes")
        scene.aborts["young"] = _abort(
            config, young.topic, young.partition, young.start_offset, "--yes"
        )
        scene.aborts["healthy"] = _abort(
            config,
            healthy_open.topic,
            healthy_open.partition,
            healthy_open.start_offset,
            "--yes",
        )
        # Late hanging transactions earlier test modules left on the shared broker: the
        # broker-wide gauge counts them too.
        _, snapshot = scene.last
        for other in snapshot.late_transactions:
            left = other.transaction
            if left.topic not in topics and other.classification is Classification.HANGING:
                scene.leftovers_aborted.append(
                    _abort(config, left.topic, left.partition, left.current_txn_start_offset,
                           "--yes")
                )  # fmt: skip

        with poll_env(real_kafka) as env:
            scene.after = env.poll()
        scene.find_hanging_after = find_hanging(real_kafka)
        scene.jmx_late_after, scene.jmx_lag_after = _jmx_gauges(real_kafka, topics)
        aborted = [TopicPartition(t.topic, t.partition) for t in (late, fresh)]
        scene.committed_end_offsets_after = _end_offsets(bootstrap, aborted, "read_committed")
        scene.end_offsets_after = _end_offsets(bootstrap, aborted, "read_uncommitted")
        yield scene
    finally:
        healthy.abort()


def _late_in(snapshot: ClusterSnapshot, txn: Txn) -> list[LateTransaction]:
    return [
        t for t in snapshot.late_transactions
        if (t.transaction.topic, t.transaction.partition) == (txn.topic, txn.partition)
    ]  # fmt: skip


def _identity(late: LateTransaction) -> tuple[int, int, int, int]:
    t = late.transaction
    return (t.partition, t.producer_id, t.producer_epoch, t.current_txn_start_offset)


def _rows(rows: list[HangingRow], topic: str) -> list[tuple[int, int, int, int]]:
    return [
        (r.partition, r.producer_id, r.producer_epoch, r.start_offset)
        for r in rows
        if r.topic == topic
    ]


def _broker_rule_late_partitions(observation: ClusterObservation) -> set[TopicPartition]:
    """ProducerStateManager.hasLateTransaction applied to what the exporter read: per partition
    the open transaction with the lowest start offset, aged by its LastTimestamp."""
    oldest: dict[TopicPartition, tuple[int, int]] = {}
    for txn in observation.open_transactions:
        tp = TopicPartition(txn.topic, txn.partition)
        if tp not in oldest or txn.current_txn_start_offset < oldest[tp][0]:
            oldest[tp] = (txn.current_txn_start_offset, txn.last_timestamp_ms)
    (broker,) = observation.brokers
    assert broker.transaction_max_timeout_ms == DEFAULT_MAX_TIMEOUT_MS
    threshold = broker.transaction_max_timeout_ms + BROKER_LATE_BUFFER_MS
    return {
        tp for tp, (_, last) in oldest.items()
        if last > 0 and observation.observed_at_ms - last > threshold
    }  # fmt: skip


def _samples(snapshot: ClusterSnapshot) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The snapshot as /metrics shows it, parsed back."""
    store = SnapshotStore([ClusterSettings(name=snapshot.cluster, bootstrap_servers=("x:1",))])
    store.publish(snapshot)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _series_of(
    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, topic: str
) -> list[float]:
    return [v for (n, labels), v in samples.items() if n == name and ("topic", topic) in labels]


# --------------------------------------------------------------------------- 1. late hanging


def test_late_hanging_transaction_equals_find_hanging_and_the_broker_gauge(scene: Scene) -> None:
    for _, snapshot in scene.polls:
        (found,) = _late_in(snapshot, scene.late)
        assert found.classification is Classification.HANGING
        assert _identity(found) == (
            scene.late.partition, scene.late.producer_id, scene.late.producer_epoch,
            scene.late.start_offset,
        )  # fmt: skip
        assert found.age_seconds >= LATE_BACKDATE_MS / 1000
    assert _rows(scene.find_hanging, scene.late.topic) == [
        (scene.late.partition, scene.late.producer_id, scene.late.producer_epoch,
         scene.late.start_offset)
    ]  # fmt: skip
    # The broker's gauge counts the partition: its rule, on what the exporter read, agrees.
    observation, _ = scene.last
    broker_rule = _broker_rule_late_partitions(observation)
    assert TopicPartition(scene.late.topic, scene.late.partition) in broker_rule
    assert scene.jmx_late == len(broker_rule)


# ------------------------------------------------------- 2. late hanging with a fresh write


def test_a_fresh_write_hides_a_late_hanging_transaction_from_kafka_not_from_the_exporter(
    scene: Scene,
) -> None:
    fresh = scene.fresh
    first, second = fresh.batches
    assert second.base_sequence == first.base_sequence + 1
    for observation, snapshot in scene.polls:
        (found,) = _late_in(snapshot, fresh)
        assert found.classification is Classification.HANGING
        assert _identity(found) == (
            fresh.partition,
            fresh.producer_id,
            fresh.producer_epoch,
            fresh.start_offset,
        )
        # Aged from its FIRST batch; the broker's LastTimestamp is the fresh one.
        assert found.transaction.start_time_source is StartTimeSource.BATCH_TIMESTAMP
        assert found.transaction.start_time_ms == first.max_timestamp_ms
        assert found.transaction.last_timestamp_ms == second.max_timestamp_ms
        assert found.age_seconds >= LATE_BACKDATE_MS / 1000
        assert TopicPartition(fresh.topic, fresh.partition) not in _broker_rule_late_partitions(
            observation
        )
    # Kafka's own tools miss it.
    assert _rows(scene.find_hanging, fresh.topic) == []
    observation, snapshot = scene.last
    broker_rule = _broker_rule_late_partitions(observation)
    assert scene.jmx_late == len(broker_rule)
    (broker,) = snapshot.brokers
    assert broker.partitions_with_late_transactions == len(broker_rule) + 1
    late_partitions = {
        TopicPartition(t.transaction.topic, t.transaction.partition)
        for t in snapshot.late_transactions
    }
    assert late_partitions - broker_rule == {TopicPartition(fresh.topic, fresh.partition)}
    # Everything else find-hanging lists, the exporter lists with the same identity.
    exporter_hanging = {
        (t.transaction.topic, *_identity(t))
        for t in snapshot.late_transactions
        if t.classification is Classification.HANGING
    }
    oracle = {
        (r.topic, r.partition, r.producer_id, r.producer_epoch, r.start_offset)
        for r in scene.find_hanging
    }
    assert oracle == exporter_hanging - {(fresh.topic, *_identity(_late_in(snapshot, fresh)[0]))}


# ------------------------------------------------------------------------- 3. young hanging


def test_a_young_hanging_transaction_is_orphaned_two_polls_after_first_seen(
    scene: Scene,
) -> None:
    young = scene.young
    key = (young.topic, young.partition, young.producer_id, young.producer_epoch,
           young.start_offset)  # fmt: skip
    orphaned_per_poll: list[bool] = []
    for observation, snapshot in scene.polls:
        assert key in {t.key for t in observation.open_transactions}
        assert _late_in(snapshot, young) == []
        mine = [o for o in snapshot.orphaned_transactions if o.transaction.key == key]
        orphaned_per_poll.append(bool(mine))
        for orphan in mine:
            assert orphan.late is False
            assert orphan.classification is Classification.ORPHANED
            assert orphan.untracked_polls >= 2
    assert orphaned_per_poll == [False, False] + [True] * (POLLS - 2)
    assert _rows(scene.find_hanging, young.topic) == []


# ---------------------------------------------------------------------- 4. healthy producers


def test_healthy_producers_are_never_late_hanging_or_orphaned(scene: Scene) -> None:
    topic = scene.healthy_topic
    tracked = scene.healthy_open
    for index, (observation, snapshot) in enumerate(scene.polls):
        opened = [t for t in observation.open_transactions if t.topic == topic]
        # Only the open transaction is open; idempotent, committed and aborted ones are not.
        assert [(t.partition, t.producer_id, t.current_txn_start_offset) for t in opened] == [
            (tracked.partition, tracked.producer_id, tracked.start_offset)
        ]
        assert [t for t in snapshot.late_transactions if t.transaction.topic == topic] == []
        assert [t for t in snapshot.orphaned_transactions if t.transaction.topic == topic] == []
        assert opened[0].key not in observation.untracked_polls
        assert opened[0].key not in observation.untracked_unknown
        if index > 0:  # asked about from the second poll: its coordinator lists the partition
            tid = observation.transactional_ids[tracked.producer_id]
            description = observation.descriptions[tid]
            assert description is not None
            assert TopicPartition(topic, tracked.partition) in description.topic_partitions
    assert _rows(scene.find_hanging, topic) == []


# ------------------------------------------------------------------- 5. last stable offset lag


def test_last_stable_offset_lag_equals_the_broker_gauge(scene: Scene) -> None:
    _, snapshot = scene.last
    lags = snapshot.last_stable_offset_lag
    mine = {tp: lag for tp, lag in lags.items() if tp.topic in scene.topics}
    late_tp = TopicPartition(scene.late.topic, scene.late.partition)
    # The hanging batch, two committed records and their marker: all behind the LSO.
    assert mine[late_tp] == 4
    assert set(mine) == {
        late_tp,
        TopicPartition(scene.fresh.topic, 0),
        TopicPartition(scene.young.topic, 0),
        TopicPartition(scene.healthy_topic, scene.healthy_open.partition),
    }
    assert {tp: scene.jmx_lag[tp] for tp in mine} == mine
    # Where the exporter saw no open transaction the broker's lag is 0.
    assert {tp: lag for tp, lag in scene.jmx_lag.items() if tp not in mine} == {
        TopicPartition(scene.healthy_topic, p): 0 for p in (1, 2, 3)
    }


# ----------------------------------------------------------------------------- 6. the abort


def test_the_abort_command_ends_what_kafka_and_the_exporter_call_hanging(scene: Scene) -> None:
    for name in ("late", "fresh"):
        result = scene.aborts[name]
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Aborted: no open transaction at offset" in result.stdout
    for result in scene.leftovers_aborted:
        assert result.returncode == 0, result.stdout + result.stderr
    orphaned = scene.aborts["young"]
    assert orphaned.returncode == 0, orphaned.stdout + orphaned.stderr
    assert "Classification:   orphaned" in orphaned.stdout
    assert "Aborted: no open transaction at offset" in orphaned.stdout
    refused = scene.aborts["healthy"]
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused" in refused.stderr and "nothing written" in refused.stdout

    # The LSO moved to the high watermark (ListOffsets read_committed vs read_uncommitted).
    late_tp = TopicPartition(scene.late.topic, scene.late.partition)
    fresh_tp = TopicPartition(scene.fresh.topic, scene.fresh.partition)
    assert scene.committed_end_offsets_after == scene.end_offsets_after
    assert scene.end_offsets_after == {late_tp: 5, fresh_tp: 3}  # + the ABORT marker
    assert f"last stable offset {scene.late.start_offset} -> 5" in scene.aborts["late"].stdout

    assert scene.after is not None
    _, before = scene.last
    observation, after = scene.after
    assert after.late_transactions == ()
    (broker,) = after.brokers
    assert broker.partitions_with_late_transactions == 0
    assert broker.partitions_with_hanging_transactions == 0
    assert scene.jmx_late > 0 and scene.jmx_late_after == 0
    assert [r for r in scene.find_hanging_after if r.topic in scene.topics] == []
    assert scene.find_hanging_after == []
    assert scene.jmx_lag_after[late_tp] == 0 and scene.jmx_lag_after[fresh_tp] == 0
    assert {TopicPartition(t.topic, t.partition) for t in observation.open_transactions} & {
        late_tp,
        fresh_tp,
    } == set()

    # The exporter's series for the two transactions are gone from /metrics, its per-broker
    # late and hanging counts are 0.
    samples_before, samples_after = _samples(before), _samples(after)
    for name in (
        "kafka_partitions_with_late_transactions",
        "kafka_partitions_with_hanging_transactions",
    ):
        labels = frozenset({("cluster", "real"), ("broker", "1")})
        assert samples_before[(name, labels)] >= 2, name
        assert samples_after[(name, labels)] == 0, name
    for topic in (scene.late.topic, scene.fresh.topic):
        for name in (
            "kafka_late_transaction_age_seconds",
            "kafka_partition_max_active_transaction_duration_seconds",
            "kafka_partition_last_stable_offset_lag",
        ):
            assert _series_of(samples_before, name, topic), (name, topic)
            assert _series_of(samples_after, name, topic) == [], (name, topic)
