"""The exporter on real ZooKeeper-mode brokers of the releases users still run (scripts/
kafka-zk-versions: 2.8, 3.0, 3.5 and 3.6, the first with partition verification): a focused set
per version, one broker start per version, one scene recorded once and judged by the tests
below (the whole KRaft matrix does not run here, to keep the suite's time in check).

The scene: a late hanging transaction with committed records after it, a stalled one (its
first batch as old, its producer still writing to it now), a young hanging one (orphaned where
the coordinator can be asked, from 3.0), an ordinary open transaction its coordinator tracks, a
committed one and an idempotent write, and a read_committed consumer group stopped at the late
transaction's start offset. Then `scan`, the status page, `/metrics`, and the
project's own `abort` on the late hanging transaction.

The oracle is Kafka itself, from the same jars: `kafka-transactions.sh find-hanging` from 3.0
(the tool first ships there); on 2.8, which has neither that tool nor ListTransactions, the
log itself (`kafka-dump-log.sh`: the transactional batch at the start offset, no control batch
after it) and the broker's ListOffsets (read_committed = the LSO, pinned at the start offset).
For the stalled transaction, which find-hanging cannot see (it ages a transaction by its
producer's last write), the log and ListOffsets on every release, and from 3.0
`kafka-transactions.sh describe-producers` (the open transaction's start offset, the fresh
LastTimestamp).
What a release cannot answer must be absent with its reason, never 0
(docs/compatibility.md#which-metric-works-on-which-kafka-version).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka_sim.consumer import READ_COMMITTED, consume_and_commit
from kafka_sim.producer import (
    OpenTransaction,
    committed_transaction,
    hanging_transaction,
    idempotent_producer_write,
    open_transaction,
)
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    LATE_BACKDATE_MS,
    REPO,
    HangingRow,
    StalledWrite,
    cluster_settings,
    create_topic,
    describe_producers_tool,
    find_hanging,
    hanging_transaction_with_fresh_write,
    poll_env,
    unique,
)
from realtools import exposed_samples

from exporter.expose.status import render_status_page
from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    LateTransaction,
    PartitionVerification,
    StartTimeSource,
    TopicPartition,
)
from exporter.scan import run_scan

POLLS = 4
"""Observations: a young hanging transaction is orphaned from the third (docs/abort.md)."""
DUMP_LOG = "kafka.tools.DumpLogSegments"


@dataclass
class ZkScene:
    version: tuple[int, int]
    late: tuple[str, int, int, int]
    """topic, producer id, epoch, start offset (partition 0)."""
    young: tuple[str, int, int, int]
    stalled: StalledWrite
    healthy_topic: str
    healthy_open: tuple[int, int]
    """producer id, start offset on partition 0 of the healthy topic."""
    blocked_group: str
    polls: list[tuple[ClusterObservation, ClusterSnapshot]] = field(default_factory=list)
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    scan_json: dict[str, object] = field(default_factory=dict)
    scan_exit: int = -1
    status_page: str = ""
    find_hanging: list[HangingRow] | None = None
    dump_log: str = ""
    stalled_dump_log: str = ""
    stalled_producers: list[dict[str, int]] | None = None
    """`kafka-transactions.sh describe-producers` of the stalled partition (3.0+)."""
    stalled_offsets: tuple[int, int] = (-1, -1)
    """(LSO, high watermark) of the stalled partition."""
    lso_before: int = -1
    high_watermark_before: int = -1
    abort: subprocess.CompletedProcess[str] | None = None
    lso_after: int = -1
    high_watermark_after: int = -1
    after: tuple[ClusterObservation, ClusterSnapshot] | None = None

    @property
    def has_transactions_api(self) -> bool:
        """ListTransactions/DescribeTransactions (and kafka-transactions.sh) from 3.0."""
        return self.version >= (3, 0)

    @property
    def last(self) -> tuple[ClusterObservation, ClusterSnapshot]:
        return self.polls[-1]


def _offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(LSO, high watermark) of partition 0 as the broker answers ListOffsets."""
    tp = KafkaTopicPartition(topic, 0)
    found = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            found.append(int(consumer.end_offsets([tp])[tp]))
        finally:
            consumer.close()
    return found[0], found[1]


