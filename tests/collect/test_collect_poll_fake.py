"""ClusterPoller over TCP against a table-driven fake of the brokers' logic (collect_fakes.py).

Each test pins one behaviour from docs/kafka-semantics.md:
per-partition errors, re-routing on NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR, start times from
the batch at CurrentTxnStartOffset, LSO lag, down brokers never reported as zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from collect_fakes import FakeCluster, Producer, Txn
from kafka_sim.cluster import SimCluster

from exporter.analyze import analyze
from exporter.model import (
    Classification,
    ClusterObservation,
    PartitionVerification,
    StartTimeSource,
    TopicPartition,
)
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

MINUTE_MS = 60_000
FETCH, LIST_OFFSETS, DESCRIBE_CONFIGS, DESCRIBE_PRODUCERS = 1, 2, 32, 61


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Env:
    sim: SimCluster
    fake: FakeCluster
    poller: ClusterObserver
    settings: ClusterSettings

    def poll(self) -> ClusterObservation:
        return self.poller.poll()


def three_brokers(profile: str = "4.0") -> FakeCluster:
    fake = FakeCluster(node_ids=[1, 2, 3], profile=profile)
    for p in range(3):
        fake.leaders[("t", p)] = p + 1  # t-0 on 1, t-1 on 2, t-2 on 3
    fake.leaders[("__transaction_state", 0)] = 1
    fake.max_timeout_ms = {1: 60_000, 2: 60_000, 3: 900_000}
    return fake


MakeEnv = Callable[..., Env]


@pytest.fixture
def make_env() -> Iterator[MakeEnv]:
    made: list[Env] = []

    def make(fake: FakeCluster, screening: bool = True, **overrides: object) -> Env:
        sim = SimCluster(node_ids=fake.node_ids, dispatcher=fake).start()
        kwargs: dict[str, object] = {"request_timeout_seconds": 2.0}
        kwargs.update(overrides)
        settings = ClusterSettings(
            name="fake",
            bootstrap_servers=tuple(sim.bootstrap_servers.split(",")),
            **kwargs,  # type: ignore[arg-type]
        )
        env = Env(sim, fake, ClusterObserver(settings, screen_partitions=screening),
                  settings)
        made.append(env)
        return env

    yield make
    for env in made:
        env.poller.close()
        env.sim.close()


def hanging_on_t0(fake: FakeCluster, age_ms: int, coordinator: int = 2) -> int:
    """A producer with an open txn at offset 5 of t-0 whose coordinator lists no partition."""
    start_ms = now_ms() - age_ms
    fake.producers[("t", 0)] = [Producer(3, 0, last_timestamp=start_ms + 10, start_offset=5)]
    fake.batches[("t", 0, 5)] = (start_ms, 3, 0)
    fake.offsets[("t", 0)] = (9, 5)
    fake.transactions["hang-1"] = Txn(producer_id=3, state="Empty", coordinator=coordinator)
    return start_ms


def test_no_transactions(make_env: MakeEnv) -> None:
    env = make_env(three_brokers())
    obs = env.poll()
    assert obs.open_transactions == ()
    assert obs.unobserved == {}
    assert [(b.broker_id, b.up) for b in obs.brokers] == [(1, True), (2, True), (3, True)]
    assert [b.transaction_max_timeout_ms for b in obs.brokers] == [60_000, 60_000, 900_000]
    assert len(obs.leaders) == 4  # internal topic included
    assert obs.transaction_states == {}
    assert obs.coordinator_view_complete
    assert obs.request_errors == ()
    snap = analyze(obs, env.settings)
    assert snap.cluster_max_active_transaction_duration_seconds == 0.0


def test_hanging_transaction_every_label(make_env: MakeEnv) -> None:
    fake = three_brokers()
    start_ms = hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    env = make_env(fake)
    obs = env.poll()
    (txn,) = obs.open_transactions
    assert (txn.topic, txn.partition, txn.leader_id) == ("t", 0, 1)
    assert (txn.producer_id, txn.producer_epoch, txn.current_txn_start_offset) == (3, 0, 5)
    assert txn.start_time_ms == start_ms
    assert txn.start_time_source is StartTimeSource.BATCH_TIMESTAMP
    assert obs.transactional_ids == {3: "hang-1"}
    description = obs.descriptions["hang-1"]
    assert description is not None and description.topic_partitions == frozenset()
    assert obs.transaction_states == {"Empty": 1}
    assert obs.last_stable_offset_lag == {TopicPartition("t", 0): 4}

    snap = analyze(obs, env.settings)
    (late,) = snap.late_transactions
    assert late.classification is Classification.HANGING
    assert late.transactional_id == "hang-1"
    assert late.age_seconds >= 30 * 60
    by_id = {b.broker_id: b for b in snap.brokers}
    assert by_id[1].partitions_with_hanging_transactions == 1
    assert by_id[2].partitions_with_late_transactions == 0


def test_late_coordinator_tracked_transaction(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    fake.transactions["hang-1"] = Txn(3, "PrepareCommit", coordinator=3, partitions=[("t", 0)])
    env = make_env(fake)
    snap = analyze(env.poll(), env.settings)
    (late,) = snap.late_transactions
    assert late.classification is Classification.COORDINATOR_TRACKED
    assert snap.brokers[0].partitions_with_late_transactions == 1
    assert snap.brokers[0].partitions_with_hanging_transactions == 0


def test_a_restarted_coordinator_that_lists_nothing_yet_makes_no_orphan(make_env: MakeEnv) -> None:
    """Right after a broker restart its coordinator answers ListTransactions with an empty list
    and no error until it has taken its __transaction_state partitions (a real 4.4.0 broker
    did for ~5 s, docs/kafka-semantics.md#a-restarted-coordinator). A tracked transaction whose
    id the previous polls listed is asked about by that id: NOT_COORDINATOR, so unknown, never
    "not tracked" -- and never orphaned."""
    fake = three_brokers()
    start_ms = now_ms() - 5_000
    fake.producers[("t", 0)] = [Producer(3, 0, last_timestamp=start_ms + 10, start_offset=5)]
    fake.batches[("t", 0, 5)] = (start_ms, 3, 0)
    fake.offsets[("t", 0)] = (9, 5)
    fake.transactions["flink-sink-0-7"] = Txn(3, "Ongoing", coordinator=2,
                                              partitions=[("t", 0)])
    env = make_env(fake)
    env.poll()
    obs = env.poll()  # seen open twice: mapped, asked about, tracked
    assert obs.transactional_ids == {3: "flink-sink-0-7"}
    assert analyze(obs, env.settings).orphaned_transactions == ()
    env.sim.call(fake.unelected_coordinators.add, 2)
    for _ in range(4):
        obs = env.poll()
        (txn,) = obs.open_transactions
        assert txn.key in obs.untracked_unknown, obs.untracked_polls
        assert obs.untracked_polls.get(txn.key, 0) == 0
        assert analyze(obs, env.settings).orphaned_transactions == ()
    env.sim.call(fake.unelected_coordinators.discard, 2)
    obs = env.poll()
    assert obs.descriptions["flink-sink-0-7"] is not None
    assert analyze(obs, env.settings).orphaned_transactions == ()


def test_a_remembered_id_its_coordinator_disowns_no_longer_names_the_producer(
    make_env: MakeEnv,
) -> None:
    """A producer listed last poll and not this poll is asked about by the id it had. If the
    coordinator no longer has that id (its transaction log was lost), or gives it to another
    producer, the open transaction is unmapped -- hanging, as find-hanging shows it -- on
    every poll, not only on the first (a real 4.4.0 broker with a wiped log did both)."""
    for disown in ("lost", "reused"):
        fake = three_brokers()
        start_ms = now_ms() - 5_000
        fake.producers[("t", 0)] = [Producer(3, 0, last_timestamp=start_ms + 10, start_offset=5)]
        fake.batches[("t", 0, 5)] = (start_ms, 3, 0)
        fake.offsets[("t", 0)] = (9, 5)
        fake.transactions["rdk-1"] = Txn(3, "Ongoing", coordinator=2, partitions=[("t", 0)])
        env = make_env(fake)
        env.poll()
        assert env.poll().transactional_ids == {3: "rdk-1"}
        if disown == "lost":
            env.sim.call(fake.transactions.pop, "rdk-1")
        else:
            env.sim.call(fake.transactions.__setitem__, "rdk-1",
                         Txn(4, "Ongoing", coordinator=2, partitions=[("t", 0)]))
        for _ in range(3):
            obs = env.poll()
            (txn,) = obs.open_transactions
            assert 3 not in obs.transactional_ids, (disown, obs.transactional_ids)
            assert txn.key not in obs.untracked_unknown
            assert obs.untracked_polls[txn.key] >= 1


def test_short_open_transaction_is_not_late_and_not_described(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=5_000)
    env = make_env(fake)
    obs = env.poll()
    assert len(obs.open_transactions) == 1
    assert obs.transactional_ids == {}
    assert obs.descriptions == {}
    assert not any(k in (10, 65) for _, k in fake.calls)  # no FindCoordinator/Describe needed
    assert analyze(obs, env.settings).late_transactions == ()


def test_oldest_of_two_open_transactions_wins(make_env: MakeEnv) -> None:
    fake = three_brokers()
    old_ms, young_ms = now_ms() - 40 * MINUTE_MS, now_ms() - 2 * MINUTE_MS
    fake.producers[("t", 1)] = [
        Producer(8, 0, last_timestamp=young_ms, start_offset=20),
        Producer(9, 1, last_timestamp=young_ms, start_offset=3),  # stalled, keeps writing later
    ]
    fake.batches[("t", 1, 20)] = (young_ms, 8, 0)
    fake.batches[("t", 1, 3)] = (old_ms, 9, 1)
    env = make_env(fake)
    snap = analyze(env.poll(), env.settings)
    age = snap.max_active_transaction_duration_seconds[TopicPartition("t", 1)]
    assert 40 * 60 <= age < 40 * 60 + 30
    assert [lt.transaction.producer_id for lt in snap.late_transactions] == [9]


def test_start_time_read_once_and_forgotten_when_closed(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=MINUTE_MS)
    env = make_env(fake)
    env.poll()
    env.poll()
    assert fake.record_fetches == 1  # the screening's Fetch sessions read no record
    env.sim.call(fake.producers.clear)
    assert env.poll().open_transactions == ()
    # Reopened with the same key: read again (cache was evicted when it closed).
    env.sim.call(hanging_on_t0, fake, MINUTE_MS)
    env.poll()
    assert fake.record_fetches == 2


def _three_open_on_leader_1(fake: FakeCluster) -> dict[int, int]:
    """Open txns on t-0, t-3, t-4, all led by broker 1 -> {partition: batch max timestamp}."""
    starts = {}
    for p, pid in ((0, 3), (3, 4), (4, 5)):
        fake.leaders[("t", p)] = 1
        starts[p] = now_ms() - (p + 1) * MINUTE_MS
        fake.producers[("t", p)] = [Producer(pid, 0, last_timestamp=now_ms(), start_offset=5)]
        fake.batches[("t", p, 5)] = (starts[p], pid, 0)
    return starts


@pytest.mark.parametrize("budget_runs_out", [False, True])
def test_start_times_of_one_leader_read_in_one_fetch_batchless_partitions_alone(
    make_env: MakeEnv, budget_runs_out: bool
) -> None:
    fake = three_brokers()
    starts = _three_open_on_leader_1(fake)
    fake.fetch_records_first_partition_only = budget_runs_out
    env = make_env(fake)
    obs = env.poll()
    assert {
        t.partition: (t.start_time_ms, t.start_time_source) for t in obs.open_transactions
    } == {p: (ms, StartTimeSource.BATCH_TIMESTAMP) for p, ms in starts.items()}
    # One batched Fetch; when only its first partition got records, the other two alone.
    assert [b for b, k in fake.calls if k == FETCH] == [1] * (3 if budget_runs_out else 1)
    assert obs.request_errors == ()


def test_error_of_one_partition_in_a_batched_fetch_stays_with_that_partition(
    make_env: MakeEnv,
) -> None:
    fake = three_brokers()
    starts = _three_open_on_leader_1(fake)
    fake.errors[(FETCH, ("t", 3))] = [1]  # OFFSET_OUT_OF_RANGE for t-3 only
    env = make_env(fake)
    obs = env.poll()
    sources = {t.partition: (t.start_time_ms, t.start_time_source) for t in obs.open_transactions}
    assert sources[0] == (starts[0], StartTimeSource.BATCH_TIMESTAMP)
    assert sources[4] == (starts[4], StartTimeSource.BATCH_TIMESTAMP)
    assert sources[3][1] is not StartTimeSource.BATCH_TIMESTAMP
    assert [(e.broker_id, e.api) for e in obs.request_errors] == [(1, "Fetch")]


def test_unreadable_batch_falls_back_to_earlier_of_last_timestamp_and_first_seen(
    make_env: MakeEnv,
) -> None:
    fake = three_brokers()
    last_ms = now_ms() - 10 * MINUTE_MS
    fake.producers[("t", 2)] = [Producer(4, 0, last_timestamp=last_ms, start_offset=7)]
    fake.errors[(FETCH, ("t", 2))] = [1]  # OFFSET_OUT_OF_RANGE: the batch is gone for good
    env = make_env(fake)
    (txn,) = env.poll().open_transactions
    assert txn.start_time_source is StartTimeSource.LAST_TIMESTAMP
    assert txn.start_time_ms == last_ms
    (txn,) = env.poll().open_transactions
    assert txn.start_time_ms == last_ms
    assert sum(1 for _, k in fake.calls if k == FETCH) == 1


def test_first_seen_when_last_timestamp_is_later(make_env: MakeEnv) -> None:
    fake = three_brokers()
    fake.producers[("t", 2)] = [Producer(4, 0, last_timestamp=now_ms(), start_offset=7)]
    env = make_env(fake)  # no batch at offset 7: read gives nothing, retried next poll
    first = env.poll().open_transactions[0]
    # The producer keeps writing: LastTimestamp moves past the first sighting.
    env.sim.call(lambda: setattr(fake.producers[("t", 2)][0], "last_timestamp", now_ms() + 60_000))
    second = env.poll().open_transactions[0]
    assert second.start_time_source is StartTimeSource.FIRST_SEEN
    assert second.start_time_ms <= first.start_time_ms + 1000


def test_broker_down_its_partitions_unobserved_rest_intact(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS, coordinator=1)
    env = make_env(fake)
    env.sim.stop_broker(2)
    obs = env.poll()
    assert {b.broker_id: b.up for b in obs.brokers} == {1: True, 2: False, 3: True}
    assert set(obs.unobserved) == {TopicPartition("t", 1)}
    assert len(obs.open_transactions) == 1
    assert obs.coordinator_view_complete is False  # broker 2's ListTransactions slice is missing
    snap = analyze(obs, env.settings)
    assert snap.unobserved_partitions == 1
    # hang-1's coordinator (broker 1) answered: one broker down does not blur its verdict.
    assert snap.late_transactions[0].classification is Classification.HANGING


def test_broker_down_unmapped_producer_is_unknown_not_hanging(make_env: MakeEnv) -> None:
    """The producer's id may live in the missing listing: no false "hanging"."""
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS, coordinator=2)
    env = make_env(fake)
    env.sim.stop_broker(2)
    snap = analyze(env.poll(), env.settings)
    assert snap.late_transactions[0].classification is Classification.UNKNOWN


