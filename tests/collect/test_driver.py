"""The admin driver's own rules, on a handler of its own: what every API on it gets for free
(fan-out by coordinator, re-routing, retry, failure accounting, the answer checked against
its request)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

from exporter.collect.client import MetadataView
from exporter.collect.connection import BrokerConnection, BrokerUnreachable, UnsupportedApi
from exporter.collect.driver import AnyBroker, CoordinatorStrategy, Driver, Handler, Outcome
from exporter.collect.pollstate import ApiSupportLog, PollState


class Client:
    """Answers each request with the next of `answers` (an answer or a failure to raise);
    records what was asked where."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.down: dict[int, Any] = {}
        self.asked: list[tuple[int, list[str]]] = []

    async def send(self, broker_id: int, build: Any) -> Any:
        self.asked.append((broker_id, build(None)))
        result = self.answers.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


class Answers(Handler[str, dict[str, Any]]):
    """Requests are the keys; answers are {key: value}."""

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return lambda _connection: list(keys)

    def parse(self, keys: list[str], response: Any) -> tuple[dict[str, Any], Collection[str]]:
        return response, set(response)


class Lookup(Answers):
    """Answers are {key: coordinator}."""

    api = "Lookup"

    def __init__(self, found: dict[str, int]) -> None:
        self.found = found

    def handle(
        self, broker_id: int, keys: list[str], answer: dict[str, int], state: PollState,
        *, last: bool,
    ) -> Outcome[str]:
        self.found.update(answer)
        return Outcome()


class Describe(Answers):
    """Answers are {key: "ok" | "moved"}; "moved" is asked again at its new coordinator."""

    api = "Describe"
    unsupported_name = "Describe"

    def __init__(self) -> None:
        self.described: dict[str, int] = {}
        self.left: list[str] = []

    def handle(
        self, broker_id: int, keys: list[str], answer: dict[str, str], state: PollState,
        *, last: bool,
    ) -> Outcome[str]:
        outcome: Outcome[str] = Outcome()
        for key, result in answer.items():
            if result == "ok":
                self.described[key] = broker_id
            else:
                state.error(broker_id, self.api, "NOT_COORDINATOR")
                outcome.retry.append(key)
                outcome.forget.append(key)
        return outcome

    def left_out(self, broker_id: int, keys: list[str], state: PollState) -> Outcome[str]:
        self.left.extend(keys)
        return Outcome()


META = MetadataView(
    brokers={1: ("h", 1), 2: ("h", 2)}, leaders={}, by_leader={}, topic_ids={}
)


def run(client: Client, keys: list[str], attempts: int = 2) -> tuple[Describe, PollState]:
    driver = Driver(client, ApiSupportLog("c"))  # type: ignore[arg-type]
    coordinators: dict[str, int] = {}
    strategy = CoordinatorStrategy(
        driver, lambda: Lookup(coordinators), coordinators, attempts=1
    )
    handler, state = Describe(), PollState(now_ms=0)
    asyncio.run(driver.run(handler, strategy, keys, META, state, attempts=attempts))
    return handler, state


def test_keys_fan_out_by_coordinator_and_a_moved_key_is_looked_up_again() -> None:
    client = Client({"a": 1, "b": 1}, {"a": "ok", "b": "moved"}, {"b": 2}, {"b": "ok"})
    handler, state = run(client, ["a", "b"])
    assert handler.described == {"a": 1, "b": 2}
    # Lookup of both at broker 1 (any broker), Describe at 1, lookup of b again, Describe at 2.
    assert client.asked == [(1, ["a", "b"]), (1, ["a", "b"]), (1, ["b"]), (2, ["b"])]
    assert [(e.broker_id, e.api, e.error) for e in state.request_errors] == [
        (1, "Describe", "NOT_COORDINATOR")]


def test_the_last_attempt_retries_nothing() -> None:
    client = Client({"a": 1}, {"a": "moved"})
    handler, _ = run(client, ["a"], attempts=1)
    assert handler.described == {} and len(client.asked) == 2


def test_a_key_left_out_of_the_answer_is_counted_and_never_read_as_answered() -> None:
    client = Client({"a": 1, "b": 1}, {"a": "ok"})
    handler, state = run(client, ["a", "b"])
    assert handler.described == {"a": 1}
    assert handler.left == ["b"]
    assert [(e.api, e.error) for e in state.request_errors] == [
        ("Describe", "MISSING_FROM_ANSWER")]


def test_a_failed_request_is_counted() -> None:
    handler, state = run(Client({"a": 2}, BrokerUnreachable("down")), ["a"])
    assert handler.described == {}
    assert [(e.broker_id, e.api, e.error) for e in state.request_errors] == [
        (2, "Describe", "BROKER_UNREACHABLE")]


def test_a_broker_without_the_api_is_logged_not_counted() -> None:
    handler, state = run(Client({"a": 2}, UnsupportedApi("not offered")), ["a"])
    assert handler.described == {} and state.request_errors == []


def test_no_broker_up_asks_nothing_and_the_keys_stay_unknown() -> None:
    client = Client()
    client.down = {1: BrokerUnreachable("x"), 2: BrokerUnreachable("y")}
    handler, _ = run(client, ["a"])
    assert client.asked == [] and handler.described == {}


def test_any_broker_is_the_lowest_id_up() -> None:
    client = Client()
    client.down = {1: BrokerUnreachable("x")}
    strategy: AnyBroker[str] = AnyBroker(client)  # type: ignore[arg-type]
    assert asyncio.run(strategy.route(["a"], META, PollState(now_ms=0))) == ({2: ["a"]}, [])
