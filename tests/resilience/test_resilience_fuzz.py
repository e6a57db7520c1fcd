"""Fuzz the response decoding path: random and mutated bytes as the broker's answer to
Metadata, DescribeProducers and ListTransactions, through the real socket, BrokerConnection
(decode), ClusterObserver (parse), analyze and the Prometheus collector (render).

Property: the poll never raises; an answer that cannot be decoded is counted as a DECODE_ERROR
request error for that API; whatever does decode (garbage names, negative numbers, bogus broker
addresses) still renders as valid exposition text.

The bytes are served by the simulator's own network layer: a dispatcher around the table-driven
fake (tests/collect/collect_fakes.py) answers normally, except for the fuzzed API whose answer
is replaced by raw bytes. A fuzzed Metadata can advertise any broker address: connections are
allowed to loopback only (the guard raises what a socket would for an unusable address, and a
refusal for a non-loopback one), so no test traffic leaves the machine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from collect.collect_fakes import FakeCluster, Producer, Txn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_sim.api import RequestContext
from kafka_sim.cluster import SimCluster
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from exporter.analyze import analyze
from exporter.expose.collector import SnapshotCollector
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

pytestmark = pytest.mark.slow  # fuzzes every answer through a running poller

METADATA, DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 3, 61, 66
API_NAMES = {METADATA: "Metadata", DESCRIBE_PRODUCERS: "DescribeProducers",
             LIST_TRANSACTIONS: "ListTransactions"}


@dataclass(frozen=True)
class RawResponse:
    """Quacks like a kafka-python response for the simulator's frame writer."""

    body: bytes
    flexible: bool

    def encode(self, version: int) -> bytes:
        return self.body

    def flexible_version_q(self, version: int) -> bool:
        return self.flexible


@dataclass
class FuzzDispatcher:
    fake: FakeCluster
    fuzz: dict[int, bytes] = field(default_factory=dict)
    valid: dict[int, tuple[type[Any], int, bool, bytes]] = field(default_factory=dict)
    """api key -> (response class, version, flexible header, a valid body)."""

    def set_endpoints(self, endpoints: Any) -> None:
        self.fake.set_endpoints(endpoints)

    def supported_versions(self, broker_id: int) -> Any:
        return self.fake.supported_versions(broker_id)

    def handle(self, ctx: RequestContext, request: Any) -> Any:
        response = self.fake.handle(ctx, request)
        flexible = bool(response.flexible_version_q(ctx.api_version))
        self.valid.setdefault(ctx.api_key, (type(response), ctx.api_version, flexible,
                                            bytes(response.encode(version=ctx.api_version))))
        payload = self.fuzz.get(ctx.api_key)
        return response if payload is None else RawResponse(payload, flexible)


def decodes(entry: tuple[type[Any], int, bool, bytes], body: bytes) -> bool:
    response_class, version, flexible, _ = entry
    header = struct.pack(">i", 7) + (b"\x00" if flexible else b"")
    try:
        response_class.decode(header + body, version=version, header=True)
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def fuzz_sim() -> Iterator[tuple[SimCluster, FuzzDispatcher, ClusterSettings]]:
    fake = FakeCluster(node_ids=[1, 2])
    fake.leaders.update({("t", 0): 1, ("t", 1): 2, ("__transaction_state", 0): 1})
    fake.max_timeout_ms = {1: 60_000, 2: 60_000}
    start_ms = time.time_ns() // 1_000_000 - 400_000
    fake.producers[("t", 0)] = [Producer(3, 0, last_timestamp=start_ms + 10, start_offset=5)]
    fake.producers[("t", 1)] = [Producer(4, 1, last_timestamp=start_ms, start_offset=0)]
    fake.batches[("t", 0, 5)] = (start_ms, 3, 0)
    fake.offsets[("t", 0)] = (9, 5)
    fake.transactions["fuzz-hang"] = Txn(producer_id=3, state="Empty", coordinator=2)
    fake.transactions["fuzz-open"] = Txn(producer_id=4, state="Ongoing", coordinator=1,
                                         partitions=[("t", 1)], start_time_ms=start_ms)
    dispatcher = FuzzDispatcher(fake)
    with SimCluster(node_ids=[1, 2], dispatcher=dispatcher) as sim:
        cluster = ClusterSettings(
            name="fuzz", bootstrap_servers=tuple(sim.bootstrap_servers.split(",")),
            request_timeout_seconds=1.0, min_reported_duration_seconds=0.0,
            late_buffer_seconds=10.0)
        obs = poll(cluster)  # a clean poll records one valid answer per API
        assert obs.request_errors == () and len(obs.open_transactions) == 2
        yield sim, dispatcher, cluster


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = asyncio.open_connection

    async def guarded(host: Any = None, port: Any = None, **kwargs: Any) -> Any:
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise OverflowError("connect(): port must be 0-65535.")
        if "\0" in host:
            raise ValueError("embedded null character")
        host.encode("idna")  # raises UnicodeError like getaddrinfo would
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConnectionRefusedError(f"test guard: no connection to {host!r}")
        return await real(host, port, **kwargs)

    monkeypatch.setattr(asyncio, "open_connection", guarded)


