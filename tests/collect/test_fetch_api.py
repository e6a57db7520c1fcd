"""`collect.apis.fetch`: the session request as the broker receives it, the answer checks
(an answer that cannot be the one to its request proves nothing), and one session exchange on
the admin driver: what is counted, what is asked again in full, what is left to the caller."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest

from exporter.collect.apis import fetch
from exporter.collect.client import MetadataView
from exporter.collect.connection import BrokerUnreachable, UnsupportedApi
from exporter.collect.driver import Driver, EveryBroker
from exporter.collect.fastdecode import FetchPartition, FetchTopic, LeanFetchResponse
from exporter.collect.pollstate import ApiSupportLog, PollState
from exporter.model import TopicPartition

T = "t"
INVALID_FETCH_SESSION_EPOCH = 71
NOT_LEADER_OR_FOLLOWER = 6
NO_VIEW = MetadataView(brokers={}, leaders={}, by_leader={}, topic_ids={})


def connection(broker_max: int) -> Any:
    """A connection whose broker offers Fetch up to `broker_max`."""
    return SimpleNamespace(
        version_for=lambda request_class, max_version: min(broker_max, max_version))


def test_the_request_reads_committed_offsets_without_bytes_at_the_negotiated_version() -> None:
    sent = fetch.SessionRequest(
        7, 3, {TopicPartition(T, 0): 10, TopicPartition("u", 2): 5}, [TopicPartition(T, 4)])
    request = fetch.fetch_session_request(sent)(connection(17))
    assert request.API_VERSION == fetch.FETCH_SESSION_MAX_VERSION == 10
    assert (request.isolation_level, request.max_bytes, request.max_wait_ms) == (1, 0, 0)
    assert (request.session_id, request.session_epoch) == (7, 3)
    assert {(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
            for t in request.topics for p in t.partitions} == {(T, 0, 10, 0), ("u", 2, 5, 0)}
    assert [(t.topic, t.partitions) for t in request.forgotten_topics_data] == [(T, [4])]
    assert isinstance(request, FetchRequest) and request.replica_id == -1


def test_a_broker_without_sessions_is_unsupported() -> None:
    build = fetch.fetch_session_request(fetch.SessionRequest(0, 0, {}, []))
    assert build(connection(7)).API_VERSION == 7
    with pytest.raises(UnsupportedApi):
        build(connection(6))


def answer(session_id: int, *parts: tuple[int, int], error: int = 0) -> LeanFetchResponse:
    """An answer of topic T carrying (partition, error) each at HW = LSO = 10."""
    return LeanFetchResponse(12, 0, error, session_id, [
        FetchTopic(T, None, [FetchPartition(i, e, 10, 10, 0, b"") for i, e in parts])])


def test_an_answer_that_cannot_be_the_one_to_its_request_names_its_partitions() -> None:
    incremental = fetch.SessionRequest(7, 2, {}, [])
    full = fetch.SessionRequest(7, 0, {}, [])
    assert fetch.contradictions(incremental, answer(7, (0, 0), (1, 0))) is None
    assert fetch.contradictions(incremental, answer(0)) is None  # the broker closed it
    assert fetch.contradictions(full, answer(9, (0, 0))) is None  # a new session's id
    assert fetch.contradictions(incremental, answer(9, (0, 0))) == {TopicPartition(T, 0)}
    assert fetch.contradictions(full, answer(9, (0, 0), (1, 0), (0, 0))) == {
        TopicPartition(T, 0), TopicPartition(T, 1)}


@dataclass
class Session:
    """The caller's side: epoch 2 until reset, then full (epoch 0)."""

    epoch: int = 2
    resets: int = 0

    def next_request(self) -> fetch.SessionRequest:
        return fetch.SessionRequest(7, self.epoch, {TopicPartition(T, 0): 10}, [])

    def reset(self) -> None:
        self.epoch = 0
        self.resets += 1


@dataclass
class Client:
    """Answers each Fetch with the next of `answers` (an answer or a failure to raise)."""

    answers: list[Any]
    asked: list[fetch.SessionRequest] = field(default_factory=list)
    settings: Any = field(default_factory=lambda: SimpleNamespace(name="fake"))

    async def send(self, broker_id: int, build: Any, decode: Any) -> Any:
        self.asked.append(build)
        result = self.answers.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def exchange(monkeypatch: pytest.MonkeyPatch, *answers: Any
             ) -> tuple[fetch.FetchSessionExchange, Session, Client, list[tuple[str, str]]]:
    monkeypatch.setattr(fetch, "fetch_session_request", lambda sent: sent)
    session, client = Session(), Client(list(answers))
    handler = fetch.FetchSessionExchange(session)
    state = PollState(now_ms=0)
    driver = Driver(client, ApiSupportLog("fake"))  # type: ignore[arg-type]  # a fake client
    asyncio.run(driver.run(handler, EveryBroker(), [1], NO_VIEW, state, attempts=2))
    return handler, session, client, [(e.api, e.error) for e in state.request_errors]


def test_a_session_error_is_counted_and_asked_again_in_full_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = answer(8, (0, 0))
    handler, session, client, errors = exchange(
        monkeypatch, answer(0, error=INVALID_FETCH_SESSION_EPOCH), good)
    assert [s.epoch for s in client.asked] == [2, 0]
    assert errors == [("Fetch", "INVALID_FETCH_SESSION_EPOCH")]
    assert handler.answer is good and handler.sent is client.asked[-1]
    assert not handler.doubted and not handler.unsupported
    handler, session, client, errors = exchange(
        monkeypatch, *[answer(0, error=INVALID_FETCH_SESSION_EPOCH)] * 2)
    assert errors == [("Fetch", "INVALID_FETCH_SESSION_EPOCH")] * 2 and session.resets == 1
    assert handler.answer is None and not handler.unsupported  # nothing to go by


def test_a_contradicting_answer_is_counted_and_its_partitions_doubted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = answer(8, (0, 0))
    handler, session, client, errors = exchange(
        monkeypatch, answer(7, (0, 0), (0, 0)), good)
    assert [s.epoch for s in client.asked] == [2, 0] and session.resets == 1
    assert errors == [("Fetch", "INCONSISTENT_ANSWER")]
    assert handler.answer is good and handler.doubted == {TopicPartition(T, 0)}
    handler, session, client, errors = exchange(
        monkeypatch, answer(7, (0, 0), (0, 0)), answer(8, (1, 0), (1, 0)))
    assert errors == [("Fetch", "INCONSISTENT_ANSWER")] * 2
    assert handler.answer is None  # in doubt


@pytest.mark.parametrize("failure, counted", [
    (BrokerUnreachable("down"), [("Fetch", "BROKER_UNREACHABLE")]),
    (answer(7, error=NOT_LEADER_OR_FOLLOWER), [("Fetch", "NOT_LEADER_OR_FOLLOWER")]),
    (UnsupportedApi("Fetch v6: no sessions before v7"), []),
])
def test_any_other_failure_is_counted_once_and_not_asked_again(
    monkeypatch: pytest.MonkeyPatch, failure: Any, counted: list[tuple[str, str]],
) -> None:
    handler, session, client, errors = exchange(monkeypatch, failure)
    assert len(client.asked) == 1 and errors == counted and handler.answer is None
    assert handler.unsupported == isinstance(failure, UnsupportedApi)
    assert session.resets == int(handler.unsupported)  # no session to be had: dropped
