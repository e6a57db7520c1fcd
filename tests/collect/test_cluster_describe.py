"""Whether the exporter's principal may Describe the cluster, read from DescribeCluster's
ClusterAuthorizedOperations (docs/kafka-semantics.md#describe-cluster): the parser on answers
as a broker encodes them (every version, the raw 32-bit field), and the reader's caching and
failure paths against a fake client."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kafka.protocol.admin.cluster import DescribeClusterResponse

from exporter.collect.apis.describe_cluster import parse_cluster_describe
from exporter.collect.connection import BrokerUnreachable, UnsupportedApi
from exporter.collect.driver import Driver
from exporter.collect.groups import ConsumerGroupReader
from exporter.collect.pollstate import ApiSupportLog, PollState
from exporter.settings import ClusterSettings

ALL_CLUSTER_OPERATIONS = 0x1FA0  # CREATE 5, ALTER 7 .. IDEMPOTENT_WRITE 12: no authorizer
INT32_MIN = -(2**31)


def answer(version: int, operations: int, error_code: int = 0) -> Any:
    """A DescribeClusterResponse with `operations` as the raw field, through the wire."""
    template = DescribeClusterResponse(
        version=version, throttle_time_ms=0, error_code=error_code, error_message=None,
        endpoint_type=1, cluster_id="c", controller_id=1, brokers=[],
        authorized_operations=set())
    raw = bytearray(template.encode())
    # The field is the last before the (empty) tagged-field buffer.
    struct.pack_into(">i", raw, len(raw) - 5, operations)
    return DescribeClusterResponse[version].decode(bytes(raw))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_bit_set_means_the_group_list_is_complete(version: int) -> None:
    assert parse_cluster_describe(answer(version, ALL_CLUSTER_OPERATIONS)) is None
    assert parse_cluster_describe(answer(version, 1 << 8)) is None


@pytest.mark.parametrize("version", [0, 1, 2])
def test_no_describe_bit_is_unauthorized(version: int) -> None:
    # What a broker answers without Describe on the cluster: 0.
    assert parse_cluster_describe(answer(version, 0)) == "CLUSTER_AUTHORIZATION_FAILED"
    # Other cluster operations without bit 8 (not something a broker sends: it answers 0).
    assert parse_cluster_describe(answer(version, ALL_CLUSTER_OPERATIONS & ~(1 << 8))) == (
        "CLUSTER_AUTHORIZATION_FAILED")


def test_int32_min_is_unknown_not_denied_nor_allowed() -> None:
    assert parse_cluster_describe(answer(2, INT32_MIN)) == "CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN"


def test_raw_integer_fields_are_read_as_the_bit_field() -> None:
    class Raw:
        error_code = 0

        def __init__(self, operations: int) -> None:
            self.authorized_operations = operations

    assert parse_cluster_describe(Raw(1 << 8)) is None
    assert parse_cluster_describe(Raw(0)) == "CLUSTER_AUTHORIZATION_FAILED"
    assert parse_cluster_describe(Raw(INT32_MIN)) == "CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN"


def test_an_error_code_is_its_name() -> None:
    assert parse_cluster_describe(answer(1, INT32_MIN, 31)) == "CLUSTER_AUTHORIZATION_FAILED"
    assert parse_cluster_describe(answer(1, INT32_MIN, 114)) == "MISMATCHED_ENDPOINT_TYPE"


class FakeClient:
    """Answers DescribeCluster from a queue of outcomes (a response or an exception)."""

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        self.down: set[int] = set()
        self.sent = 0

    async def send(self, broker_id: int, build: Any) -> Any:
        self.sent += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class Meta:
    def __init__(self) -> None:
        self.brokers = {1: ("h", 1), 2: ("h", 2)}


def ask(reader: ConsumerGroupReader, state: PollState) -> str | None:
    return asyncio.run(reader._list_incomplete(Meta(), state))  # type: ignore[arg-type]


def reader_for(client: FakeClient) -> ConsumerGroupReader:
    settings = ClusterSettings(name="c", bootstrap_servers=("h:1",), config_refresh_seconds=3600)
    driver = Driver(client, ApiSupportLog("c"))  # type: ignore[arg-type]
    return ConsumerGroupReader(driver, settings)


def test_a_broker_down_is_not_cached_an_answer_is() -> None:
    client = FakeClient([BrokerUnreachable("down"), answer(2, 0), answer(2, 1 << 8)])
    reader, state = reader_for(client), PollState(now_ms=0)
    assert ask(reader, state) == "BROKER_UNREACHABLE"
    assert [(e.api, e.error) for e in state.request_errors] == [
        ("DescribeCluster", "BROKER_UNREACHABLE")]
    assert ask(reader, state) == "CLUSTER_AUTHORIZATION_FAILED"
    assert ask(reader, state) == "CLUSTER_AUTHORIZATION_FAILED"  # cached: not asked again
    assert client.sent == 2


def test_a_broker_without_describe_cluster_makes_the_list_unknown_unsupported() -> None:
    client = FakeClient([UnsupportedApi("DescribeClusterRequest not offered by broker")])
    reader, state = reader_for(client), PollState(now_ms=0)
    assert ask(reader, state) == "UNSUPPORTED_VERSION"  # -> reason unsupported_api
    assert state.request_errors == []  # the broker's release, not a failure
    assert ask(reader, state) == "UNSUPPORTED_VERSION" and client.sent == 1


def test_an_error_answer_is_counted_as_a_request_error() -> None:
    client = FakeClient([answer(1, INT32_MIN, 31)])
    reader, state = reader_for(client), PollState(now_ms=0)
    assert ask(reader, state) == "CLUSTER_AUTHORIZATION_FAILED"
    assert [(e.api, e.error) for e in state.request_errors] == [
        ("DescribeCluster", "CLUSTER_AUTHORIZATION_FAILED")]


def test_no_broker_up_asks_nothing() -> None:
    client = FakeClient([])
    client.down = {1, 2}
    assert ask(reader_for(client), PollState(now_ms=0)) == "BROKER_UNREACHABLE"
    assert client.sent == 0
