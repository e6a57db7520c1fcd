"""One poll of one cluster: Metadata -> DescribeProducers -> start times -> thresholds ->
coordinator view -> LSO lag, gathered into a `ClusterObservation`.

`ClusterPoller.poll()` is synchronous so a scheduler thread can call it; inside it runs an
asyncio loop the poller owns (connections live on that loop and are reused between polls).
Semantics: docs/kafka-semantics.md; errors are kept per partition /
per id and never crash the poll.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from kafka.protocol.admin.transactions import DescribeProducersResponse
from kafka.protocol.consumer.fetch import FetchResponse

from exporter.analyze import effective_max_timeout_ms, is_late
from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BatchHeader,
    ClusterClient,
    MetadataView,
    batch_partitions,
    describe_broker_config_request,
    describe_producers_request,
    describe_transactions_request,
    fetch_batch_request,
    fetch_request,
    find_coordinator_requests,
    first_batch_header,
    gather_settled,
    list_offsets_request,
    list_transactions_request,
    parse_find_coordinator,
    parse_transaction_max_timeout_ms,
)
from exporter.collect.connection import CollectError, error_name
from exporter.collect.fastdecode import lean
from exporter.model import (
    BrokerStatus,
    ClusterObservation,
    OpenTransaction,
    RequestError,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
)
from exporter.settings import ClusterSettings

log = structlog.get_logger()

NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
TRANSACTIONAL_ID_NOT_FOUND = 105
# Fetch errors after which re-reading the batch will not help: fall back for good.
FETCH_BATCH_PARTITIONS = 100
"""Start-time reads per Fetch request (distinct partitions of one leader)."""
_PERMANENT_FETCH_ERRORS = frozenset({1, 3, 29})  # OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, DENIED
_RETRY_DELAY_SECONDS = 0.05
TRANSACTION_STATE_TOPIC = "__transaction_state"
UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
"""`CollectError.kind` when the broker does not offer an API at all (it predates it)."""
# What each API needs, for the once-per-broker log line when a broker lacks it.
_SINCE_KAFKA = {
    "DescribeProducers": "2.8",
    "ListTransactions": "3.0",
    "DescribeTransactions": "3.0",
}

# Lean: empty partitions (error 0, no producer) are not in the answer; the loop below skips
# them anyway. At 200k partitions that is ~180k fewer objects per poll.
_DECODE_DESCRIBE_PRODUCERS = lean(DescribeProducersResponse)
_DECODE_FETCH = lean(FetchResponse)  # v12-v17: only errors and raw records (fastdecode)

TxnKey = tuple[str, int, int, int, int]
"""(topic, partition, producer_id, producer_epoch, current_txn_start_offset)."""


@dataclass(slots=True)
class _RawOpenTxn:
    """A DescribeProducers entry with CurrentTxnStartOffset >= 0, before its start time."""

    topic: str
    partition: int
    leader_id: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_txn_start_offset: int
    last_timestamp_ms: int

    @property
    def key(self) -> TxnKey:
        return (
            self.topic,
            self.partition,
            self.producer_id,
            self.producer_epoch,
            self.current_txn_start_offset,
        )


@dataclass(slots=True)
class _PollState:
    """Mutable scratch space for one poll."""

    now_ms: int
    unobserved: dict[TopicPartition, str] = field(default_factory=dict)
    request_errors: list[RequestError] = field(default_factory=list)
    open_txns: list[_RawOpenTxn] = field(default_factory=list)
    unobservable_brokers: set[int] = field(default_factory=set)
    """Brokers up but without DescribeProducers: their partitions are unobserved."""

    def error(self, broker_id: int, api: str, error: str) -> None:
        self.request_errors.append(RequestError(broker_id, api, error))


@dataclass(slots=True)
class _CoordinatorView:
    transactional_ids: dict[int, str] = field(default_factory=dict)
    descriptions: dict[str, TransactionDescription | None] = field(default_factory=dict)
    complete: bool = True
    states: dict[str, int] | None = None


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ClusterPoller:
    """Polls one cluster; one poll at a time; caches start times, thresholds, coordinators."""

    def __init__(
        self, settings: ClusterSettings, clock_ms: Callable[[], int] = wall_clock_ms
    ) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._client = ClusterClient(settings)
        self._start_times: dict[TxnKey, tuple[int, StartTimeSource]] = {}
        self._first_seen_ms: dict[TxnKey, int] = {}
        self._max_timeouts: dict[int, tuple[int, float]] = {}  # broker -> (ms, fetched monotonic)
        self._coordinators: dict[str, int] = {}
        self._denied_topics_logged: set[str] = set()
        self._down_logged: set[int] = set()
        self._unsupported_logged: set[tuple[int, str]] = set()
        self._closed = False

    def poll(self) -> ClusterObservation:
        with self._lock:
            if self._closed:
                raise RuntimeError("poller is closed")
            return self._loop.run_until_complete(self._poll())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._loop.run_until_complete(self._client.close())
            self._loop.close()

    # -- the poll -------------------------------------------------------------------------

    async def _poll(self) -> ClusterObservation:
        started = time.monotonic()
        client = self._client
        client.begin_poll()
        state = _PollState(now_ms=self._clock_ms())
        try:
            meta = await client.metadata()
        except CollectError as exc:
            log.warning("metadata_failed", cluster=self.settings.name, error=str(exc))
            state.error(-1, "Metadata", exc.kind)
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
            )
        state.unobserved.update(meta.leaderless)

        listed, _, _ = await asyncio.gather(
            self._list_transactions(meta, state),
            self._describe_producers(meta, state),
            self._refresh_max_timeouts(meta, state),
        )
        open_txns, lso_lag = await asyncio.gather(
            self._resolve_start_times(meta, state),
            self._last_stable_offset_lag(state),
        )
        coordinator_view = await self._coordinator_view(listed, open_txns, meta, state)
        self._evict_closed(state, meta)

        brokers = self._broker_statuses(meta, state)
        return ClusterObservation(
            cluster=self.settings.name,
            observed_at_ms=state.now_ms,
            brokers=brokers,
            leaders=meta.leaders,
            open_transactions=tuple(open_txns),
            unobserved=state.unobserved,
            transactional_ids=coordinator_view.transactional_ids,
            descriptions=coordinator_view.descriptions,
            coordinator_view_complete=coordinator_view.complete,
            transaction_states=coordinator_view.states,
            last_stable_offset_lag=lso_lag,
            request_errors=tuple(state.request_errors),
            poll_duration_seconds=time.monotonic() - started,
        )

    # -- a. b. DescribeProducers ----------------------------------------------------------

    async def _describe_producers(self, meta: MetadataView, state: _PollState) -> None:
        retry = await self._describe_producers_round(meta.by_leader, state, retry_allowed=True)
        if not retry:
            return
        # NOT_LEADER_OR_FOLLOWER: leadership moved since Metadata; ask again, retry once.
        topics = sorted({tp.topic for tp in retry})
        try:
            fresh = await self._client.metadata(topics)
        except CollectError as exc:
            state.error(-1, "Metadata", exc.kind)
            for tp in retry:
                state.unobserved[tp] = "NOT_LEADER_OR_FOLLOWER"
            return
        by_leader: dict[int, dict[str, list[int]]] = {}
        for tp in sorted(retry):
            leader = fresh.leaders.get(tp, -1)
            if leader < 0:
                state.unobserved[tp] = "LEADER_NOT_AVAILABLE"
                continue
            meta.leaders[tp] = leader
            by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)
        meta.brokers.update(fresh.brokers)
        await self._describe_producers_round(by_leader, state, retry_allowed=False)

    async def _describe_producers_round(
        self,
        by_leader: dict[int, dict[str, list[int]]],
        state: _PollState,
        retry_allowed: bool,
    ) -> list[TopicPartition]:
        batch_size = max(1, self.settings.describe_producers_batch_size)
        calls = [
            self._describe_producers_batch(leader, batch, state, retry_allowed)
            for leader, per_topic in by_leader.items()
            for batch in batch_partitions(per_topic, batch_size)
        ]
        retry: list[TopicPartition] = []
        for result in await asyncio.gather(*calls):
            retry.extend(result)
        return retry

    async def _describe_producers_batch(
        self,
        leader: int,
        batch: list[tuple[str, list[int]]],
        state: _PollState,
        retry_allowed: bool,
    ) -> list[TopicPartition]:
        try:
            response = await self._client.send(
                leader, describe_producers_request(batch), _DECODE_DESCRIBE_PRODUCERS
            )
        except CollectError as exc:
            # Down or slow broker, or one that predates DescribeProducers (Kafka < 2.8): its
            # partitions are unknown, never "no transactions".
            if exc.kind == UNSUPPORTED_VERSION:
                state.unobservable_brokers.add(leader)
                self._log_unsupported(leader, "DescribeProducers")
            else:
                state.error(leader, "DescribeProducers", exc.kind)
            reason = exc.kind
            for topic, partitions in batch:
                for p in partitions:
                    state.unobserved[TopicPartition(topic, p)] = reason
            return []
        retry: list[TopicPartition] = []
        append_open = state.open_txns.append
        for topic in response.topics:
            name = topic.name
            for p in topic.partitions:
                code = p.error_code
                if code == 0:
                    for producer in p.active_producers:
                        start_offset = producer.current_txn_start_offset
                        if start_offset >= 0:
                            append_open(
                                _RawOpenTxn(
                                    name,
                                    p.partition_index,
                                    leader,
                                    producer.producer_id,
                                    producer.producer_epoch,
                                    producer.coordinator_epoch,
                                    start_offset,
                                    producer.last_timestamp,
                                )
                            )
                    continue
                tp = TopicPartition(name, p.partition_index)
                err = error_name(code)
                state.error(leader, "DescribeProducers", err)
                if code == NOT_LEADER_OR_FOLLOWER and retry_allowed:
                    retry.append(tp)
                    continue
                state.unobserved[tp] = err
                if code == TOPIC_AUTHORIZATION_FAILED and name not in self._denied_topics_logged:
                    self._denied_topics_logged.add(name)
                    log.warning(
                        "topic_not_authorized",
                        cluster=self.settings.name,
                        topic=name,
                        hint="DescribeProducers needs READ on the topic",
                    )
        return retry

    # -- c. start times ---------------------------------------------------------------------

    async def _resolve_start_times(
        self, meta: MetadataView, state: _PollState
    ) -> list[OpenTransaction]:
        """Start = max timestamp of the batch at CurrentTxnStartOffset, read once per txn."""
        to_read = [t for t in state.open_txns if t.key not in self._start_times]
        for txn in to_read:
            self._first_seen_ms.setdefault(txn.key, state.now_ms)
        if to_read:
            await self._read_start_times(to_read, meta, state)
        result: list[OpenTransaction] = []
        for t in state.open_txns:
            cached = self._start_times.get(t.key)
            start_ms, source = cached if cached is not None else self._fallback_start(t)
            result.append(
                OpenTransaction(
                    topic=t.topic,
                    partition=t.partition,
                    leader_id=t.leader_id,
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    coordinator_epoch=t.coordinator_epoch,
                    current_txn_start_offset=t.current_txn_start_offset,
                    last_timestamp_ms=t.last_timestamp_ms,
                    start_time_ms=start_ms,
                    start_time_source=source,
                )
            )
        return result

    def _fallback_start(self, txn: _RawOpenTxn) -> tuple[int, StartTimeSource]:
        """The earlier of LastTimestamp and when the exporter first saw the txn open."""
        first_seen = self._first_seen_ms.get(txn.key)
        last = txn.last_timestamp_ms
        if last >= 0 and (first_seen is None or last <= first_seen):
            return last, StartTimeSource.LAST_TIMESTAMP
        if first_seen is None:
            return last, StartTimeSource.LAST_TIMESTAMP
        return first_seen, StartTimeSource.FIRST_SEEN

    async def _read_start_times(
        self, to_read: list[_RawOpenTxn], meta: MetadataView, state: _PollState
    ) -> None:
        """Batch the reads: per leader, Fetches of up to FETCH_BATCH_PARTITIONS distinct
        partitions (a second open txn on a partition goes in another request: one offset per
        partition and request). A cold poll has one read per open txn (~2,000 at 200k)."""
        batches: dict[int, list[dict[tuple[str, int], _RawOpenTxn]]] = {}
        for txn in to_read:
            per_leader = batches.setdefault(txn.leader_id, [])
            key = (txn.topic, txn.partition)
            for batch in per_leader:
                if key not in batch and len(batch) < FETCH_BATCH_PARTITIONS:
                    batch[key] = txn
                    break
            else:
                per_leader.append({key: txn})
        await asyncio.gather(
            *(
                self._read_start_batch(leader, list(batch.values()), meta, state)
                for leader, per_leader in batches.items()
                for batch in per_leader
            )
        )

    async def _read_start_batch(
        self, leader_id: int, txns: list[_RawOpenTxn], meta: MetadataView, state: _PollState
    ) -> None:
        if len(txns) == 1:
            await self._read_start_time(txns[0], meta, state)
            return
        build = fetch_batch_request(
            [
                (t.topic, meta.topic_ids.get(t.topic), t.partition, t.current_txn_start_offset)
                for t in txns
            ]
        )
        try:
            response = await self._client.send(leader_id, build, _DECODE_FETCH)
        except CollectError as exc:
            for _ in txns:
                state.error(leader_id, "Fetch", exc.kind)  # as many as unbatched reads
            return
        if response.error_code != 0:
            for txn in txns:
                self._fetch_failed(txn, response.error_code, state)
            return
        names_by_id = {meta.topic_ids.get(t.topic): t.topic for t in txns}
        answered: dict[tuple[str | None, int], Any] = {}
        for topic in response.responses:
            name = topic.topic if response.API_VERSION < 13 else names_by_id.get(topic.topic_id)
            for p in topic.partitions:
                answered[(name, p.partition_index)] = p
        alone: list[_RawOpenTxn] = []
        for txn in txns:
            partition = answered.get((txn.topic, txn.partition))
            if partition is None:
                alone.append(txn)
            elif partition.error_code != 0:
                self._fetch_failed(txn, partition.error_code, state)
            elif not self._take_batch_header(txn, first_batch_header(partition.records)):
                # No records: the response's byte budget ran out before this partition's
                # batch (only the first partition is promised a whole batch, KIP-74).
                alone.append(txn)
        if alone:
            await asyncio.gather(*(self._read_start_time(t, meta, state) for t in alone))

    async def _read_start_time(
        self, txn: _RawOpenTxn, meta: MetadataView, state: _PollState
    ) -> None:
        build = fetch_request(
            txn.topic, meta.topic_ids.get(txn.topic), txn.partition, txn.current_txn_start_offset
        )
        try:
            response = await self._client.send(txn.leader_id, build, _DECODE_FETCH)
        except CollectError as exc:
            state.error(txn.leader_id, "Fetch", exc.kind)
            return  # transient: fall back this poll, try again next poll
        partitions = [p for topic in response.responses for p in topic.partitions]
        code = response.error_code or (partitions[0].error_code if partitions else 0)
        if code != 0:
            self._fetch_failed(txn, code, state)
            return
        records = partitions[0].records if partitions else None
        self._take_batch_header(txn, first_batch_header(records))

    def _fetch_failed(self, txn: _RawOpenTxn, code: int, state: _PollState) -> None:
        state.error(txn.leader_id, "Fetch", error_name(code))
        if code in _PERMANENT_FETCH_ERRORS:
            self._start_times[txn.key] = self._fallback_start(txn)

    def _take_batch_header(self, txn: _RawOpenTxn, header: BatchHeader | None) -> bool:
        """Cache the start time from the batch at the txn's first offset; False: no batch."""
        if header is None:
            return False
        if (
            header.base_offset == txn.current_txn_start_offset
            and header.producer_id == txn.producer_id
        ):
            self._start_times[txn.key] = (header.max_timestamp, StartTimeSource.BATCH_TIMESTAMP)
        else:
            # Another batch sits at that offset (log cleaned/truncated): do not guess again.
            self._start_times[txn.key] = self._fallback_start(txn)
        return True

    def _evict_closed(self, state: _PollState, meta: MetadataView) -> None:
        """Forget transactions no longer open on partitions observed this poll."""
        seen = {t.key for t in state.open_txns}
        unobserved = state.unobserved
        for cache in (self._start_times, self._first_seen_ms):
            stale = [
                k
                for k in cache
                if k not in seen
                and (
                    TopicPartition(k[0], k[1]) not in unobserved
                    or TopicPartition(k[0], k[1]) not in meta.leaders
                )
            ]
            for k in stale:
                del cache[k]

    # -- d. thresholds ----------------------------------------------------------------------

    async def _refresh_max_timeouts(self, meta: MetadataView, state: _PollState) -> None:
        if self.settings.transaction_max_timeout_ms is not None:
            return
        now = time.monotonic()
        due = [
            b
            for b in meta.brokers
            if b not in self._max_timeouts
            or now - self._max_timeouts[b][1] >= self.settings.config_refresh_seconds
        ]
        await asyncio.gather(*(self._read_max_timeout(b, state) for b in due))

    async def _read_max_timeout(self, broker_id: int, state: _PollState) -> None:
        try:
            response = await self._client.send(broker_id, describe_broker_config_request(broker_id))
        except CollectError as exc:
            state.error(broker_id, "DescribeConfigs", exc.kind)
            return
        for result in response.results:
            if result.error_code != 0:
                state.error(broker_id, "DescribeConfigs", error_name(result.error_code))
        value = parse_transaction_max_timeout_ms(response)
        if value is not None:
            self._max_timeouts[broker_id] = (value, time.monotonic())

    def _max_timeout_ms(self, broker_id: int) -> int | None:
        if self.settings.transaction_max_timeout_ms is not None:
            return self.settings.transaction_max_timeout_ms
        cached = self._max_timeouts.get(broker_id)
        return cached[0] if cached is not None else None

    # -- e. coordinator view ------------------------------------------------------------------

    async def _list_transactions(
        self, meta: MetadataView, state: _PollState
    ) -> tuple[list[tuple[str, int, str]], bool]:
        """Every broker's ListTransactions (each coordinates a slice) and whether all answered."""
        results = await asyncio.gather(
            *(self._list_transactions_at(b, state) for b in sorted(meta.brokers))
        )
        listing: list[tuple[str, int, str]] = []
        for result in results:
            if result is not None:
                listing.extend(result)
        # A dead broker leaves Metadata, so it is not asked above; its slice of the listing is
        # still missing while any __transaction_state partition has no leader.
        orphaned = any(tp.topic == TRANSACTION_STATE_TOPIC for tp in meta.leaderless)
        return listing, not orphaned and all(result is not None for result in results)

    async def _list_transactions_at(
        self, broker_id: int, state: _PollState
    ) -> list[tuple[str, int, str]] | None:
        for attempt in range(2):
            try:
                response = await self._client.send(broker_id, list_transactions_request())
            except CollectError as exc:
                # Kafka < 3.0 has no ListTransactions: this broker's slice of the coordinator
                # view is missing, so unmapped producers classify as unknown, never hanging.
                if exc.kind == UNSUPPORTED_VERSION:
                    self._log_unsupported(broker_id, "ListTransactions")
                else:
                    state.error(broker_id, "ListTransactions", exc.kind)
                return None
            if response.error_code == 0:
                return [
                    (t.transactional_id, t.producer_id, t.transaction_state)
                    for t in response.transaction_states
                ]
            state.error(broker_id, "ListTransactions", error_name(response.error_code))
            if response.error_code != COORDINATOR_LOAD_IN_PROGRESS or attempt:
                return None
            await asyncio.sleep(_RETRY_DELAY_SECONDS)
        return None

    async def _coordinator_view(
        self,
        listed: tuple[list[tuple[str, int, str]], bool],
        open_txns: list[OpenTransaction],
        meta: MetadataView,
        state: _PollState,
    ) -> _CoordinatorView:
        view = _CoordinatorView()
        listing, view.complete = listed
        states: dict[str, int] = {}
        ids_by_producer: dict[int, str] = {}
        for transactional_id, producer_id, txn_state in listing:
            states[txn_state] = states.get(txn_state, 0) + 1
            ids_by_producer[producer_id] = transactional_id
        # A partial count would read as transactions that ended: no count unless all answered.
        view.states = states if view.complete else None

        late_buffer_ms = round(self.settings.late_buffer_seconds * 1000)
        late_producers = {
            t.producer_id
            for t in open_txns
            if is_late(
                t,
                state.now_ms,
                effective_max_timeout_ms(self.settings, self._max_timeout_ms(t.leader_id)),
                late_buffer_ms,
            )
        }
        # The unfiltered listing above holds the same (id, pid) pairs ListTransactions with
        # ProducerIdFilters would return (reference find-hanging step 3), one round trip less.
        view.transactional_ids = {
            pid: ids_by_producer[pid] for pid in late_producers if pid in ids_by_producer
        }
        wanted = sorted(set(view.transactional_ids.values()))
        if wanted:
            try:
                await self._describe_transactions(wanted, view, meta, state)
            except _CoordinatorApiUnsupported:
                view.complete = False
        return view

    async def _describe_transactions(
        self,
        transactional_ids: list[str],
        view: _CoordinatorView,
        meta: MetadataView,
        state: _PollState,
    ) -> None:
        pending = transactional_ids
        for attempt in range(2):
            await self._find_coordinators(
                [t for t in pending if t not in self._coordinators], meta, state
            )
            by_coordinator: dict[int, list[str]] = {}
            for t in pending:
                coordinator = self._coordinators.get(t)
                if coordinator is not None:
                    by_coordinator.setdefault(coordinator, []).append(t)
            results = await asyncio.gather(
                *(
                    self._describe_at(c, ids, view, state)
                    for c, ids in sorted(by_coordinator.items())
                )
            )
            pending = [t for retry in results for t in retry]
            if not pending:
                return
            if attempt == 0:
                await asyncio.sleep(_RETRY_DELAY_SECONDS)

    async def _find_coordinators(
        self, transactional_ids: list[str], meta: MetadataView, state: _PollState
    ) -> None:
        if not transactional_ids:
            return
        for attempt in range(2):
            broker = next((b for b in sorted(meta.brokers) if b not in self._client.down), None)
            if broker is None:
                return
            try:
                connection = await self._client.connection(broker)
                requests = find_coordinator_requests(connection, transactional_ids)
            except CollectError as exc:
                if exc.kind == UNSUPPORTED_VERSION:
                    raise _CoordinatorApiUnsupported() from exc
                state.error(broker, "FindCoordinator", exc.kind)
                continue
            responses = await gather_settled(
                *(self._client.send(broker, _prebuilt(r)) for r in requests)
            )
            retry: list[str] = []
            for request, response in zip(requests, responses, strict=True):
                if isinstance(response, CollectError):
                    state.error(broker, "FindCoordinator", response.kind)
                    retry.extend(request.coordinator_keys or [request.key])
                    continue
                if isinstance(response, BaseException):
                    raise response
                key = None if request.API_VERSION >= 4 else request.key
                for transactional_id, node_id, code in parse_find_coordinator(response, key):
                    if code == 0 and node_id >= 0:
                        self._coordinators[transactional_id] = node_id
                    else:
                        state.error(broker, "FindCoordinator", error_name(code))
                        retry.append(transactional_id)
            if not retry:
                return
            transactional_ids = retry
            if attempt == 0:
                await asyncio.sleep(_RETRY_DELAY_SECONDS)

    async def _describe_at(
        self,
        coordinator: int,
        transactional_ids: list[str],
        view: _CoordinatorView,
        state: _PollState,
    ) -> list[str]:
        """DescribeTransactions at one coordinator; returns the ids worth one more try."""
        try:
            response = await self._client.send(
                coordinator, describe_transactions_request(transactional_ids)
            )
        except CollectError as exc:
            if exc.kind == UNSUPPORTED_VERSION:
                # A coordinator on Kafka < 3.0 (mixed cluster): its ids stay undescribed and
                # classify as unknown; the other coordinators' answers still count.
                self._log_unsupported(coordinator, "DescribeTransactions")
                view.complete = False
                return []
            state.error(coordinator, "DescribeTransactions", exc.kind)
            for t in transactional_ids:
                self._coordinators.pop(t, None)
            return []  # absent from descriptions -> classified unknown
        retry: list[str] = []
        for d in response.transaction_states:
            code = d.error_code
            if code == 0:
                view.descriptions[d.transactional_id] = TransactionDescription(
                    transactional_id=d.transactional_id,
                    state=d.transaction_state,
                    transaction_timeout_ms=d.transaction_timeout_ms,
                    transaction_start_time_ms=d.transaction_start_time_ms,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topic_partitions=frozenset(
                        TopicPartition(t.topic, p) for t in d.topics for p in t.partitions
                    ),
                )
                continue
            state.error(coordinator, "DescribeTransactions", error_name(code))
            if code == TRANSACTIONAL_ID_NOT_FOUND:
                view.descriptions[d.transactional_id] = None  # "no description": hanging
            elif code == NOT_COORDINATOR:
                self._coordinators.pop(d.transactional_id, None)  # moved: look it up again
                retry.append(d.transactional_id)
            elif code == COORDINATOR_LOAD_IN_PROGRESS:
                retry.append(d.transactional_id)
        return retry

    # -- f. LSO lag -------------------------------------------------------------------------

    async def _last_stable_offset_lag(self, state: _PollState) -> dict[TopicPartition, int]:
        """High watermark - LSO for partitions with an open transaction, per leader."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        seen: set[tuple[str, int]] = set()
        for t in state.open_txns:
            if (t.topic, t.partition) in seen:
                continue
            seen.add((t.topic, t.partition))
            by_leader.setdefault(t.leader_id, {}).setdefault(t.topic, []).append(t.partition)
        lag: dict[TopicPartition, int] = {}
        await asyncio.gather(*(self._lag_at(b, ps, lag, state) for b, ps in by_leader.items()))
        return lag

    async def _lag_at(
        self,
        broker_id: int,
        partitions: dict[str, list[int]],
        lag: dict[TopicPartition, int],
        state: _PollState,
    ) -> None:
        results = await gather_settled(
            self._client.send(broker_id, list_offsets_request(partitions, READ_UNCOMMITTED)),
            self._client.send(broker_id, list_offsets_request(partitions, READ_COMMITTED)),
        )
        offsets: list[dict[tuple[str, int], int]] = []
        for result in results:
            if isinstance(result, CollectError):
                state.error(broker_id, "ListOffsets", result.kind)
                return
            if isinstance(result, BaseException):
                raise result
            found: dict[tuple[str, int], int] = {}
            for topic in result.topics:
                for p in topic.partitions:
                    if p.error_code == 0:
                        found[(topic.name, p.partition_index)] = p.offset
                    else:
                        state.error(broker_id, "ListOffsets", error_name(p.error_code))
            offsets.append(found)
        high_watermarks, stable_offsets = offsets
        for key, high_watermark in high_watermarks.items():
            stable = stable_offsets.get(key)
            if stable is not None:
                lag[TopicPartition(*key)] = max(0, high_watermark - stable)

    # -- brokers ------------------------------------------------------------------------------

    def _log_unsupported(self, broker_id: int, api: str) -> None:
        """One log line per broker and API, not one per poll: this is the broker's release,
        not a failure (no request error is counted)."""
        if (broker_id, api) in self._unsupported_logged:
            return
        self._unsupported_logged.add((broker_id, api))
        log.warning(
            "api_not_supported_by_broker",
            cluster=self.settings.name,
            broker_id=broker_id,
            api=api,
            hint=f"{api} needs Kafka {_SINCE_KAFKA.get(api, '?')} or later on this broker",
        )

    def _broker_statuses(self, meta: MetadataView, state: _PollState) -> tuple[BrokerStatus, ...]:
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
                self._unsupported_logged.discard((broker_id, "DescribeProducers"))
            statuses.append(
                BrokerStatus(
                    broker_id=broker_id,
                    up=reason is None,
                    error=reason,
                    transaction_max_timeout_ms=self._max_timeout_ms(broker_id),
                    observable=observable,
                )
            )
        return tuple(statuses)


class _CoordinatorApiUnsupported(Exception):
    """FindCoordinator/DescribeTransactions unsupported: the coordinator view is incomplete."""


def _prebuilt(request: Any) -> Callable[[Any], Any]:
    return lambda _connection: request
