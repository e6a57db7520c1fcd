"""librdkafka (confluent-kafka) transactional producers on real brokers, with the exporter
polling every half second in a thread and every verdict kept.

- Many transactions back to back: no poll calls any of them late, hanging or orphaned.
- The producer killed with SIGKILL mid-transaction, then a broker restart: its coordinator
  tracks the transaction until transaction.timeout.ms and aborts it; no poll calls it hanging
  or orphaned, and `kafka-transactions.sh` agrees at each step.
- The same, stamped older than the broker's lateness rule, then the transaction log lost (the
  broker stopped, its __transaction_state partitions deleted, started again): the exporter
  reports it late and hanging, with the producer id, epoch and start offset `find-hanging`
  lists, and the broker's late gauge counts it.
Kafka's behaviour relied on: docs/kafka-semantics.md#real-clients.
"""

from __future__ import annotations

import signal
from pathlib import Path

from clienthelpers import (
    PollRecord,
    describe_transaction,
    kill9,
    list_transactions,
    rdkafka_producer,
    read_line,
    start_loop,
    wipe_transaction_log,
)
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    LATE_BACKDATE_MS,
    TRANSACTIONS_COMMAND,
    create_topic,
    find_hanging,
    jmx_late_transactions,
    unique,
)

from exporter.model import Classification

TRANSACTIONS = 300
PARTITIONS = 3