def test_slow_broker_is_down_not_zero(make_env: MakeEnv) -> None:
    fake = three_brokers()
    # An open transaction on t-2: its screening leaves it to DescribeProducers (LSO < HW).
    fake.producers[("t", 2)] = [Producer(7, 0, last_timestamp=now_ms(), start_offset=5)]
    fake.batches[("t", 2, 5)] = (now_ms(), 7, 0)
    env = make_env(fake, request_timeout_seconds=0.3)
    env.poll()  # connections made, versions negotiated
    env.sim.set_latency(1500, broker_id=3, api_key=DESCRIBE_PRODUCERS)
    started = time.monotonic()
    obs = env.poll()
    assert time.monotonic() - started < 1.4
    assert {b.broker_id: b.up for b in obs.brokers} == {1: True, 2: True, 3: False}
    assert set(obs.unobserved) == {TopicPartition("t", 2)}
    assert any(e.broker_id == 3 and e.error == "REQUEST_TIMEOUT" for e in obs.request_errors)


def test_leader_moved_between_metadata_and_describe_producers(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=MINUTE_MS)
    env = make_env(fake)
    env.sim.call(fake.after_metadata.append, lambda: fake.leaders.update({("t", 0): 2}))
    obs = env.poll()
    (txn,) = obs.open_transactions
    assert txn.leader_id == 2
    assert obs.unobserved == {}
    assert obs.leaders[TopicPartition("t", 0)] == 2
    assert [(e.broker_id, e.error) for e in obs.request_errors] == [(1, "NOT_LEADER_OR_FOLLOWER")]


