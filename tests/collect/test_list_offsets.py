"""ListOffsets on the admin driver: each partition asked of its leader in both isolation levels;
a partition gets offsets only from two error-free, possible answers, and whatever else
happened is its reason (counted where something failed), never a number."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from exporter.collect.apis import list_offsets
from exporter.collect.apis.list_offsets import ListOffsets, StableOffsets
from exporter.collect.client import READ_COMMITTED, READ_UNCOMMITTED, MetadataView
from exporter.collect.connection import BrokerUnreachable, RequestTimeout
from exporter.collect.driver import Driver, PartitionLeaderStrategy
from exporter.collect.errors import NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
from exporter.collect.fastdecode import (
    LeanListOffsetsResponse,
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from exporter.collect.pollstate import ApiSupportLog, PollState
from exporter.model import TopicPartition

T = "t"
Answer = Mapping[int, tuple[int, int]] | Exception
"""partition -> (error code, offset), or the request's failure."""


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


class Client:
    """Answers ListOffsets from `answers[(broker, isolation level)]`; records what was asked."""

    def __init__(self, answers: dict[tuple[int, int], Answer]) -> None:
        self.answers = answers
        self.asked: list[tuple[int, int, dict[str, list[int]]]] = []
        self.down: dict[int, Any] = {}

    async def send(self, broker_id: int, build: Any, decode: Any) -> Any:
        partitions, isolation = build
        self.asked.append((broker_id, isolation, {t: list(ps) for t, ps in partitions.items()}))
        answer = self.answers[(broker_id, isolation)]
        if isinstance(answer, Exception):
            raise answer
        return LeanListOffsetsResponse(10, 0, [ListOffsetsTopic(T, [
            ListOffsetsPartition(p, error, offset) for p, (error, offset) in answer.items()
        ])])


@pytest.fixture(autouse=True)
def plain_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request builder replaced by what it was asked (the fake's keys)."""
    monkeypatch.setattr(list_offsets, "list_offsets_request",
                        lambda partitions, isolation: (partitions, isolation))


def read(
    client: Client, leaders: dict[TopicPartition, int], keys: list[TopicPartition]
) -> tuple[StableOffsets, list[tuple[int, str]]]:
    meta = MetadataView(brokers={}, leaders=leaders, by_leader={}, topic_ids={})
    state = PollState(now_ms=0)
    offsets = StableOffsets()
    driver = Driver(client, ApiSupportLog("test"))  # type: ignore[arg-type]
    asyncio.run(driver.run(ListOffsets(offsets), PartitionLeaderStrategy(), keys, meta, state))
    assert all(e.api == "ListOffsets" for e in state.request_errors)
    return offsets, sorted((e.broker_id, e.error) for e in state.request_errors)


def test_each_partition_is_asked_of_its_leader_in_both_isolation_levels() -> None:
    client = Client({
        (1, READ_UNCOMMITTED): {0: (0, 10), 2: (0, 30)},
        (1, READ_COMMITTED): {0: (0, 7), 2: (0, 30)},
        (2, READ_UNCOMMITTED): {1: (0, 20)},
        (2, READ_COMMITTED): {1: (0, 5)},
    })
    offsets, errors = read(client, {tp(0): 1, tp(1): 2, tp(2): 1}, [tp(0), tp(1), tp(2)])
    assert sorted(client.asked) == [
        (1, READ_UNCOMMITTED, {T: [0, 2]}), (1, READ_COMMITTED, {T: [0, 2]}),
        (2, READ_UNCOMMITTED, {T: [1]}), (2, READ_COMMITTED, {T: [1]}),
    ]
    assert offsets.high_watermarks == {tp(0): 10, tp(1): 20, tp(2): 30}
    assert offsets.last_stable_offsets == {tp(0): 7, tp(1): 5, tp(2): 30}
    assert offsets.lag == {tp(0): 3, tp(1): 15, tp(2): 0}
    assert offsets.failed == {} and errors == []


def test_a_partition_without_a_leader_is_not_asked_and_has_no_offsets() -> None:
    client = Client({(1, READ_UNCOMMITTED): {0: (0, 4)}, (1, READ_COMMITTED): {0: (0, 4)}})
    offsets, errors = read(client, {tp(0): 1, tp(2): -1}, [tp(0), tp(1), tp(2)])
    assert [asked[0] for asked in client.asked] == [1, 1]
    assert offsets.high_watermarks == {tp(0): 4}
    assert offsets.failed == {tp(1): "LEADER_NOT_AVAILABLE", tp(2): "LEADER_NOT_AVAILABLE"}
    assert errors == []


def test_errors_left_out_partitions_and_impossible_offsets_are_never_offsets() -> None:
    client = Client({
        (1, READ_UNCOMMITTED): {
            0: (NOT_LEADER_OR_FOLLOWER, -1), 1: (0, 10), 2: (0, 10), 3: (0, 5), 4: (0, 8),
        },
        (1, READ_COMMITTED): {
            0: (0, 3), 1: (UNKNOWN_TOPIC_OR_PARTITION, -1), 3: (0, 6), 4: (0, -1),
        },  # 2 and 5 left out; 3: LSO past the high watermark; 4: negative LSO
    })
    offsets, errors = read(client, dict.fromkeys(map(tp, range(6)), 1), list(map(tp, range(6))))
    assert len(client.asked) == 2  # a moved leader is not asked again this poll
    assert offsets.high_watermarks == offsets.last_stable_offsets == {}
    assert offsets.failed == {
        tp(0): "NOT_LEADER_OR_FOLLOWER", tp(1): "UNKNOWN_TOPIC_OR_PARTITION",
        tp(2): "MISSING_FROM_ANSWER", tp(3): "INVALID_OFFSET", tp(4): "INVALID_OFFSET",
        tp(5): "MISSING_FROM_ANSWER",
    }
    # One per partition error and one per partition left out; impossible offsets came in an
    # answer: not a request error.
    assert errors == [
        (1, "MISSING_FROM_ANSWER"), (1, "MISSING_FROM_ANSWER"),
        (1, "NOT_LEADER_OR_FOLLOWER"), (1, "UNKNOWN_TOPIC_OR_PARTITION"),
    ]


def test_a_failed_request_leaves_its_leaders_partitions_without_offsets() -> None:
    client = Client({
        (1, READ_UNCOMMITTED): BrokerUnreachable("down"),
        (1, READ_COMMITTED): BrokerUnreachable("down"),
        (2, READ_UNCOMMITTED): {1: (NOT_LEADER_OR_FOLLOWER, -1), 2: (0, 9)},
        (2, READ_COMMITTED): RequestTimeout("slow"),
        (3, READ_UNCOMMITTED): {3: (0, 4)},
        (3, READ_COMMITTED): {3: (0, 4)},
    })
    leaders = {tp(0): 1, tp(1): 2, tp(2): 2, tp(3): 3}
    offsets, errors = read(client, leaders, list(map(tp, range(4))))
    assert offsets.high_watermarks == offsets.last_stable_offsets == {tp(3): 4}
    assert offsets.failed == {
        tp(0): "BROKER_UNREACHABLE", tp(1): "REQUEST_TIMEOUT", tp(2): "REQUEST_TIMEOUT",
    }
    # The first failed request of a leader is the one counted; an answer read before it
    # still has its partition errors counted.
    assert errors == [
        (1, "BROKER_UNREACHABLE"), (2, "NOT_LEADER_OR_FOLLOWER"), (2, "REQUEST_TIMEOUT"),
    ]
