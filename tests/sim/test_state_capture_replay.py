"""Replays the real Kafka 4.0 capture timeline against BrokerRouter.handle() (no sockets).

The client side of the timeline (InitProducerId, AddPartitionsToTxn, Produce, EndTxn) is driven
with kafka-python request objects at the captured times (a ManualClock), producing the very
record batches the capture's Fetch responses show; every captured admin request is then decoded
from its `request_hex`, answered, re-encoded and compared field by field with the broker's
captured answer (tests/data/real-kafka-4.0, file numbers in the test names).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_sim.api import RequestContext
from kafka_sim.clock import ManualClock
from kafka_sim.log import split_batches
from kafka_sim.router import BrokerRouter
from kafka_sim.state import ClusterState

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "real-kafka-4.0"

REQUEST_CLASSES: dict[int, Any] = {
    1: FetchRequest, 2: ListOffsetsRequest, 3: MetadataRequest, 10: FindCoordinatorRequest,
    32: DescribeConfigsRequest, 61: DescribeProducersRequest, 65: DescribeTransactionsRequest,
    66: ListTransactionsRequest,
}
CLUSTER_ID = "mqfK9tQ7Q9iqlwTE8JTT4w"
TOPIC_IDS = {
    "txn-open": uuid.UUID("4352960b-3b2d-4ee5-967c-600d86c5899a"),
    "txn-committed": uuid.UUID("0dac34e7-2696-4be0-8d58-59534b26cf41"),
    "hang-test": uuid.UUID("264266f4-b21b-4974-a66f-38fbf2eea8e6"),
}


def load(name: str) -> dict[str, Any]:
    for path in CAPTURES.glob(f"{name}*.json"):
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    raise FileNotFoundError(name)


def captured_batches(name: str) -> list[bytes]:
    cap = load(name)
    records = bytes.fromhex(cap["response"]["responses"][0]["partitions"][0]["records"])
    batches = split_batches(records)
    assert batches is not None
    return [raw for _, raw in batches]


def client_batch(raw: bytes) -> bytes:
    """A fetched batch as the client sent it: base offset 0 (CRC does not cover it)."""
    return bytes(8) + raw[8:]


class Replay:
    def __init__(self) -> None:
        self.clock = ManualClock(1795217132605)  # timeout sweeps then fall on ...152605
        self.state = ClusterState(
            [1], self.clock,
            broker_config={"transaction.partition.verification.enable": "false",
                           "transaction.max.timeout.ms": "60000"},
            cluster_id=CLUSTER_ID)
        self.state.set_endpoint(1, "127.0.0.1", 19092)
        for name, count in (("txn-open", 3), ("txn-committed", 1), ("hang-test", 3)):
            self.state.create_topic(name, count, topic_id=TOPIC_IDS[name])
        self.answers: dict[str, tuple[Any, Any]] = {}
        self.correlation = 100

    def at(self, ms: int) -> None:
        self.clock.set_ms(ms)

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        ctx = RequestContext(1, api_key, version, self.correlation, "test", "User:ANONYMOUS")
        return BrokerRouter(self.state).handle(ctx, request)

    def exchange(self, name: str) -> None:
        """Answer a captured request at its capture time; keep (ours, theirs) decoded."""
        cap = load(name)
        self.at(max(self.clock.now_ms(), cap["request_sent_at_ms"]))
        key, version = cap["api_key"], cap["request_version"]
        req_cls = REQUEST_CLASSES[key]
        request = req_cls.decode(bytes.fromhex(cap["request_hex"]), version=version, header=True)
        response = self.call(key, version, request)
        resp_cls = type(getattr(response, "message", response))  # LeanResponse: its message
        ours = resp_cls.decode(response.encode(version=version), version=version)
        theirs = resp_cls.decode(bytes.fromhex(cap["response_hex"]), version=version,
                                 header=True)
        self.answers[name] = (ours.to_dict(), theirs.to_dict())

    def produce(self, version: int, tid: str | None, topic: str, partition: int,
                raw: bytes) -> Any:
        Topic = ProduceRequest.TopicProduceData
        req = ProduceRequest(version=version, transactional_id=tid, acks=-1, timeout_ms=30000,
                             topic_data=[Topic(name=topic, partition_data=[
                                 Topic.PartitionProduceData(index=partition, records=raw)])])
        resp = self.call(0, version, req)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0, part
        return part

    def init_pid(self, tid: str | None, timeout_ms: int) -> tuple[int, int]:
        resp = self.call(22, 4, InitProducerIdRequest(
            version=4, transactional_id=tid, transaction_timeout_ms=timeout_ms))
        assert resp.error_code == 0
        return resp.producer_id, resp.producer_epoch

    def add_partitions(self, tid: str, pid: int, topic: str, partitions: list[int]) -> None:
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        resp = self.call(24, 3, AddPartitionsToTxnRequest(
            version=3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[T(name=topic, partitions=partitions)]))
        errors = [p.partition_error_code for t in resp.results_by_topic_v3_and_below
                  for p in t.results_by_partition]
        assert errors == [0] * len(partitions)

    def run(self) -> None:
        for name in ("04", "05", "06", "07", "08", "09", "10", "11", "12", "13"):
            self.exchange(name)
        committed = captured_batches("26")
        # idempotent producer (pid 0) writes one record to txn-committed-0
        self.at(1795217135200)
        assert self.init_pid(None, 0) == (0, 0)
        self.produce(9, None, "txn-committed", 0, client_batch(committed[0]))
        # tx-committed-1 (pid 1) commits two records
        self.at(1795217135500)
        assert self.init_pid("tx-committed-1", 60000) == (1, 0)
        self.at(1795217135521)
        self.add_partitions("tx-committed-1", 1, "txn-committed", [0])
        self.produce(9, "tx-committed-1", "txn-committed", 0, client_batch(committed[1]))
        # tx-open-1 (pid 2) is created before tx-committed-1 commits
        self.at(1795217135558)
        assert self.init_pid("tx-open-1", 60000) == (2, 0)
        self.at(1795217135573)
        end = self.call(26, 3, EndTxnRequest(version=3, transactional_id="tx-committed-1",
                                             producer_id=1, producer_epoch=0, committed=True))
        assert end.error_code == 0
        # tx-open-1: three batches to txn-open-0, one to txn-open-1, left open
        self.at(1795217135788)
        self.add_partitions("tx-open-1", 2, "txn-open", [0])
        for raw in captured_batches("35"):
            self.produce(9, "tx-open-1", "txn-open", 0, client_batch(raw))
        self.at(1795217135803)
        self.add_partitions("tx-open-1", 2, "txn-open", [1])
        builder = DefaultRecordBatchBuilder(2, 0, True, 2, 0, 0, 1 << 20)
        builder.append(0, timestamp=1795217135804, key=b"k3", value=b"open-txn-3", headers=[])
        self.produce(9, "tx-open-1", "txn-open", 1, bytes(builder.build()))
        for name in ("14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25",
                     "26"):
            self.exchange(name)
        # hang-1 (pid 3): transactional Produce v11 without AddPartitionsToTxn
        self.at(1795217136190)
        assert self.init_pid("hang-1", 10000) == (3, 0)
        self.produce(11, "hang-1", "hang-test", 0, client_batch(captured_batches("33")[0]))
        for name in ("27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38",
                     "39"):
            self.exchange(name)
        # tx-timeout-1 (pid 4, timeout 10 s) writes to txn-open-2 and is abandoned
        self.at(1795217142200)
        assert self.init_pid("tx-timeout-1", 10000) == (4, 0)
        self.at(1795217142228)
        self.add_partitions("tx-timeout-1", 4, "txn-open", [2])
        self.produce(9, "tx-timeout-1", "txn-open", 2, client_batch(captured_batches("49")[0]))
        self.exchange("45")
        self.exchange("46")
        self.at(1795217152605)
        self.state.tick()  # the sweep due at ...152605 aborts tx-timeout-1
        for name in ("47", "48", "49"):
            self.exchange(name)
        self.at(1795217202597)
        assert self.state.coordinator.abort_timed_out_transactions() == ["tx-open-1"]
        for name in ("50", "51", "52", "53"):
            self.exchange(name)


@pytest.fixture(scope="module")
def replay() -> Replay:
    r = Replay()
    r.run()
    return r


EXCHANGES = [
    "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18",
    "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33",
    "34", "35", "36", "37", "38", "39", "45", "46", "47", "48", "49", "50", "51", "52", "53",
]


@pytest.mark.parametrize("name", EXCHANGES)
def test_answer_equals_kafka_4_0_capture(replay: Replay, name: str) -> None:
    ours, theirs = replay.answers[name]
    assert ours == theirs