def test_a_re_route_stays_in_its_poll_and_the_next_reuses_the_metadata_as_answered(
    make_env: MakeEnv,
) -> None:
    """The client reuses its parse of an unchanged Metadata answer (shared, not copied): the
    re-route of one poll must not leak into it."""
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=MINUTE_MS)
    env = make_env(fake)
    moves = [lambda: fake.leaders.update({("t", 0): 2}),  # after the poll's full Metadata
             lambda: fake.leaders.update({("t", 0): 1})]  # after the re-route's Metadata
    env.sim.call(fake.after_metadata.extend, moves)
    rerouted = env.poll()
    assert rerouted.leaders[TopicPartition("t", 0)] == 2
    cached = env.poller.poller._client._last_full_metadata
    again = env.poll()  # the same full answer as the first poll's: its parse is reused
    assert env.poller.poller._client._last_full_metadata is cached
    assert again.leaders[TopicPartition("t", 0)] == 1
    assert rerouted.leaders[TopicPartition("t", 0)] == 2  # an observation never changes
    (txn,) = again.open_transactions
    assert txn.leader_id == 1 and again.request_errors == ()


def test_not_leader_twice_leaves_partition_unobserved(make_env: MakeEnv) -> None:
    fake = three_brokers()
    fake.errors[(DESCRIBE_PRODUCERS, ("t", 0))] = [6, 6]
    env = make_env(fake)
    obs = env.poll()
    assert obs.unobserved == {TopicPartition("t", 0): "NOT_LEADER_OR_FOLLOWER"}


