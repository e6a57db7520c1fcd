"""Transaction version 2 in the simulator: a new epoch per transaction and, at epoch
exhaustion (32766), a new producer id; the exporter reports none of those transactions late,
hanging or orphaned (docs/kafka-semantics.md#transaction-version-2).

Kafka offers no way to start a real producer near the epoch limit, so exhaustion is shown here
on the simulator (whose coordinator follows `TransactionMetadata.isEpochExhausted` and
`prepareProducerIdRotation`); the per-transaction epoch bump itself is measured on real brokers
(tests/realkafka/test_real_two_phase.py)."""

from __future__ import annotations

from kafka_sim.cluster import SimCluster
from kafka_sim.producer import RawProducer
from simhelpers import poll_env

EXHAUSTED_EPOCH = 32766  # Short.MAX_VALUE - 1


def test_epoch_bumps_and_producer_id_rotation_never_look_orphaned() -> None:
    with SimCluster(brokers=1, topics={"t": 1}) as sim, poll_env(sim, "sim") as env:
        producer = RawProducer(sim.bootstrap_servers, "tv2-1", now_ms=sim.clock.now_ms)
        producer.init_producer_id()
        first_id = producer.producer_id
        # Start near the limit, as a producer that has run ~32,000 transactions would be.
        metadata = sim.state.coordinator.get("tv2-1")
        assert metadata is not None
        metadata.producer_epoch = producer.producer_epoch = EXHAUSTED_EPOCH - 2
        seen: list[tuple[int, int, int]] = []
        for _ in range(4):
            producer.add_partitions("t", [0])
            batch = producer.produce("t", 0, [(b"k", b"v", None)], transactional=True)
            # Two polls see it open with the same key: the coordinator is asked, and tracks it.
            for _ in range(2):
                observation, snapshot = env.poll()
                (txn,) = observation.open_transactions
                assert (txn.producer_id, txn.producer_epoch) == (
                    producer.producer_id, producer.producer_epoch)
                assert txn.current_txn_start_offset == batch.base_offset
                assert snapshot.late_transactions == ()
                assert snapshot.orphaned_transactions == ()
                assert [b.partitions_with_orphaned_transactions for b in snapshot.brokers] == [0]
            seen.append((producer.producer_id, producer.producer_epoch, batch.base_offset))
            producer.end_txn(True, transaction_version_2=True)
        producer.close()
        _, snapshot = env.poll()
        assert snapshot.late_transactions == () and snapshot.orphaned_transactions == ()

    # 32764 -> 32765 -> (exhausted at 32766) a new producer id at epoch 0 -> 1.
    assert [(pid == first_id, epoch) for pid, epoch, _ in seen] == [
        (True, EXHAUSTED_EPOCH - 2), (True, EXHAUSTED_EPOCH - 1), (True, EXHAUSTED_EPOCH),
        (False, 0),
    ]
    log = sim.state.partition("t", 0).log
    assert log.last_stable_offset == log.high_watermark
