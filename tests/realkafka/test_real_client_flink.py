"""Apache Flink's KafkaSink with DeliveryGuarantee.EXACTLY_ONCE on real brokers: a small job of
the rig's own (tests/realkafka/java/FlinkEosJob.java, Flink and flink-connector-kafka from
scripts/install-clients) in a local MiniCluster, a checkpoint every 2 s, transaction.timeout.ms
15 min, with the exporter polling every half second in a thread and every verdict kept.

Faults, one after the other: the job's JVM killed with SIGKILL between checkpoints (its
transactions linger: open, tracked by their coordinator, until their 15 min timeout); the job
started again from its last checkpoint (the sink aborts what lingers); the job cancelled.

What must hold (Kafka's and Flink's behaviour: docs/kafka-semantics.md#real-clients):
- every open transaction on the topic belongs to `<transactionalIdPrefix>-<subtask>-<n>`;
- no poll calls any of them late, hanging or orphaned: a lingering transaction is neither (its
  timeout is long, its coordinator tracks it); the exporter shows it open under its id,
  tracked, as `kafka-transactions.sh describe` does (Ongoing, 900000 ms);
- a read_committed consumer group stops at the lingering transaction's first offset
  (`kafka-consumer-groups.sh`): recorded here; naming the groups so blocked before anything
  is late is the exporter's to do;
- after the restart from the checkpoint, the lingering transactions are gone;
- after the cancellation, what the exporter sees open is what `kafka-transactions.sh list`
  calls Ongoing.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from clienthelpers import (
    FLINK_JVM,
    Lines,
    PollRecord,
    Verdict,
    describe_transaction,
    flink_home,
    java_app,
    kill9,
    list_transactions,
    start_loop,
)
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import create_topic, unique
from realtools import console_consume, describe_groups

CHECKPOINT_MS = 2000
FLINK_TIMEOUT_MS = "900000"
STARTUP_S = 240.0

Key = tuple[str, int, int, int, int]


def _job(cluster: RealKafkaCluster, topic: str, prefix: str, checkpoints: Path, log: Path,
         restore: Path | None = None) -> Lines:  # fmt: skip
    home = flink_home()
    args = [cluster.bootstrap, topic, prefix, str(checkpoints), str(CHECKPOINT_MS)]
    if restore is not None:
        args.append(str(restore))
    child = java_app(home / "lib", home / "classes", "FlinkEosJob", *args, log=log, jvm=FLINK_JVM)
    return Lines(child, log)


def _latest_checkpoint(checkpoints: Path) -> Path:
    """The completed checkpoint (a chk-N folder with its _metadata) with the highest N."""
    done = [p.parent for p in checkpoints.glob("*/chk-*/_metadata")]
    assert done, f"no completed checkpoint under {checkpoints}"
    return max(done, key=lambda p: int(p.name.split("-")[1]))


def _key(v: Verdict) -> Key:
    return (v.topic, v.partition, v.producer_id, v.producer_epoch, v.start_offset)


def test_flink_exactly_once_sink_lingering_after_a_kill_then_restored_then_cancelled(
    clients_kafka: RealKafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(clients_kafka, unique("flink-out"), partitions=2)
    prefix = unique("flink-eos")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    running = start_loop(clients_kafka, [topic])
    loop = running.loop
    jobs: list[Lines] = []
    pattern = re.compile(rf"{re.escape(prefix)}-(\d+)-(\d+)")

    def mine(record: PollRecord) -> dict[Key, Verdict]:
        return {
            _key(v): v for v in record.verdicts
            if pattern.fullmatch(loop.transactional_id(v) or "")
        }  # fmt: skip

    try:
        first = _job(clients_kafka, topic, prefix, checkpoints, tmp_path / "job-1.log")
        jobs.append(first)
        index = first.wait("a completed checkpoint", lambda s: s.startswith("CHECKPOINT"),
                           STARTUP_S)  # fmt: skip
        first.wait("a second one", lambda s: s.startswith("CHECKPOINT"), 60, start=index + 1)
        loop.wait_for("the job's transactions", lambda r: bool(mine(r)), 60)

        # SIGKILL: what it had open lingers.
        loop.phase = "killed"
        kill9(first.child)
        after_kill = loop.wait_for("a poll after the kill", lambda r: True, 30)
        lingering = set(mine(after_kill))
        assert lingering, after_kill.verdicts
        tracked = loop.wait_for(
            "the lingering transactions, tracked",
            lambda r: all(k in mine(r) and mine(r)[k].tracked for k in lingering), 60,
        )  # fmt: skip
        lingering_ids = {loop.transactional_id(mine(tracked)[k]) for k in lingering}
        for transactional_id in sorted(i for i in lingering_ids if i):
            described = describe_transaction(clients_kafka, transactional_id)
            assert described["TransactionState"] == "Ongoing", described
            assert described["TransactionTimeoutMs"] == FLINK_TIMEOUT_MS, described
        # Kafka's consumer-group oracle: a read_committed group stops at the first offset of
        # the lingering transactions on each partition (the lowest, when two subtasks wrote there).
        group = unique("flink-reader")
        console_consume(clients_kafka, topic, group, "read_committed", timeout_ms=10000)
        committed = {
            r.partition: r.current_offset for r in describe_groups(clients_kafka, group)[group]
        }
        first_open: dict[int, int] = {}
        for _, partition, _, _, start_offset in lingering:
            first_open[partition] = min(start_offset, first_open.get(partition, start_offset))
        for partition, start_offset in first_open.items():
            assert committed.get(partition) == start_offset, (committed, lingering)

        # Started again from its last checkpoint: the sink aborts what lingers.
        loop.phase = "restored"
        second = _job(
            clients_kafka, topic, prefix, checkpoints, tmp_path / "job-2.log",
            restore=_latest_checkpoint(checkpoints),
        )  # fmt: skip
        jobs.append(second)
        loop.wait_for(
            "the lingering transactions aborted",
            lambda r: not lingering & set(mine(r)) and r.observation.brokers[0].up, STARTUP_S,
        )  # fmt: skip
        index = second.wait("a checkpoint after the restore",
                            lambda s: s.startswith("CHECKPOINT"), STARTUP_S)  # fmt: skip

        # Cancelled between checkpoints.
        loop.phase = "cancelled"
        (checkpoints / "cancel").touch()
        second.wait("the cancellation", lambda s: s == "CANCELLED", 120)
        after_cancel = loop.wait_for("two polls after the cancel", lambda r: True, 30)
        after_cancel = loop.wait_for("", lambda r: True, 30, after=after_cancel.started + 0.01)
        open_ids = {loop.transactional_id(v) for v in mine(after_cancel).values()}
        ongoing = {
            tid for tid, row in list_transactions(clients_kafka).items()
            if pattern.fullmatch(tid) and row.state == "Ongoing"
        }  # fmt: skip
        assert open_ids == ongoing, (open_ids, ongoing)
    finally:
        for job in jobs:
            if job.child.poll() is None:
                job.child.send_signal(signal.SIGKILL)
                job.child.wait(30)
        running.stop()

    assert loop.false_verdicts() == []
    verdicts = [v for r in loop.records for v in r.verdicts]
    names = {loop.transactional_id(v) for v in verdicts}
    assert names and all(n is not None and pattern.fullmatch(n) for n in names), names
    assert {pattern.fullmatch(n).group(1) for n in names if n} <= {"0", "1"}  # type: ignore[union-attr]