def test_moved_coordinator_is_looked_up_again(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS, coordinator=2)
    env = make_env(fake)
    assert env.poll().descriptions["hang-1"] is not None
    env.sim.call(setattr, fake.transactions["hang-1"], "coordinator", 3)
    obs = env.poll()
    assert obs.descriptions["hang-1"] is not None
    assert obs.coordinator_view_complete
    assert (2, "NOT_COORDINATOR") in {(e.broker_id, e.error) for e in obs.request_errors}
    assert analyze(obs, env.settings).late_transactions[0].classification is (
        Classification.HANGING
    )


def test_coordinator_load_in_progress_is_retried_once(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    fake.errors[(65, "hang-1")] = [14]
    env = make_env(fake)
    obs = env.poll()
    assert obs.descriptions["hang-1"] is not None


def test_description_unavailable_is_unknown_not_hanging(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    fake.errors[(65, "hang-1")] = [53]  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    env = make_env(fake)
    obs = env.poll()
    assert "hang-1" not in obs.descriptions
    (late,) = analyze(obs, env.settings).late_transactions
    assert late.classification is Classification.UNKNOWN


def test_transactional_id_not_found_is_hanging(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    fake.errors[(65, "hang-1")] = [105]
    env = make_env(fake)
    obs = env.poll()
    assert obs.descriptions == {"hang-1": None}
    assert analyze(obs, env.settings).late_transactions[0].classification is (
        Classification.HANGING
    )


def test_list_transactions_failure_makes_classification_unknown(make_env: MakeEnv) -> None:
    fake = three_brokers()
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS, coordinator=2)
    fake.errors[(66, 2)] = [15, 15]  # COORDINATOR_NOT_AVAILABLE at hang-1's coordinator
    env = make_env(fake)
    obs = env.poll()
    assert not obs.coordinator_view_complete
    assert obs.transaction_states is None
    assert analyze(obs, env.settings).late_transactions[0].classification is (
        Classification.UNKNOWN
    )


def test_unauthorised_topic_unobserved_and_counted(make_env: MakeEnv) -> None:
    fake = three_brokers()
    fake.leaders[("secret", 0)] = 1
    fake.leaders[("secret", 1)] = 2
    fake.denied_topics.add("secret")
    env = make_env(fake)
    obs = env.poll()
    assert obs.unobserved == {
        TopicPartition("secret", 0): "TOPIC_AUTHORIZATION_FAILED",
        TopicPartition("secret", 1): "TOPIC_AUTHORIZATION_FAILED",
    }
    assert sorted((e.broker_id, e.api, e.error) for e in obs.request_errors) == [
        (1, "DescribeProducers", "TOPIC_AUTHORIZATION_FAILED"),
        (2, "DescribeProducers", "TOPIC_AUTHORIZATION_FAILED"),
    ]
    assert all(b.up for b in obs.brokers)


def test_broker_without_transaction_admin_apis(make_env: MakeEnv) -> None:
    env = make_env(three_brokers(profile="no-transaction-admin"))
    obs = env.poll()
    assert len(obs.unobserved) == 4  # DescribeProducers unsupported: nothing observed
    assert not obs.coordinator_view_complete
    assert all(b.up for b in obs.brokers)


def test_batches_respect_describe_producers_batch_size(make_env: MakeEnv) -> None:
    fake = three_brokers()
    for p in range(3, 10):
        fake.leaders[("t", p)] = 1
    env = make_env(fake, describe_producers_batch_size=3)
    obs = env.poll()
    assert obs.unobserved == {}
    # broker 1 leads t-0, t-3..t-9 and __transaction_state-0: 9 partitions -> 3 requests
    assert sum(1 for b, k in fake.calls if (b, k) == (1, DESCRIBE_PRODUCERS)) == 3


def test_describe_producers_requests_are_reused_while_metadata_is_unchanged(
    make_env: MakeEnv,
) -> None:
    fake = three_brokers()
    # Metadata every poll: the poll right after the move reads the changed answer (with the
    # default age the old leader's NOT_LEADER_OR_FOLLOWER would first ask it again). Every
    # partition asked every poll (the screened poll asks them directly only until they answer).
    env = make_env(fake, screening=False, metadata_max_age_seconds=0.0)
    env.poll()
    first = env.poller.poller._producers._cached_requests
    env.poll()
    assert env.poller.poller._producers._cached_requests is first  # same batches, same bytes
    env.sim.call(fake.leaders.update, {("t", 2): 1})  # t-2 moves from broker 3 to broker 1
    obs = env.poll()
    assert obs.unobserved == {} and obs.request_errors == ()
    after = env.poller.poller._producers._cached_requests
    assert after is not first and after is not None
    assert {(leader, t, tuple(ps)) for leader, batch, _ in after[2] for t, ps in batch} == {
        (1, "t", (0, 2)), (1, "__transaction_state", (0,)), (2, "t", (1,)),
    }
    assert fake.calls.count((3, DESCRIBE_PRODUCERS)) == 2  # not asked once it led nothing


def test_override_asks_describe_configs_only_for_verification(make_env: MakeEnv) -> None:
    fake = three_brokers()
    env = make_env(fake, transaction_max_timeout_ms=1234)
    obs = env.poll()
    assert all(b.transaction_max_timeout_ms == 1234 for b in obs.brokers)
    assert sorted(fake.config_requests) == [
        (b, 4, str(b), ["transaction.partition.verification.enable"]) for b in (1, 2, 3)]
    assert {b.partition_verification for b in obs.brokers} == {PartitionVerification.DISABLED}


def test_configs_refreshed_only_when_due(make_env: MakeEnv) -> None:
    fake = three_brokers()
    env = make_env(fake)
    env.poll()
    env.poll()
    assert sum(1 for _, k in fake.calls if k == DESCRIBE_CONFIGS) == 3


def test_no_reachable_bootstrap_gives_an_empty_down_observation() -> None:
    settings = ClusterSettings(
        name="nowhere", bootstrap_servers=("127.0.0.1:1",), request_timeout_seconds=0.5
    )
    poller = ClusterObserver(settings)
    try:
        obs = poller.poll()
    finally:
        poller.close()
    assert obs.brokers == ()
    assert obs.request_errors[0].api == "Metadata"
    assert not analyze(obs, settings).up


def _topic_config_requests(fake: FakeCluster) -> list[tuple[int, str, list[str] | None]]:
    return [(b, name, keys) for b, rtype, name, keys in fake.config_requests if rtype == 2]


def test_topic_config_read_once_for_the_late_topic_only(make_env: MakeEnv) -> None:
    fake = three_brokers()
    fake.leaders[("quiet", 0)] = 2
    fake.producers[("quiet", 0)] = [Producer(9, 0, last_timestamp=now_ms(), start_offset=0)]
    fake.batches[("quiet", 0, 0)] = (now_ms(), 9, 0)  # open but fresh: not late
    hanging_on_t0(fake, age_ms=30 * MINUTE_MS)
    fake.cleanup_policies["t"] = "compact"
    env = make_env(fake)
    obs = env.poll()
    assert obs.compacted_topics == {"t": True}
    # One TOPIC DescribeConfigs, to the lowest broker, for the late transaction's topic only.
    assert _topic_config_requests(fake) == [(1, "t", ["cleanup.policy"])]
    obs = env.poll()  # cached until config_refresh_seconds
    assert obs.compacted_topics == {"t": True}
    assert len(_topic_config_requests(fake)) == 1


def test_no_late_transaction_sends_no_topic_config_request(make_env: MakeEnv) -> None:
    fake = three_brokers()
    fake.producers[("t", 1)] = [Producer(9, 0, last_timestamp=now_ms(), start_offset=0)]
    fake.batches[("t", 1, 0)] = (now_ms(), 9, 0)
    # Tracked by its coordinator: neither late nor orphaned.
    fake.transactions["healthy"] = Txn(producer_id=9, state="Ongoing", coordinator=2,
                                       partitions=[("t", 1)], start_time_ms=now_ms())
    env = make_env(fake)
    for _ in range(3):
        obs = env.poll()
        assert len(obs.open_transactions) == 1 and obs.compacted_topics == {}
    assert _topic_config_requests(fake) == []
    # The broker configs are read once (then cached), in one request per broker.
    assert sorted(b for b, k in fake.calls if k == DESCRIBE_CONFIGS) == [1, 2, 3]


def test_orphaned_transactions_topic_is_read_once_orphaned(make_env: MakeEnv) -> None:
    fake = three_brokers()
    # Fresh, but no coordinator tracks it: seen open on poll 1, not tracked on polls 2 and 3,
    # orphaned (not late) on poll 3.
    fake.producers[("t", 1)] = [Producer(9, 0, last_timestamp=now_ms(), start_offset=0)]
    fake.batches[("t", 1, 0)] = (now_ms(), 9, 0)
    fake.cleanup_policies["t"] = "compact"
    env = make_env(fake)
    for _ in range(2):
        obs = env.poll()
        assert obs.compacted_topics == {} and _topic_config_requests(fake) == []
    obs = env.poll()
    snap = analyze(obs, env.settings)
    assert [o.transaction.topic for o in snap.orphaned_transactions] == ["t"]
    assert snap.late_transactions == ()
    assert obs.compacted_topics == {"t": True} and snap.compacted_topics == {"t": True}
    assert _topic_config_requests(fake) == [(1, "t", ["cleanup.policy"])]
