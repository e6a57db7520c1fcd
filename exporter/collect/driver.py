"""One driver for the admin APIs, one handler per API (the shape of Kafka's own admin client).

A `Handler` knows one Kafka API: its request for a set of keys (transactional ids, group ids,
broker ids, partitions), how to read an answer and what the answer means for each key. A
`Strategy` knows which broker to ask about each key: every broker (`EveryBroker`), whichever
is up (`AnyBroker`), the coordinator of the key (`CoordinatorStrategy`, itself a
FindCoordinator run on the driver), or the leader of a partition (`PartitionLeaderStrategy`,
from the poll's Metadata). The `Driver` owns what each API used to write again:

- fan-out: every broker's requests at once, each broker's batches at once;
- retry: keys a handler gives back are asked again after `RETRY_DELAY_SECONDS`, up to the
  attempts the caller allows; keys whose broker no longer owns them are looked up again first;
- failure accounting: a request that fails, or an answer with a top-level error code, is
  counted (`PollState.error`) under the API's name, or logged once per broker when the broker
  predates the API; the handler then says what it means for its keys (unknown, never "none");
- the answer checked against its request: a key asked for and left out of the answer is counted
  `MISSING_FROM_ANSWER` and handed to the handler as left out, never read as "nothing there".

An API whose batches are many and costly to build (DescribeProducers: one per few hundred
partitions, kept between polls) routes and builds them itself and hands them over pre-built
(`BatchHandler`, `BatchRun`): the driver then sends and accounts for them as above, with
the keys left out of each answer named by the handler's parser rather than found by a walk
over the batch, and re-routes once what the handler gives back (`FreshLeaderStrategy`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from exporter.collect.client import ClusterClient, MetadataView, gather_settled
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.errors import MISSING_FROM_ANSWER, NONE, error_name
from exporter.collect.pollstate import (
    RETRY_DELAY_SECONDS,
    UNSUPPORTED_API_KIND,
    ApiSupportLog,
    PollState,
)
from exporter.model import TopicPartition

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")
B = TypeVar("B")


@dataclass(slots=True)
class Outcome(Generic[K]):
    """What an answer (or a failed request) means for the driver's next attempt."""

    retry: list[K] = field(default_factory=list)
    """Keys worth asking again (loading, moved, not answered)."""
    forget: list[K] = field(default_factory=list)
    """Keys whose broker is no longer theirs (NOT_COORDINATOR, the coordinator failed): the
    strategy looks them up again before they are next asked."""

    def add(self, other: Outcome[K]) -> None:
        self.retry.extend(other.retry)
        self.forget.extend(other.forget)


class Handler(Generic[K, A]):
    """One Kafka API for one call (an instance keeps that call's results).

    Subclasses set `api` (its name in request errors) and `unsupported_name` (the name the
    once-per-broker log gives a broker that predates the API; None: such a broker is counted
    as a failed request like any other) and write `request`, `parse` and `handle`."""

    api: str = ""
    unsupported_name: str | None = None
    view_needs_it = False
    """An API the coordinator view needs: a broker without it is also recorded in
    `PollState.unsupported_apis` (the view is then incomplete, never "nothing there")."""

    split_by_version = False
    """Whether `batches` needs the broker's negotiated versions (its connection)."""

    def batches(self, keys: list[K], connection: BrokerConnection | None) -> list[list[K]]:
        """The keys of each request to one broker (all in one by default); `connection` is
        given when `split_by_version` is set."""
        return [keys]

    def request(self, keys: list[K]) -> Callable[[BrokerConnection], Any]:
        """The request for `keys`, built for the broker's negotiated versions."""
        raise NotImplementedError

    def ask(self, client: ClusterClient, broker_id: int, keys: list[K]) -> Awaitable[Any]:
        """Send the request for `keys` (one batch) and await its answer, given to `parse`.
        An API whose answer is read from more than one request (ListOffsets: both isolation
        levels) sends them here; a `CollectError` raised is that batch's failed request."""
        return client.send(broker_id, self.request(keys))

    def parse(self, keys: list[K], response: Any) -> tuple[A, Collection[K]]:
        """The answer read, and the keys it speaks of (checked by the driver against `keys`)."""
        raise NotImplementedError

    def error_code(self, answer: A) -> int:
        """The answer's top-level error code, for the APIs that have one (counted by the
        driver before `handle`; the handler decides what it means for the keys)."""
        return int(NONE)

    def handle(
        self, broker_id: int, keys: list[K], answer: A, state: PollState, *, last: bool
    ) -> Outcome[K]:
        """Take the answer in; `last`: no attempt follows, so nothing is retried."""
        raise NotImplementedError

    def left_out(self, broker_id: int, keys: list[K], state: PollState) -> Outcome[K]:
        """Keys asked for and left out of the answer (already counted): unknown by default."""
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[K], error: CollectError, state: PollState
    ) -> Outcome[K]:
        """The request failed (already counted or logged): its keys are unknown by default."""
        return Outcome()

    def unrouted(self, keys: list[K]) -> None:
        """Keys no broker could be found for (none up, coordinator not found): unknown."""


