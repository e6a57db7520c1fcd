"""The orphan tracker (exporter/orphans.py) on its own: a pure value carried from poll to poll.
Rules: docs/kafka-semantics.md#orphaned. The end-to-end verdicts (poller + tracker + analyze)
are tested in tests/collect/test_orphaned_*.py and on real brokers."""

from __future__ import annotations

from dataclasses import replace

from exporter_factories import NOW_MS, open_txn

from exporter.model import (
    BrokerStatus,
    ClusterObservation,
    OpenTransaction,
    TopicPartition,
    TransactionDescription,
)
from exporter.orphans import OrphanTracking, track

TXN = open_txn("t", 0, producer_id=7, age_ms=5_000)  # young: never late here
BROKERS = (BrokerStatus(broker_id=1, up=True),)


def answered(*txns: OpenTransaction, tracked: bool = False, complete: bool = True,
             unobserved: dict[TopicPartition, str] | None = None) -> ClusterObservation:
    """One poll's answer: `txns` open; their producers map to "app" whose description lists
    the partition when `tracked` (else lists nothing: not tracked)."""
    partitions = frozenset(TopicPartition(t.topic, t.partition) for t in txns) if tracked else (
        frozenset())
    return ClusterObservation(
        cluster="c", observed_at_ms=NOW_MS, brokers=BROKERS,
        leaders={TopicPartition(t.topic, t.partition): 1 for t in txns},
        open_transactions=txns,
        unobserved=unobserved or {},
        transactional_ids={t.producer_id: "app" for t in txns},
        descriptions={"app": TransactionDescription(
            "app", "Ongoing", 60_000, NOW_MS, 7, 0, partitions)},
        coordinator_view_complete=complete,
    )


FAILED = ClusterObservation(cluster="c", observed_at_ms=NOW_MS, brokers=(), leaders={},
                            open_transactions=(), metadata_answered=False,
                            coordinator_view_complete=False)


def run(state: OrphanTracking, *polls: ClusterObservation) -> tuple[
        OrphanTracking, list[ClusterObservation]]:
    seen = []
    for poll in polls:
        state, obs = track(state, poll)
        seen.append(obs)
    return state, seen


def test_the_first_poll_asks_nothing_and_the_next_asks_what_it_saw_open() -> None:
    fresh = OrphanTracking()
    assert fresh.focus().describe == frozenset()
    state, (first,) = run(fresh, answered(TXN))
    assert first.untracked_polls == {} and not first.orphan_detection_warm
    assert state.focus().describe == {TXN.key}
    assert state.focus().orphaned_if_untracked == frozenset()  # one answer is not evidence


def test_two_consecutive_untracked_answers_make_an_orphan_and_the_focus_says_so_before() -> None:
    state, seen = run(OrphanTracking(), answered(TXN), answered(TXN))
    assert seen[1].untracked_polls == {TXN.key: 1}
    # The next "not tracked" makes it orphaned: the poller reads its groups then.
    assert state.focus().orphaned_if_untracked == {TXN.key}
    state, (third,) = run(state, answered(TXN))
    assert third.untracked_polls == {TXN.key: 2} and third.orphan_detection_warm


def test_tracked_resets_the_count() -> None:
    _, seen = run(OrphanTracking(), answered(TXN), answered(TXN),
                  answered(TXN, tracked=True), answered(TXN))
    assert [o.untracked_polls for o in seen] == [{}, {TXN.key: 1}, {}, {TXN.key: 1}]


def test_a_failed_poll_keeps_the_counts_and_what_follows_it_is_undecided() -> None:
    state, _ = run(OrphanTracking(), answered(TXN), answered(TXN))
    after_failure, (failed,) = run(state, FAILED)
    assert failed is FAILED  # nothing to add: no evidence
    assert after_failure.untracked_polls == state.untracked_polls
    # Seen again right after the gap: its count goes on, but a new transaction is undecided.
    other = open_txn("t", 1, producer_id=7, start_offset=9, age_ms=5_000)
    _, (next_obs,) = run(after_failure, answered(TXN, other))
    assert next_obs.untracked_polls == {TXN.key: 2}
    assert other.key in next_obs.untracked_unknown


def test_an_incomplete_coordinator_view_is_undecided_and_keeps_the_count() -> None:
    state, _ = run(OrphanTracking(), answered(TXN), answered(TXN))
    # A coordinator's listing is missing: the producer's id is unknown.
    no_answer = replace(answered(TXN), transactional_ids={}, coordinator_view_complete=False)
    state, (unknown,) = run(state, no_answer)
    assert TXN.key in unknown.untracked_unknown and unknown.untracked_polls == {}
    assert state.untracked_polls == {TXN.key: 1}


def test_track_is_pure_the_same_state_and_poll_give_the_same_answer() -> None:
    state, _ = run(OrphanTracking(), answered(TXN), answered(TXN))
    before = (state.seen_open, dict(state.untracked_polls), state.interrupted,
              state.answered_polls)
    first = track(state, answered(TXN))
    again = track(state, answered(TXN))
    assert first == again
    assert (state.seen_open, dict(state.untracked_polls), state.interrupted,
            state.answered_polls) == before
