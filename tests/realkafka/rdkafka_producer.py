"""A librdkafka transactional producer (confluent-kafka), run as a child process by the
real-broker tests and the client soak, so that it can be killed with SIGKILL mid-transaction.

    python rdkafka_producer.py loop BOOTSTRAP TOPIC TXN_ID COUNT PARTITIONS
        COUNT transactions back to back, each writing one record to every partition
        0..PARTITIONS-1 and committed; prints "DONE <count>".
    python rdkafka_producer.py open BOOTSTRAP TOPIC TXN_ID TIMEOUT_MS BACKDATE_MS
        One transaction (transaction.timeout.ms TIMEOUT_MS): one record to partition 0 stamped
        BACKDATE_MS in the past, flushed; prints "OPEN" and waits, the transaction open, until
        it is killed.

Each line printed is flushed at once: the parent reads them as the child's progress.
"""

from __future__ import annotations

import sys
import threading
import time

from confluent_kafka import KafkaException, Producer


def _producer(bootstrap: str, transactional_id: str, timeout_ms: int) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": min(timeout_ms, 60000),
        }
    )
    producer.init_transactions(60)
    return producer


def _anew(bootstrap: str, transactional_id: str) -> Producer:
    """A new producer for the id (fencing the old one), asked again while the broker is away."""
    while True:
        try:
            return _producer(bootstrap, transactional_id, 60000)
        except KafkaException:
            time.sleep(1)


def loop(bootstrap: str, topic: str, transactional_id: str, count: int, partitions: int) -> None:
    """As an application does: a transaction that fails is aborted (or, when the producer is
    fenced or broken, the producer made anew) and the next one begins; the broker may restart
    meanwhile. Prints "DONE <committed>"."""
    producer = _producer(bootstrap, transactional_id, 60000)
    committed = 0
    for n in range(count):
        try:
            producer.begin_transaction()
            for partition in range(partitions):
                producer.produce(
                    topic, value=f"{transactional_id}:{n}".encode(), partition=partition
                )
            producer.commit_transaction(60)
            committed += 1
        except KafkaException as exc:
            try:
                if not exc.args[0].txn_requires_abort():
                    raise
                producer.abort_transaction(60)
            except KafkaException:
                producer = _anew(bootstrap, transactional_id)
    print(f"DONE {committed}", flush=True)


def open_and_wait(
    bootstrap: str, topic: str, transactional_id: str, timeout_ms: int, backdate_ms: int
) -> None:
    producer = _producer(bootstrap, transactional_id, timeout_ms)
    producer.begin_transaction()
    stamp_ms = int(time.time() * 1000) - backdate_ms
    producer.produce(topic, value=b"open", partition=0, timestamp=stamp_ms)
    remaining = producer.flush(60)
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    print("OPEN", flush=True)
    threading.Event().wait()


def main(argv: list[str]) -> None:
    mode, bootstrap, topic, transactional_id, *rest = argv
    if mode == "loop":
        loop(bootstrap, topic, transactional_id, int(rest[0]), int(rest[1]))
    elif mode == "open":
        open_and_wait(bootstrap, topic, transactional_id, int(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