class WholeAnswer(Handler[K, Any]):
    """An API whose answer is one whole (a broker's listing, the cluster's description), with
    a top-level error code: every key asked is answered."""

    def parse(self, keys: list[K], response: Any) -> tuple[Any, Collection[K]]:
        return response, keys

    def error_code(self, answer: Any) -> int:
        return int(answer.error_code)


class Strategy(Protocol[K]):
    """Which broker to ask about each key."""

    async def route(
        self, keys: list[K], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[K]], list[K]]:
        """(broker -> its keys, the keys no broker was found for)."""
        ...

    def forget(self, keys: Collection[K]) -> None:
        """These keys' broker is no longer theirs."""
        ...


class Driver:
    """Runs handlers over the cluster client's connections (the poll's asyncio loop)."""

    def __init__(self, client: ClusterClient, support: ApiSupportLog) -> None:
        self.client = client
        self.support = support

    async def run(
        self,
        handler: Handler[K, Any],
        strategy: Strategy[K],
        keys: list[K],
        meta: MetadataView,
        state: PollState,
        *,
        attempts: int = 1,
    ) -> None:
        """Ask about `keys` until each is answered, failed, or `attempts` are used up."""
        pending = keys
        for attempt in range(attempts):
            if not pending:
                return
            last = attempt == attempts - 1
            routes, unrouted = await strategy.route(pending, meta, state)
            if unrouted:
                handler.unrouted(unrouted)
            asks = [
                self._ask(handler, broker_id, broker_keys, state, last=last)
                for broker_id, broker_keys in sorted(routes.items())
            ]
            # One broker (a leader's session, the one broker asked): awaited in place.
            outcomes = [await asks[0]] if len(asks) == 1 else await asyncio.gather(*asks)
            pending = []
            for outcome in outcomes:
                strategy.forget(outcome.forget)
                pending.extend(outcome.retry)
            if pending and not last:
                await asyncio.sleep(RETRY_DELAY_SECONDS)

    async def _ask(
        self, handler: Handler[K, Any], broker_id: int, keys: list[K], state: PollState,
        *, last: bool,
    ) -> Outcome[K]:
        outcome: Outcome[K] = Outcome()
        try:
            connection = (
                await self.client.connection(broker_id) if handler.split_by_version else None
            )
            batches = handler.batches(keys, connection)
        except CollectError as exc:
            outcome.add(self._failed(handler, broker_id, keys, exc, state))
            return outcome
        results = await gather_settled(
            *(handler.ask(self.client, broker_id, batch) for batch in batches)
        )
        for batch, result in zip(batches, results, strict=True):
            if isinstance(result, CollectError):
                outcome.add(self._failed(handler, broker_id, batch, result, state))
                continue
            if isinstance(result, BaseException):
                raise result
            if handler.unsupported_name is not None:
                self.support.supported(broker_id, handler.unsupported_name)
            answer, answered = handler.parse(batch, result)
            left_out = [k for k in batch if k not in answered]
            if left_out:
                state.error(broker_id, handler.api, MISSING_FROM_ANSWER)
                outcome.add(handler.left_out(broker_id, left_out, state))
            code = handler.error_code(answer)
            if code != NONE:
                state.error(broker_id, handler.api, error_name(code))
            outcome.add(handler.handle(broker_id, batch, answer, state, last=last))
        return outcome

    def _failed(
        self,
        handler: Handler[K, Any],
        broker_id: int,
        keys: list[K],
        error: CollectError,
        state: PollState,
    ) -> Outcome[K]:
        predates = self.count_failure(
            handler.api, handler.unsupported_name, broker_id, error, state
        )
        if predates and handler.view_needs_it:
            state.unsupported_apis.add(handler.api)
        return handler.failed(broker_id, keys, error, state)

    def count_failure(
        self, api: str, unsupported_name: str | None, broker_id: int, error: CollectError,
        state: PollState,
    ) -> bool:
        """A failed request counted under `api`, or, from a broker that predates the API
        (`unsupported_name` set), logged once and not counted: True then."""
        if error.kind == UNSUPPORTED_API_KIND and unsupported_name is not None:
            # The broker's release, not a failure: logged once, not counted.
            self.support.unsupported(broker_id, unsupported_name)
            return True
        state.error(broker_id, api, error.kind)
        return False


