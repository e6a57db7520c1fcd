"""`idempotent_producer_write_all` on a real broker: one short-lived idempotent
producer, one InitProducerId and one Produce carrying a batch for several partitions, leaves a
producer state of its own (sequence 0) on each of them and on no other partition. The real-broker
producer-states benchmark seeds a million states this way, so what it seeds is checked here."""

from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka_sim.client import VersionRange
from kafka_sim.producer import idempotent_producer_write_all
from kafka_sim.realkafka import RealKafkaCluster
from kafka_sim.routing import RawCluster
from realhelpers import create_topic, unique

PRODUCERS = 3
WRITTEN = [0, 1, 2]
PARTITIONS = 4


def test_each_short_lived_producer_leaves_one_state_on_every_partition_it_wrote(
    real_kafka: RealKafkaCluster,
) -> None:
    topic = create_topic(real_kafka, unique("seed-many"), partitions=PARTITIONS)
    raw = RawCluster(real_kafka.bootstrap, "seed-many-test", 60.0)
    try:
        producer_ids = [
            idempotent_producer_write_all(raw, topic, WRITTEN, timeout_s=60.0)
            for _ in range(PRODUCERS)
        ]
        leader = raw.leader_client(topic, 0)  # one broker: it leads every partition
        version = leader.api_version(DescribeProducersRequest.API_KEY, VersionRange(0, 0))
        answer = leader.request(
            DescribeProducersRequest[version](
                topics=[
                    DescribeProducersRequest.TopicRequest(
                        name=topic, partition_indexes=list(range(PARTITIONS))
                    )
                ]
            )
        )
    finally:
        raw.close()
    assert len(set(producer_ids)) == PRODUCERS
    states = {
        p.partition_index: sorted((s.producer_id, s.last_sequence) for s in p.active_producers)
        for t in answer.topics
        for p in t.partitions
        if p.error_code == 0
    }
    expected = sorted((pid, 0) for pid in producer_ids)
    assert states == {**{p: expected for p in WRITTEN}, 3: []}
