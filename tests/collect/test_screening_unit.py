"""`collect.screening.screen` on hand-made ListOffsets answers (issue 28): only LSO == HW from
both answers, without error, is "clear"; everything else goes to DescribeProducers, and what
is wrong with an answer is counted."""

from __future__ import annotations

import asyncio
from typing import Any

from exporter.collect import screening
from exporter.collect.client import READ_COMMITTED
from exporter.collect.connection import BrokerUnreachable
from exporter.collect.fastdecode import (
    LeanListOffsetsResponse,
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from exporter.collect.pollstate import PollState

NOT_LEADER_OR_FOLLOWER = 6


class FakeClient:
    """Answers the high-watermark (isolation 0) and LSO (READ_COMMITTED) requests with the
    given partitions in that order ((index, error, offset) per topic), or raises."""

    def __init__(self, hw: Any, lso: Any) -> None:
        self.answers = {0: hw, READ_COMMITTED: lso}

    async def send(self, broker_id: int, isolation: Any, decode: Any) -> Any:
        answer = self.answers[isolation]
        if isinstance(answer, Exception):
            raise answer
        return LeanListOffsetsResponse(10, 0, [
            ListOffsetsTopic(name, [ListOffsetsPartition(*p) for p in parts])
            for name, parts in answer.items()
        ])


def run(hw: Any, lso: Any, asked: dict[str, list[int]]) -> tuple[Any, list[Any]]:
    """`screen` with the request builder replaced by its isolation level (the fake's key)."""
    state = PollState(now_ms=0)
    client: Any = FakeClient(hw, lso)
    build = screening.list_offsets_request
    screening.list_offsets_request = lambda partitions, isolation: isolation  # type: ignore
    try:
        result = asyncio.run(screening.screen(client, {1: asked}, state))
    finally:
        screening.list_offsets_request = build
    return result, [(e.api, e.error) for e in state.request_errors]


def test_only_lso_equal_to_hw_is_clear_in_any_order() -> None:
    hw = {"t": [(0, 0, 10), (1, 0, 20), (2, 0, 30)]}
    lso = {"t": [(2, 0, 30), (0, 0, 10), (1, 0, 15)]}  # another order; t-1 has LSO < HW
    ask, errors = run(hw, lso, {"t": [0, 1, 2]})
    assert ask == {1: {"t": [1]}} and errors == []


def test_errors_missing_and_failed_requests_go_to_describe_producers() -> None:
    hw = {"t": [(0, 0, 10), (1, NOT_LEADER_OR_FOLLOWER, -1), (3, 0, 5)]}
    lso = {"t": [(0, 0, 10), (1, 0, 20), (3, 0, 5)]}
    ask, errors = run(hw, lso, {"t": [0, 1, 2, 3], "u": [0]})
    assert ask == {1: {"t": [1, 2], "u": [0]}}
    assert sorted(errors) == [("ListOffsets", "MISSING_FROM_ANSWER")] * 4 + [
        ("ListOffsets", "NOT_LEADER_OR_FOLLOWER")]
    ask, errors = run(BrokerUnreachable("down"), lso, {"t": [0, 3]})
    assert ask == {1: {"t": [0, 3]}} and errors == [("ListOffsets", "BROKER_UNREACHABLE")]


def test_unknown_offsets_are_never_clear() -> None:
    ask, _ = run({"t": [(0, 0, -1)]}, {"t": [(0, 0, -1)]}, {"t": [0]})
    assert ask == {1: {"t": [0]}}