def test_librdkafka_transactions_back_to_back_get_no_false_verdicts(
    clients_kafka: RealKafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(clients_kafka, unique("rdk-loop"), partitions=PARTITIONS)
    txn_id = unique("rdk-loop-txn")
    running = start_loop(clients_kafka, [topic])
    try:
        child = rdkafka_producer(
            "loop", clients_kafka.bootstrap, topic, txn_id, str(TRANSACTIONS), str(PARTITIONS),
            log=tmp_path / "producer.log",
        )  # fmt: skip
        assert read_line(child, "DONE", 180, tmp_path / "producer.log") == f"DONE {TRANSACTIONS}"
        assert child.wait(30) == 0
        running.loop.wait_for("no open transaction left", lambda r: not r.verdicts, 30)
    finally:
        running.stop()
    loop = running.loop
    assert loop.false_verdicts() == []
    seen = [v for r in loop.records for v in r.verdicts]
    # Every open transaction the exporter saw was this producer's, under its id.
    assert seen, "no transaction was ever seen open"
    assert {v.transactional_id for v in seen} <= {txn_id, None}
    assert list_transactions(clients_kafka)[txn_id].state == "CompleteCommit"


def _tracked_open(txn_id: str, topic: str):  # type: ignore[no-untyped-def]
    def check(record: PollRecord) -> bool:
        return any(
            v.topic == topic and v.transactional_id == txn_id and v.tracked is True
            and v.late is None and not v.orphaned
            for v in record.verdicts
        )  # fmt: skip

    return check


def test_a_killed_librdkafka_producer_is_tracked_until_its_coordinator_aborts_it(
    clients_kafka: RealKafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(clients_kafka, unique("rdk-kill"))
    txn_id = unique("rdk-kill-txn")
    timeout_ms = 15_000
    running = start_loop(clients_kafka, [topic])
    try:
        log = tmp_path / "producer.log"
        child = rdkafka_producer(
            "open", clients_kafka.bootstrap, topic, txn_id, str(timeout_ms), "0", log=log
        )
        read_line(child, "OPEN", 90, log)
        kill9(child)
        running.loop.phase = "producer killed"
        running.loop.wait_for("the open transaction, tracked", _tracked_open(txn_id, topic), 30)
        described = describe_transaction(clients_kafka, txn_id)
        assert described["TransactionState"] == "Ongoing", described
        assert f"{topic}-0" in described["TopicPartitions"], described

        # A clean broker restart while the transaction is open: its coordinator reloads it.
        running.loop.phase = "broker restart"
        clients_kafka.kill(1, signal.SIGTERM)
        clients_kafka.restart(1)
        running.loop.phase = "after restart"
        running.loop.wait_for(
            "the coordinator's abort", lambda r: r.observation.brokers[0].up and not r.verdicts,
            timeout_ms / 1000 + 90,
        )  # fmt: skip
    finally:
        running.stop()
    loop = running.loop
    assert loop.false_verdicts() == []
    assert list_transactions(clients_kafka)[txn_id].state == "CompleteAbort"
    # While open, the exporter saw one transaction, under its id, tracked. Untracked only on
    # the last poll that saw it open: the coordinator completed the abort (the description
    # lists no partition) between the poll's DescribeProducers and its DescribeTransactions,
    # and the next poll saw the marker. One untracked poll makes nothing orphaned (above).
    seen = {(v.producer_id, v.start_offset, v.transactional_id, v.tracked)
            for r in loop.records for v in r.verdicts}  # fmt: skip
    assert {s[2] for s in seen} <= {txn_id, None}
    tracked = [v.tracked for r in loop.records for v in r.verdicts]
    assert True in tracked and False not in tracked[:-1], seen


def test_a_killed_librdkafka_producer_whose_transaction_log_is_lost_is_hanging(
    clients_kafka: RealKafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(clients_kafka, unique("rdk-lost"))
    txn_id = unique("rdk-lost-txn")
    running = start_loop(clients_kafka, [topic])
    try:
        log = tmp_path / "producer.log"
        # Its timeout at the broker's maximum (15 min), its one record stamped older than the
        # broker's lateness rule: late, but its coordinator tracks it.
        child = rdkafka_producer(
            "open", clients_kafka.bootstrap, topic, txn_id, "900000", str(LATE_BACKDATE_MS),
            log=log,
        )  # fmt: skip
        read_line(child, "OPEN", 90, log)
        kill9(child)
        running.loop.phase = "producer killed"
        tracked = running.loop.wait_for(
            "late, coordinator-tracked",
            lambda r: any(v.topic == topic and v.late is Classification.COORDINATOR_TRACKED
                          and v.transactional_id == txn_id for v in r.verdicts),
            30,
        )  # fmt: skip
        assert [r for r in find_hanging(clients_kafka) if r.topic == topic] == []

        running.loop.phase = "transaction log lost"
        clients_kafka.kill(1, signal.SIGTERM)
        assert wipe_transaction_log(clients_kafka) > 0
        clients_kafka.restart(1)
        running.loop.phase = "after restart"
        hanging = running.loop.wait_for(
            "late, hanging",
            lambda r: any(v.topic == topic and v.late is Classification.HANGING
                          for v in r.verdicts),
            90,
        )  # fmt: skip
    finally:
        running.stop()
    (before,) = [v for v in tracked.verdicts if v.topic == topic]
    (after,) = [v for v in hanging.verdicts if v.topic == topic]
    # The same transaction; its coordinator no longer knows its id.
    assert (after.producer_id, after.producer_epoch, after.start_offset) == (
        before.producer_id, before.producer_epoch, before.start_offset
    )  # fmt: skip
    assert after.transactional_id is None
    assert txn_id not in list_transactions(clients_kafka)
    rows = [r for r in find_hanging(clients_kafka) if r.topic == topic]
    assert [(r.partition, r.producer_id, r.producer_epoch, r.start_offset) for r in rows] == [
        (0, after.producer_id, after.producer_epoch, after.start_offset)
    ]
    assert jmx_late_transactions(clients_kafka) >= 1
    # No poll called it orphaned or hanging while its coordinator tracked it.
    assert [
        (r.phase, v) for r in running.loop.records for v in r.verdicts
        if v.tracked is True and (v.orphaned or v.late is Classification.HANGING)
    ] == []  # fmt: skip
    # Ended with Kafka's own tool, so later tests on this broker see no late transaction.
    result = clients_kafka.tool(
        TRANSACTIONS_COMMAND, "--bootstrap-server", clients_kafka.bootstrap, "abort",
        "--topic", topic, "--partition", "0", "--start-offset", str(after.start_offset),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
