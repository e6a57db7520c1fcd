"""A poll reuses the previous poll's Metadata answer unless something says it changed: a
leader error, a broker that failed, a partition without a leader, or the answer's age
(`metadata_max_age_seconds`). Checked on the simulated cluster by counting the Metadata
requests its brokers receive, with the verdicts of each poll.

Semantics: docs/kafka-semantics.md#metadata-between-polls."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, PollEnv, poll_env
from waits import wait_for

from exporter.collect.metadata_age import MetadataRefresh
from exporter.expose.collector import SnapshotCollector
from exporter.model import Classification, TopicPartition
from exporter.snapshots import SnapshotStore

METADATA = 3


class ApiLog:
    """Counts the requests the simulated brokers answer, by API key."""

    def __init__(self, sim: SimCluster) -> None:
        self.counts: Counter[int] = Counter()
        router: Any = sim.router
        handle = router.handle

        def counting(ctx: Any, request: Any) -> Any:
            self.counts[ctx.api_key] += 1
            return handle(ctx, request)

        sim.call(setattr, router, "handle", counting)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        sim.create_topic("r", 3, replication_factor=3)
        yield sim


def _env(sim: SimCluster, **settings: Any) -> Any:
    return poll_env(
        sim, "reuse", request_timeout_seconds=2.0, late_buffer_seconds=300.0,
        min_reported_duration_seconds=0.0, **settings,
    )


def _refreshes(env: PollEnv) -> dict[MetadataRefresh, int]:
    return dict(env.poller.poller.metadata_refreshes)


def _hanging(env: PollEnv, topic: str, partition: int) -> set[tuple[str, int, int]]:
    """(topic, partition, leader) of the hanging late transactions of one poll."""
    _, snap = env.poll()
    return {
        (late.transaction.topic, late.transaction.partition, late.transaction.leader_id)
        for late in snap.late_transactions
        if late.classification is Classification.HANGING
        and (late.transaction.topic, late.transaction.partition) == (topic, partition)
    }


def test_standing_still_later_polls_send_no_metadata(sim: SimCluster) -> None:
    with _env(sim) as env:
        hanging_transaction(
            env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        log = ApiLog(sim)
        leader = env.leader("t", 0)
        assert _hanging(env, "t", 0) == {("t", 0, leader)}
        first = log.counts[METADATA]
        assert first == 1
        for _ in range(3):
            assert _hanging(env, "t", 0) == {("t", 0, leader)}
        assert log.counts[METADATA] == first
        assert _refreshes(env) == {MetadataRefresh.START: 1}


def test_max_age_zero_asks_metadata_every_poll(sim: SimCluster) -> None:
    with _env(sim, metadata_max_age_seconds=0.0) as env:
        log = ApiLog(sim)
        for _ in range(3):
            env.poll()
        assert log.counts[METADATA] == 3


def test_moved_leader_keeps_the_hanging_transaction_and_refreshes_metadata(
    sim: SimCluster,
) -> None:
    with _env(sim) as env:
        hanging_transaction(
            env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        old = env.leader("t", 0)
        new = next(b for b in sim.node_ids if b != old)
        assert _hanging(env, "t", 0) == {("t", 0, old)}
        assert _hanging(env, "t", 0) == {("t", 0, old)}
        log = ApiLog(sim)
        sim.move_partition_leader("t", 0, new)
        # The same poll: the old leader's error re-routes the partition.
        obs, snap = env.poll()
        assert TopicPartition("t", 0) not in obs.unobserved
        assert {
            (late.transaction.partition, late.transaction.leader_id)
            for late in snap.late_transactions
            if late.classification is Classification.HANGING
        } == {(0, new)}
        assert (old, "DescribeProducers", "NOT_LEADER_OR_FOLLOWER") in {
            (e.broker_id, e.api, e.error) for e in obs.request_errors
        }
        # The next poll asks the full Metadata again, and needs no re-routing.
        before = log.counts[METADATA]
        obs, _ = env.poll()
        assert log.counts[METADATA] == before + 1
        assert _refreshes(env)[MetadataRefresh.LEADER_CHANGED] == 1
        assert obs.leaders[TopicPartition("t", 0)] == new
        assert obs.request_errors == ()
        assert _hanging(env, "t", 0) == {("t", 0, new)}
        assert log.counts[METADATA] == before + 1


def test_stopped_broker_refreshes_metadata_and_its_partitions_fail_over(
    sim: SimCluster,
) -> None:
    with _env(sim) as env:
        hanging_transaction(
            env.bootstrap, "hang-r", "r", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        down = env.leader("r", 0)
        assert _hanging(env, "r", 0) == {("r", 0, down)}
        assert _hanging(env, "r", 0) == {("r", 0, down)}
        log = ApiLog(sim)
        sim.stop_broker(down)  # fenced: its partitions fail over to live replicas
        new = env.leader("r", 0)
        assert new != down
        obs, snap = env.poll()
        assert {b.broker_id: b.up for b in obs.brokers}[down] is False
        assert TopicPartition("r", 0) not in obs.unobserved
        assert {
            (late.transaction.topic, late.transaction.partition, late.transaction.leader_id)
            for late in snap.late_transactions
            if late.classification is Classification.HANGING
        } == {("r", 0, new)}
        before = log.counts[METADATA]
        obs, _ = env.poll()
        assert log.counts[METADATA] >= before + 1
        assert _refreshes(env)[MetadataRefresh.BROKER_FAILED] >= 1
        assert obs.leaders[TopicPartition("r", 0)] == new
        assert {b.broker_id: b.up for b in obs.brokers}[down] is False


def test_new_topic_with_a_hanging_transaction_is_seen_within_the_max_age(
    sim: SimCluster,
) -> None:
    with _env(sim, metadata_max_age_seconds=1.0) as env:
        env.poll()
        sim.create_topic("late-comer", 1)
        hanging_transaction(
            env.bootstrap, "hang-new", "late-comer", 0, backdate_ms=30 * MINUTE_MS,
            now_ms=env.now_ms,
        )
        leader = env.leader("late-comer", 0)
        wait_for(
            "the new topic's hanging transaction",
            lambda: _hanging(env, "late-comer", 0) == {("late-comer", 0, leader)},
            timeout_seconds=60.0,
        )
        assert _refreshes(env).get(MetadataRefresh.MAX_AGE, 0) >= 1


def test_new_topic_waits_for_the_max_age_when_nothing_else_changed(sim: SimCluster) -> None:
    with _env(sim) as env:
        env.poll()
        sim.create_topic("late-comer", 1)
        hanging_transaction(
            env.bootstrap, "hang-new", "late-comer", 0, backdate_ms=30 * MINUTE_MS,
            now_ms=env.now_ms,
        )
        log = ApiLog(sim)
        obs, _ = env.poll()
        # The default age (300 s) has not passed: the earlier answer is reused.
        assert log.counts[METADATA] == 0
        assert TopicPartition("late-comer", 0) not in obs.leaders


def test_refreshes_are_counted_by_reason_in_metrics(sim: SimCluster) -> None:
    with _env(sim) as env:
        store = SnapshotStore([env.settings])
        for _ in range(3):
            _, snap = env.poll()
            store.publish(snap)
        old = env.leader("t", 1)
        sim.move_partition_leader("t", 1, next(b for b in sim.node_ids if b != old))
        for _ in range(2):  # the error, then the refresh it asks for
            _, snap = env.poll()
            store.publish(snap)
        registry = CollectorRegistry()
        registry.register(SnapshotCollector(store))
        counted = {
            sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples
            if sample.name == "kafka_txn_exporter_metadata_refreshes_total"
        }
        assert counted == {"start": 1.0, "leader_changed": 1.0}


class _CountingLeaders(dict[TopicPartition, int]):
    """A leaders mapping that counts the walks over it (items, iteration)."""

    walks = 0

    def items(self) -> Any:
        type(self).walks += 1
        return super().items()

    def __iter__(self) -> Any:
        type(self).walks += 1
        return super().__iter__()


def test_reused_metadata_is_not_walked_per_partition_again(sim: SimCluster) -> None:
    """Whether a coordinator topic has a leader Metadata does not list is found once per
    Metadata answer: a poll that reuses the answer walks none of its partitions for it."""
    with _env(sim) as env:
        hanging_transaction(
            env.bootstrap, "hang-w", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        assert _hanging(env, "t", 0)  # ListTransactions and the blocked-group lookup ran
        cached = env.poller.poller._client._last_full_metadata
        assert cached is not None
        reused = cached[2]  # the parsed answer the next poll's view shares
        counting = _CountingLeaders(reused.leaders)
        _CountingLeaders.walks = 0
        reused.leaders = counting
        assert _hanging(env, "t", 0)
        assert _refreshes(env) == {MetadataRefresh.START: 1}
        assert _CountingLeaders.walks == 0
