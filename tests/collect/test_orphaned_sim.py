"""Orphaned transactions against the simulator over TCP: an open transaction
its coordinator does not track on two consecutive polls with the same key is flagged before it
is late; a healthy one is never; an unanswered coordinator is unknown, never orphaned.

Rule and races: docs/kafka-semantics.md#orphaned. Polls are driven by the test on the
simulator's clock, advanced by one poll interval between polls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, PollEnv, poll_env

from exporter.model import Classification, ClusterSnapshot, TopicPartition
from exporter.scan import scan_cluster

POLL_INTERVAL_MS = 30_000  # the default poll_interval_seconds
LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS, FIND_COORDINATOR = 66, 65, 10
COORDINATOR_LOAD_IN_PROGRESS = 14


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=3, topics={"t": 6}, broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(sim, "sim", request_timeout_seconds=2.0, min_reported_duration_seconds=0.0)
        as env,
    ):
        yield env


def next_poll(env: PollEnv) -> ClusterSnapshot:
    env.sim.clock.advance(POLL_INTERVAL_MS)
    return env.poll()[1]


@contextmanager
def requests_by_api(env: PollEnv) -> Iterator[Counter[int]]:
    """Counts the requests the simulated brokers receive, by API key."""
    seen: Counter[int] = Counter()
    router: Any = env.sim.router
    original = router.handle

    def handle(ctx: Any, request: Any) -> Any:
        seen[ctx.api_key] += 1
        return original(ctx, request)

    env.sim.call(setattr, router, "handle", handle)
    try:
        yield seen
    finally:
        env.sim.call(delattr, router, "handle")


def orphaned_keys(snap: ClusterSnapshot) -> set[tuple[str, int, int, int, int]]:
    return {o.transaction.key for o in snap.orphaned_transactions}


def orphaned_by_broker(snap: ClusterSnapshot) -> dict[int, int | None]:
    return {b.broker_id: b.partitions_with_orphaned_transactions for b in snap.brokers}


def test_injected_hanging_transactions_are_orphaned_two_polls_after_first_seen(
    env: PollEnv,
) -> None:
    first_seen: dict[tuple[str, int, int, int, int], int] = {}  # poll number
    flagged_at: dict[tuple[str, int, int, int, int], int] = {}
    injected: list[tuple[str, int, int, int, int]] = []
    # One hanging transaction injected before each of four polls, on partitions led by
    # different brokers, while a healthy one stays open throughout.
    healthy = open_transaction(env.bootstrap, "healthy", "t", [5], now_ms=env.now_ms)
    for i in range(4):
        pid, epoch, offset = hanging_transaction(
            env.bootstrap, f"hang-{i}", "t", i, now_ms=env.now_ms
        )
        injected.append(("t", i, pid, epoch, offset))
        snap = next_poll(env)
        for o in snap.orphaned_transactions:
            flagged_at.setdefault(o.transaction.key, i)
        for key in injected:
            first_seen.setdefault(key, i)
    for i in range(4, 7):
        snap = next_poll(env)
        for o in snap.orphaned_transactions:
            flagged_at.setdefault(o.transaction.key, i)

    assert set(flagged_at) == set(injected)  # every one, and the healthy one never
    for key in injected:
        # Polls are one interval apart: flagged two poll intervals after first seen open.
        assert flagged_at[key] - first_seen[key] == 2, key
    assert all(not o.late and o.classification is Classification.ORPHANED
               for o in snap.orphaned_transactions)
    assert {o.transactional_id for o in snap.orphaned_transactions} == {
        f"hang-{i}" for i in range(4)}
    assert snap.late_transactions == ()  # 3.5 min old: not late (60 s + 5 min)
    leaders = {i: env.leader("t", i) for i in range(4)}
    expected = Counter(leaders.values())
    assert orphaned_by_broker(snap) == {b: expected.get(b, 0) for b in env.sim.node_ids}
    # Not committed: 3.5 simulated minutes exceed its 60 s timeout, so whether the coordinator
    # has already aborted it (and fences the commit) depends on when its timer ran.
    healthy.close_quietly()


def test_a_transaction_seen_once_costs_no_coordinator_request(env: PollEnv) -> None:
    env.poll()  # connections and metadata warm
    txn = open_transaction(env.bootstrap, "short", "t", [0], now_ms=env.now_ms)
    with requests_by_api(env) as seen:
        next_poll(env)
    txn.commit()
    with requests_by_api(env) as after:
        next_poll(env)
    # Only the per-poll listing, one per broker; nothing was described.
    assert seen[LIST_TRANSACTIONS] == 3 and after[LIST_TRANSACTIONS] == 3
    assert seen[DESCRIBE_TRANSACTIONS] == seen[FIND_COORDINATOR] == 0
    assert after[DESCRIBE_TRANSACTIONS] == after[FIND_COORDINATOR] == 0


def test_a_long_healthy_transaction_is_described_from_its_second_poll_and_never_orphaned(
    env: PollEnv,
) -> None:
    txn = open_transaction(env.bootstrap, "long", "t", [0, 1], now_ms=env.now_ms)
    with requests_by_api(env) as first:
        next_poll(env)
    assert first[DESCRIBE_TRANSACTIONS] == 0
    for _ in range(5):
        with requests_by_api(env) as seen:
            obs = env.poller.poll()
        assert seen[DESCRIBE_TRANSACTIONS] == 1  # one coordinator, one id
        assert obs.untracked_polls == {}
        env.sim.clock.advance(POLL_INTERVAL_MS // 10)
    txn.commit()


def test_coordinator_loading_is_unknown_never_orphaned(env: PollEnv) -> None:
    """While the coordinator cannot answer, the count is absent; the answers before and
    after the interruption still count as consecutive."""
    _, _, offset = hanging_transaction(env.bootstrap, "hang-l", "t", 0, now_ms=env.now_ms)
    next_poll(env)  # first seen: not asked
    snap = next_poll(env)  # not tracked once
    assert snap.orphaned_transactions == ()
    leader = env.leader("t", 0)
    assert orphaned_by_broker(snap)[leader] == 0
    state: Any = env.sim.state
    partition = env.sim.call(lambda: state.coordinator.partition_for("hang-l"))
    env.sim.call(state.coordinator.loading_partitions.add, partition)
    snap = next_poll(env)
    # The coordinator cannot answer: whether it is orphaned now is unknown, not 0, not 1.
    assert snap.orphaned_transactions == ()
    assert orphaned_by_broker(snap)[leader] is None
    env.sim.call(state.coordinator.loading_partitions.discard, partition)
    # An interrupted check is no evidence either way: the count did not start
    # again, so the second "not tracked" answer, at the first successful check, decides.
    snap = next_poll(env)
    (orphan,) = snap.orphaned_transactions
    assert orphan.transaction.key == ("t", 0, orphan.transaction.producer_id, 0, offset)
    assert orphaned_by_broker(snap)[leader] == 1
    assert TopicPartition("t", 0) in snap.max_active_transaction_duration_seconds


def test_scan_polls_again_only_while_something_may_be_orphaned(env: PollEnv) -> None:
    settings = env.settings
    healthy = open_transaction(env.bootstrap, "healthy-s", "t", [5], now_ms=env.now_ms)
    waits: list[float] = []
    with requests_by_api(env) as seen:
        snap = scan_cluster(settings, orphan_check_seconds=0.01, sleep=waits.append)
    assert seen[LIST_TRANSACTIONS] == 2 * 3  # two polls of three brokers: nothing suspect
    assert snap.orphaned_transactions == ()
    assert waits == []  # the second poll follows at once; only a confirmation waits
    _, _, offset = hanging_transaction(env.bootstrap, "hang-s", "t", 2, now_ms=env.now_ms)
    with requests_by_api(env) as seen:
        snap = scan_cluster(settings, orphan_check_seconds=0.01, sleep=waits.append)
    assert seen[LIST_TRANSACTIONS] == 3 * 3
    assert waits == [0.01]  # one wait, between the two "not tracked" answers
    (orphan,) = snap.orphaned_transactions
    assert (orphan.transaction.partition, orphan.transaction.current_txn_start_offset) == (
        2, offset)
    with requests_by_api(env) as seen:
        snap = scan_cluster(settings)  # find-hanging's way: one poll, late only
    assert seen[LIST_TRANSACTIONS] == 3 and snap.orphaned_transactions == ()
    healthy.commit()


def test_on_kafka_2_8_a_transaction_open_across_polls_makes_the_orphaned_count_unknown() -> None:
    """No ListTransactions before 3.0: the coordinator cannot be asked, so the broker's
    orphaned count is absent while it leads a transaction seen open twice, never 0."""
    with (
        SimCluster(brokers=1, topics={"t": 2}, broker_config=CAPTURE_BROKER_CONFIG,
                   profile="2.8") as sim,
        poll_env(sim, "old", request_timeout_seconds=2.0) as env,
    ):
        env.poll()
        hanging_transaction(env.bootstrap, "hang-old", "t", 0, now_ms=env.now_ms)
        first = next_poll(env)
        assert first.brokers[0].partitions_with_orphaned_transactions == 0  # seen once
        for _ in range(3):
            snap = next_poll(env)
            assert snap.orphaned_transactions == ()
            assert snap.brokers[0].partitions_with_orphaned_transactions is None
            assert snap.brokers[0].partitions_with_open_transactions == 1


def test_a_transaction_late_when_first_seen_counts_only_from_its_second_poll(
    env: PollEnv,
) -> None:
    """Its first answer may predate it (a producer clock behind makes a new transaction look
    late at once): classified hanging, but orphaned only after two later answers."""
    hanging_transaction(env.bootstrap, "hang-old", "t", 3, backdate_ms=30 * 60_000,
                        now_ms=env.now_ms)
    obs, snap = env.poll()
    assert [lt.classification for lt in snap.late_transactions] == [Classification.HANGING]
    assert obs.untracked_polls == {} and snap.orphaned_transactions == ()
    obs, snap = env.poll()
    assert list(obs.untracked_polls.values()) == [1] and snap.orphaned_transactions == ()
    _, snap = env.poll()
    (orphan,) = snap.orphaned_transactions
    assert orphan.late and orphan.classification is Classification.HANGING


def test_an_orphan_stays_orphaned_through_a_listing_error(env: PollEnv) -> None:
    """A transient ListTransactions error after the verdict: the broker's count is absent
    (never 0) for that poll, and the transaction is orphaned again at the next one."""
    hanging_transaction(env.bootstrap, "hang-e", "t", 1, now_ms=env.now_ms)
    for _ in range(3):
        snap = next_poll(env)
    leader = env.leader("t", 1)
    assert orphaned_by_broker(snap)[leader] == 1
    env.sim.fail_next_responses("malformed", api_key=LIST_TRANSACTIONS, count=3)
    snap = next_poll(env)
    assert orphaned_by_broker(snap)[leader] is None
    assert snap.orphaned_transactions == ()
    snap = next_poll(env)
    assert orphaned_by_broker(snap)[leader] == 1
    assert len(snap.orphaned_transactions) == 1


def test_orphan_detection_is_warm_exactly_when_an_orphan_open_all_along_is_reported(
    env: PollEnv,
) -> None:
    """`orphan_detection_warm`: after a start an orphan is reported from the third
    poll, and the alert rules hold its page while no replica is warm, so the flag must be false
    exactly until then. A failed poll (no Metadata) is no evidence: the consecutive
    answers stand, so the first poll after it is warm and reports the orphan again."""
    hanging_transaction(env.bootstrap, "hang-warm", "t", 0, now_ms=env.now_ms)
    seen = [next_poll(env) for _ in range(4)]
    assert [s.orphan_detection_warm for s in seen] == [False, False, True, True]
    assert [len(s.orphaned_transactions) for s in seen] == [0, 0, 1, 1]

    for node in env.sim.node_ids:
        env.sim.stop_broker(node)
    failed = next_poll(env)
    assert not failed.up and not failed.orphan_detection_warm
    for node in env.sim.node_ids:
        env.sim.start_broker(node)
    after = [next_poll(env) for _ in range(3)]
    assert [s.up for s in after] == [True, True, True]
    assert [s.orphan_detection_warm for s in after] == [True, True, True]
    assert [len(s.orphaned_transactions) for s in after] == [1, 1, 1]
