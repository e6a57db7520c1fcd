"""The coordinator view: every broker's ListTransactions (transactional id <-> producer id,
state counts), then FindCoordinator + DescribeTransactions for the ids of the transactions the
poller asks about: late ones, and ones already seen open on the previous poll (reference
find-hanging steps 3-4; docs/kafka-semantics.md#find-hanging, #orphaned)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.collect.apis.describe_transactions import DescribeTransactions, Known
from exporter.collect.apis.find_coordinator import (
    CoordinatorApiUnsupported,
    FindTransactionCoordinators,
)
from exporter.collect.apis.list_transactions import list_transactions
from exporter.collect.client import MetadataView
from exporter.collect.driver import CoordinatorStrategy, Driver
from exporter.collect.groups import unlisted_leader
from exporter.collect.pollstate import PollState
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


class CoordinatorReader:
    """Maps producers of the transactions asked about to their transactional ids and
    coordinators.

    Its caches (transactional id -> coordinator broker; producer id -> transactional id) hold
    only the ids and producers asked about in the latest poll: one whose transaction ended is
    forgotten at the end of the next poll."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._coordinators: dict[str, int] = {}
        self._listed_ids: dict[int, str] = {}
        """Producer id -> the transactional id a coordinator listed for it, for the producers
        asked about last poll."""
        self._described: Known = {}
        """The transaction states the latest DescribeTransactions call read."""

    def cache_sizes(self) -> dict[str, int]:
        return {
            "coordinators": len(self._coordinators),
            "listed_ids": len(self._listed_ids),
            "described_states": len(self._described),
        }

    async def list_transactions(self, meta: MetadataView, state: PollState) -> Listing:
        """Every broker's ListTransactions (each coordinates a slice) and whether all answered."""
        asked = meta.brokers
        missing = coordinator_not_asked(meta)
        listing, answered = await list_transactions(self._driver, sorted(asked), meta, state)
        if meta.brokers is not asked:
            # DescribeProducers re-routed meanwhile and added a fresh answer's brokers to the
            # view: a coordinator among them was not asked.
            missing = missing or coordinator_not_asked(meta, asked)
        return listing, not missing and answered

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
        known, self._described = self._described, {}
        if wanted:
            try:
                await self._describe(wanted, view, meta, state, known)
            except CoordinatorApiUnsupported:
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
        known: Known,
    ) -> None:
        """DescribeTransactions at each id's coordinator (looked up by FindCoordinator when not
        known, or moved); a coordinator moved or loading is asked once more. The previous call's
        transaction states are `known`; this call's go to `_described`."""
        coordinators = CoordinatorStrategy(
            self._driver,
            lambda: FindTransactionCoordinators(self._coordinators),
            self._coordinators,
            attempts=2,
        )
        handler = DescribeTransactions(view.descriptions, known, self._described)
        await self._driver.run(handler, coordinators, transactional_ids, meta, state, attempts=2)
        if not handler.complete:
            view.complete = False