def poll(cluster: ClusterSettings) -> Any:
    poller = ClusterObserver(cluster)
    try:
        return poller.poll()
    finally:
        poller.close()


def render(obs: Any, cluster: ClusterSettings) -> str:
    store = SnapshotStore([cluster])
    store.publish(analyze(obs, cluster))
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    return generate_latest(registry).decode()


@st.composite
def answers(draw: st.DrawFn, valid: bytes) -> bytes:
    """Random bytes, or a valid answer with bytes flipped, cut, inserted or appended."""
    how = draw(st.sampled_from(["random", "flip", "truncate", "insert", "append"]))
    if how == "random" or not valid:
        return draw(st.binary(max_size=256))
    data = bytearray(valid)
    if how == "flip":
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif how == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "insert":
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=16))
    else:
        data += draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@pytest.mark.parametrize("api_key", [METADATA, DESCRIBE_PRODUCERS, LIST_TRANSACTIONS])
@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_answers_never_crash_and_are_counted(
    fuzz_sim: tuple[SimCluster, FuzzDispatcher, ClusterSettings], api_key: int,
    data: st.DataObject,
) -> None:
    _, dispatcher, cluster = fuzz_sim
    entry = dispatcher.valid[api_key]
    body = data.draw(answers(entry[3]))
    dispatcher.fuzz[api_key] = body
    try:
        obs = poll(cluster)  # must not raise
    finally:
        dispatcher.fuzz.clear()
    if not decodes(entry, body):
        assert (API_NAMES[api_key], "DECODE_ERROR") in {
            (e.api, e.error) for e in obs.request_errors}
    text = render(obs, cluster)
    assert 'kafka_txn_exporter_up{cluster="fuzz"}' in text


def test_unusable_broker_addresses_in_metadata_fail_that_broker_only(
    fuzz_sim: tuple[SimCluster, FuzzDispatcher, ClusterSettings],
) -> None:
    """Found by the fuzz test: a Metadata answer advertising a port outside 0-65535 or a host
    no socket accepts raised OverflowError/ValueError out of the poll (the whole cluster
    down). Now it is that broker's BROKER_UNREACHABLE."""
    sim, dispatcher, cluster = fuzz_sim
    real_endpoints = dict(dispatcher.fake.endpoints)
    for bad in [("127.0.0.1", 70_000), ("127.0.0.1", -1), ("bad\0host", 9092),
                ("x" * 300, 9092)]:
        sim.call(dispatcher.fake.set_endpoints, {**real_endpoints, 2: bad})
        try:
            obs = poll(cluster)
        finally:
            sim.call(dispatcher.fake.set_endpoints, real_endpoints)
        assert {b.broker_id: b.up for b in obs.brokers} == {1: True, 2: False}, bad
        assert ("DescribeProducers", "BROKER_UNREACHABLE") in {
            (e.api, e.error) for e in obs.request_errors}
        assert len(obs.open_transactions) == 1  # broker 1's partition is still read


def test_nulls_the_decoder_lets_through_are_shape_errors() -> None:
    """The two shapes the fuzz test found first: a null array and a null state string in a
    ListTransactions answer (kafka-python decodes compact length 0 as None for either)."""
    from kafka.protocol.admin.transactions import ListTransactionsResponse

    from exporter.collect.shapes import ShapeError, check_response

    state = ListTransactionsResponse.TransactionState
    good = ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=[],
                                    transaction_states=[state(transactional_id="a",
                                                              producer_id=1,
                                                              transaction_state="Ongoing")])
    check_response(good, LIST_TRANSACTIONS, 1)
    good.transaction_states[0].transaction_state = None
    with pytest.raises(ShapeError, match=r"transaction_states\[\]\.transaction_state"):
        check_response(good, LIST_TRANSACTIONS, 1)
    good.transaction_states = None
    with pytest.raises(ShapeError, match="transaction_states"):
        check_response(good, LIST_TRANSACTIONS, 1)
