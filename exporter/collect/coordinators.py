"""The coordinator view: every broker's ListTransactions (transactional id <-> producer id,
state counts), then FindCoordinator + DescribeTransactions for the ids of the transactions the
poller asks about: late ones, and ones already seen open on the previous poll (reference
find-hanging steps 3-4; docs/kafka-semantics.md#find-hanging, #orphaned)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.client import (
    ClusterClient,
    MetadataView,
    describe_transactions_request,
    find_coordinator_requests,
    gather_settled,
    list_transactions_request,
    parse_find_coordinator,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    MISSING_FROM_ANSWER,
    NOT_COORDINATOR,
    TRANSACTIONAL_ID_NOT_FOUND,
    error_name,
)
from exporter.collect.groups import unlisted_leader
from exporter.collect.parse import parse_describe_transactions, parse_list_transactions
from exporter.collect.pollstate import (
    RETRY_DELAY_SECONDS,
    UNSUPPORTED_API_KIND,
    ApiSupportLog,
    PollState,
)
from exporter.model import OpenTransaction, TransactionDescription

TRANSACTION_STATE_TOPIC = "__transaction_state"

Listing = tuple[list[tuple[str, int, str]], bool]


def coordinator_not_asked(meta: MetadataView, asked: Mapping[int, object] | None = None) -> bool:
    """Whether some coordinator's slice of the listing is missing from the brokers `asked`
    (Metadata's brokers by default): a __transaction_state partition without a leader (a
    dead broker leaves Metadata, so it is not asked), or led by a broker not asked."""
    if any(tp.topic == TRANSACTION_STATE_TOPIC for tp in meta.leaderless):
        return True
    if asked is None:
        return unlisted_leader(meta, TRANSACTION_STATE_TOPIC)
    return any(
        leader >= 0 and leader not in asked
        for tp, leader in meta.leaders.items()
        if tp.topic == TRANSACTION_STATE_TOPIC
    )
"""([(transactional_id, producer_id, state)], whether every coordinator answered)."""


@dataclass(slots=True)
class CoordinatorView:
    transactional_ids: dict[int, str] = field(default_factory=dict)
    descriptions: dict[str, TransactionDescription | None] = field(default_factory=dict)
    complete: bool = True
    states: dict[str, int] | None = None


class _CoordinatorApiUnsupported(Exception):
    """FindCoordinator/DescribeTransactions unsupported: the coordinator view is incomplete."""


class CoordinatorReader:
    """Maps producers of the transactions asked about to their transactional ids and
    coordinators.

    Its caches (transactional id -> coordinator broker; producer id -> transactional id) hold
    only the ids and producers asked about in the latest poll: one whose transaction ended is
    forgotten at the end of the next poll."""

    def __init__(self, client: ClusterClient, support: ApiSupportLog) -> None:
        self._client = client
        self._support = support
        self._coordinators: dict[str, int] = {}
        self._listed_ids: dict[int, str] = {}
        """Producer id -> the transactional id a coordinator listed for it, for the producers
        asked about last poll."""

    def cache_sizes(self) -> dict[str, int]:
        return {"coordinators": len(self._coordinators), "listed_ids": len(self._listed_ids)}

    async def list_transactions(self, meta: MetadataView, state: PollState) -> Listing:
        """Every broker's ListTransactions (each coordinates a slice) and whether all answered."""
        asked = meta.brokers
        missing = coordinator_not_asked(meta)
        results = await asyncio.gather(*(self._list_at(b, state) for b in sorted(asked)))
        listing: list[tuple[str, int, str]] = []
        for result in results:
            if result is not None:
                listing.extend(result)
        if meta.brokers is not asked:
            # DescribeProducers re-routed meanwhile and added a fresh answer's brokers to the
            # view: a coordinator among them was not asked.
            missing = missing or coordinator_not_asked(meta, asked)
        return listing, not missing and all(result is not None for result in results)

    async def _list_at(self, broker_id: int, state: PollState) -> list[tuple[str, int, str]] | None:
        for attempt in range(2):
            try:
                response = await self._client.send(broker_id, list_transactions_request())
            except CollectError as exc:
                # Kafka < 3.0 has no ListTransactions: this broker's slice of the coordinator
                # view is missing, so unmapped producers classify as unknown, never hanging.
                if exc.kind == UNSUPPORTED_API_KIND:
                    self._support.unsupported(broker_id, "ListTransactions")
                    state.unsupported_apis.add("ListTransactions")
                else:
                    state.error(broker_id, "ListTransactions", exc.kind)
                return None
            if response.error_code == 0:
                return parse_list_transactions(response)
            state.error(broker_id, "ListTransactions", error_name(response.error_code))
            if response.error_code != COORDINATOR_LOAD_IN_PROGRESS or attempt:
                return None
            await asyncio.sleep(RETRY_DELAY_SECONDS)
        return None

    async def view(
        self,
        listed: Listing,
        open_txns: list[OpenTransaction],
        ask: Callable[[OpenTransaction], bool],
        meta: MetadataView,
        state: PollState,
    ) -> CoordinatorView:
        view = CoordinatorView()
        listing, view.complete = listed
        states: dict[str, int] = {}
        ids_by_producer: dict[int, str] = {}
        for transactional_id, producer_id, txn_state in listing:
            states[txn_state] = states.get(txn_state, 0) + 1
            ids_by_producer[producer_id] = transactional_id
        # A partial count would read as transactions that ended: no count unless all answered.
        view.states = states if view.complete else None

        asked_producers = {t.producer_id for t in open_txns if ask(t)}
        # The unfiltered listing above holds the same (id, pid) pairs ListTransactions with
        # ProducerIdFilters would return (reference find-hanging step 3), one round trip less.
        # It was taken after the previous poll ended, so after any transaction seen open then
        # had begun (docs/kafka-semantics.md#orphaned).
        view.transactional_ids = {
            pid: ids_by_producer[pid] for pid in asked_producers if pid in ids_by_producer
        }
        # A producer a coordinator listed last poll and lists no more, its transaction still
        # open: a coordinator just restarted lists nothing, without an error, until it has taken
        # its __transaction_state partitions (docs/kafka-semantics.md#a-restarted-coordinator).
        # So it is asked about by the id it had; the coordinator's own answer decides
        # (NOT_COORDINATOR or loading: unknown; TRANSACTIONAL_ID_NOT_FOUND: not tracked).
        # (A listing with a coordinator missing leaves every unmapped producer unknown anyway.)
        remembered: dict[int, str] = {}
        if view.complete:
            for pid in asked_producers:
                if pid not in view.transactional_ids and pid in self._listed_ids:
                    remembered[pid] = self._listed_ids[pid]
        view.transactional_ids.update(remembered)
        self._listed_ids = {**self._listed_ids, **view.transactional_ids}
        self._listed_ids = {p: t for p, t in self._listed_ids.items() if p in asked_producers}
        wanted_ids = set(view.transactional_ids.values())
        wanted = sorted(wanted_ids)
        # Forget the coordinators of ids no longer asked about (their transactions ended).
        for gone in [t for t in self._coordinators if t not in wanted_ids]:
            del self._coordinators[gone]
        if wanted:
            try:
                await self._describe(wanted, view, meta, state)
            except _CoordinatorApiUnsupported:
                view.complete = False
        self._drop_disowned(remembered, view)
        return view

    def _drop_disowned(self, remembered: dict[int, str], view: CoordinatorView) -> None:
        """A remembered id its coordinator no longer gives to the producer (the id is not found:
        its transaction log was lost; or the id now belongs to another producer id) no longer
        names that producer: it is unmapped, as Kafka's tools show it, and hanging."""
        for pid, transactional_id in remembered.items():
            if transactional_id not in view.descriptions:
                continue  # undecided: asked again next poll
            description = view.descriptions[transactional_id]
            if description is None or description.producer_id != pid:
                del view.transactional_ids[pid]
                self._listed_ids.pop(pid, None)

    async def _describe(
        self,
        transactional_ids: list[str],
        view: CoordinatorView,
        meta: MetadataView,
        state: PollState,
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
                await asyncio.sleep(RETRY_DELAY_SECONDS)

    async def _find_coordinators(
        self, transactional_ids: list[str], meta: MetadataView, state: PollState
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
                if exc.kind == UNSUPPORTED_API_KIND:
                    state.unsupported_apis.add("FindCoordinator")
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
                found = parse_find_coordinator(response, key)
                left_out = set(request.coordinator_keys or [request.key]).difference(
                    t for t, _, _ in found
                )
                if left_out:  # asked and not answered: looked up again
                    state.error(broker, "FindCoordinator", MISSING_FROM_ANSWER)
                    retry.extend(sorted(left_out))
                for transactional_id, node_id, code in found:
                    if code == 0 and node_id >= 0:
                        self._coordinators[transactional_id] = node_id
                    else:
                        state.error(broker, "FindCoordinator", error_name(code))
                        retry.append(transactional_id)
            if not retry:
                return
            transactional_ids = retry
            if attempt == 0:
                await asyncio.sleep(RETRY_DELAY_SECONDS)

    async def _describe_at(
        self,
        coordinator: int,
        transactional_ids: list[str],
        view: CoordinatorView,
        state: PollState,
    ) -> list[str]:
        """DescribeTransactions at one coordinator; returns the ids worth one more try."""
        try:
            response = await self._client.send(
                coordinator, describe_transactions_request(transactional_ids)
            )
        except CollectError as exc:
            if exc.kind == UNSUPPORTED_API_KIND:
                # A coordinator on Kafka < 3.0 (mixed cluster): its ids stay undescribed and
                # classify as unknown; the other coordinators' answers still count.
                self._support.unsupported(coordinator, "DescribeTransactions")
                state.unsupported_apis.add("DescribeTransactions")
                view.complete = False
                return []
            state.error(coordinator, "DescribeTransactions", exc.kind)
            for t in transactional_ids:
                self._coordinators.pop(t, None)
            return []  # absent from descriptions -> classified unknown
        descriptions, errors = parse_describe_transactions(response)
        for description in descriptions:
            view.descriptions[description.transactional_id] = description
        answered = {d.transactional_id for d in descriptions} | {t for t, _ in errors}
        if not answered.issuperset(transactional_ids):
            # An id asked about and left out: undescribed, so classified unknown.
            state.error(coordinator, "DescribeTransactions", MISSING_FROM_ANSWER)
        retry: list[str] = []
        for transactional_id, code in errors:
            state.error(coordinator, "DescribeTransactions", error_name(code))
            if code == TRANSACTIONAL_ID_NOT_FOUND:
                view.descriptions[transactional_id] = None  # "no description": hanging
            elif code == NOT_COORDINATOR:
                self._coordinators.pop(transactional_id, None)  # moved: look it up again
                retry.append(transactional_id)
            elif code == COORDINATOR_LOAD_IN_PROGRESS:
                retry.append(transactional_id)
        return retry


def _prebuilt(request: Any) -> Callable[[Any], Any]:
    return lambda _connection: request
