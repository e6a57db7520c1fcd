"""ClusterPoller against the simulated cluster (kafka_sim) over TCP, with transactions made
through the wire protocol by simulator/kafka_sim/producer.py.

Semantics: docs/kafka-semantics.md. The simulator's brokers run with
transaction.max.timeout.ms=60000 and partition verification off (like the real-broker capture),
so a transaction is late after 60 s + late_buffer; tests move the simulator clock instead of
waiting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import committed_transaction, hanging_transaction, open_transaction
from simhelpers import (
    CAPTURE_BROKER_CONFIG,
    MINUTE_MS,
    PollEnv,
    cluster_settings,
    poll_env,
    poll_once,
)

from exporter.model import (
    Classification,
    StartTimeSource,
    TopicPartition,
)
from exporter.settings import SaslSettings

DESCRIBE_PRODUCERS = 61
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(
            sim,
            "sim",
            request_timeout_seconds=2.0,
            late_buffer_seconds=300.0,
            min_reported_duration_seconds=0.0,
        ) as env,
    ):
        yield env


def test_no_transactions(env: PollEnv) -> None:
    obs, snap = env.poll()
    assert obs.open_transactions == ()
    assert obs.unobserved == {}
    assert {TopicPartition("t", p) for p in range(3)} <= set(obs.leaders)
    assert [(b.broker_id, b.up, b.transaction_max_timeout_ms) for b in obs.brokers] == [
        (1, True, 60000),
        (2, True, 60000),
        (3, True, 60000),
    ]
    assert snap.up
    assert snap.cluster_max_active_transaction_duration_seconds == 0.0
    assert all(b.partitions_with_open_transactions == 0 for b in snap.brokers)


def test_short_committed_transactions_are_never_late(env: PollEnv) -> None:
    committed_transaction(env.bootstrap, "c-1", "t", [0, 1], now_ms=env.now_ms)
    committed_transaction(env.bootstrap, "c-2", "t", [2], now_ms=env.now_ms)
    env.sim.clock.advance(60 * MINUTE_MS)
    obs, snap = env.poll()
    assert obs.open_transactions == ()
    assert snap.late_transactions == ()
    assert obs.transaction_states == {"CompleteCommit": 2}


def test_hanging_transaction_every_label_right(env: PollEnv) -> None:
    pid, epoch, start_offset = hanging_transaction(
        env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
    )
    obs, snap = env.poll()
    (txn,) = obs.open_transactions
    assert (txn.topic, txn.partition, txn.leader_id) == ("t", 0, env.leader("t", 0))
    assert (txn.producer_id, txn.producer_epoch, txn.current_txn_start_offset) == (
        pid,
        epoch,
        start_offset,
    )
    assert txn.start_time_source is StartTimeSource.BATCH_TIMESTAMP
    assert obs.observed_at_ms - txn.start_time_ms >= 30 * MINUTE_MS
    assert obs.transactional_ids == {pid: "hang-1"}
    description = obs.descriptions["hang-1"]
    assert description is not None and description.state == "Empty"
    assert obs.last_stable_offset_lag == {TopicPartition("t", 0): 1}

    (late,) = snap.late_transactions
    assert late.classification is Classification.HANGING
    assert late.transactional_id == "hang-1"
    assert 30 * 60 <= late.age_seconds < 31 * 60
    leader = {b.broker_id: b for b in snap.brokers}[txn.leader_id]
    assert leader.partitions_with_open_transactions == 1
    assert leader.partitions_with_late_transactions == 1
    assert leader.partitions_with_hanging_transactions == 1
    assert sum(b.partitions_with_late_transactions for b in snap.brokers) == 1


def test_late_coordinator_tracked_transaction(env: PollEnv) -> None:
    # Markers blocked on the leader: EndTxn(commit) leaves PrepareCommit, partition stays open.
    leader = env.leader("t", 1)
    txn = open_transaction(env.bootstrap, "tracked-1", "t", [1], now_ms=env.now_ms)
    env.sim.block_markers(leader, True)
    txn.commit(wait_for_markers=False)
    env.sim.clock.advance(10 * MINUTE_MS)
    obs, snap = env.poll()
    (late,) = snap.late_transactions
    assert late.transaction.producer_id == txn.producer_id
    assert late.classification is Classification.COORDINATOR_TRACKED
    assert late.transactional_id == "tracked-1"
    description = obs.descriptions["tracked-1"]
    assert description is not None and description.state == "PrepareCommit"
    assert TopicPartition("t", 1) in description.topic_partitions
    summary = {b.broker_id: b for b in snap.brokers}[leader]
    assert summary.partitions_with_late_transactions == 1
    assert summary.partitions_with_hanging_transactions == 0


def test_two_open_transactions_on_one_partition_oldest_wins(env: PollEnv) -> None:
    older = open_transaction(env.bootstrap, "old-1", "t", [2], now_ms=env.now_ms)
    env.sim.clock.advance(30_000)
    younger = open_transaction(env.bootstrap, "young-1", "t", [2], now_ms=env.now_ms)
    try:
        obs, snap = env.poll()
        assert {t.producer_id for t in obs.open_transactions} == {
            older.producer_id,
            younger.producer_id,
        }
        age = snap.max_active_transaction_duration_seconds[TopicPartition("t", 2)]
        assert 30 <= age < 40
        assert snap.cluster_max_active_transaction_duration_seconds == age
    finally:
        older.abort()
        younger.abort()


def test_broker_down_partitions_unobserved_rest_intact(env: PollEnv) -> None:
    down = env.leader("t", 1)
    other = env.leader("t", 0)
    assert down != other
    hanging_transaction(
        env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
    )
    env.poll()
    env.sim.stop_broker(down)
    obs, snap = env.poll()
    status = {b.broker_id: b for b in obs.brokers}
    assert not status[down].up
    assert all(b.up for b in obs.brokers if b.broker_id != down)
    assert TopicPartition("t", 1) in obs.unobserved
    assert TopicPartition("t", 0) not in obs.unobserved
    assert [(t.topic, t.partition) for t in obs.open_transactions] == [("t", 0)]
    assert snap.unobserved_partitions >= 1
    assert {b.broker_id: b.up for b in snap.brokers}[down] is False


def test_leadership_moved_between_metadata_and_describe_producers(env: PollEnv) -> None:
    old = env.leader("t", 0)
    new = next(b for b in env.sim.node_ids if b != old)
    pid, _, _ = hanging_transaction(
        env.bootstrap, "hang-1", "t", 0, backdate_ms=MINUTE_MS, now_ms=env.now_ms
    )
    env.poll()  # connections and metadata warm
    state: Any = env.sim.state
    router: Any = env.sim.router
    original = router.handle
    moved: list[bool] = []

    def handle(ctx: Any, request: Any) -> Any:
        # Right when the old leader receives DescribeProducers, the leadership moves away.
        if ctx.api_key == DESCRIBE_PRODUCERS and ctx.broker_id == old and not moved:
            moved.append(True)
            state.move_partition_leader("t", 0, new)
            state.inject_error(
                DESCRIBE_PRODUCERS,
                NOT_LEADER_OR_FOLLOWER,
                broker_id=old,
                topic="t",
                partition=0,
                count=1,
            )
        return original(ctx, request)

    env.sim.call(setattr, router, "handle", handle)
    try:
        obs, _ = env.poll()
    finally:
        env.sim.call(delattr, router, "handle")
    assert moved
    assert TopicPartition("t", 0) not in obs.unobserved
    (txn,) = obs.open_transactions
    assert (txn.producer_id, txn.leader_id) == (pid, new)
    assert obs.leaders[TopicPartition("t", 0)] == new
    assert any(
        (e.broker_id, e.api, e.error) == (old, "DescribeProducers", "NOT_LEADER_OR_FOLLOWER")
        for e in obs.request_errors
    )


def test_moved_coordinator_is_looked_up_again(env: PollEnv) -> None:
    hanging_transaction(
        env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
    )
    obs, _ = env.poll()
    assert obs.descriptions["hang-1"] is not None
    coordinator = env.sim.call(
        lambda: env.sim.state.txn_state_partition_leader(
            env.sim.state.coordinator.partition_for("hang-1")
        )
    )
    old = coordinator[0]
    new = next(b for b in env.sim.node_ids if b != old)
    env.sim.move_transaction_coordinator("hang-1", new)
    obs, snap = env.poll()
    assert obs.descriptions["hang-1"] is not None
    assert obs.coordinator_view_complete
    assert (old, "DescribeTransactions", "NOT_COORDINATOR") in {
        (e.broker_id, e.api, e.error) for e in obs.request_errors
    }
    assert snap.late_transactions[0].classification is Classification.HANGING


def test_unauthorised_topic_is_unobserved_and_counted(env: PollEnv) -> None:
    env.sim.create_topic("secret", 2)
    env.sim.deny_topic("User:ANONYMOUS", "secret", "READ")
    obs, snap = env.poll()
    assert {tp: why for tp, why in obs.unobserved.items() if tp.topic == "secret"} == {
        TopicPartition("secret", 0): "TOPIC_AUTHORIZATION_FAILED",
        TopicPartition("secret", 1): "TOPIC_AUTHORIZATION_FAILED",
    }
    assert sum(1 for e in obs.request_errors if e.error == "TOPIC_AUTHORIZATION_FAILED") == 2
    assert snap.unobserved_partitions == 2
    assert all(b.up for b in obs.brokers)


def test_poll_over_sasl_scram() -> None:
    users = {"exporter": "exporter-secret"}
    with SimCluster(
        brokers=2, topics={"t": 2}, broker_config=CAPTURE_BROKER_CONFIG, sasl_users=users
    ) as sim:
        settings = cluster_settings(
            sim,
            "sasl",
            sasl=SaslSettings("SCRAM-SHA-256", "exporter", "exporter-secret"),
            request_timeout_seconds=2.0,
        )
        obs = poll_once(sim, settings)
    assert [(b.broker_id, b.up) for b in obs.brokers] == [(1, True), (2, True)]
    assert obs.unobserved == {}
    assert obs.request_errors == ()


def test_wrong_sasl_password_marks_brokers_down_without_crashing() -> None:
    with SimCluster(
        brokers=1, topics={"t": 1}, broker_config=CAPTURE_BROKER_CONFIG, sasl_users={"u": "right"}
    ) as sim:
        settings = cluster_settings(
            sim, "sasl", sasl=SaslSettings("PLAIN", "u", "wrong"), request_timeout_seconds=2.0
        )
        obs = poll_once(sim, settings)
    assert obs.brokers == ()
    assert [(e.api, e.error) for e in obs.request_errors] == [("Metadata", "AUTHENTICATION_FAILED")]
