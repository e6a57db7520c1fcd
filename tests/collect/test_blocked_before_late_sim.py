"""Blocked before late, end to end against the simulator
(docs/kafka-semantics.md#blocked-before-late).

On `bbl` partition 0 a transaction with a 50 min timeout stays open (tracked by its coordinator,
not late: a Flink sink's lingering transaction, its transactional id Flink-shaped), with
committed records before and after it; on partition 1 a hanging transaction (the coordinator
never heard of it) likewise. A read_committed group stops at each LSO. Requests are counted where
the brokers see them: while no transaction is `blocked_groups_min_age_seconds` old, no group
request is sent; once they are, the groups they block are read and reported with the blocking
transaction's classification (coordinator_tracked = lingering, then orphaned for the hanging one)
and application, and they go once the transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.consumer import READ_COMMITTED, READ_UNCOMMITTED, consume_and_commit
from kafka_sim.producer import committed_transaction, hanging_transaction, open_transaction
from simhelpers import poll_env
from test_blocked_groups_sim import RequestLog, exposed

from exporter.model import Classification, ClusterSnapshot

TOPIC = "bbl"
MIN_AGE_SECONDS = 120.0
LINGERING_TIMEOUT_MS = 3_000_000  # 50 min, as Flink users set it
BROKER_CONFIG = {
    "transaction.max.timeout.ms": "3600000",
    "transaction.partition.verification.enable": "false",  # so a hanging one can be made
}
LINGERING_ID = "clicks-sink-0-7"  # Flink KafkaSink: <prefix>-<subtask>-<checkpoint>


def blocking_by_partition(snap: ClusterSnapshot) -> dict[int, tuple[str, list[str], str, str]]:
    return {
        b.transaction.partition: (
            str(b.classification), [g.group_id for g in b.blocked_groups], b.application,
            b.transactional_id,
        )
        for b in snap.blocking_transactions
    }


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, topics={TOPIC: 2}, broker_config=BROKER_CONFIG) as sim:
        yield sim


def test_groups_behind_a_lingering_transaction_are_read_only_past_the_minimum_age(
    sim: SimCluster,
) -> None:
    b = sim.bootstrap_servers
    clock = sim.clock.now_ms
    committed_transaction(b, "bbl-before", TOPIC, {0: 3, 1: 3})
    lingering = open_transaction(b, LINGERING_ID, TOPIC, [0], records=2,
                                 transaction_timeout_ms=LINGERING_TIMEOUT_MS, now_ms=clock)
    hanging_transaction(b, "bbl-hang", TOPIC, 1, now_ms=clock)
    committed_transaction(b, "bbl-after", TOPIC, {0: 2, 1: 2})
    for partition in (0, 1):
        stopped = consume_and_commit(b, f"rc-{partition}", TOPIC, partition,
                                     isolation_level=READ_COMMITTED)
        # 3 records and the commit marker: the open transaction's first offset is 4 (the LSO).
        assert stopped.committed_offset == stopped.end_offset == 4
    consume_and_commit(b, "ru-0", TOPIC, 0, isolation_level=READ_UNCOMMITTED)
    log = RequestLog(sim)
    try:
        with poll_env(sim, "bbl", blocked_groups_min_age_seconds=MIN_AGE_SECONDS) as env:
            # Young: the poll reads no consumer group at all.
            obs, snap = env.poll()
            assert len(obs.open_transactions) == 2
            assert obs.consumer_groups is None and log.group_requests() == 0
            assert snap.blocking_transactions == () and snap.late_transactions == ()

            sim.clock.advance(int(MIN_AGE_SECONDS * 1000) + 1_000)
            obs, snap = env.poll()
            assert log.group_requests() > 0
            assert snap.late_transactions == ()  # neither is late: 50 min / 60 min timeouts
            assert blocking_by_partition(snap) == {
                0: ("coordinator_tracked", ["rc-0"], "clicks-sink", LINGERING_ID),
                # One "not tracked" answer is not yet evidence: unknown, never hanging.
                1: ("unknown", ["rc-1"], "", "bbl-hang"),
            }
            series = exposed(env.settings, snap)
            assert sorted(
                (s["group"], s["classification"], s["application"], s["transactional_id"])
                for s in series["kafka_consumer_group_blocked_seconds"]
            ) == [("rc-0", "coordinator_tracked", "clicks-sink", LINGERING_ID),
                  ("rc-1", "unknown", "", "bbl-hang")]

            obs, snap = env.poll()  # the hanging one's second "not tracked": orphaned
            assert blocking_by_partition(snap)[1][0] == str(Classification.ORPHANED)
            assert blocking_by_partition(snap)[0][0] == "coordinator_tracked"
            assert [o.transaction.partition for o in snap.orphaned_transactions] == [1]

            lingering.commit()
            committed_transaction(b, "bbl-after-2", TOPIC, {0: 1})
            obs, snap = env.poll()
            assert 0 not in blocking_by_partition(snap)  # ended: nothing blocks there
    finally:
        lingering.close_quietly()


def test_nothing_is_read_while_every_open_transaction_is_younger_than_the_minimum_age(
    sim: SimCluster,
) -> None:
    """The cost promise: open transactions below the age, a group at their LSO, many polls:
    not one ListGroups, FindCoordinator(group), OffsetFetch or DescribeCluster."""
    b = sim.bootstrap_servers
    clock = sim.clock.now_ms
    committed_transaction(b, "young-before", TOPIC, {0: 2})
    young = open_transaction(b, "young-0-1", TOPIC, [0, 1],
                             transaction_timeout_ms=LINGERING_TIMEOUT_MS, now_ms=clock)
    committed_transaction(b, "young-after", TOPIC, {0: 2})
    consume_and_commit(b, "rc-young", TOPIC, 0, isolation_level=READ_COMMITTED)
    log = RequestLog(sim)
    try:
        with poll_env(sim, "young", blocked_groups_min_age_seconds=MIN_AGE_SECONDS) as env:
            for _ in range(4):
                sim.clock.advance(25_000)  # 100 s in all: still below 120 s
                obs, snap = env.poll()
                assert len(obs.open_transactions) == 2
                assert obs.consumer_groups is None
                assert snap.blocking_transactions == ()
            assert log.group_requests() == 0
    finally:
        young.close_quietly()
