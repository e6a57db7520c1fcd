"""kafka_sim.workload: the churn the demo runs, and the raw client's framing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin.transactions import ListTransactionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka_sim.client import KafkaProtocolError, RawKafkaClient, VersionRange, parse_bootstrap
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import HANGING_PRODUCE_VERSIONS, PRODUCE_VERSIONS, hanging_transaction
from kafka_sim.workload import Workload
from simhelpers import CAPTURE_BROKER_CONFIG

PRODUCE, ADD_PARTITIONS_TO_TXN, API_VERSIONS = 0, 24, 18
UNSUPPORTED_VERSION = 35


@pytest.fixture
def cluster() -> Iterator[Any]:
    with SimCluster(
        brokers=1, node_ids=[1], topics={"w": 2}, broker_config=CAPTURE_BROKER_CONFIG
    ) as sim:
        yield sim


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")


@pytest.mark.parametrize(
    ("release", "api_versions", "produce", "hanging_produce"),
    [("2.7", (0, 3), 8, 8), ("3.0", (0, 3), 9, 9), ("4.0", (0, 4), 9, 11)],
)
def test_raw_client_negotiates_the_highest_shared_version(
    release: str, api_versions: tuple[int, int], produce: int, hanging_produce: int
) -> None:
    """ApiVersions v4 first; a broker that only knows v0-v3 answers UNSUPPORTED_VERSION with its
    range (capture 41) and is asked again at v3. Then each pick is min(preferred, broker max)."""
    with SimCluster(brokers=1, profile=release) as sim:
        host, port = sim.endpoints[1]
        with RawKafkaClient(host, port) as client:
            assert client.negotiate()[API_VERSIONS] == api_versions
            assert client.api_version(PRODUCE, PRODUCE_VERSIONS) == produce
            assert client.api_version(PRODUCE, HANGING_PRODUCE_VERSIONS) == hanging_produce


def test_raw_client_refuses_a_version_range_the_broker_lacks() -> None:
    """The batched AddPartitionsToTxn (v4+, KIP-890, 3.6+) does not exist on a 3.0 broker."""
    with SimCluster(brokers=1, profile="3.0") as sim:
        host, port = sim.endpoints[1]
        with RawKafkaClient(host, port) as client, pytest.raises(KafkaProtocolError) as raised:
            client.api_version(ADD_PARTITIONS_TO_TXN, VersionRange(4, 5))
    assert raised.value.error_code == UNSUPPORTED_VERSION


def test_raw_client_round_trip(cluster: Any) -> None:
    host, port = cluster.endpoints[1]
    with RawKafkaClient(host, port) as client:
        resp = client.request(
            ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
        )
        assert resp.error_code == 0
        assert {k.api_key for k in resp.api_keys} >= {61, 65, 66}
        again = client.request(ApiVersionsRequest[0]())
        assert again.header.correlation_id == resp.header.correlation_id + 1


def test_workload_churns_committed_aborted_and_long_running_transactions(cluster: Any) -> None:
    workload = Workload(
        cluster.bootstrap_servers,
        "w",
        [0, 1],
        transactions_per_second=200,
        abort_ratio=0.3,
        long_running_ratio=0.3,
        long_running_ms=60000,
        max_open_long_running=2,
        seed=7,
        now_ms=cluster.clock.now_ms,
    )
    with workload:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (
            workload.stats.committed and workload.stats.aborted and workload.open_transactions == 2
        ):
            time.sleep(0.02)
        host, port = cluster.endpoints[1]
        with RawKafkaClient(host, port) as client:
            listed = client.request(ListTransactionsRequest[1](duration_filter=-1))
        states = {t.transactional_id: t.transaction_state for t in listed.transaction_states}
    assert workload.stats.errors == 0, workload.stats.last_error
    assert workload.stats.committed > 0 and workload.stats.aborted > 0
    assert sorted(s for tid, s in states.items() if "-long-" in tid) == ["Ongoing", "Ongoing"]
    assert "CompleteCommit" in states.values() and "CompleteAbort" in states.values()
    assert workload.open_transactions == 0  # stop() ended the long-running ones


def test_read_committed_group_stops_behind_a_hanging_transaction(cluster: Any) -> None:
    """The demo's consumer group: on the partition holding a hanging transaction its committed
    offset stops at the last stable offset while the high watermark moves on; on the other
    partition it keeps up with the high watermark."""
    workload = Workload(
        cluster.bootstrap_servers,
        "w",
        [0, 1],
        transactions_per_second=50,
        abort_ratio=0.0,
        long_running_ratio=0.0,
        seed=3,
        consumer_group="readers",
    )
    assert workload.consumer is not None
    workload.consumer.commit_interval_s = 0.1
    state = cluster.state

    def offsets(partition: int) -> tuple[int | None, int, int]:
        log = state.partition("w", partition).log
        committed = state.groups.committed("readers", "w", partition)
        return (
            None if committed is None else committed.offset,
            0 if log is None else log.last_stable_offset,
            0 if log is None else log.high_watermark,
        )

    with workload:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and offsets(0)[0] is None:
            time.sleep(0.05)
        hw1_at_hang = offsets(1)[2]
        _, _, start = hanging_transaction(cluster.bootstrap_servers, "stuck", "w", 0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            committed0, lso0, hw0 = offsets(0)
            committed1 = offsets(1)[0]
            moved_on = committed1 is not None and committed1 > hw1_at_hang
            if committed0 == start and hw0 > start + 5 and moved_on:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # more commits: the group must stay where it is
        committed0, lso0, hw0 = offsets(0)
    assert workload.consumer.stats.errors == 0, workload.consumer.stats.last_error
    assert committed0 == lso0 == start < hw0
    committed1 = offsets(1)[0]
    assert committed1 is not None and committed1 > hw1_at_hang  # the other partition moves on
    listed = [g.group_id for g in state.groups.groups.values()]
    assert listed == ["readers"]
