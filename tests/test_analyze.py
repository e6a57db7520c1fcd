"""Unit tests for the pure analysis (exporter/analyze.py).

Rules: docs/kafka-semantics.md#late-transactions and #find-hanging (step 5).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from exporter.analyze import (
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    analyze,
    blocked_groups,
    classify,
    effective_max_timeout_ms,
    is_late,
)
from exporter.model import (
    BrokerStatus,
    Classification,
    ClusterObservation,
    CommittedOffset,
    ConsumerGroupOffsets,
    FinalizedFeatures,
    OpenTransaction,
    PartitionVerification,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
    UnobservedReason,
)
from exporter.orphans import next_untracked_polls, orphaned_transactions
from exporter.settings import ClusterSettings

NOW_MS = 1_800_000_000_000
MINUTE_MS = 60_000
SETTINGS = ClusterSettings(name="c1", bootstrap_servers=("localhost:9092",))


def txn(
    topic: str = "t",
    partition: int = 0,
    leader_id: int = 1,
    producer_id: int = 7,
    age_ms: int = 0,
    start_offset: int = 0,
) -> OpenTransaction:
    return OpenTransaction(
        topic=topic,
        partition=partition,
        leader_id=leader_id,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=-1,
        current_txn_start_offset=start_offset,
        last_timestamp_ms=NOW_MS - age_ms,
        start_time_ms=NOW_MS - age_ms,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    )


def description(tid: str, *tps: TopicPartition) -> TransactionDescription:
    return TransactionDescription(
        transactional_id=tid,
        state="Ongoing",
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=NOW_MS - MINUTE_MS,
        producer_id=7,
        producer_epoch=0,
        topic_partitions=frozenset(tps),
    )


def observation(
    *txns: OpenTransaction,
    brokers: tuple[BrokerStatus, ...] = (BrokerStatus(1, True, None, 900_000),),
    **kwargs: object,
) -> ClusterObservation:
    leaders = {TopicPartition(t.topic, t.partition): t.leader_id for t in txns}
    return ClusterObservation(
        cluster="c1",
        observed_at_ms=NOW_MS,
        brokers=brokers,
        leaders=leaders,
        open_transactions=txns,
        **kwargs,  # type: ignore[arg-type]
    )


# -- is_late ---------------------------------------------------------------------------------


def test_is_late_is_strictly_greater_than_max_timeout_plus_buffer() -> None:
    limit = 900_000 + 300_000
    assert not is_late(txn(age_ms=limit), NOW_MS, 900_000, 300_000)
    assert is_late(txn(age_ms=limit + 1), NOW_MS, 900_000, 300_000)


@given(
    age_ms=st.integers(min_value=0, max_value=10**10),
    max_timeout_ms=st.integers(min_value=1, max_value=10**9),
    buffer_ms=st.integers(min_value=0, max_value=10**9),
)
def test_is_late_matches_the_age_rule(age_ms: int, max_timeout_ms: int, buffer_ms: int) -> None:
    assert is_late(txn(age_ms=age_ms), NOW_MS, max_timeout_ms, buffer_ms) == (
        age_ms > max_timeout_ms + buffer_ms
    )


def test_effective_max_timeout_prefers_override_then_broker_then_kafka_default() -> None:
    override = replace(SETTINGS, transaction_max_timeout_ms=1234)
    assert effective_max_timeout_ms(override, 60_000) == 1234
    assert effective_max_timeout_ms(SETTINGS, 60_000) == 60_000
    assert effective_max_timeout_ms(SETTINGS, None) == DEFAULT_TRANSACTION_MAX_TIMEOUT_MS == 900_000


# -- classify (find-hanging step 5) ------------------------------------------------------------


def test_classify_hanging_when_producer_id_maps_to_no_transactional_id() -> None:
    assert classify(txn(), {}, {}, True) is Classification.HANGING


def test_classify_hanging_when_transactional_id_not_found() -> None:
    assert classify(txn(), {7: "tx"}, {"tx": None}, True) is Classification.HANGING


def test_classify_hanging_when_partition_not_in_description() -> None:
    desc = description("tx", TopicPartition("other", 0), TopicPartition("t", 1))
    assert classify(txn(), {7: "tx"}, {"tx": desc}, True) is Classification.HANGING


def test_classify_coordinator_tracked_when_partition_in_description() -> None:
    desc = description("tx", TopicPartition("t", 0))
    assert classify(txn(), {7: "tx"}, {"tx": desc}, True) is Classification.COORDINATOR_TRACKED


def test_classify_unmapped_producer_unknown_when_a_listing_is_missing() -> None:
    assert classify(txn(), {}, {}, False) is Classification.UNKNOWN


def test_classify_mapped_producer_still_classified_when_another_listing_is_missing() -> None:
    """One coordinator down must not hide what the others answered."""
    tracked = description("tx", TopicPartition("t", 0))
    assert classify(txn(), {7: "tx"}, {"tx": tracked}, False) is Classification.COORDINATOR_TRACKED
    assert classify(txn(), {7: "tx"}, {"tx": None}, False) is Classification.HANGING


def test_classify_unknown_when_description_could_not_be_obtained() -> None:
    # The id maps, but DescribeTransactions gave no answer for it (absent, not None).
    assert classify(txn(), {7: "tx"}, {}, True) is Classification.UNKNOWN


# -- analyze -------------------------------------------------------------------------------------


def test_no_transactions_gives_zero_cluster_max_and_zero_counts() -> None:
    snap = analyze(observation(), SETTINGS)
    assert snap.up
    assert snap.cluster_max_active_transaction_duration_seconds == 0.0
    assert snap.max_active_transaction_duration_seconds == {}
    assert snap.late_transactions == ()
    (broker,) = snap.brokers
    assert (broker.broker_id, broker.up) == (1, True)
    assert broker.partitions_with_open_transactions == 0
    assert broker.partitions_with_late_transactions == 0
    assert broker.partitions_with_hanging_transactions == 0


def test_short_transactions_are_not_reported_below_min_duration_but_count_as_open() -> None:
    snap = analyze(observation(txn(age_ms=5_000)), SETTINGS)
    assert snap.max_active_transaction_duration_seconds == {}
    assert snap.cluster_max_active_transaction_duration_seconds == 5.0
    assert snap.brokers[0].partitions_with_open_transactions == 1
    assert snap.late_transactions == ()


@given(
    older_ms=st.integers(min_value=MINUTE_MS, max_value=10**9),
    younger_ms=st.integers(min_value=0, max_value=10**9),
)
def test_oldest_of_two_open_transactions_on_a_partition_wins(
    older_ms: int, younger_ms: int
) -> None:
    a = txn(producer_id=1, age_ms=older_ms, start_offset=0)
    b = txn(producer_id=2, age_ms=younger_ms, start_offset=5)
    snap = analyze(observation(b, a), SETTINGS)
    expected = max(older_ms, younger_ms) / 1000.0
    assert snap.max_active_transaction_duration_seconds == {TopicPartition("t", 0): expected}
    assert snap.cluster_max_active_transaction_duration_seconds == expected
    assert snap.brokers[0].partitions_with_open_transactions == 1


def test_late_hanging_transaction_has_every_label() -> None:
    late = txn(age_ms=900_000 + 300_000 + 1, producer_id=3)
    snap = analyze(
        observation(
            late, transactional_ids={3: "hang-1"}, descriptions={"hang-1": description("hang-1")}
        ),
        SETTINGS,
    )
    (lt,) = snap.late_transactions
    assert lt.transaction == late
    assert lt.classification is Classification.HANGING
    assert lt.transactional_id == "hang-1"
    assert lt.age_seconds == 1200.001
    broker = snap.brokers[0]
    assert broker.partitions_with_late_transactions == 1
    assert broker.partitions_with_hanging_transactions == 1


def test_late_coordinator_tracked_transaction_is_late_but_not_hanging() -> None:
    late = txn(age_ms=30 * MINUTE_MS)
    desc = description("tx", TopicPartition("t", 0))
    snap = analyze(
        observation(late, transactional_ids={7: "tx"}, descriptions={"tx": desc}), SETTINGS
    )
    (lt,) = snap.late_transactions
    assert lt.classification is Classification.COORDINATOR_TRACKED
    assert snap.brokers[0].partitions_with_late_transactions == 1
    assert snap.brokers[0].partitions_with_hanging_transactions == 0


def test_late_uses_each_leaders_own_max_timeout() -> None:
    brokers = (BrokerStatus(1, True, None, 60_000), BrokerStatus(2, True, None, 900_000))
    on_short = txn(topic="a", leader_id=1, age_ms=7 * MINUTE_MS)  # > 1 + 5 min
    on_long = txn(topic="b", leader_id=2, age_ms=7 * MINUTE_MS)  # < 15 + 5 min
    snap = analyze(observation(on_short, on_long, brokers=brokers), SETTINGS)
    assert [lt.transaction.topic for lt in snap.late_transactions] == ["a"]


def test_override_replaces_broker_max_timeout() -> None:
    settings = replace(SETTINGS, transaction_max_timeout_ms=1_000, late_buffer_seconds=0)
    snap = analyze(observation(txn(age_ms=2_000)), settings)
    assert len(snap.late_transactions) == 1


def test_unknown_broker_max_timeout_falls_back_to_kafka_default() -> None:
    brokers = (BrokerStatus(1, True, None, None),)
    not_late = txn(age_ms=20 * MINUTE_MS)  # = 15 + 5 min exactly: not late
    late = txn(partition=1, age_ms=20 * MINUTE_MS + 1)
    snap = analyze(observation(not_late, late, brokers=brokers), SETTINGS)
    assert [lt.transaction.partition for lt in snap.late_transactions] == [1]


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=3),  # leader
            st.integers(min_value=0, max_value=4),  # partition
            st.integers(min_value=0, max_value=3 * 3600_000),  # age
        ),
        max_size=20,
    ),
    st.sets(st.integers(min_value=1, max_value=3)),
)
def test_counts_never_include_down_brokers(
    txns: list[tuple[int, int, int]], down: set[int]
) -> None:
    # Each partition is led by one broker: the topic name carries the leader.
    opens = tuple(
        txn(topic=f"t{leader}", partition=p, leader_id=leader, age_ms=age, producer_id=i)
        for i, (leader, p, age) in enumerate(txns)
    )
    brokers = tuple(
        BrokerStatus(b, b not in down, "down" if b in down else None, 900_000) for b in (1, 2, 3)
    )
    snap = analyze(observation(*opens, brokers=brokers), SETTINGS)
    assert snap.up == (len(down) < 3)
    for summary in snap.brokers:
        partitions = {(t.topic, t.partition) for t in opens if t.leader_id == summary.broker_id}
        if summary.broker_id in down:
            assert not summary.up
            assert summary.partitions_with_open_transactions is None  # unknown, not 0
            assert summary.partitions_with_late_transactions is None
            assert summary.partitions_with_hanging_transactions is None
        else:
            assert summary.up
            assert summary.partitions_with_open_transactions == len(partitions)
            assert summary.partitions_with_late_transactions is not None
            assert summary.partitions_with_hanging_transactions is not None
            assert (
                summary.partitions_with_hanging_transactions
                <= summary.partitions_with_late_transactions
                <= summary.partitions_with_open_transactions
            )


def test_unobserved_lag_states_and_errors_pass_through() -> None:
    tp = TopicPartition("t", 0)
    obs = observation(
        unobserved={TopicPartition("x", 0): "TOPIC_AUTHORIZATION_FAILED"},
        transaction_states={"Ongoing": 2, "Empty": 1},
        last_stable_offset_lag={tp: 4},
        poll_duration_seconds=0.25,
    )
    snap = analyze(obs, SETTINGS)
    assert snap.unobserved_partitions == 1
    assert snap.transaction_states == {"Ongoing": 2, "Empty": 1}
    assert snap.last_stable_offset_lag == {tp: 4}
    assert snap.poll_duration_seconds == 0.25


def test_no_broker_up_means_cluster_down() -> None:
    snap = analyze(observation(brokers=()), SETTINGS)
    assert not snap.up


# -- orphaned (docs/kafka-semantics.md#orphaned) ----------------------------------------------


def test_untracked_count_grows_only_on_consecutive_not_tracked_answers() -> None:
    a, b, c = txn(partition=0).key, txn(partition=1).key, txn(partition=2).key
    counts, undecided = next_untracked_polls(
        {}, {a: Classification.HANGING, b: Classification.COORDINATOR_TRACKED}
    )
    assert counts == {a: 1} and undecided == frozenset()
    counts, undecided = next_untracked_polls(
        counts,
        {a: Classification.HANGING, b: Classification.HANGING, c: Classification.UNKNOWN},
    )
    assert counts == {a: 2, b: 1} and undecided == frozenset({c})
    # Unknown: undecided, and the count starts again; tracked resets it.
    counts, undecided = next_untracked_polls(
        counts, {a: Classification.UNKNOWN, b: Classification.COORDINATOR_TRACKED}
    )
    assert counts == {} and undecided == frozenset({a})
    counts, _ = next_untracked_polls(counts, {a: Classification.HANGING})
    assert counts == {a: 1}
    # A key not asked about (not seen open) is forgotten.
    counts, _ = next_untracked_polls(counts, {b: Classification.HANGING})
    assert counts == {b: 1}


def test_orphaned_needs_two_untracked_polls_and_counts_per_broker() -> None:
    young = txn(partition=0, age_ms=MINUTE_MS, producer_id=3)
    once = txn(partition=1, age_ms=MINUTE_MS, producer_id=4)
    snap = analyze(
        observation(young, once, untracked_polls={young.key: 2, once.key: 1},
                    transactional_ids={3: "hang-1"}),
        SETTINGS,
    )
    (orphan,) = snap.orphaned_transactions
    assert orphan.transaction == young
    assert orphan.classification is Classification.ORPHANED and not orphan.late
    assert orphan.transactional_id == "hang-1" and orphan.untracked_polls == 2
    assert orphan.age_seconds == 60.0
    assert snap.late_transactions == ()
    assert orphaned_transactions([young, once], {young.key: 2, once.key: 1}) == [young]
    broker = snap.brokers[0]
    assert broker.partitions_with_orphaned_transactions == 1
    assert broker.partitions_with_late_transactions == 0


def test_late_orphaned_transaction_keeps_hanging_and_counts_as_orphaned() -> None:
    old = txn(age_ms=30 * MINUTE_MS, producer_id=3)
    snap = analyze(observation(old, untracked_polls={old.key: 3}), SETTINGS)
    (lt,) = snap.late_transactions
    assert lt.classification is Classification.HANGING
    (orphan,) = snap.orphaned_transactions
    assert orphan.late and orphan.classification is Classification.HANGING
    assert snap.brokers[0].partitions_with_orphaned_transactions == 1


def test_orphaned_count_unknown_while_a_suspect_goes_unanswered_or_partitions_unobserved() -> None:
    suspect = txn(partition=0, age_ms=MINUTE_MS)
    snap = analyze(observation(suspect, untracked_unknown=frozenset({suspect.key})), SETTINGS)
    assert snap.brokers[0].partitions_with_orphaned_transactions is None
    assert snap.brokers[0].partitions_with_open_transactions == 1  # the rest stays known
    leaders = {TopicPartition("t", 0): 1, TopicPartition("t", 9): 1}
    snap = analyze(
        replace(
            observation(suspect, untracked_polls={suspect.key: 2}),
            leaders=leaders,
            unobserved={TopicPartition("t", 9): "NOT_LEADER_OR_FOLLOWER"},
        ),
        SETTINGS,
    )
    assert snap.brokers[0].partitions_with_orphaned_transactions is None
    assert len(snap.orphaned_transactions) == 1  # the one seen is still listed


# -- exposure (docs/kafka-semantics.md#exposure) ---------------------------------------------


def test_finalized_transaction_version_unknown_without_features() -> None:
    assert analyze(observation(), SETTINGS).finalized_transaction_version is None


def test_finalized_transaction_version_not_finalized_is_0() -> None:
    features = FinalizedFeatures(epoch=3, levels={"metadata.version": 20})
    snap = analyze(observation(finalized_features=features), SETTINGS)
    assert snap.finalized_transaction_version == 0


def test_finalized_transaction_version_is_the_level() -> None:
    features = FinalizedFeatures(epoch=10, levels={"transaction.version": 2})
    snap = analyze(observation(finalized_features=features), SETTINGS)
    assert snap.finalized_transaction_version == 2


def test_verification_flag_is_unknown_for_a_down_broker() -> None:
    brokers = (
        BrokerStatus(1, True, None, 900_000, partition_verification=PartitionVerification.DISABLED),
        BrokerStatus(2, False, "timeout", 900_000,
                     partition_verification=PartitionVerification.ENABLED),
        BrokerStatus(3, True, None, 900_000),
    )
    snap = analyze(observation(brokers=brokers), SETTINGS)
    assert [b.partition_verification for b in snap.brokers] == [
        PartitionVerification.DISABLED, None, None]


def test_compacted_flag_only_for_topics_of_late_transactions() -> None:
    late_one = txn("compacted-topic", age_ms=30 * MINUTE_MS)
    fresh = txn("fresh-topic", producer_id=8, age_ms=MINUTE_MS)
    unknown = txn("unread-topic", producer_id=9, age_ms=30 * MINUTE_MS)
    obs = observation(
        late_one, fresh, unknown,
        compacted_topics={"compacted-topic": True, "fresh-topic": False},
    )
    snap = analyze(obs, SETTINGS)
    flags = {lt.transaction.topic: lt.topic_compacted for lt in snap.late_transactions}
    assert flags == {"compacted-topic": True, "unread-topic": None}
    assert snap.compacted_topics == {"compacted-topic": True}
# -- blocked consumer groups -----------------------------------------------------------------

GROUP_TP = TopicPartition("t", 0)


def groups_obs(
    *txns: OpenTransaction,
    lso: int = 6,
    hw: int = 11,
    committed: tuple[tuple[str, int, int], ...] = (),
    unknown: dict[TopicPartition, str] | None = None,
    looked_up: bool = True,
    incomplete: str | None = None,
) -> ClusterObservation:
    """An observation of `txns` on t-0 with its LSO/HW and (group, offset, first seen ms)."""
    return observation(
        *txns,
        last_stable_offsets={GROUP_TP: lso},
        high_watermarks={GROUP_TP: hw},
        consumer_groups=ConsumerGroupOffsets(
            partitions=frozenset({GROUP_TP}),
            committed=tuple(CommittedOffset(g, "t", 0, o, seen) for g, o, seen in committed),
            unknown=unknown or {},
            incomplete=incomplete,
        ) if looked_up else None,
    )


def test_group_at_the_lso_with_the_high_watermark_beyond_is_blocked() -> None:
    t = txn(age_ms=60 * MINUTE_MS, start_offset=6)
    obs = groups_obs(t, committed=(("rc", 6, NOW_MS - MINUTE_MS), ("ru", 11, NOW_MS),
                                   ("lagging", 2, NOW_MS)))
    blocked, reason = blocked_groups(t, obs)
    assert reason is None
    assert [(g.group_id, g.committed_offset, g.blocked_seconds) for g in blocked] == [
        ("rc", 6, 60.0)
    ]
    (lt,) = analyze(obs, SETTINGS).late_transactions
    assert [g.group_id for g in lt.blocked_groups] == ["rc"]
    assert lt.blocked_groups_unknown is None


def test_nothing_past_the_lso_blocks_nobody_even_without_a_lookup() -> None:
    t = txn(age_ms=60 * MINUTE_MS, start_offset=6)
    assert blocked_groups(t, groups_obs(t, lso=6, hw=6, looked_up=False)) == ((), None)


def test_a_late_transaction_not_holding_the_lso_stops_no_group_itself() -> None:
    older = txn(age_ms=90 * MINUTE_MS, start_offset=6, producer_id=1)
    newer = txn(age_ms=60 * MINUTE_MS, start_offset=8, producer_id=2)
    obs = groups_obs(older, newer, committed=(("rc", 6, NOW_MS),))
    assert [g.group_id for g in blocked_groups(older, obs)[0]] == ["rc"]
    assert blocked_groups(newer, obs) == ((), None)


def test_unreadable_groups_are_unknown_with_a_reason_never_none_blocked() -> None:
    t = txn(age_ms=60 * MINUTE_MS, start_offset=6)
    obs = groups_obs(t, committed=(("rc", 6, NOW_MS),),
                     unknown={GROUP_TP: "GROUP_AUTHORIZATION_FAILED"})
    assert blocked_groups(t, obs) == ((), UnobservedReason.UNAUTHORIZED)
    snap = analyze(obs, SETTINGS)
    assert snap.late_transactions[0].blocked_groups_unknown == "unauthorized"
    assert snap.blocked_groups_unknown_by_reason == {"unauthorized": 1}
    # Not looked up at all (cannot happen in a poll) is unknown too, not "none".
    assert blocked_groups(t, groups_obs(t, looked_up=False))[1] is UnobservedReason.ERROR
    # The LSO itself could not be read.
    no_lso = replace(obs, last_stable_offsets={}, high_watermarks={},
                     consumer_groups=ConsumerGroupOffsets(
                         partitions=frozenset({GROUP_TP}),
                         unknown={GROUP_TP: "BROKER_UNREACHABLE"}))
    assert blocked_groups(t, no_lso)[1] is UnobservedReason.BROKER_DOWN


def test_an_incomplete_group_list_keeps_the_groups_found_and_makes_the_count_unknown() -> None:
    """Without Describe on the cluster ListGroups may have left groups out: those found at the
    LSO are blocked (true), how many are blocked is not known."""
    t = txn(age_ms=60 * MINUTE_MS, start_offset=6)
    obs = groups_obs(t, committed=(("rc", 6, NOW_MS), ("ru", 11, NOW_MS)),
                     incomplete="CLUSTER_AUTHORIZATION_FAILED")
    blocked, reason = blocked_groups(t, obs)
    assert [g.group_id for g in blocked] == ["rc"] and reason is UnobservedReason.UNAUTHORIZED
    snap = analyze(obs, SETTINGS)
    (lt,) = snap.late_transactions
    assert [g.group_id for g in lt.blocked_groups] == ["rc"]
    assert lt.blocked_groups_unknown == "unauthorized"
    assert snap.blocked_groups_unknown_by_reason == {"unauthorized": 1}
    # None found is no "0" either.
    assert blocked_groups(t, groups_obs(t, incomplete="CLUSTER_AUTHORIZATION_FAILED")) == (
        (), UnobservedReason.UNAUTHORIZED)
    # Not known whether the list is complete: unknown with the detail's reason.
    assert blocked_groups(t, groups_obs(t, incomplete="UNSUPPORTED_VERSION"))[1] is (
        UnobservedReason.UNSUPPORTED_API)
    assert blocked_groups(t, groups_obs(
        t, incomplete="CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN"))[1] is UnobservedReason.ERROR
    # What holds whatever the listing: nothing past the LSO, or another transaction holds it.
    assert blocked_groups(t, groups_obs(t, lso=6, hw=6, incomplete="x")) == ((), None)
    newer = txn(age_ms=30 * MINUTE_MS, start_offset=8, producer_id=2)
    assert blocked_groups(newer, groups_obs(t, newer, incomplete="x")) == ((), None)


def test_an_orphaned_transaction_not_yet_late_reports_the_groups_it_blocks() -> None:
    young = txn(age_ms=MINUTE_MS, start_offset=6)
    obs = replace(groups_obs(young, committed=(("rc", 6, NOW_MS),)),
                  untracked_polls={young.key: 2})
    snap = analyze(obs, SETTINGS)
    assert snap.late_transactions == ()
    (orphan,) = snap.orphaned_transactions
    assert [g.group_id for g in orphan.blocked_groups] == ["rc"]
    assert orphan.blocked_groups_unknown is None
