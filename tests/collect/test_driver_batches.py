"""The admin driver's pre-built batches (`BatchRun`) and its re-routing of partitions whose
leader moved (`FreshLeaderStrategy`), on a handler of their own: every batch sent at once and
accounted for, left-out keys counted once per answer as the parser names them, and the keys
given back over a poll's asks looked up once in a fresh Metadata and asked once more."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from exporter.collect.client import MetadataView
from exporter.collect.connection import (
    BrokerUnreachable,
    CollectError,
    RequestTimeout,
    UnsupportedApi,
)
from exporter.collect.driver import BatchHandler, BatchRun, Driver, FreshLeaderStrategy, Outcome
from exporter.collect.pollstate import ApiSupportLog, PollState
from exporter.model import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Client:
    """Answers each batch sent to a broker with the next of that broker's `answers`
    ({partition: "ok" | "moved"}, or a failure to raise), and Metadata with `fresh`."""

    def __init__(self, answers: dict[int, list[Any]], fresh: MetadataView | Exception) -> None:
        self.answers = answers
        self.fresh = fresh
        self.sent: list[tuple[int, tuple[TopicPartition, ...]]] = []
        self.metadata_asked: list[list[str]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def send(self, broker_id: int, batch: tuple[TopicPartition, ...]) -> Any:
        self.sent.append((broker_id, batch))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)  # every batch of an ask is in flight before any is answered
        self.in_flight -= 1
        result = self.answers[broker_id].pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    async def metadata(self, topics: Sequence[str]) -> MetadataView:
        self.metadata_asked.append(list(topics))
        if isinstance(self.fresh, Exception):
            raise self.fresh
        return self.fresh


class Moves(BatchHandler[TopicPartition, tuple[TopicPartition, ...], dict[TopicPartition, str]]):
    """Batches are tuples of partitions; "moved", or a broker gone, gives a partition back
    (not on the last attempt); a partition the answer leaves out is named by the parser."""

    api = unsupported_name = "Moves"

    def __init__(self) -> None:
        self.ok: dict[TopicPartition, int] = {}
        self.left: list[TopicPartition] = []
        self.moved_last: list[TopicPartition] = []
        self.unrouted_with: list[tuple[list[TopicPartition], str | None]] = []
        self.failed_with: list[tuple[int, str]] = []

    def ask(self, client: Any, broker_id: int, batch: tuple[TopicPartition, ...]) -> Awaitable[Any]:
        sent: Awaitable[Any] = client.send(broker_id, batch)
        return sent

    def parse(
        self, broker_id: int, batch: tuple[TopicPartition, ...], response: Any
    ) -> tuple[dict[TopicPartition, str], Sequence[TopicPartition]]:
        return response, [tp for tp in batch if tp not in response]

    def handle(
        self, broker_id: int, batch: tuple[TopicPartition, ...],
        answer: dict[TopicPartition, str], state: PollState, *, last: bool,
    ) -> Outcome[TopicPartition]:
        outcome: Outcome[TopicPartition] = Outcome()
        for tp, result in answer.items():
            if result == "ok":
                self.ok[tp] = broker_id
            elif last:
                self.moved_last.append(tp)
            else:
                outcome.retry.append(tp)
        return outcome

    def left_out(
        self, broker_id: int, keys: Sequence[TopicPartition], state: PollState
    ) -> Outcome[TopicPartition]:
        self.left.extend(keys)
        return Outcome()

    def failed(
        self, broker_id: int, batch: tuple[TopicPartition, ...], error: CollectError,
        state: PollState, *, last: bool,
    ) -> Outcome[TopicPartition]:
        self.failed_with.append((broker_id, error.kind))
        gone = isinstance(error, BrokerUnreachable) and not last
        return Outcome(retry=list(batch) if gone else [])

    def unrouted(
        self, keys: list[TopicPartition], state: PollState, error: CollectError | None
    ) -> None:
        self.unrouted_with.append((keys, None if error is None else error.kind))

    def batches(
        self, routes: Mapping[int, list[TopicPartition]], state: PollState
    ) -> list[tuple[int, tuple[TopicPartition, ...]]]:
        return [(leader, tuple(tps)) for leader, tps in routes.items()]


def view(leaders: dict[TopicPartition, int], brokers: dict[int, tuple[str, int]]) -> MetadataView:
    return MetadataView(
        brokers=brokers, leaders=leaders, by_leader={}, topic_ids={},
        unlisted_leader_topics=frozenset(),
    )


def poll(
    client: Client, asks: list[list[tuple[int, tuple[TopicPartition, ...]]]], meta: MetadataView
) -> tuple[Moves, PollState, ApiSupportLog]:
    support = ApiSupportLog("c")
    driver = Driver(client, support)  # type: ignore[arg-type]
    run: BatchRun[TopicPartition, tuple[TopicPartition, ...]] = BatchRun(
        driver, FreshLeaderStrategy(client)  # type: ignore[arg-type]
    )
    handler, state = Moves(), PollState(now_ms=0)

    async def go() -> None:
        for batches in asks:
            await run.ask(handler, batches, state)
        await run.retry(handler, meta, state)

    asyncio.run(go())
    return handler, state, support


def errors(state: PollState) -> list[tuple[int, str, str]]:
    return [(e.broker_id, e.api, e.error) for e in state.request_errors]


def test_every_batch_goes_out_at_once_and_left_out_keys_are_counted_once_per_answer() -> None:
    client = Client({1: [{A0: "ok"}], 2: [{}]}, view({}, {}))
    handler, state, _ = poll(client, [[(1, (A0, A1)), (2, (B0,))]], view({}, {}))
    assert client.most_in_flight == 2
    assert handler.ok == {A0: 1}
    assert sorted(handler.left) == [A1, B0]
    assert sorted(errors(state)) == [(1, "Moves", "MISSING_FROM_ANSWER"),
                                     (2, "Moves", "MISSING_FROM_ANSWER")]
    assert client.metadata_asked == []  # nothing given back: no Metadata


def test_a_failed_request_is_counted_and_a_broker_without_the_api_logged_not_counted() -> None:
    client = Client({1: [RequestTimeout("slow")], 2: [UnsupportedApi("old")]}, view({}, {}))
    handler, state, support = poll(client, [[(1, (A0,)), (2, (B0,))]], view({}, {}))
    assert errors(state) == [(1, "Moves", "REQUEST_TIMEOUT")]
    assert sorted(handler.failed_with) == [(1, "REQUEST_TIMEOUT"), (2, "UNSUPPORTED_VERSION")]
    assert len(support) == 1  # broker 2 logged once
    assert client.metadata_asked == []


def test_keys_given_back_over_a_polls_asks_are_looked_up_once_and_asked_once_more() -> None:
    old_leaders = {A0: 1, A1: 1, B0: 2}
    meta = view(dict(old_leaders), {1: ("h", 1), 2: ("h", 2)})
    shared_leaders = meta.leaders
    fresh = view({A0: 3, A1: 1, B0: 3}, {3: ("h", 3)})
    client = Client(
        {1: [{A0: "moved", A1: "ok"}], 2: [BrokerUnreachable("gone")],
         3: [{A0: "ok", B0: "moved"}]},
        fresh,
    )
    handler, state, _ = poll(client, [[(1, (A0, A1))], [(2, (B0,))]], meta)
    assert client.metadata_asked == [["a", "b"]]  # one Metadata for both asks' keys
    assert client.sent[-1] == (3, (A0, B0))  # asked once more, at the leader named now
    assert handler.ok == {A0: 3, A1: 1}
    assert handler.moved_last == [B0]  # the last attempt gives nothing back
    # The poll's view routes by the fresh answer, in new mappings (the old one not written).
    assert meta.leaders == {A0: 3, A1: 1, B0: 3} and shared_leaders == old_leaders
    assert dict(meta.brokers) == {1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}
    assert meta.unlisted_leader_topics is None
    assert errors(state) == [(2, "Moves", "BROKER_UNREACHABLE")]


def test_a_key_without_a_leader_now_is_unrouted() -> None:
    meta = view({A0: 1}, {1: ("h", 1)})
    client = Client({1: [{A0: "moved"}]}, view({}, {}))
    handler, _, _ = poll(client, [[(1, (A0,))]], meta)
    assert handler.unrouted_with == [([A0], None)]
    assert len(client.sent) == 1


def test_a_failed_metadata_is_counted_and_the_keys_stay_as_their_first_attempt_left_them() -> None:
    meta = view({A0: 1}, {1: ("h", 1)})
    client = Client({1: [{A0: "moved"}]}, RequestTimeout("metadata slow"))
    handler, state, _ = poll(client, [[(1, (A0,))]], meta)
    assert handler.unrouted_with == [([A0], "REQUEST_TIMEOUT")]
    assert errors(state) == [(-1, "Metadata", "REQUEST_TIMEOUT")]
    assert meta.leaders == {A0: 1} and len(client.sent) == 1