class EveryBroker:
    """Keys are broker ids, each asked of itself (APIs where each broker answers for its own
    slice: ListTransactions, ListGroups, a broker's own configs). A broker already down this
    poll fails fast and is counted, like any failed request."""

    async def route(
        self, keys: list[int], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[int]], list[int]]:
        return {broker_id: [broker_id] for broker_id in keys}, []

    def forget(self, keys: Collection[int]) -> None:
        pass


class AnyBroker(Generic[K]):
    """Every key asked of one broker: the lowest id not down this poll (APIs any broker
    answers: FindCoordinator, DescribeCluster, topic configs)."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client

    async def route(
        self, keys: list[K], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[K]], list[K]]:
        down = self._client.down
        broker_id = next((b for b in sorted(meta.brokers) if b not in down), None)
        if broker_id is None:
            return {}, keys
        return {broker_id: keys}, []

    def forget(self, keys: Collection[K]) -> None:
        pass


class CoordinatorStrategy(Generic[K]):
    """Keys asked of their coordinator, looked up with FindCoordinator (`lookup`, a handler
    that writes what it finds into `coordinators`) on any broker, for the keys not already
    in `coordinators`. The caller owns `coordinators`: kept across polls, or one call's."""

    def __init__(
        self,
        driver: Driver,
        lookup: Callable[[], Handler[K, Any]],
        coordinators: dict[K, int],
        *,
        attempts: int,
    ) -> None:
        self._driver = driver
        self._lookup = lookup
        self.coordinators = coordinators
        self._attempts = attempts

    async def route(
        self, keys: list[K], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[K]], list[K]]:
        coordinators = self.coordinators
        unknown = [k for k in keys if k not in coordinators]
        if unknown:
            await self._driver.run(
                self._lookup(), AnyBroker(self._driver.client), unknown, meta, state,
                attempts=self._attempts,
            )
        routes: dict[int, list[K]] = {}
        for key in keys:
            coordinator = coordinators.get(key)
            if coordinator is not None:
                routes.setdefault(coordinator, []).append(key)
        # Keys without a coordinator: the lookup has counted why; they stay unknown.
        return routes, []

    def forget(self, keys: Collection[K]) -> None:
        for key in keys:
            self.coordinators.pop(key, None)


