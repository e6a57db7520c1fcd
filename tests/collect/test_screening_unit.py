"""`collect.screening.Screen` on hand-made answers: only LSO == HW, read without
error, is "clear"; everything else goes to DescribeProducers, and what is wrong with an
answer is counted. A partition's first read is the two ListOffsets; then its leader's fetch
session: full, then incremental, and full again whenever the session is in doubt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing

from exporter.collect import screening
from exporter.collect.apis import fetch, list_offsets
from exporter.collect.client import READ_COMMITTED
from exporter.collect.connection import BrokerUnreachable, UnsupportedApi
from exporter.collect.driver import Driver
from exporter.collect.fastdecode import (
    FetchPartition,
    FetchTopic,
    LeanFetchResponse,
    LeanListOffsetsResponse,
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from exporter.collect.pollstate import ApiSupportLog, PollState
from exporter.model import TopicPartition

NOT_LEADER_OR_FOLLOWER = 6
INVALID_FETCH_SESSION_EPOCH = 71
T = "t"


@dataclass(frozen=True)
class FetchSent:
    session_id: int
    epoch: int
    send: dict[TopicPartition, int]
    forget: list[TopicPartition]


@dataclass
class FakeClient:
    """ListOffsets: `hw` / `lso` ({topic: [(index, error, offset)]}, or an exception);
    Fetch: `fetch(sent)` gives ({topic: [(index, error, hw, lso)]} or an exception, session
    id). Every request is recorded in `sent`."""

    hw: Any = None
    lso: Any = None
    fetch: Callable[[FetchSent], tuple[Any, int]] | None = None
    sent: list[Any] = field(default_factory=list)
    settings: Any = field(default_factory=lambda: SimpleNamespace(name="fake"))

    async def send(self, broker_id: int, request: Any, decode: Any) -> Any:
        self.sent.append(request)
        if isinstance(request, FetchSent):
            assert self.fetch is not None
            answer, session_id = self.fetch(request)
            if isinstance(answer, Exception):
                raise answer
            error = answer.pop("error", 0) if isinstance(answer, dict) else 0
            return LeanFetchResponse(12, 0, error, session_id, [
                FetchTopic(name, None, [FetchPartition(i, e, hw, lso, 0, b"")
                                        for i, e, hw, lso in parts])
                for name, parts in answer.items()
            ])
        answer = self.hw if request == 0 else self.lso
        if isinstance(answer, Exception):
            raise answer
        return LeanListOffsetsResponse(10, 0, [
            ListOffsetsTopic(name, [ListOffsetsPartition(*p) for p in parts])
            for name, parts in answer.items()
        ])


def screen_on(client: FakeClient) -> screening.Screen:
    return screening.Screen(Driver(client, ApiSupportLog("fake")))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def plain_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request builders replaced by what they were asked (the fake's keys)."""
    monkeypatch.setattr(list_offsets, "list_offsets_request",
                        lambda partitions, isolation: isolation)
    monkeypatch.setattr(
        fetch, "fetch_session_request",
        lambda sent: FetchSent(sent.session_id, sent.epoch, dict(sent.send), list(sent.forget)))


def poll(screen: screening.Screen, asked: dict[str, list[int]]
         ) -> tuple[screening.ScreenResult, list[tuple[str, str]]]:
    """One poll of `screen`; the partitions to ask sorted (their order is not promised)."""
    state = PollState(now_ms=0)
    result = asyncio.run(screen.screen({1: asked}, state))
    for per_topic in result.ask.values():
        for indexes in per_topic.values():
            indexes.sort()
    return result, [(e.api, e.error) for e in state.request_errors]


def tps(*indexes: int) -> list[TopicPartition]:
    return [TopicPartition(T, i) for i in indexes]


def test_only_lso_equal_to_hw_is_clear_in_any_order() -> None:
    client: Any = FakeClient(hw={T: [(0, 0, 10), (1, 0, 20), (2, 0, 30)]},
                             lso={T: [(2, 0, 30), (0, 0, 10), (1, 0, 15)]})
    result, errors = poll(screen_on(client), {T: [0, 1, 2]})
    assert result.ask == {1: {T: [1]}} and errors == []
    assert result.offsets == {TopicPartition(T, 1): screening.Offsets(20, 15)}


def test_errors_missing_and_failed_requests_go_to_describe_producers() -> None:
    client: Any = FakeClient(hw={T: [(0, 0, 10), (1, NOT_LEADER_OR_FOLLOWER, -1), (3, 0, 5)]},
                             lso={T: [(0, 0, 10), (1, 0, 20), (3, 0, 5)]})
    result, errors = poll(screen_on(client), {T: [0, 1, 2, 3], "u": [0]})
    assert result.ask == {1: {T: [1, 2], "u": [0]}}
    assert sorted(errors) == [("ListOffsets", "MISSING_FROM_ANSWER")] * 2 + [
        ("ListOffsets", "NOT_LEADER_OR_FOLLOWER")]
    client = FakeClient(hw=BrokerUnreachable("down"), lso=client.lso)
    result, errors = poll(screen_on(client), {T: [0, 3]})
    assert result.ask == {1: {T: [0, 3]}} and errors == [("ListOffsets", "BROKER_UNREACHABLE")]


