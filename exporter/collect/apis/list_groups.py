"""ListGroups: every broker lists the groups it coordinates; the exporter keeps consumer groups
(the ones that commit offsets)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from kafka.protocol.admin.groups import ListGroupsRequest

from exporter.collect.client import MetadataView
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Driver, EveryBroker, Handler, Outcome
from exporter.collect.errors import NONE, error_name
from exporter.collect.pollstate import PollState

CONSUMER_PROTOCOL_TYPES = frozenset({"consumer", ""})
"""ListGroups protocol types of groups that commit offsets: "consumer" (subscribing
consumers) and "" (a "simple" group made by commits without membership). Connect workers'
groups ("connect") and other protocols keep no offsets."""
CONSUMER_GROUP_TYPES = frozenset({"classic", "consumer"})
"""ListGroups v5 `group_type` of consumer groups (KIP-848); share and streams groups differ."""


def list_groups_request() -> Callable[[BrokerConnection], Any]:
    """ListGroups without filters (every state, every type): the caller keeps consumer groups."""

    def build(connection: BrokerConnection) -> Any:
        return ListGroupsRequest(
            states_filter=[], types_filter=[], version=connection.version_for(ListGroupsRequest)
        )

    return build


def parse_list_groups(response: Any) -> tuple[int, list[str]]:
    """ListGroups answer -> (error code, ids of the consumer groups it lists)."""
    groups: list[str] = []
    # group_type exists from v5; kafka-python fills it with "" below v5 (read as "not said").
    typed = getattr(response, "API_VERSION", 0) >= 5
    for g in response.groups:
        if g.protocol_type not in CONSUMER_PROTOCOL_TYPES:
            continue
        if typed and str(g.group_type).lower() not in CONSUMER_GROUP_TYPES:
            continue
        groups.append(g.group_id)
    return response.error_code, groups


class ListGroups(Handler[int, tuple[int, list[str]]]):
    """Keys are broker ids; each broker's consumer groups, or why they are unknown (an API the
    broker lacks is counted like any failure: every broker has had ListGroups)."""

    api = "ListGroups"

    def __init__(self) -> None:
        self.listed: dict[int, list[str] | str] = {}

    def request(self, keys: list[int]) -> Callable[[BrokerConnection], Any]:
        return list_groups_request()

    def parse(
        self, keys: list[int], response: Any
    ) -> tuple[tuple[int, list[str]], Collection[int]]:
        return parse_list_groups(response), keys

    def error_code(self, answer: tuple[int, list[str]]) -> int:
        return answer[0]

    def handle(
        self, broker_id: int, keys: list[int], answer: tuple[int, list[str]], state: PollState,
        *, last: bool,
    ) -> Outcome[int]:
        code, groups = answer
        self.listed[broker_id] = groups if code == NONE else error_name(code)
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[int], error: CollectError, state: PollState
    ) -> Outcome[int]:
        self.listed[broker_id] = error.kind
        return Outcome()


async def list_groups(
    driver: Driver, meta: MetadataView, state: PollState
) -> list[list[str] | str]:
    """Each broker's consumer groups (by broker id), or why they are unknown."""
    handler = ListGroups()
    brokers = sorted(meta.brokers)
    await driver.run(handler, EveryBroker(), brokers, meta, state)
    return [handler.listed[b] for b in brokers]
