"""One poll of one cluster: Metadata -> DescribeProducers -> start times -> thresholds ->
LSO lag -> coordinator view and, only for partitions with a late or orphaned transaction or
one at least `blocked_groups_min_age_seconds` old, the consumer groups' committed offsets,
gathered into a `ClusterObservation`.

`ClusterPoller` only wires the phases; each is a collaborator with its own cache
(`producers`, `start_times`, `broker_config`, `coordinators`, `lso`, `groups`), and every
answer is read by the pure parsers of `collect.parse`. `poll()` is synchronous so a
scheduler thread can call it; the poll runs on the process's one polling loop
(`collect.loop`: every cluster shares it, so a cluster costs no descriptor besides its broker
connections, which live on that loop and are reused between polls). Errors are kept per
partition / per id and never crash the poll.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from exporter.analyze import (
    carried_counts,
    classify,
    next_untracked_polls,
    orphaned_transactions,
)
from exporter.collect.broker_config import BrokerConfigReader
from exporter.collect.client import ClusterClient, MetadataView
from exporter.collect.connection import CollectError
from exporter.collect.coordinators import CoordinatorReader
from exporter.collect.groups import ConsumerGroupReader
from exporter.collect.loop import run as run_on_loop
from exporter.collect.lso import LastStableOffsetReader, StableOffsets
from exporter.collect.pollstate import ApiSupportLog, PollState, wall_clock_ms
from exporter.collect.producers import ProducerStateReader
from exporter.collect.start_times import StartTimeResolver
from exporter.collect.topic_config import TopicConfigReader
from exporter.logs import get_logger
from exporter.model import (
    BrokerStatus,
    Classification,
    ClusterObservation,
    OpenTransaction,
    PollPhase,
    TopicPartition,
    TxnKey,
)
from exporter.rules import (
    ORPHANED_AFTER_POLLS,
    blocked_groups_min_age_ms,
    effective_max_timeout_ms,
    is_late,
    is_old_enough_for_groups,
    is_orphaned,
    late_buffer_ms,
)
from exporter.settings import ClusterSettings

__all__ = ["ClusterPoller", "wall_clock_ms"]

log = get_logger()


class ClusterPoller:
    """Polls one cluster, one poll at a time."""

    def __init__(
        self,
        settings: ClusterSettings,
        clock_ms: Callable[[], int] = wall_clock_ms,
        also_ask: Callable[[OpenTransaction], bool] | None = None,
        screen_crowded_partitions: bool = True,
    ) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self._also_ask = also_ask
        """Open transactions to ask coordinators about even on the first poll (abort: the
        one it may abort, so a young two-phase-commit transaction is recognised)."""
        self._lock = threading.Lock()
        self._client = ClusterClient(settings)
        self._support = ApiSupportLog(settings.name)
        self._producers = ProducerStateReader(
            self._client, settings, self._support, screening=screen_crowded_partitions
        )
        """`screen_crowded_partitions`=False: DescribeProducers for every partition every
        poll (the reference of the differential test, tests/collect/test_screening_*)."""
        self._start_times = StartTimeResolver(self._client)
        self._broker_config = BrokerConfigReader(self._client, settings)
        self._topic_config = TopicConfigReader(self._client, settings)
        self._coordinators = CoordinatorReader(self._client, self._support)
        self._lso = LastStableOffsetReader(self._client)
        self._groups = ConsumerGroupReader(self._client, self._support, settings)
        self._down_logged: set[int] = set()
        self._seen_open: set[TxnKey] = set()
        """Open transactions of the previous poll: asked about if still open (#orphaned)."""
        self._untracked_polls: dict[TxnKey, int] = {}
        """Consecutive not-tracked answers per key, kept across an interrupted check."""
        self._unobserved_before: set[TopicPartition] | None = set()
        """Partitions the previous poll could not observe (None: the whole poll failed)."""
        self._interrupted: set[TxnKey] = set()
        """Open transactions whose answers have a gap (a poll that could not observe their
        partition): orphaned or not is unknown until decided."""
        self._polled_before = False
        self._answered_polls = 0
        """Consecutive polls whose coordinator answers extended `_untracked_polls`: once they
        reach ORPHANED_AFTER_POLLS, an orphan untracked all along is reported (warm)."""
        self._closed = False
        self.metadata_error: CollectError | None = None
        """Why the last poll's Metadata failed (no broker answered); None when it answered.
        `scan` names the cause from it (authentication, TLS, unreachable, timeout)."""

    def poll(self) -> ClusterObservation:
        """One poll, from any thread but the polling loop's (the one-shot commands)."""
        with self._lock:
            return run_on_loop(self.poll_async())

    async def poll_async(self) -> ClusterObservation:
        """One poll, on the polling loop (the daemon's scheduler): no thread waits for it."""
        if self._closed:
            raise RuntimeError("poller is closed")
        return await self._poll()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # Polls only add connections, under this lock: with none kept (a cluster that
            # refused them) there is nothing to close, and no trip to the loop for it.
            if self._client.pool.holds_connections:
                run_on_loop(self._client.close())

    def cache_sizes(self) -> dict[str, int]:
        """Entries held between polls, per cache (each must stay bounded by what is open)."""
        return {
            **self._start_times.cache_sizes(),
            **self._broker_config.cache_sizes(),
            **self._topic_config.cache_sizes(),
            **self._coordinators.cache_sizes(),
            "seen_open": len(self._seen_open),
            "untracked_polls": len(self._untracked_polls),
            "interrupted": len(self._interrupted),
            **self._groups.cache_sizes(),
            "down_logged": len(self._down_logged),
            "unsupported_logged": len(self._support),
        }

    async def _poll(self) -> ClusterObservation:
        started = time.monotonic()
        client = self._client
        client.begin_poll()
        state = PollState(now_ms=self._clock_ms())
        try:
            meta = await state.timed(PollPhase.METADATA, client.metadata())
        except CollectError as exc:
            self.metadata_error = exc
            log.warning("metadata_failed", cluster=self.settings.name, error=str(exc))
            state.error(-1, "Metadata", exc.kind)
            # No answer is no evidence: the counts stand, and what is first seen next is
            # undecided (it may have been open through this poll).
            self._unobserved_before = None
            return ClusterObservation(
                cluster=self.settings.name,
                observed_at_ms=state.now_ms,
                brokers=(),
                leaders={},
                open_transactions=(),
                coordinator_view_complete=False,
                transaction_states=None,
                request_errors=tuple(state.request_errors),
                poll_duration_seconds=time.monotonic() - started,
                poll_phase_seconds=state.phase_seconds,
            )
        self.metadata_error = None
        state.unobserved.update(meta.leaderless)

        timed = state.timed
        listed, _, _ = await asyncio.gather(
            timed(PollPhase.LIST_TRANSACTIONS, self._coordinators.list_transactions(meta, state)),
            timed(PollPhase.DESCRIBE_PRODUCERS, self._producers.read(meta, state)),
            timed(PollPhase.BROKER_CONFIGS, self._broker_config.refresh(meta, state)),
        )
        open_txns, offsets = await asyncio.gather(
            timed(PollPhase.START_TIMES, self._start_times.resolve(meta, state)),
            timed(PollPhase.LIST_OFFSETS, self._lso.read(state)),
        )
        late = self._late_rule(state.now_ms)
        seen_before = self._seen_open
        min_age_ms = blocked_groups_min_age_ms(self.settings)
        now_ms = state.now_ms

        def old_enough(txn: OpenTransaction) -> bool:
            return is_old_enough_for_groups(txn, now_ms, min_age_ms)

        def ask(txn: OpenTransaction) -> bool:
            # A transaction seen open only once costs nothing: most end before the next poll.
            # One old enough to block consumers is asked at once (its classification is shown
            # with the groups it blocks, also on the first poll after a start).
            return (
                txn.key in seen_before
                or late(txn)
                or old_enough(txn)
                or (self._also_ask is not None and self._also_ask(txn))
            )

        coordinator_view = await timed(
            PollPhase.DESCRIBE_TRANSACTIONS,
            self._coordinators.view(listed, open_txns, ask, meta, state),
        )
        self._start_times.evict_closed(state, meta)
        # Only answers given after a poll saw the transaction open count towards orphaned:
        # the listing may predate a transaction seen for the first time (one that looks late
        # at once, e.g. from a producer whose clock is behind, included).
        answers: dict[TxnKey, Classification] = {
            txn.key: classify(
                txn,
                coordinator_view.transactional_ids,
                coordinator_view.descriptions,
                coordinator_view.complete,
            )
            for txn in open_txns
            if txn.key in seen_before
        }
        previous_counts = self._untracked_polls
        untracked_polls, untracked_unknown = next_untracked_polls(previous_counts, answers)
        untracked_unknown |= self._undecided_after_gap(
            open_txns, answers, untracked_polls, untracked_unknown
        )
        # A key on a partition not observed this poll keeps its count too (not evidence).
        carried = set(untracked_unknown) | {
            key for key in previous_counts if TopicPartition(key[0], key[1]) in state.unobserved
        }
        self._untracked_polls = carried_counts(previous_counts, untracked_polls, carried)
        self._seen_open = {txn.key for txn in open_txns} | {
            key for key in seen_before if TopicPartition(key[0], key[1]) in state.unobserved
        }
        self._unobserved_before = set(state.unobserved)
        # The first poll after start asks about nothing (nothing was seen open before it).
        self._answered_polls = self._answered_polls + 1 if self._polled_before else 0
        self._polled_before = True
        # Only behind late or orphaned transactions: compacted topics; behind those and any
        # old enough to block consumers (a lingering one, not late): blocked groups. While no
        # transaction is that old, nothing more is read.
        affected = [*filter(late, open_txns), *orphaned_transactions(open_txns, untracked_polls)]
        to_look_at, not_comparable = _blocked_group_candidates(
            [*affected, *filter(old_enough, open_txns)], offsets
        )
        compacted_topics, group_offsets = await asyncio.gather(
            timed(
                PollPhase.TOPIC_CONFIGS,
                self._topic_config.compacted({t.topic for t in affected}, meta, state),
            ),
            timed(
                PollPhase.CONSUMER_GROUPS,
                self._groups.read(to_look_at, not_comparable, meta, state),
            ),
        )

        return ClusterObservation(
            cluster=self.settings.name,
            observed_at_ms=state.now_ms,
            brokers=self._broker_statuses(meta, state),
            leaders=meta.leaders,
            open_transactions=tuple(open_txns),
            unobserved=state.unobserved,
            transactional_ids=coordinator_view.transactional_ids,
            descriptions=coordinator_view.descriptions,
            coordinator_view_complete=coordinator_view.complete,
            coordinator_view_unsupported=frozenset(state.unsupported_apis),
            transaction_states=coordinator_view.states,
            last_stable_offset_lag=offsets.lag,
            request_errors=tuple(state.request_errors),
            poll_duration_seconds=time.monotonic() - started,
            poll_phase_seconds=state.phase_seconds,
            untracked_polls=untracked_polls,
            untracked_unknown=untracked_unknown,
            finalized_features=self._broker_config.finalized_features(),
            compacted_topics=compacted_topics,
            high_watermarks=offsets.high_watermarks,
            last_stable_offsets=offsets.last_stable_offsets,
            consumer_groups=group_offsets,
            orphan_detection_warm=self._answered_polls >= ORPHANED_AFTER_POLLS,
        )

    def _undecided_after_gap(
        self,
        open_txns: list[OpenTransaction],
        answers: dict[TxnKey, Classification],
        untracked_polls: dict[TxnKey, int],
        unanswered: frozenset[TxnKey],
    ) -> frozenset[TxnKey]:
        """Transactions seen right after a poll that could not observe their partition have a
        gap in their consecutive answers (they may have been open, and untracked, through it):
        until the rule decides them (orphaned, or tracked), whether they are orphaned is
        unknown, not "no"."""
        before = self._unobserved_before
        open_keys = {t.key for t in open_txns}
        # An unknown answer is a gap too: the next answer alone is not "two consecutive".
        gap = {k for k in self._interrupted if k in open_keys} | set(unanswered)
        for txn in open_txns:
            if before is None or TopicPartition(txn.topic, txn.partition) in before:
                gap.add(txn.key)
        decided = {
            k for k in gap
            if answers.get(k) is Classification.COORDINATOR_TRACKED
            or is_orphaned(untracked_polls.get(k, 0))
        }
        self._interrupted = gap - decided
        return frozenset(self._interrupted)

    def _late_rule(self, now_ms: int) -> Callable[[OpenTransaction], bool]:
        """`rules.is_late` with each leader's threshold: ids to ask coordinators about."""
        buffer_ms = late_buffer_ms(self.settings)
        max_timeout_ms = self._broker_config.max_timeout_ms

        def late(txn: OpenTransaction) -> bool:
            threshold_ms = effective_max_timeout_ms(self.settings, max_timeout_ms(txn.leader_id))
            return is_late(txn, now_ms, threshold_ms, buffer_ms)

        return late

    def _broker_statuses(self, meta: MetadataView, state: PollState) -> tuple[BrokerStatus, ...]:
        # A broker missing from Metadata but still named as a replica is down, not gone.
        ids = set(meta.brokers) | meta.replica_ids
        statuses: list[BrokerStatus] = []
        for broker_id in sorted(ids):
            error = self._client.down.get(broker_id)
            if error is None and broker_id not in meta.brokers:
                reason: str | None = "not in metadata"
            else:
                reason = None if error is None else f"{error.kind}: {error}"
            if reason is not None and broker_id not in self._down_logged:
                self._down_logged.add(broker_id)
                log.warning(
                    "broker_down", cluster=self.settings.name, broker_id=broker_id, error=reason
                )
            elif reason is None:
                self._down_logged.discard(broker_id)
            observable = broker_id not in state.unobservable_brokers
            if observable:
                self._support.supported(broker_id, "DescribeProducers")
            statuses.append(
                BrokerStatus(
                    broker_id=broker_id,
                    up=reason is None,
                    error=reason,
                    transaction_max_timeout_ms=self._broker_config.max_timeout_ms(broker_id),
                    observable=observable,
                    partition_verification=(
                        self._broker_config.partition_verification(broker_id)
                        if reason is None else None
                    ),
                )
            )
        return tuple(statuses)


def _blocked_group_candidates(
    affected: list[OpenTransaction], offsets: StableOffsets
) -> tuple[list[TopicPartition], dict[TopicPartition, str]]:
    """Partitions of the `affected` (late, orphaned or old enough) transactions whose groups
    need a look
    (the high watermark is past the LSO: otherwise no group can be stopped there), and those
    whose LSO could not be read (their groups are unknown)."""
    look: list[TopicPartition] = []
    unknown: dict[TopicPartition, str] = {}
    for tp in {TopicPartition(t.topic, t.partition) for t in affected}:
        stable = offsets.last_stable_offsets.get(tp)
        if stable is None:
            unknown[tp] = offsets.failed.get(tp, "MISSING_FROM_ANSWER")
        elif offsets.high_watermarks[tp] > stable:
            look.append(tp)
    return look, unknown