def _dump_logs(cluster: RealKafkaCluster, topics: list[str]) -> dict[str, str]:
    """`kafka-dump-log.sh --deep-iteration` of partition 0's first segment of each topic, in one
    run of the tool: its output per topic."""
    segments = [cluster.log_dir() / f"{t}-0" / "00000000000000000000.log" for t in topics]
    dumped = cluster.tool(
        DUMP_LOG, "--files", ",".join(str(s) for s in segments), "--deep-iteration"
    )
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    out: dict[str, str] = {}
    current = ""
    for line in dumped.stdout.splitlines():
        if line.startswith("Dumping "):
            current = next(t for t in topics if f"/{t}-0/" in line)
        if current:
            out[current] = out.get(current, "") + line + "\n"
    assert sorted(out) == sorted(topics), dumped.stdout
    return out


def _abort(config: Path, topic: str, start_offset: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "simulator")])
    return subprocess.run(
        [
            sys.executable, "-m", "exporter", "abort", "--config", str(config),
            "--cluster", "real", "--topic", topic, "--partition", "0",
            "--start-offset", str(start_offset), "--yes",
        ],
        capture_output=True, text=True, timeout=180, env=env, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def zk_scene(
    real_zk_kafka: RealKafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZkScene]:
    cluster = real_zk_kafka
    bootstrap = cluster.bootstrap
    late_topic = create_topic(cluster, unique("zk-late"))
    young_topic = create_topic(cluster, unique("zk-young"))
    stalled_topic = create_topic(cluster, unique("zk-stalled"))
    healthy_topic = create_topic(cluster, unique("zk-healthy"), partitions=3)

    pid, epoch, start = hanging_transaction(
        bootstrap, unique("zk-late-txn"), late_topic, 0, backdate_ms=LATE_BACKDATE_MS
    )
    committed_transaction(bootstrap, unique("zk-after-late"), late_topic, [0], records=2)
    young_pid, young_epoch, young_start = hanging_transaction(
        bootstrap, unique("zk-young-txn"), young_topic, 0
    )
    stalled = hanging_transaction_with_fresh_write(
        bootstrap, unique("zk-stalled-txn"), stalled_topic, 0, LATE_BACKDATE_MS
    )
    healthy: OpenTransaction = open_transaction(
        bootstrap, unique("zk-open"), healthy_topic, [0], transaction_timeout_ms=300_000
    )
    (batch,) = healthy.batches
    committed_transaction(bootstrap, unique("zk-commit"), healthy_topic, [1])
    idempotent_producer_write(bootstrap, healthy_topic, 2)
    group = unique("zk-group")
    consume_and_commit(bootstrap, group, late_topic, 0, isolation_level=READ_COMMITTED)

    scene = ZkScene(
        version=cluster.install.major_minor,
        late=(late_topic, pid, epoch, start),
        young=(young_topic, young_pid, young_epoch, young_start),
        stalled=stalled,
        healthy_topic=healthy_topic,
        healthy_open=(healthy.producer_id, batch.base_offset),
        blocked_group=group,
    )
    try:
        with poll_env(cluster) as env:
            for _ in range(POLLS):
                scene.polls.append(env.poll())
            _, snapshot = scene.last
            scene.samples = exposed_samples(env, snapshot)
            scene.status_page = render_status_page(
                {"real": snapshot}, abort_command=["kafka-txn-exporter", "abort"]
            ).decode()
        out, err = io.StringIO(), io.StringIO()
        scene.scan_exit = run_scan(
            [cluster_settings(cluster)], "json", out, err, orphan_check_seconds=0.5
        )
        scene.scan_json = json.loads(out.getvalue())
        scene.lso_before, scene.high_watermark_before = _offsets(bootstrap, late_topic)
        scene.stalled_offsets = _offsets(bootstrap, stalled_topic)
        dumps = [stalled_topic]
        if scene.has_transactions_api:
            scene.find_hanging = find_hanging(cluster)
            scene.stalled_producers = describe_producers_tool(cluster, stalled_topic, 0)
        else:
            dumps.append(late_topic)
        dumped = _dump_logs(cluster, dumps)
        scene.stalled_dump_log = dumped[stalled_topic]
        scene.dump_log = dumped.get(late_topic, "")

        config = tmp_path_factory.mktemp("zk-abort") / "config.yaml"
        config.write_text(
            "clusters:\n  - name: real\n"
            f"    bootstrap_servers: \"{bootstrap}\"\n"
            "    request_timeout_seconds: 20\n"
            "admin:\n  clusters:\n    - name: real\n      client_id: zk-admin\n",
            encoding="utf-8",
        )
        scene.abort = _abort(config, late_topic, start)
        scene.lso_after, scene.high_watermark_after = _offsets(bootstrap, late_topic)
        with poll_env(cluster) as env:
            scene.after = env.poll()
        yield scene
    finally:
        healthy.abort()


def _late_on(snapshot: ClusterSnapshot, topic: str) -> list[LateTransaction]:
    return [t for t in snapshot.late_transactions if t.transaction.topic == topic]


def _series(scene: ZkScene, name: str, **labels: str) -> list[float]:
    return [
        value for n, have, value in scene.samples
        if n == name and all(have.get(k) == v for k, v in labels.items())
    ]  # fmt: skip


# ------------------------------------------------------------------------------ the truth


def test_the_late_hanging_transaction_is_what_kafka_itself_shows(zk_scene: ZkScene) -> None:
    topic, pid, epoch, start = zk_scene.late
    for _, snapshot in zk_scene.polls:
        (late,) = [t for t in snapshot.late_transactions if t.transaction.topic == topic]
        txn = late.transaction
        assert (txn.partition, txn.producer_id, txn.producer_epoch) == (0, pid, epoch)
        assert txn.current_txn_start_offset == start
        assert late.age_seconds >= LATE_BACKDATE_MS / 1000
        # Hanging needs the coordinator's word (ListTransactions, 3.0+); before, unknown.
        expected = (
            Classification.HANGING if zk_scene.has_transactions_api else Classification.UNKNOWN
        )
        assert late.classification is expected
    # Kafka's own view: the LSO is pinned at the start offset, the committed records after it.
    assert zk_scene.lso_before == start < zk_scene.high_watermark_before == start + 4
    observation, snapshot = zk_scene.last
    tp = TopicPartition(topic, 0)
    assert observation.last_stable_offsets[tp] == zk_scene.lso_before
    assert observation.high_watermarks[tp] == zk_scene.high_watermark_before
    assert snapshot.last_stable_offset_lag[tp] == 4
    if zk_scene.find_hanging is not None:
        rows = [(r.partition, r.producer_id, r.producer_epoch, r.start_offset)
                for r in zk_scene.find_hanging if r.topic == topic]  # fmt: skip
        assert rows == [(0, pid, epoch, start)]
    else:
        # 2.8: the log holds the transactional batch at `start` and no control batch (marker)
        # of that producer after it.
        batches = [line for line in zk_scene.dump_log.splitlines() if "baseOffset:" in line]
        mine = [line for line in batches if f"producerId: {pid} " in line]
        assert len(mine) == 1 and f"baseOffset: {start} " in mine[0], zk_scene.dump_log
        assert "isTransactional: true" in mine[0] and "isControl: false" in mine[0]


def test_a_stalled_transaction_whose_producer_keeps_writing_is_late_from_its_first_batch(
    zk_scene: ZkScene,
) -> None:
    """Open since an old first batch, its producer still writing to it now: Kafka's own aging
    (the producer's LastTimestamp: find-hanging, the late-transactions gauge) calls it fresh;
    the exporter ages it from the batch at its start offset."""
    stalled = zk_scene.stalled
    first, second = stalled.first, stalled.second
    assert second.base_sequence == first.base_sequence + 1
    assert first.max_timestamp_ms <= second.max_timestamp_ms - LATE_BACKDATE_MS
    expected = Classification.HANGING if zk_scene.has_transactions_api else Classification.UNKNOWN
    for _, snapshot in zk_scene.polls:
        (late,) = _late_on(snapshot, stalled.topic)
        txn = late.transaction
        assert (txn.partition, txn.producer_id, txn.producer_epoch) == (
            stalled.partition, stalled.producer_id, stalled.producer_epoch,
        )  # fmt: skip
        assert txn.current_txn_start_offset == stalled.start_offset
        assert txn.start_time_source is StartTimeSource.BATCH_TIMESTAMP
        assert txn.start_time_ms == first.max_timestamp_ms
        assert txn.last_timestamp_ms == second.max_timestamp_ms
        assert late.age_seconds >= LATE_BACKDATE_MS / 1000
        assert late.classification is expected
    assert _series(
        zk_scene, "kafka_late_transaction_age_seconds", topic=stalled.topic,
        classification=expected.value,
    )  # fmt: skip
    # Kafka's view: the LSO pinned at the first batch, both batches behind it.
    assert zk_scene.stalled_offsets == (stalled.start_offset, stalled.start_offset + 2)
    # The log: the producer's two transactional batches, stamped old and now, no marker.
    batches = [b for b in zk_scene.stalled_dump_log.splitlines() if b.startswith("baseOffset:")]
    assert len(batches) == 2, zk_scene.stalled_dump_log
    for line, batch in zip(batches, (first, second), strict=True):
        assert f"baseOffset: {batch.base_offset} " in line
        assert f"producerId: {stalled.producer_id} " in line
        assert "isTransactional: true" in line and "isControl: false" in line
        assert f"CreateTime: {batch.max_timestamp_ms} " in line
    if zk_scene.has_transactions_api:
        # find-hanging ages by the producer's last write, which is fresh: it misses it.
        assert zk_scene.find_hanging is not None
        assert [r for r in zk_scene.find_hanging if r.topic == stalled.topic] == []
        # describe-producers: the transaction open from the first batch, last written now.
        assert zk_scene.stalled_producers is not None
        (producer,) = [
            p for p in zk_scene.stalled_producers if p["ProducerId"] == stalled.producer_id
        ]
        assert producer["CurrentTransactionStartOffset"] == stalled.start_offset
        assert producer["LastTimestamp"] == second.max_timestamp_ms


def test_a_young_hanging_transaction_is_orphaned_only_where_the_coordinator_can_be_asked(
    zk_scene: ZkScene,
) -> None:
    topic, pid, epoch, start = zk_scene.young
    key = (topic, 0, pid, epoch, start)
    orphaned = []
    for observation, snapshot in zk_scene.polls:
        assert key in {t.key for t in observation.open_transactions}
        assert _late_on(snapshot, topic) == []
        orphaned.append(any(o.transaction.key == key for o in snapshot.orphaned_transactions))
    if zk_scene.has_transactions_api:
        assert orphaned == [False, False] + [True] * (POLLS - 2)
    else:
        assert orphaned == [False] * POLLS
        # Not "0 orphaned": the count is unknown for the broker.
        (broker,) = zk_scene.last[1].brokers
        assert broker.partitions_with_orphaned_transactions is None
        assert _series(zk_scene, "kafka_partitions_with_orphaned_transactions") == []


def test_healthy_producers_are_open_or_nothing_never_late(zk_scene: ZkScene) -> None:
    pid, start = zk_scene.healthy_open
    for observation, snapshot in zk_scene.polls:
        opened = [t for t in observation.open_transactions if t.topic == zk_scene.healthy_topic]
        assert [(t.partition, t.producer_id, t.current_txn_start_offset) for t in opened] == [
            (0, pid, start)
        ]
        assert _late_on(snapshot, zk_scene.healthy_topic) == []
        assert [o for o in snapshot.orphaned_transactions
                if o.transaction.topic == zk_scene.healthy_topic] == []  # fmt: skip
    (broker,) = zk_scene.last[1].brokers
    # Four partitions hold an open transaction: late, stalled, young and the ordinary one; the
    # late and the stalled one are late.
    assert _series(zk_scene, "kafka_partitions_with_open_transactions", broker="1") == [4.0]
    assert _series(zk_scene, "kafka_partitions_with_late_transactions", broker="1") == [2.0]
    assert broker.partitions_with_open_transactions == 4


# ----------------------------------------------------------------------- blocked consumer groups


def test_blocked_groups_are_found_from_3_0_and_unknown_with_their_reason_before(
    zk_scene: ZkScene,
) -> None:
    topic = zk_scene.late[0]
    _, snapshot = zk_scene.last
    (late,) = [t for t in snapshot.late_transactions if t.transaction.topic == topic]
    counts = _series(zk_scene, "kafka_transaction_blocked_consumer_groups", topic=topic)
    if zk_scene.has_transactions_api:
        assert late.blocked_groups_unknown is None
        assert {g.group_id for g in late.blocked_groups} == {zk_scene.blocked_group}
        assert counts == [1.0]
    else:
        # FindCoordinator v4 and OffsetFetch v8 (batched) arrive in 3.0.
        assert late.blocked_groups_unknown == "unsupported_api"
        assert counts == []
        assert _series(
            zk_scene, "kafka_txn_exporter_blocked_consumer_groups_unknown",
            reason="unsupported_api",
        ) == [2.0]  # the late and the stalled one (the young one is neither late nor orphaned)


# ---------------------------------------------------------------------------------- exposure


def test_partition_verification_is_read_from_3_6_and_not_offered_before(
    zk_scene: ZkScene,
) -> None:
    (broker,) = zk_scene.last[1].brokers
    verification = _series(zk_scene, "kafka_transaction_partition_verification_enabled")
    if zk_scene.version >= (3, 6):
        assert broker.partition_verification is PartitionVerification.DISABLED
        assert verification == [0.0]
    else:
        assert broker.partition_verification is PartitionVerification.NOT_OFFERED
        assert verification == []
    # A ZooKeeper-mode broker finalizes no transaction.version, but reports finalized features
    # (epoch >= 0, measured on 2.8.2 to 3.6.2) without it: level 0, not unknown.
    expected = 0
    assert zk_scene.last[1].finalized_transaction_version == expected
    assert _series(zk_scene, "kafka_finalized_transaction_version") == [float(expected)]
    exposure = zk_scene.scan_json["exposure"]
    assert isinstance(exposure, dict)
    assert exposure["real"]["finalized_transaction_version"] == expected


# ------------------------------------------------------------------------ what cannot be known


def test_what_the_version_cannot_serve_is_absent_with_its_reason(zk_scene: ZkScene) -> None:
    _, snapshot = zk_scene.last
    (broker,) = snapshot.brokers
    states = _series(zk_scene, "kafka_transactions")
    hanging = _series(zk_scene, "kafka_partitions_with_hanging_transactions", broker="1")
    if zk_scene.has_transactions_api:
        assert snapshot.transaction_states is not None and states
        assert hanging == [2.0]  # the late and the stalled one
        assert snapshot.unclassified_by_reason == {}
        assert _series(zk_scene, "kafka_txn_exporter_unclassified_transactions") == []
        return
    # 2.8: no ListTransactions/DescribeTransactions. Nothing reads 0 for what is unknown.
    assert snapshot.transaction_states is None and states == []
    assert broker.partitions_with_hanging_transactions is None and hanging == []
    assert broker.partitions_with_orphaned_transactions is None
    # The late transactions are there (the late and the stalled one), classified unknown (not
    # hanging), with the groups they block unknown for the reason counted.
    for topic in (zk_scene.late[0], zk_scene.stalled.topic):
        assert _series(
            zk_scene, "kafka_late_transaction_age_seconds", topic=topic,
            classification="unknown", transactional_id="",
        )  # fmt: skip
    assert snapshot.blocked_groups_unknown_by_reason == {"unsupported_api": 2}
    # Why hanging and orphaned are unknown is counted.
    assert snapshot.unclassified_by_reason == {"unsupported_api": 2}
    assert _series(
        zk_scene, "kafka_txn_exporter_unclassified_transactions", reason="unsupported_api"
    ) == [2.0]  # fmt: skip
    # The status page shows the unknown counts as unknown and says why, so does scan.
    row = zk_scene.status_page.split('data-broker="1"', 1)[1].split("</tr>", 1)[0]
    assert row.count(">?</td>") == 2, row  # hanging and orphaned
    assert "do not offer ListTransactions/DescribeTransactions" in zk_scene.status_page
    notes = zk_scene.scan_json["notes"]
    assert isinstance(notes, list)
    assert any(
        "could not be classified (unsupported_api: the brokers do not offer ListTransactions"
        in note for note in notes
    ), notes
    assert any("blocked consumer groups unknown (unsupported_api)" in n for n in notes), notes


def test_scan_lists_the_late_transaction_as_the_version_can_classify_it(
    zk_scene: ZkScene,
) -> None:
    topic, pid, _, start = zk_scene.late
    rows = zk_scene.scan_json["transactions"]
    assert isinstance(rows, list)
    (row,) = [r for r in rows if r["topic"] == topic]
    assert (row["producer_id"], row["start_offset"]) == (pid, start)
    if zk_scene.has_transactions_api:
        assert row["classification"] == "hanging"
        assert zk_scene.scan_exit == 1
    else:
        assert row["classification"] == "unknown"
        assert row["blocked_groups"] is None
        assert zk_scene.scan_exit == 0


# ----------------------------------------------------------------------------------- abort


def test_abort_ends_the_late_hanging_transaction_or_refuses_what_it_cannot_confirm(
    zk_scene: ZkScene,
) -> None:
    topic, _, _, start = zk_scene.late
    result = zk_scene.abort
    assert result is not None and zk_scene.after is not None
    _, after = zk_scene.after
    if zk_scene.has_transactions_api:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Aborted: no open transaction at offset" in result.stdout
        # The broker's LSO moved past the ABORT marker to the high watermark.
        assert zk_scene.lso_after == zk_scene.high_watermark_after == start + 5
        assert _late_on(after, topic) == []
    else:
        # Without the coordinator's listing a late transaction cannot be confirmed hanging:
        # abort refuses and writes nothing (Kafka's LSO has not moved).
        assert result.returncode != 0, result.stdout + result.stderr
        assert "nothing written" in result.stdout
        assert zk_scene.lso_after == start
        assert len(_late_on(after, topic)) == 1


# ------------------------------------------------------------- the simulator's old profiles


SIM_PROFILE = {(2, 8): "2.8", (3, 0): "3.0", (3, 5): "3.5", (3, 6): "3.6"}
"""The simulator's release profiles these brokers judge."""
TRANSACTION_APIS = {
    22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions",
}  # fmt: skip


@dataclass(frozen=True)
class LiveApiVersions:
    api_versions: dict[int, tuple[int, int]]
    supported_features: list[tuple[str, int, int]]
    finalized_features_epoch: int
    finalized_features: list[tuple[str, int, int]]


def _live_api_versions(cluster: RealKafkaCluster) -> LiveApiVersions:
    """The broker's ApiVersions v3 answer."""
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest
    from kafka_sim.client import RawKafkaClient

    with RawKafkaClient("127.0.0.1", cluster.port()) as client:
        answer = client.request(
            ApiVersionsRequest[3](client_software_name="kte-test", client_software_version="1")
        )
    return LiveApiVersions(
        {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys},
        [(f.name, f.min_version, f.max_version) for f in answer.supported_features],
        int(answer.finalized_features_epoch),
        [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features],
    )


def test_the_simulators_release_profile_answers_apiversions_as_the_live_broker(
    real_zk_kafka: RealKafkaCluster, zk_scene: ZkScene
) -> None:
    from kafka_sim.versions import PROFILES

    live = _live_api_versions(real_zk_kafka)
    ranges = live.api_versions
    # What the exporter relies on, per release (docs/compatibility.md).
    assert 61 in ranges  # DescribeProducers from 2.8
    assert (65 in ranges, 66 in ranges) == (zk_scene.has_transactions_api,) * 2
    assert ranges[24][1] == (4 if zk_scene.version >= (3, 6) else 3)  # verification from 3.6
    # Finalized features reported (epoch >= 0), transaction.version not among them: level 0.
    assert live.finalized_features_epoch >= 0
    assert "transaction.version" not in {name for name, _, _ in live.finalized_features}
    name = SIM_PROFILE.get(zk_scene.version)
    if name is None:
        return
    profile = PROFILES[name]
    assert dict(profile.api_versions) == ranges
    assert [
        (f.name, f.min_version, f.max_version) for f in profile.supported_features_for(3)
    ] == live.supported_features
    assert profile.finalized_features_epoch == live.finalized_features_epoch
    assert [
        (f.name, f.min_version_level, f.max_version_level) for f in profile.finalized_features
    ] == live.finalized_features
