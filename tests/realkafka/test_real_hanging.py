"""A hanging transaction on a real broker: the exporter's verdict against Kafka's own
`kafka-transactions.sh find-hanging` and the broker's PartitionsWithLateTransactionsCount gauge
(docs/kafka-semantics.md#find-hanging)."""

from __future__ import annotations

from kafka_sim.producer import hanging_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    LATE_BACKDATE_MS,
    create_topic,
    find_hanging,
    jmx_late_transactions,
    poll_env,
    unique,
)

from exporter.model import Classification


def test_a_late_hanging_transaction_is_what_find_hanging_and_the_broker_gauge_say(
    real_kafka: RealKafkaCluster,
) -> None:
    topic = create_topic(real_kafka, unique("hang"), partitions=3)
    producer_id, epoch, start_offset = hanging_transaction(
        real_kafka.bootstrap, unique("hang-txn"), topic, 1, backdate_ms=LATE_BACKDATE_MS
    )
    with poll_env(real_kafka) as env:
        _, snapshot = env.poll()

    late = [t for t in snapshot.late_transactions if t.transaction.topic == topic]
    assert len(late) == 1
    (found,) = late
    assert found.classification is Classification.HANGING
    assert (found.transaction.partition, found.transaction.producer_id) == (1, producer_id)
    assert (found.transaction.producer_epoch, found.transaction.current_txn_start_offset) == (
        epoch,
        start_offset,
    )
    assert found.age_seconds >= LATE_BACKDATE_MS / 1000

    oracle = [row for row in find_hanging(real_kafka) if row.topic == topic]
    assert [(r.partition, r.producer_id, r.producer_epoch, r.start_offset) for r in oracle] == [
        (1, producer_id, epoch, start_offset)
    ]
    (broker,) = snapshot.brokers
    assert broker.partitions_with_late_transactions == jmx_late_transactions(real_kafka)
    assert broker.partitions_with_hanging_transactions == broker.partitions_with_late_transactions
