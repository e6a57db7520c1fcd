"""One poll of one cluster: Metadata (the previous poll's answer while nothing says it changed,
`collect.metadata_age`) -> DescribeProducers -> start times -> thresholds ->
LSO lag -> coordinator view and, only for partitions with a late or orphaned transaction or
one at least `blocked_groups_min_age_seconds` old, the consumer groups' committed offsets,
gathered into a `ClusterObservation`.

`ClusterPoller` only wires the phases; each is a collaborator with its own cache
(`producers`, `start_times`, `broker_config`, `coordinators`, `lso`, `groups`), and every
answer is read by the pure parsers of `collect.apis` and `collect.parse`. `poll()` is
synchronous so a scheduler thread can call it; the poll runs on the process's one polling loop
(`collect.loop`: every cluster shares it, so a cluster costs no descriptor besides its broker
connections, which live on that loop and are reused between polls). Errors are kept per
partition / per id and never crash the poll.

The poller reports what Kafka answered in this poll; it keeps no verdict across polls. The
orphan tracker (`exporter.orphans`, wired with the poller by `exporter.observe`) keeps that
memory and tells each poll, by its `PollFocus`, which transactions to ask coordinators about.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from exporter.collect.broker_config import BrokerConfigReader
from exporter.collect.client import ClusterClient, MetadataView
from exporter.collect.connection import CollectError
from exporter.collect.coordinators import CoordinatorReader, CoordinatorView
from exporter.collect.driver import Driver
from exporter.collect.groups import ConsumerGroupReader
from exporter.collect.loop import run as run_on_loop
from exporter.collect.lso import LastStableOffsetReader, StableOffsets
from exporter.collect.metadata_age import MetadataRefresh, refresh_reason, stale_after
from exporter.collect.pollstate import ApiSupportLog, PollState, wall_clock_ms
from exporter.collect.producers import ProducerStateReader
from exporter.collect.start_times import StartTimeResolver
from exporter.collect.topic_config import TopicConfigReader
from exporter.logs import get_logger
from exporter.model import (
    BrokerStatus,
    Classification,
    ClusterObservation,
    ConsumerGroupOffsets,
    OpenTransaction,
    PollFocus,
    PollPhase,
    TopicPartition,
)
from exporter.rules import (
    blocked_groups_min_age_ms,
    classify,
    effective_max_timeout_ms,
    is_late,
    is_old_enough_for_groups,
    late_buffer_ms,
)
from exporter.settings import ClusterSettings

__all__ = ["NO_FOCUS", "ClusterPoller", "wall_clock_ms"]

log = get_logger()
_READER_TURNS = 3
NO_FOCUS = PollFocus()
"""Nothing asked of the poll by earlier ones: as the first poll after a start."""


class ClusterPoller:
    """Polls one cluster, one poll at a time."""

    def __init__(
        self,
        settings: ClusterSettings,
        clock_ms: Callable[[], int] = wall_clock_ms,
        also_ask: Callable[[OpenTransaction], bool] | None = None,
        screen_partitions: bool = True,
    ) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self._also_ask = also_ask
        """Open transactions to ask coordinators about even on the first poll (abort: the
        one it may abort, so a young two-phase-commit transaction is recognised)."""
        self._lock = threading.Lock()
        self._client = ClusterClient(settings)
        self._support = ApiSupportLog(settings.name)
        driver = Driver(self._client, self._support)
        """The one admin driver every reader's requests run on."""
        self._producers = ProducerStateReader(driver, settings, screening=screen_partitions)
        """`screen_partitions`=False: DescribeProducers for every partition every
        poll (the reference of the differential test, tests/collect/test_screening_*)."""
        self._start_times = StartTimeResolver(self._client)
        self._broker_config = BrokerConfigReader(driver, settings)
        self._topic_config = TopicConfigReader(driver, settings)
        self._coordinators = CoordinatorReader(driver)
        self._lso = LastStableOffsetReader(driver)
        self._groups = ConsumerGroupReader(driver, settings)
        self._down_logged: set[int] = set()
        self._closed = False
        self._metadata_stale: MetadataRefresh | None = MetadataRefresh.START
        """Why the next poll must ask Metadata (what the last poll saw); None: it may reuse
        the last answer while younger than `metadata_max_age_seconds`."""
        self._metadata_read_at = 0.0
        """time.monotonic() of the last full Metadata answer."""
        self.metadata_refreshes: dict[MetadataRefresh, int] = {}
        """Full Metadata requests answered since the start, by why they were asked."""
        self.metadata_error: CollectError | None = None
        """Why the last poll's Metadata failed (no broker answered); None when it answered.
        `scan` names the cause from it (authentication, TLS, unreachable, timeout)."""

    def poll(self, focus: PollFocus = NO_FOCUS) -> ClusterObservation:
        """One poll, from any thread but the polling loop's (the one-shot commands)."""
        with self._lock:
            return run_on_loop(self.poll_async(focus))

    async def poll_async(self, focus: PollFocus = NO_FOCUS) -> ClusterObservation:
        """One poll, on the polling loop (the daemon's scheduler): no thread waits for it.
        `focus`: what earlier polls ask of this one (the orphan tracker's, `exporter.orphans`);
        without it, the poll asks as the first after a start does."""
        if self._closed:
            raise RuntimeError("poller is closed")
        return await self._poll(focus)

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
            **self._groups.cache_sizes(),
            "down_logged": len(self._down_logged),
            "unsupported_logged": len(self._support),
        }

    async def _poll(self, focus: PollFocus) -> ClusterObservation:
        started = time.monotonic()
        self._client.begin_poll()
        state = PollState(now_ms=self._clock_ms())
        try:
            meta, refreshed = await state.timed(PollPhase.METADATA, self._metadata())
        except CollectError as exc:
            return self._metadata_failed(exc, state, started)
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
            timed(
                PollPhase.LIST_OFFSETS,
                self._lso.read(meta, state, self._producers.offsets_read),
            ),
        )
        coordinator_view = await timed(
            PollPhase.DESCRIBE_TRANSACTIONS,
            self._coordinators.view(
                listed, open_txns, self._worth_describing(focus, state.now_ms), meta, state
            ),
        )
        self._start_times.evict_closed(state, meta)
        compacted_topics, group_offsets = await self._read_behind_affected(
            focus, open_txns, offsets, coordinator_view, meta, state
        )

        self._metadata_stale = stale_after(
            state.request_errors,
            leaderless=bool(meta.leaderless),
            broker_missing=not meta.replica_ids <= meta.brokers.keys(),
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
            metadata_refresh=None if refreshed is None else refreshed.value,
            finalized_features=self._broker_config.finalized_features(),
            compacted_topics=compacted_topics,
            high_watermarks=offsets.high_watermarks,
            last_stable_offsets=offsets.last_stable_offsets,
            consumer_groups=group_offsets,
        )

    def _metadata_failed(
        self, exc: CollectError, state: PollState, started: float
    ) -> ClusterObservation:
        """No Metadata answer: nothing is known of the cluster this poll (up 0)."""
        self._metadata_stale = MetadataRefresh.START
        self.metadata_error = exc
        log.warning("metadata_failed", cluster=self.settings.name, error=str(exc))
        state.error(-1, "Metadata", exc.kind)
        return ClusterObservation(
            cluster=self.settings.name,
            observed_at_ms=state.now_ms,
            brokers=(),
            leaders={},
            open_transactions=(),
            metadata_answered=False,
            coordinator_view_complete=False,
            transaction_states=None,
            request_errors=tuple(state.request_errors),
            poll_duration_seconds=time.monotonic() - started,
            poll_phase_seconds=state.phase_seconds,
        )

    def _worth_describing(
        self, focus: PollFocus, now_ms: int
    ) -> Callable[[OpenTransaction], bool]:
        """Which open transactions the coordinator is asked about. One seen open only once
        costs nothing: most end before the next poll. One late, or old enough to block
        consumers, is asked at once (its classification is shown with the groups it blocks,
        also on the first poll after a start)."""
        late = self._late_rule(now_ms)
        seen_before = focus.describe
        min_age_ms = blocked_groups_min_age_ms(self.settings)
        also_ask = self._also_ask

        def ask(txn: OpenTransaction) -> bool:
            return (
                txn.key in seen_before
                or late(txn)
                or is_old_enough_for_groups(txn, now_ms, min_age_ms)
                or (also_ask is not None and also_ask(txn))
            )

        return ask

    async def _read_behind_affected(
        self,
        focus: PollFocus,
        open_txns: list[OpenTransaction],
        offsets: StableOffsets,
        coordinator_view: CoordinatorView,
        meta: MetadataView,
        state: PollState,
    ) -> tuple[dict[str, bool], ConsumerGroupOffsets | None]:
        """Only behind late or orphaned transactions: their topics' compaction; behind those
        and any old enough to block consumers (a lingering one, not late): the blocked
        groups. While no transaction is that old, nothing more is read."""
        late = self._late_rule(state.now_ms)
        now_ms = state.now_ms
        min_age_ms = blocked_groups_min_age_ms(self.settings)

        def untracked_again(txn: OpenTransaction) -> bool:
            # Orphaned by this poll's answer (the tracker decides; this only chooses what to
            # read): its topic's config and its groups are read as a late one's are.
            return (
                txn.key in focus.orphaned_if_untracked
                and txn.key in focus.describe
                and classify(
                    txn,
                    coordinator_view.transactional_ids,
                    coordinator_view.descriptions,
                    coordinator_view.complete,
                ) is Classification.HANGING
            )

        affected = [*filter(late, open_txns), *filter(untracked_again, open_txns)]
        old_enough = [
            t for t in open_txns if is_old_enough_for_groups(t, now_ms, min_age_ms)
        ]
        to_look_at, not_comparable = _blocked_group_candidates(
            [*affected, *old_enough], offsets
        )
        compacted_topics, group_offsets = await asyncio.gather(
            state.timed(
                PollPhase.TOPIC_CONFIGS,
                self._topic_config.compacted({t.topic for t in affected}, meta, state),
            ),
            state.timed(
                PollPhase.CONSUMER_GROUPS,
                self._groups.read(to_look_at, not_comparable, meta, state),
            ),
        )
        return compacted_topics, group_offsets

    async def _metadata(self) -> tuple[MetadataView, MetadataRefresh | None]:
        """The previous poll's Metadata answer while nothing says it changed and it is younger
        than `metadata_max_age_seconds`; else a new one (`collect.metadata_age`), with why."""
        age_seconds = time.monotonic() - self._metadata_read_at
        reason = refresh_reason(
            self._metadata_stale, age_seconds, self.settings.metadata_max_age_seconds
        )
        if reason is None:
            # A closed connection is seen by its reader task: let the loop run the readers
            # of connections a broker closed just now (a FIN takes two loop turns to be read).
            for _ in range(_READER_TURNS):
                await asyncio.sleep(0)
        if reason is None and self._client.lost_broker_connection():
            # A broker closed its connection between polls (stopped, restarted): this poll
            # reads where its partitions are now, as the Java client does on a disconnect.
            reason = MetadataRefresh.BROKER_FAILED
        if reason is None and self._client.broker_session_ended():
            # Logging in again may now fail (an expired token, a revoked secret): Metadata
            # first, so a refused login reads as the cluster's failure with its cause.
            reason = MetadataRefresh.SESSION_ENDED
        if reason is None:
            reused = self._client.last_full_metadata()
            if reused is not None:
                return reused, None
            reason = MetadataRefresh.START
        meta = await self._client.metadata()
        self._metadata_read_at = time.monotonic()
        self.metadata_refreshes[reason] = self.metadata_refreshes.get(reason, 0) + 1
        return meta, reason

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
