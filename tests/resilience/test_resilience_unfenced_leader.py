"""A leader killed with `kill -9` stays the leader in Metadata until the controller fences it
(docs/kafka-semantics.md#faults), as the real 3-broker cluster showed
(tests/realkafka/test_real_faults.py): meanwhile its partitions cannot be observed. The
simulator reproduces that window (`stop_broker(fenced=False)`, then `fence_broker`), so the
exporter's answer to it is checked here in milliseconds: absent counts and the reason counted,
never "no late transaction"; then the new leader's late=1 hanging=1, and full recovery on the
first poll after the broker is back.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from simhelpers import poll_env

from exporter.model import Classification, ClusterSnapshot, TopicPartition

BROKER_CONFIG = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
    # As the real cluster: the coordinator fails over with its __transaction_state partition.
    "transaction.state.log.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
}


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, broker_config=BROKER_CONFIG) as cluster:
        cluster.create_topic("r", 3, replication_factor=3)
        hanging_transaction(cluster.bootstrap_servers, "unfenced", "r", 0, backdate_ms=400_000)
        yield cluster


def counts(snap: ClusterSnapshot) -> dict[int, tuple[bool, int | None, int | None]]:
    """broker -> (up, late, hanging) as the snapshot shows them."""
    return {
        b.broker_id: (
            b.up,
            b.partitions_with_late_transactions,
            b.partitions_with_hanging_transactions,
        )
        for b in snap.brokers
    }


def test_a_killed_leader_not_yet_fenced_leaves_its_counts_absent_never_zero(
    sim: SimCluster,
) -> None:
    leader = int(sim.call(lambda: sim.state.partition("r", 0).leader_id))
    others = [b for b in (1, 2, 3) if b != leader]
    with poll_env(sim, "unfenced") as env:
        _, before = env.poll()
        assert [lt.transaction.leader_id for lt in before.late_transactions] == [leader]

        sim.stop_broker(leader, fenced=False)
        obs, snap = env.poll()
        assert obs.leaders[TopicPartition("r", 0)] == leader  # still named leader: not fenced yet
        assert snap.late_transactions == ()
        assert counts(snap) == {leader: (False, None, None)} | {b: (True, 0, 0) for b in others}
        assert snap.unobserved_by_reason.get("broker_down", 0) >= 1
        assert snap.cluster_max_active_transaction_duration_seconds is None
        assert any(e.broker_id == leader for e in snap.request_errors)

        sim.fence_broker(leader)
        _, snap = env.poll()
        (found,) = snap.late_transactions
        new_leader = found.transaction.leader_id
        assert new_leader in others and found.classification is Classification.HANGING
        assert counts(snap)[new_leader] == (True, 1, 1)
        assert counts(snap)[leader] == (False, None, None)
        assert snap.unobserved_partitions == 0

        sim.start_broker(leader)
        _, snap = env.poll()
        assert counts(snap) == {new_leader: (True, 1, 1)} | {
            b: (True, 0, 0) for b in (1, 2, 3) if b != new_leader
        }
        assert snap.unobserved_partitions == 0