@pytest.mark.parametrize("hw, lso", [(-1, -1), (5, 7), (5, -1)])
def test_impossible_offsets_are_never_clear(hw: int, lso: int) -> None:
    client: Any = FakeClient(hw={T: [(0, 0, hw)]}, lso={T: [(0, 0, lso)]})
    result, _ = poll(screen_on(client), {T: [0]})
    assert result.ask == {1: {T: [0]}}


def warm_screen(fetch: Callable[[FetchSent], tuple[Any, int]]) -> tuple[screening.Screen, Any]:
    """A screen whose partitions 0-2 were read with ListOffsets (2 has LSO < HW)."""
    client: Any = FakeClient(hw={T: [(0, 0, 10), (1, 0, 20), (2, 0, 30)]},
                             lso={T: [(0, 0, 10), (1, 0, 20), (2, 0, 25)]}, fetch=fetch)
    screen = screen_on(client)
    poll(screen, {T: [0, 1, 2]})
    client.sent.clear()
    return screen, client


def full_answer(sent: FetchSent) -> tuple[Any, int]:
    offsets = {0: (10, 10), 1: (20, 20), 2: (30, 25)}
    return {T: [(tp.partition, 0, *offsets[tp.partition]) for tp in sent.send]}, 7


def test_the_session_starts_full_then_reports_only_what_moved() -> None:
    answers = [full_answer, lambda sent: ({}, 7), lambda sent: ({T: [(1, 0, 22, 21)]}, 7),
               lambda sent: ({}, 7)]
    screen, client = warm_screen(lambda sent: answers.pop(0)(sent))
    result, errors = poll(screen, {T: [0, 1, 2]})
    assert client.sent == [FetchSent(0, 0, {tp: hw for tp, hw in zip(tps(0, 1, 2), (10, 20, 30),
                                                                     strict=True)}, [])]
    assert result.ask == {1: {T: [2]}} and not result.unchanged and errors == []
    assert result.read == {TopicPartition(T, 2): screening.Offsets(30, 25)}
    client.sent.clear()
    result, _ = poll(screen, {T: [0, 1, 2]})  # nothing moved: nothing sent, 2 unchanged
    assert client.sent == [FetchSent(7, 1, {}, [])]
    assert result.ask == {1: {T: [2]}}
    assert result.unchanged == {TopicPartition(T, 2): screening.Offsets(30, 25)}
    assert result.read == result.unchanged  # the leader's session reports them as they were
    client.sent.clear()
    result, _ = poll(screen, {T: [0, 1, 2]})  # 1 moved, with a transaction now
    assert result.ask == {1: {T: [1, 2]}}
    assert set(result.unchanged) == {TopicPartition(T, 2)}
    client.sent.clear()
    result, _ = poll(screen, {T: [0, 2]})  # 1 no longer screened; its fetch offset moved
    assert client.sent == [FetchSent(7, 3, {}, tps(1))]


@pytest.mark.parametrize(
    "fault", ["session", "request", "missing", "missing_unclear", "impossible", "declined"])