class KnownBroker(Generic[K]):
    """Every key asked of one broker the caller already knows to answer for them (the leader
    a fetch session is held with)."""

    def __init__(self, broker_id: int) -> None:
        self._broker_id = broker_id

    async def route(
        self, keys: list[K], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[K]], list[K]]:
        return {self._broker_id: keys}, []

    def forget(self, keys: Collection[K]) -> None:
        pass


class PartitionLeaderStrategy:
    """Keys are partitions, each asked of its leader as the poll's Metadata says
    (`MetadataView.leaders`, with the poll's own re-routing of DescribeProducers in it): APIs a
    partition's leader answers (ListOffsets). A partition without a leader is unrouted. A
    leader that answers it no longer leads (NOT_LEADER_OR_FOLLOWER) is not asked again this
    poll: the handler says what the answer means, and the next poll's Metadata routes anew."""

    async def route(
        self, keys: list[TopicPartition], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
        leaders = meta.leaders
        routes: dict[int, list[TopicPartition]] = {}
        unrouted: list[TopicPartition] = []
        for tp in keys:
            leader = leaders.get(tp, -1)
            if leader < 0:
                unrouted.append(tp)
            else:
                routes.setdefault(leader, []).append(tp)
        return routes, unrouted

    def forget(self, keys: Collection[TopicPartition]) -> None:
        pass


class BatchHandler(Generic[K, B, A]):
    """One Kafka API whose caller routes its keys and builds its batches (`B`, each one
    request to one broker): for an API whose batches are built once and reused while the
    cluster is unchanged, where a walk over every key per poll would cost more than the
    request (DescribeProducers at a million partitions). Run by `BatchRun`; the hooks are
    those of `Handler`, given the batch instead of a list of its keys."""

    api: str = ""
    unsupported_name: str | None = None

    def ask(self, client: ClusterClient, broker_id: int, batch: B) -> Awaitable[Any]:
        """Send `batch` and await its answer, given to `parse`; a `CollectError` raised is
        the batch's failed request."""
        raise NotImplementedError

    def parse(self, broker_id: int, batch: B, response: Any) -> tuple[A, Sequence[K]]:
        """The answer read, and the keys of `batch` it leaves out (found by the parser's own
        pass over the answer: the driver does not walk the batch)."""
        raise NotImplementedError

    def error_code(self, answer: A) -> int:
        """The answer's top-level error code, for the APIs that have one."""
        return int(NONE)

    def handle(
        self, broker_id: int, batch: B, answer: A, state: PollState, *, last: bool
    ) -> Outcome[K]:
        """Take the answer in; `last`: no attempt follows, so nothing is retried."""
        raise NotImplementedError

    def left_out(self, broker_id: int, keys: Sequence[K], state: PollState) -> Outcome[K]:
        """Keys asked for and left out of the answer (already counted): unknown by default."""
        return Outcome()

    def failed(
        self, broker_id: int, batch: B, error: CollectError, state: PollState, *, last: bool
    ) -> Outcome[K]:
        """The request failed (already counted or logged): its keys are unknown by default."""
        return Outcome()

    def unrouted(self, keys: list[K], state: PollState, error: CollectError | None) -> None:
        """Keys given back and not asked again: no broker leads them (`error` None), or
        looking their broker up failed (`error`, counted by the strategy)."""

    def batches(self, routes: Mapping[int, list[K]], state: PollState) -> list[tuple[int, B]]:
        """The batches asking the keys given back again, routed anew: (broker id, batch)."""
        raise NotImplementedError


class BatchRun(Generic[K, B]):
    """Pre-routed, pre-built batches over one poll: each `ask` sends its batches, every one at
    once, and accounts for them as `Driver.run` does (a failed request counted under the API's
    name or, for a broker that predates it, logged once; a top-level error code counted; the
    keys an answer leaves out counted `MISSING_FROM_ANSWER` once per answer and handed to
    `left_out`). The keys the handlers give back are kept, over every `ask` of the poll, and
    `retry` routes them anew with `strategy`, once, and asks them once more: a poll whose
    phases ask in turn (some batches known only after another phase) looks their brokers up
    once, not once per phase."""

    def __init__(self, driver: Driver, strategy: Strategy[K]) -> None:
        self._driver = driver
        self._strategy = strategy
        self.given_back: list[K] = []

    async def ask(
        self,
        handler: BatchHandler[K, B, Any],
        batches: Sequence[tuple[int, B]],
        state: PollState,
        *,
        last: bool = False,
    ) -> None:
        """Send `batches` ((broker id, batch)); `last`: no attempt follows."""
        outcomes = await asyncio.gather(
            *(self._ask(handler, broker_id, batch, state, last=last)
              for broker_id, batch in batches)
        )
        for outcome in outcomes:
            self._strategy.forget(outcome.forget)
            if not last:
                self.given_back.extend(outcome.retry)

    async def retry(
        self, handler: BatchHandler[K, B, Any], meta: MetadataView, state: PollState
    ) -> None:
        """Ask the keys given back once more, where `strategy` routes them now."""
        keys, self.given_back = self.given_back, []
        if not keys:
            return
        try:
            routes, unrouted = await self._strategy.route(keys, meta, state)
        except CollectError as exc:
            handler.unrouted(keys, state, exc)
            return
        if unrouted:
            handler.unrouted(unrouted, state, None)
        await self.ask(handler, handler.batches(routes, state), state, last=True)

    async def _ask(
        self, handler: BatchHandler[K, B, Any], broker_id: int, batch: B, state: PollState,
        *, last: bool,
    ) -> Outcome[K]:
        driver = self._driver
        try:
            response = await handler.ask(driver.client, broker_id, batch)
        except CollectError as exc:
            driver.count_failure(handler.api, handler.unsupported_name, broker_id, exc, state)
            return handler.failed(broker_id, batch, exc, state, last=last)
        if handler.unsupported_name is not None:
            driver.support.supported(broker_id, handler.unsupported_name)
        answer, left_out = handler.parse(broker_id, batch, response)
        code = handler.error_code(answer)
        if code != NONE:
            state.error(broker_id, handler.api, error_name(code))
        outcome = handler.handle(broker_id, batch, answer, state, last=last)
        if left_out:
            state.error(broker_id, handler.api, MISSING_FROM_ANSWER)
            outcome.add(handler.left_out(broker_id, left_out, state))
        return outcome


class FreshLeaderStrategy:
    """Keys are partitions whose leader may have moved since the poll's Metadata (it answered
    NOT_LEADER_OR_FOLLOWER, or refused the connection): a fresh Metadata of their topics names
    their leader now. What it says is written into the poll's view, in new mappings (the old
    ones may be shared with the client's parse of the last answer, which the next poll may
    reuse: never written), so that later phases route by it; `unlisted_leader_topics` is
    reset, to be walked again if asked. A partition without a leader now is unrouted; a failed
    Metadata is counted and raised (the keys stay as their first attempt left them)."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client

    async def route(
        self, keys: list[TopicPartition], meta: MetadataView, state: PollState
    ) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
        try:
            fresh = await self._client.metadata(sorted({tp.topic for tp in keys}))
        except CollectError as exc:
            state.error(-1, "Metadata", exc.kind)
            raise
        routes: dict[int, list[TopicPartition]] = {}
        unrouted: list[TopicPartition] = []
        leaders = dict(meta.leaders)
        for tp in sorted(keys):
            leader = fresh.leaders.get(tp, -1)
            if leader < 0:
                unrouted.append(tp)
                continue
            leaders[tp] = leader
            routes.setdefault(leader, []).append(tp)
        meta.leaders = leaders
        meta.brokers = {**meta.brokers, **fresh.brokers}
        meta.unlisted_leader_topics = None
        return routes, unrouted

    def forget(self, keys: Collection[TopicPartition]) -> None:
        pass
