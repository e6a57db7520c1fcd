"""The orphan tracker: the memory across polls that turns each poll's coordinator answers into
the consecutive "not tracked" count of every open transaction (docs/kafka-semantics.md#orphaned).

It sits between collect and analyze: the poller reports what Kafka answered in one poll (open
transactions, the coordinators' view, the partitions it could not observe), `track` adds that
poll to the tracker's state and fills the observation's `untracked_polls`,
`untracked_unknown` and `orphan_detection_warm`, which `analyze` reports. The state is a plain
immutable value (`OrphanTracking`): `next_state, observation = track(state, observation)`. Its
`focus()` tells the next poll which transactions to ask the coordinators about. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from exporter.model import (
    Classification,
    ClusterObservation,
    OpenTransaction,
    PollFocus,
    TopicPartition,
    TxnKey,
)
from exporter.rules import ORPHANED_AFTER_POLLS, classify, is_orphaned

__all__ = [
    "OrphanTracking",
    "carried_counts",
    "next_untracked_polls",
    "orphaned_transactions",
    "track",
]


@dataclass(frozen=True, slots=True)
class OrphanTracking:
    """What the polls so far leave for the next one; the initial value is a fresh start."""

    seen_open: frozenset[TxnKey] = frozenset()
    """Open transactions of the previous poll (and those on partitions it could not observe,
    seen before): asked about if still open."""
    untracked_polls: Mapping[TxnKey, int] = field(default_factory=dict)
    """Consecutive not-tracked answers per key, kept across an interrupted check."""
    interrupted: frozenset[TxnKey] = frozenset()
    """Open transactions whose answers have a gap (a poll that could not observe their
    partition, or an unknown answer): orphaned or not is unknown until decided."""
    unobserved_before: frozenset[TopicPartition] | None = frozenset()
    """Partitions the previous poll could not observe (None: the whole poll failed)."""
    polled_before: bool = False
    answered_polls: int = 0
    """Consecutive polls whose coordinator answers extended `untracked_polls`: once they
    reach ORPHANED_AFTER_POLLS, an orphan untracked all along is reported (warm)."""

    def focus(self) -> PollFocus:
        """What the next poll must ask: the coordinators' answer for every transaction seen
        open before, and which of them one more "not tracked" answer makes orphaned."""
        counts = self.untracked_polls
        return PollFocus(
            describe=self.seen_open,
            orphaned_if_untracked=frozenset(
                key for key in self.seen_open if is_orphaned(counts.get(key, 0) + 1)
            ),
        )

    def sizes(self) -> dict[str, int]:
        """Entries held between polls (each bounded by what is open)."""
        return {
            "seen_open": len(self.seen_open),
            "untracked_polls": len(self.untracked_polls),
            "interrupted": len(self.interrupted),
        }


def track(
    previous: OrphanTracking, observation: ClusterObservation
) -> tuple[OrphanTracking, ClusterObservation]:
    """Add one poll (asked with `previous.focus()`) to the tracking: the next state, and the
    observation with this poll's not-tracked counts, its undecided transactions and whether
    the verdicts are warm.

    A poll whose Metadata failed (no broker answered) is no evidence: the counts stand, and
    what is first seen next is undecided (it may have been open through this poll)."""
    if not observation.metadata_answered:
        return replace(previous, unobserved_before=None), observation
    open_txns = observation.open_transactions
    unobserved = observation.unobserved
    seen_before = previous.seen_open
    # Only answers given after a poll saw the transaction open count towards orphaned: the
    # listing may predate a transaction seen for the first time (one that looks late at once,
    # e.g. from a producer whose clock is behind, included).
    answers: dict[TxnKey, Classification] = {
        txn.key: classify(
            txn,
            observation.transactional_ids,
            observation.descriptions,
            observation.coordinator_view_complete,
        )
        for txn in open_txns
        if txn.key in seen_before
    }
    previous_counts = previous.untracked_polls
    untracked_polls, untracked_unknown = next_untracked_polls(previous_counts, answers)
    interrupted = _undecided_after_gap(
        previous, open_txns, answers, untracked_polls, untracked_unknown
    )
    untracked_unknown |= interrupted
    # A key on a partition not observed this poll keeps its count too (not evidence).
    carried = set(untracked_unknown) | {
        key for key in previous_counts if TopicPartition(key[0], key[1]) in unobserved
    }
    # The first poll after start asks about nothing (nothing was seen open before it).
    answered_polls = previous.answered_polls + 1 if previous.polled_before else 0
    state = OrphanTracking(
        seen_open=frozenset({txn.key for txn in open_txns} | {
            key for key in seen_before if TopicPartition(key[0], key[1]) in unobserved
        }),
        untracked_polls=carried_counts(previous_counts, untracked_polls, carried),
        interrupted=interrupted,
        unobserved_before=frozenset(unobserved),
        polled_before=True,
        answered_polls=answered_polls,
    )
    return state, replace(
        observation,
        untracked_polls=untracked_polls,
        untracked_unknown=untracked_unknown,
        orphan_detection_warm=answered_polls >= ORPHANED_AFTER_POLLS,
    )


def _undecided_after_gap(
    previous: OrphanTracking,
    open_txns: Iterable[OpenTransaction],
    answers: Mapping[TxnKey, Classification],
    untracked_polls: Mapping[TxnKey, int],
    unanswered: frozenset[TxnKey],
) -> frozenset[TxnKey]:
    """Transactions seen right after a poll that could not observe their partition have a gap
    in their consecutive answers (they may have been open, and untracked, through it): until
    the rule decides them (orphaned, or tracked), whether they are orphaned is unknown, not
    "no". Returns those still undecided (the next state's `interrupted`)."""
    before = previous.unobserved_before
    open_txns = list(open_txns)
    open_keys = {t.key for t in open_txns}
    # An unknown answer is a gap too: the next answer alone is not "two consecutive".
    gap = {k for k in previous.interrupted if k in open_keys} | set(unanswered)
    for txn in open_txns:
        if before is None or TopicPartition(txn.topic, txn.partition) in before:
            gap.add(txn.key)
    decided = {
        k for k in gap
        if answers.get(k) is Classification.COORDINATOR_TRACKED
        or is_orphaned(untracked_polls.get(k, 0))
    }
    return frozenset(gap - decided)


def next_untracked_polls(
    previous: Mapping[TxnKey, int], answers: Mapping[TxnKey, Classification]
) -> tuple[dict[TxnKey, int], frozenset[TxnKey]]:
    """This poll's consecutive not-tracked counts, from the previous poll's and this poll's
    coordinator answers (`classify` of each transaction asked about: HANGING = not tracked).

    A key not asked about this poll is dropped (not seen open, or not asked): the count
    restarts. "Tracked" resets it, so only "not tracked" answers make an orphan. An unknown
    answer (the check was interrupted: an error, a coordinator loading or moving) is not
    evidence either way: the key is undecided, so its broker's count is absent,
    and its count is neither advanced nor reset. Returns the counts of the keys answered not
    tracked this poll, and the undecided keys; `carried_counts` gives the undecided keys'
    counts to remember for the next poll."""
    counts: dict[TxnKey, int] = {}
    undecided: set[TxnKey] = set()
    for key, answer in answers.items():
        if answer is Classification.HANGING:
            counts[key] = previous.get(key, 0) + 1
        elif answer is Classification.UNKNOWN:
            undecided.add(key)
    return counts, frozenset(undecided)


def carried_counts(
    previous: Mapping[TxnKey, int], counts: Mapping[TxnKey, int], carried: Iterable[TxnKey]
) -> dict[TxnKey, int]:
    """The not-tracked counts to remember for the next poll: this poll's, plus the previous
    count of each key whose check was interrupted (`carried`), so a transaction already
    orphaned is orphaned again at the first successful check."""
    memory = dict(counts)
    for key in carried:
        if key not in memory and key in previous:
            memory[key] = previous[key]
    return memory


def orphaned_transactions(
    open_transactions: Iterable[OpenTransaction], untracked_polls: Mapping[TxnKey, int]
) -> list[OpenTransaction]:
    """The open transactions that are orphaned (late or not): what a caller that acts on
    them (e.g. a consumer-group lookup) asks about besides the late ones."""
    return [t for t in open_transactions if is_orphaned(untracked_polls.get(t.key, 0))]