def test_a_session_in_doubt_sends_its_partitions_to_describe_producers_and_starts_again(
    fault: str,
) -> None:
    """An answer in doubt: its partitions go to DescribeProducers. No answer at all (a failed
    request): the leader's partitions are read with ListOffsets in the same poll, and only
    those with LSO < HW are asked. Either way a new session starts next poll."""
    answers: list[Callable[[FetchSent], tuple[Any, int]]] = [full_answer]
    if fault == "session":  # the epoch is refused: a full fetch in the same poll
        answers += [lambda sent: ({"error": INVALID_FETCH_SESSION_EPOCH}, 0), full_answer]
    elif fault == "request":
        answers += [lambda sent: (BrokerUnreachable("down"), 0)]
    elif fault == "missing":  # an added partition always comes back in its first answer
        answers = [lambda sent: ({T: [(0, 0, 10, 10), (2, 0, 30, 25)]}, 7)]
    elif fault == "missing_unclear":
        answers = [lambda sent: ({T: [(0, 0, 10, 10), (1, 0, 20, 20)]}, 7)]
    elif fault == "impossible":
        answers += [lambda sent: ({T: [(0, 0, 10, 12)]}, 7)]
    else:  # no room in the broker's session cache
        answers = [lambda sent: (*full_answer(sent)[:1], 0)]
    answers += [full_answer]
    screen, client = warm_screen(lambda sent: answers.pop(0)(sent))
    if fault in ("session", "request", "impossible"):
        poll(screen, {T: [0, 1, 2]})
        client.sent.clear()
    result, errors = poll(screen, {T: [0, 1, 2]})
    epochs = [s.epoch for s in client.sent if isinstance(s, FetchSent)]
    if fault == "session":
        assert epochs == [1, 0]
        assert errors == [("Fetch", "INVALID_FETCH_SESSION_EPOCH")]
        assert result.ask == {1: {T: [2]}} and not result.unchanged
        return
    expected = {"request": [2], "missing": [1, 2], "missing_unclear": [2], "impossible": [0, 2],
                "declined": [2]}[fault]
    assert sorted(result.ask[1][T]) == expected and list(result.ask) == [1]
    two = {TopicPartition(T, 2): screening.Offsets(30, 25)}
    if fault == "request":  # read again with the two ListOffsets: this poll's offsets
        assert sorted(s for s in client.sent if not isinstance(s, FetchSent)) == [
            0, READ_COMMITTED]
        assert result.read == two
    if fault == "missing_unclear":  # 2's offsets are last poll's: known, not read this poll
        assert result.offsets == two and not result.read
    assert {"request": [("Fetch", "BROKER_UNREACHABLE")],
            "missing": [("Fetch", "MISSING_FROM_ANSWER")],
            "missing_unclear": [("Fetch", "MISSING_FROM_ANSWER")],
            "impossible": [("Fetch", "INVALID_OFFSET")],
            "declined": []}[fault] == errors
    client.sent.clear()
    poll(screen, {T: [0, 1, 2]})
    fetches = [s for s in client.sent if isinstance(s, FetchSent)]
    assert fetches and fetches[0].epoch == 0  # a full fetch: a new session
    assert all(hw == screening.Offsets(*{0: (10, 10), 1: (20, 20), 2: (30, 25)}[tp.partition])
               .high_watermark for tp, hw in fetches[0].send.items())


def test_a_partition_answered_with_an_error_is_read_afresh_and_kept_by_its_session(
) -> None:
    answers = [full_answer, lambda sent: ({T: [(1, 0, -1, -1)], "x": []}, 7)]
    screen, client = warm_screen(lambda sent: answers.pop(0)(sent))
    poll(screen, {T: [0, 1, 2]})
    result, errors = poll(screen, {T: [0, 1, 2]})  # -1/-1 without an error: impossible
    assert sorted(result.ask[1][T]) == [1, 2]
    assert errors == [("Fetch", "INVALID_OFFSET")]
    client.sent.clear()
    client.fetch = full_answer
    poll(screen, {T: [0, 1, 2]})  # full again for 0 and 2; 1 read with ListOffsets
    assert sorted(s for s in client.sent if not isinstance(s, FetchSent)) == [0, READ_COMMITTED]
    client.fetch = lambda sent: ({T: [(1, 0, 20, 20)]}, 7)
    poll(screen, {T: [0, 1, 2]})  # 1 joins the session
    client.sent.clear()
    client.fetch = lambda sent: ({T: [(1, NOT_LEADER_OR_FOLLOWER, -1, -1)]}, 7)
    result, errors = poll(screen, {T: [0, 1, 2]})
    assert sorted(result.ask[1][T]) == [1, 2]
    assert errors == [("Fetch", "NOT_LEADER_OR_FOLLOWER")]
    client.sent.clear()
    client.fetch = lambda sent: ({}, 7)
    poll(screen, {T: [0, 1, 2]})
    fetch = next(s for s in client.sent if isinstance(s, FetchSent))
    assert fetch.forget == []  # the broker answers it again after an error (KIP-227)
    assert 0 in [s for s in client.sent if not isinstance(s, FetchSent)]  # read afresh


def test_a_leader_without_fetch_sessions_is_read_with_list_offsets_and_not_counted() -> None:
    """Fetch before v7 holds no session: the broker's release, not a failure. Every poll its
    partitions are read with the two ListOffsets, nothing is counted as a request error, and
    the broker is logged once, not every poll."""
    screen, client = warm_screen(
        lambda sent: (UnsupportedApi("Fetch v6: no sessions before v7"), 0))
    logged: list[dict[str, Any]] = []
    for _ in range(2):
        with structlog.testing.capture_logs() as logs:
            result, errors = poll(screen, {T: [0, 1, 2]})
        logged += [e for e in logs if e["event"] == "api_not_supported_by_broker"]
        assert errors == []
        assert result.ask == {1: {T: [2]}}
        assert result.offsets == {TopicPartition(T, 2): screening.Offsets(30, 25)}
        fetches = [s for s in client.sent if isinstance(s, FetchSent)]
        assert [s.epoch for s in fetches] == [0]  # one try per poll, never a session
        assert sorted(s for s in client.sent if not isinstance(s, FetchSent)) == [
            0, READ_COMMITTED]
        client.sent.clear()
    assert [(e["broker_id"], e["api"]) for e in logged] == [(1, "Fetch sessions")]  # once
