"""Healthy transactional traffic on a real broker never looks orphaned, late or hanging
(docs/kafka-semantics.md#orphaned): real producers commit, abort, hold transactions open for
seconds over several partitions, and abandon some for the coordinator to abort on timeout, while
the exporter polls every second. Every transaction the exporter reports on the churn topic would
be a false alarm."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka import KafkaProducer
from kafka_sim.producer import aborted_transaction, committed_transaction, open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import create_topic, poll_env, unique
from realtools import TRANSACTIONS_COMMAND

from exporter.model import TopicPartition

CHURN_SECONDS = 32.0
POLL_INTERVAL_SECONDS = 1.0
PARTITIONS = 3
SHORT_TIMEOUT_MS = 3000
"""transaction.timeout.ms of the abandoned transactions: the coordinator aborts them once it
has expired, on its next scan (transaction.abort.timed.out.transaction.cleanup.interval.ms,
10 s by default)."""
ABANDON_AT_SECONDS = (0.0, 8.0)


@dataclass
class Worker:
    """One producer looping until told to stop; what it did, and what went wrong."""

    name: str
    step: Callable[[int], None]
    done: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step(self.done)
            except BaseException as exc:  # reported by the test, not lost in the thread
                self.errors.append(exc)
                return
            self.done += 1


def _python_producer(bootstrap: str, topic: str, stop: threading.Event) -> Callable[[int], None]:
    """kafka-python's transactional producer: one transaction across every partition, held
    about a second, then committed."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=unique("churn-kp"), request_timeout_ms=15000
    )
    producer.init_transactions()

    def step(n: int) -> None:
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            producer.send(topic, value=f"kp {n}".encode(), partition=partition)
        producer.flush()
        stop.wait(1.0)
        producer.commit_transaction()
        if stop.is_set():
            producer.close()

    return step


def _coordinator_states(cluster: RealKafkaCluster) -> dict[str, str]:
    """transactional id -> the coordinator's state (`kafka-transactions.sh list`)."""
    result = cluster.tool(TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap, "list")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    columns = lines[0].split()
    states = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) == len(columns):
            states[fields[columns.index("TransactionalId")]] = fields[
                columns.index("TransactionState")
            ]
    return states


def test_churn_of_real_transactions_reports_nothing_orphaned_late_or_hanging(
    real_kafka: RealKafkaCluster,
) -> None:
    bootstrap = real_kafka.bootstrap
    topic = create_topic(real_kafka, unique("churn"), partitions=PARTITIONS)
    stop = threading.Event()
    committed_id, aborted_id, held_id = (unique(n) for n in ("churn-c", "churn-a", "churn-h"))

    def committed(_: int) -> None:
        committed_transaction(bootstrap, committed_id, topic, {0: 2, 1: 2, 2: 1})
        stop.wait(0.3)

    def aborted(_: int) -> None:
        aborted_transaction(bootstrap, aborted_id, topic, {1: 1, 2: 2})
        stop.wait(0.3)

    def held(n: int) -> None:
        txn = open_transaction(bootstrap, held_id, topic, [0, 2], transaction_timeout_ms=60000)
        txn.send(topic, 1)
        stop.wait(2.5)
        if n % 2 == 0:
            txn.commit()
        else:
            txn.abort()

    workers = [
        Worker("committed", committed),
        Worker("aborted", aborted),
        Worker("held", held),
        Worker("kafka-python", _python_producer(bootstrap, topic, stop)),
    ]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    abandoned: list[tuple[str, int]] = []  # (transactional id, producer id)
    reported: list[str] = []
    open_polls = 0
    seen_open: set[int] = set()
    still_open: set[int] = set()
    open_keys: set[tuple[str, int, int, int, int]] = set()
    asked = 0  # open on two polls in a row: the exporter asked their coordinator
    unknown: list[str] = []
    started = time.monotonic()
    with poll_env(real_kafka, poll_interval_seconds=POLL_INTERVAL_SECONDS) as env:
        for thread in threads:
            thread.start()
        try:
            while time.monotonic() - started < CHURN_SECONDS:
                elapsed = time.monotonic() - started
                if len(abandoned) < len(ABANDON_AT_SECONDS) and (
                    elapsed >= ABANDON_AT_SECONDS[len(abandoned)]
                ):
                    # A producer that dies mid-transaction: never ended, its connection dropped.
                    tid = unique("churn-abandoned")
                    txn = open_transaction(
                        bootstrap, tid, topic, [1, 2], transaction_timeout_ms=SHORT_TIMEOUT_MS
                    )
                    abandoned.append((tid, txn.producer_id))
                    txn.abandon()
                poll_started = time.monotonic()
                observation, snapshot = env.poll()
                mine = [t for t in observation.open_transactions if t.topic == topic]
                open_polls += bool(mine)
                still_open = {t.producer_id for t in mine}
                keys = {t.key for t in mine}
                asked += len(keys & open_keys)
                open_keys = keys
                assert observation.coordinator_view_complete
                unknown += [str(key) for key in observation.untracked_unknown if key in keys]
                seen_open |= still_open
                reported += [
                    f"late {t.transaction.key} {t.classification}"
                    for t in snapshot.late_transactions
                    if t.transaction.topic == topic
                ]
                reported += [
                    f"orphaned {t.transaction.key} untracked {t.untracked_polls}"
                    for t in snapshot.orphaned_transactions
                    if t.transaction.topic == topic
                ]
                assert all(
                    TopicPartition(topic, p) not in observation.unobserved
                    for p in range(PARTITIONS)
                )
                time.sleep(max(0.0, POLL_INTERVAL_SECONDS - (time.monotonic() - poll_started)))
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
    polls = int(CHURN_SECONDS / POLL_INTERVAL_SECONDS)
    assert reported == []
    assert unknown == []
    assert [(w.name, w.errors) for w in workers if w.errors] == []
    assert all(w.done >= 2 for w in workers), [(w.name, w.done) for w in workers]
    # Not vacuous: the exporter saw transactions open on most polls, the abandoned ones too.
    assert open_polls >= polls // 2, (open_polls, polls)
    assert asked >= polls // 2, (asked, polls)
    abandoned_ids = {producer_id for _, producer_id in abandoned}
    assert abandoned_ids <= seen_open
    # The coordinator ended them (timed out, aborted): the exporter no longer sees them open.
    assert not abandoned_ids & still_open
    states = _coordinator_states(real_kafka)
    assert {tid: states.get(tid) for tid, _ in abandoned} == {
        tid: "CompleteAbort" for tid, _ in abandoned
    }
