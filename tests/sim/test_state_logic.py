"""Unit tests of the simulated brokers' logic, calling BrokerRouter.handle() directly."""

from __future__ import annotations

import json
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
    WriteTxnMarkersRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_sim.api import RequestContext
from kafka_sim.clock import Clock, ManualClock
from kafka_sim.coordinator import partition_for
from kafka_sim.router import BrokerRouter
from kafka_sim.seed import (
    seed_cluster,
    seed_hanging_transaction,
    seed_idempotent_producer,
    seed_open_transaction,
)
from kafka_sim.state import ClusterState
from kafka_sim.versions import PROFILES

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "real-kafka-4.0"
T0 = 1_800_000_000_000

# Errors
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
TOPIC_AUTHORIZATION_FAILED, INVALID_REQUEST, OUT_OF_ORDER_SEQUENCE = 29, 42, 45
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT = 47, 48, 50
TRANSACTION_ABORTABLE = 120
CONCURRENT_TRANSACTIONS, TRANSACTION_COORDINATOR_FENCED = 51, 52


class Sim:
    """A ClusterState on a manual clock plus one-line request helpers."""

    def __init__(self, brokers: int = 3, **config: str) -> None:
        self.clock = ManualClock(T0)
        self.state = ClusterState(list(range(1, brokers + 1)), self.clock,
                                  broker_config=config or None)
        self.router = BrokerRouter(self.state)
        self.seq: dict[tuple[int, str, int], int] = {}

    def call(self, broker: int, api_key: int, version: int, request: Any,
             principal: str = "User:ANONYMOUS") -> Any:
        return self.router.handle(RequestContext(broker, api_key, version, 1, "t", principal),
                                  request)

    def leader(self, topic: str, partition: int) -> int:
        p = self.state.partition(topic, partition)
        assert p is not None
        return p.leader_id

    def coordinator(self, tid: str) -> int:
        self.find_coordinator(1, tid)
        found = self.state.coordinator.coordinator_for(tid)
        assert found is not None
        return found[0]

    def find_coordinator(self, broker: int, key: str, key_type: int = 1,
                         version: int = 3) -> Any:
        return self.call(broker, 10, version,
                         FindCoordinatorRequest(version=version, key=key, key_type=key_type))

    def init_pid(self, tid: str | None, timeout_ms: int = 60000, version: int = 4) -> Any:
        broker = self.coordinator(tid) if tid is not None else 1
        return self.call(broker, 22, version, InitProducerIdRequest(
            version=version, transactional_id=tid, transaction_timeout_ms=timeout_ms))

    def add(self, tid: str, pid: int, epoch: int, topic: str, partitions: list[int]) -> int:
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        resp = self.call(self.coordinator(tid), 24, 3, AddPartitionsToTxnRequest(
            version=3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[T(name=topic, partitions=partitions)]))
        codes = {p.partition_error_code for t in resp.results_by_topic_v3_and_below
                 for p in t.results_by_partition}
        assert len(codes) == 1
        return codes.pop()

    def produce(self, topic: str, partition: int, *, pid: int = -1, epoch: int = -1,
                tid: str | None = None, seq: int | None = None, records: int = 1,
                ts: int | None = None, version: int = 9, broker: int | None = None) -> Any:
        if seq is None:
            seq = self.seq.get((pid, topic, partition), 0) if pid >= 0 else -1
        builder = DefaultRecordBatchBuilder(2, 0, tid is not None, pid, epoch, seq, 1 << 20)
        for i in range(records):
            builder.append(i, timestamp=ts if ts is not None else self.clock.now_ms(),
                           key=None, value=b"v%d" % i, headers=[])
        Topic = ProduceRequest.TopicProduceData
        req = ProduceRequest(version=version, transactional_id=tid, acks=-1, timeout_ms=1000,
                             topic_data=[Topic(name=topic, partition_data=[
                                 Topic.PartitionProduceData(index=partition,
                                                            records=bytes(builder.build()))])])
        resp = self.call(broker or self.leader(topic, partition), 0, version, req)
        part = resp.responses[0].partition_responses[0]
        if part.error_code == NONE and pid >= 0:
            self.seq[(pid, topic, partition)] = seq + records
        return part

    def end(self, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> Any:
        return self.call(self.coordinator(tid), 26, version, EndTxnRequest(
            version=version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
            committed=commit))

    def producers(self, topic: str, partition: int, broker: int | None = None,
                  principal: str = "User:ANONYMOUS") -> Any:
        T = DescribeProducersRequest.TopicRequest
        resp = self.call(broker or self.leader(topic, partition), 61, 0, DescribeProducersRequest(
            version=0, topics=[T(name=topic, partition_indexes=[partition])]), principal)
        return resp.topics[0].partitions[0]

    def describe_txn(self, tid: str, broker: int | None = None) -> Any:
        resp = self.call(broker or self.coordinator(tid), 65, 0,
                         DescribeTransactionsRequest(version=0, transactional_ids=[tid]))
        return resp.transaction_states[0]

    def list_txns(self, broker: int, version: int = 1, **filters: Any) -> Any:
        fields = {"state_filters": [], "producer_id_filters": []}
        if version >= 1:
            fields["duration_filter"] = -1
        fields.update(filters)
        return self.call(broker, 66, version, ListTransactionsRequest(version=version, **fields))

    def offsets(self, topic: str, partition: int, isolation: int) -> int:
        T = ListOffsetsRequest.ListOffsetsTopic
        resp = self.call(self.leader(topic, partition), 2, 10, ListOffsetsRequest(
            version=10, replica_id=-1, isolation_level=isolation, timeout_ms=1000,
            topics=[T(name=topic, partitions=[T.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]))
        part = resp.topics[0].partitions[0]
        assert part.error_code == NONE
        return int(part.offset)

    def tick_after(self, ms: int) -> None:
        self.clock.advance(ms)
        self.state.tick()


def open_txn(sim: Sim, tid: str, topic: str, partitions: list[int],
             timeout_ms: int = 60000) -> tuple[int, int]:
    r = sim.init_pid(tid, timeout_ms)
    assert r.error_code == NONE
    assert sim.add(tid, r.producer_id, r.producer_epoch, topic, partitions) == NONE
    for p in partitions:
        assert sim.produce(topic, p, pid=r.producer_id, epoch=r.producer_epoch,
                           tid=tid).error_code == NONE
    return r.producer_id, r.producer_epoch


# -- profiles and clock ---------------------------------------------------------------------
def test_4_0_profile_equals_captured_api_versions_and_features() -> None:
    v3 = json.loads((CAPTURES / "01-apiversions-v3.json").read_text())["response"]
    v4 = json.loads((CAPTURES / "03-apiversions-v4.json").read_text())["response"]
    profile = PROFILES["4.0"]
    assert [(k, lo, hi) for k, (lo, hi) in profile.api_versions.items()] == [
        (a["api_key"], a["min_version"], a["max_version"]) for a in v3["api_keys"]]
    for version, captured in ((3, v3), (4, v4)):
        assert [(f.name, f.min_version, f.max_version)
                for f in profile.supported_features_for(version)] == [
            (f["name"], f["min_version"], f["max_version"]) for f in captured["supported_features"]]
    assert profile.finalized_features_epoch == v3["finalized_features_epoch"]
    assert [(f.name, f.max_version_level, f.min_version_level)
            for f in profile.finalized_features] == [
        (f["name"], f["max_version_level"], f["min_version_level"])
        for f in v3["finalized_features"]]
    assert profile.transaction_version() == 2


def test_clock_advance_moves_time_forward_only() -> None:
    clock = Clock(start_ms=1_000_000)
    before = clock.now_ms()
    clock.advance(60_000)
    assert clock.now_ms() - before >= 60_000
    with pytest.raises(ValueError):
        clock.advance(-1)


# -- topics, metadata, coordinators, configs ------------------------------------------------
def test_create_topic_spreads_leaders_round_robin() -> None:
    sim = Sim(brokers=3)
    sim.state.create_topic("t", 6, replication_factor=2)
    topic = sim.state.topics["t"]
    assert [p.leader_id for p in topic.partitions] == [1, 2, 3, 1, 2, 3]
    assert [p.replicas for p in topic.partitions][:3] == [(1, 2), (2, 3), (3, 1)]


def test_first_transaction_lookup_creates_topic_and_answers_coordinator_not_available() -> None:
    sim = Sim()
    first = sim.find_coordinator(1, "tx", version=6 - 3)
    assert (first.error_code, first.error_message, first.node_id) == (
        COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1)
    second = sim.find_coordinator(2, "tx")
    expected = sim.state.topics["__transaction_state"].partitions[partition_for("tx", 50)]
    assert (second.error_code, second.error_message, second.node_id) == (
        NONE, "NONE", expected.leader_id)


def test_metadata_unknown_topic_without_auto_creation_and_auto_creation() -> None:
    sim = Sim()
    T = MetadataRequest.MetadataRequestTopic
    resp = sim.call(1, 3, 13, MetadataRequest(version=13, topics=[T(name="nope")],
                                              allow_auto_topic_creation=False))
    assert (resp.topics[0].error_code, resp.topics[0].topic_id) == (UNKNOWN_TOPIC_OR_PARTITION,
                                                                    None)
    assert "nope" not in sim.state.topics
    sim.call(1, 3, 13, MetadataRequest(version=13, topics=[T(name="auto")],
                                       allow_auto_topic_creation=True))
    assert len(sim.state.topics["auto"].partitions) == 3  # num.partitions of the captured broker


def test_describe_configs_defaults_and_other_broker_id() -> None:
    sim = Sim()
    R = DescribeConfigsRequest.DescribeConfigsResource
    keys = ["transaction.max.timeout.ms", "transaction.partition.verification.enable"]
    resp = sim.call(2, 32, 4, DescribeConfigsRequest(version=4, resources=[
        R(resource_type=4, resource_name="2", configuration_keys=keys),
        R(resource_type=4, resource_name="1", configuration_keys=None)]))
    ok, wrong = resp.results
    values = {c.name: (c.value, c.config_source) for c in ok.configs}
    assert values == {"transaction.max.timeout.ms": ("900000", 5),
                      "transaction.partition.verification.enable": ("true", 5)}
    assert (wrong.error_code, wrong.error_message) == (
        INVALID_REQUEST, "Unexpected broker id, expected 2 or empty string, but received 1")


# -- producer ids, produce checks -----------------------------------------------------------
def test_produce_sequence_epoch_and_duplicate_checks() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    r = sim.init_pid(None)
    pid = r.producer_id
    assert sim.produce("t", 0, pid=pid, epoch=0, seq=0, records=2).base_offset == 0
    assert sim.produce("t", 0, pid=pid, epoch=0, seq=5).error_code == OUT_OF_ORDER_SEQUENCE
    dup = sim.produce("t", 0, pid=pid, epoch=0, seq=0, records=2)
    assert (dup.error_code, dup.base_offset) == (NONE, 0)
    assert sim.produce("t", 0, pid=pid, epoch=1, seq=0).base_offset == 2  # new epoch, seq 0
    assert sim.produce("t", 0, pid=pid, epoch=0, seq=3).error_code == INVALID_PRODUCER_EPOCH
    entry = sim.producers("t", 0).active_producers[0]
    assert (entry.producer_epoch, entry.last_sequence, entry.current_txn_start_offset) == (
        1, 0, -1)


def test_init_producer_id_rejects_timeout_above_max() -> None:
    sim = Sim(**{"transaction.max.timeout.ms": "60000"})
    assert sim.init_pid("tx", 60001).error_code == INVALID_TRANSACTION_TIMEOUT
    assert sim.init_pid("tx", 60000).error_code == NONE


def test_producer_ids_come_in_per_broker_blocks() -> None:
    sim = Sim()
    sim.state.create_topic("t", 3)
    a = sim.call(1, 22, 4, InitProducerIdRequest(version=4, transactional_id=None,
                                                 transaction_timeout_ms=1))
    b = sim.call(2, 22, 4, InitProducerIdRequest(version=4, transactional_id=None,
                                                 transaction_timeout_ms=1))
    c = sim.call(1, 22, 4, InitProducerIdRequest(version=4, transactional_id=None,
                                                 transaction_timeout_ms=1))
    assert (a.producer_id, b.producer_id, c.producer_id) == (0, 1000, 1)


# -- transactions ---------------------------------------------------------------------------
def test_verification_on_rejects_produce_to_partition_not_added() -> None:
    sim = Sim()  # transaction.partition.verification.enable defaults to true
    sim.state.create_topic("t", 2)
    r = sim.init_pid("tx")
    part = sim.produce("t", 0, pid=r.producer_id, epoch=0, tid="tx", version=11)
    assert part.error_code == TRANSACTION_ABORTABLE  # as real 3.9.2-4.4.0 brokers answer v11
    part = sim.produce("t", 0, pid=r.producer_id, epoch=0, tid="tx", version=10)
    assert part.error_code == INVALID_TXN_STATE  # and v10 and below
    assert sim.producers("t", 0).active_producers == []


def test_verification_off_leaves_hanging_transaction_the_sweep_never_aborts() -> None:
    sim = Sim(**{"transaction.partition.verification.enable": "false"})
    sim.state.create_topic("t", 1)
    r = sim.init_pid("hang", 10000)
    assert sim.produce("t", 0, pid=r.producer_id, epoch=0, tid="hang", version=11,
                       ts=T0 - 400_000).error_code == NONE
    sim.tick_after(3_600_000)
    entry = sim.producers("t", 0).active_producers[0]
    assert (entry.last_timestamp, entry.coordinator_epoch, entry.current_txn_start_offset) == (
        T0 - 400_000, -1, 0)
    desc = sim.describe_txn("hang")
    assert (desc.transaction_state, desc.transaction_start_time_ms, list(desc.topics)) == (
        "Empty", -1, [])
    assert (sim.offsets("t", 0, 0), sim.offsets("t", 0, 1)) == (1, 0)


def test_commit_v3_keeps_epoch_and_sets_coordinator_epoch() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    pid, epoch = open_txn(sim, "tx", "t", [0])
    assert sim.end("tx", pid, epoch, True).error_code == NONE
    entry = sim.producers("t", 0).active_producers[0]
    assert (entry.producer_epoch, entry.last_sequence, entry.coordinator_epoch,
            entry.current_txn_start_offset, entry.last_timestamp) == (0, 0, 0, -1, T0)
    assert sim.describe_txn("tx").transaction_state == "CompleteCommit"


def test_end_txn_v5_bumps_epoch_every_time() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    pid, epoch = open_txn(sim, "tx", "t", [0])
    resp = sim.end("tx", pid, epoch, True, version=5)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (NONE, pid, 1)
    entry = sim.producers("t", 0).active_producers[0]
    assert (entry.producer_epoch, entry.last_sequence) == (1, -1)


def test_timeout_abort_raises_epoch_by_two_on_the_sweep_interval() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    open_txn(sim, "tx", "t", [0], timeout_ms=5000)
    sim.tick_after(6000)  # timed out, but the 10 s cleanup interval has not come round
    assert sim.describe_txn("tx").transaction_state == "Ongoing"
    sim.tick_after(4000)
    desc = sim.describe_txn("tx")
    assert (desc.transaction_state, desc.producer_epoch, list(desc.topics)) == (
        "CompleteAbort", 2, [])
    entry = sim.producers("t", 0).active_producers[0]
    assert (entry.producer_epoch, entry.last_sequence, entry.coordinator_epoch,
            entry.current_txn_start_offset, entry.last_timestamp) == (2, -1, 0, -1, T0 + 10_000)


def test_init_producer_id_fences_ongoing_transaction() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    open_txn(sim, "tx", "t", [0])
    assert sim.init_pid("tx").error_code == CONCURRENT_TRANSACTIONS
    retry = sim.init_pid("tx")
    assert (retry.error_code, retry.producer_epoch) == (NONE, 3)
    assert sim.offsets("t", 0, 1) == sim.offsets("t", 0, 0) == 2


def test_blocked_markers_keep_transaction_prepared_and_partition_open() -> None:
    sim = Sim()
    sim.state.create_topic("t", 3)
    pid, epoch = open_txn(sim, "tx", "t", [0, 1])
    sim.state.block_markers(sim.leader("t", 0), True)
    assert sim.end("tx", pid, epoch, True).error_code == NONE
    desc = sim.describe_txn("tx")
    assert (desc.transaction_state, [(t.topic, list(t.partitions)) for t in desc.topics]) == (
        "PrepareCommit", [("t", [0])])
    assert sim.producers("t", 0).active_producers[0].current_txn_start_offset == 0
    assert sim.offsets("t", 0, 1) == 0
    assert sim.producers("t", 1).active_producers[0].current_txn_start_offset == -1
    sim.state.block_markers(sim.leader("t", 0), False)
    assert sim.describe_txn("tx").transaction_state == "CompleteCommit"
    assert sim.offsets("t", 0, 1) == 2


def test_moved_coordinator_answers_not_coordinator_at_old_broker_and_new_epoch() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    pid, epoch = open_txn(sim, "tx", "t", [0])
    old = sim.coordinator("tx")
    new = 1 if old != 1 else 2
    sim.state.move_transaction_coordinator("tx", new)
    assert sim.describe_txn("tx", broker=old).error_code == NOT_COORDINATOR
    assert sim.describe_txn("tx", broker=new).transaction_state == "Ongoing"
    assert sim.end("tx", pid, epoch, False).error_code == NONE
    assert sim.producers("t", 0).active_producers[0].coordinator_epoch == 1


def test_write_txn_markers_epoch_and_coordinator_fencing() -> None:
    sim = Sim(**{"transaction.partition.verification.enable": "false"})
    sim.state.create_topic("t", 1)
    r = sim.init_pid("hang")
    sim.produce("t", 0, pid=r.producer_id, epoch=0, tid="hang", version=11)
    leader = sim.leader("t", 0)
    M = WriteTxnMarkersRequest.WritableTxnMarker

    def abort(epoch: int, coordinator_epoch: int, broker: int = leader) -> int:
        resp = sim.call(broker, 27, 1, WriteTxnMarkersRequest(version=1, markers=[M(
            producer_id=r.producer_id, producer_epoch=epoch, transaction_result=False,
            topics=[M.WritableTxnMarkerTopic(name="t", partition_indexes=[0])],
            coordinator_epoch=coordinator_epoch)]))
        return int(resp.markers[0].topics[0].partitions[0].error_code)

    assert abort(0, 0, broker=leader % 3 + 1) == NOT_LEADER_OR_FOLLOWER
    assert abort(0, 5) == NONE
    assert sim.offsets("t", 0, 1) == 2
    assert abort(0, 4) == TRANSACTION_COORDINATOR_FENCED
    sim.produce("t", 0, pid=r.producer_id, epoch=1, seq=0)
    assert abort(0, 5) == INVALID_PRODUCER_EPOCH


def test_fetch_read_committed_lists_aborted_transactions() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    pid, epoch = open_txn(sim, "tx", "t", [0])
    sim.end("tx", pid, epoch, False)
    topic_id = sim.state.topics["t"].topic_id
    F = FetchRequest.FetchTopic
    resp = sim.call(sim.leader("t", 0), 1, 17, FetchRequest(
        version=17, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
        session_id=0, session_epoch=-1, topics=[F(topic_id=topic_id, partitions=[
            F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""))
    part = resp.responses[0].partitions[0]
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
    assert (part.high_watermark, part.last_stable_offset) == (2, 2)


def test_log_append_time_topic_stamps_batches() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1, configs={"message.timestamp.type": "LogAppendTime"})
    r = sim.init_pid(None)
    part = sim.produce("t", 0, pid=r.producer_id, epoch=0, ts=T0 - 99_999)
    assert part.log_append_time_ms == T0
    assert sim.producers("t", 0).active_producers[0].last_timestamp == T0


def test_idle_idempotent_producer_expires_but_open_transaction_does_not() -> None:
    sim = Sim(**{"transaction.partition.verification.enable": "false"})
    sim.state.create_topic("t", 1)
    idem = sim.init_pid(None)
    sim.produce("t", 0, pid=idem.producer_id, epoch=0)
    r = sim.init_pid("hang")
    sim.produce("t", 0, pid=r.producer_id, epoch=0, tid="hang", version=11)
    sim.tick_after(86_400_000 + 600_000)
    assert [p.producer_id for p in sim.producers("t", 0).active_producers] == [r.producer_id]


# -- admin APIs -----------------------------------------------------------------------------
def test_list_transactions_filters_and_brokers_list_only_their_own_ids() -> None:
    sim = Sim()
    sim.state.create_topic("t", 3)
    ids = [f"tx-{i}" for i in range(12)]
    for tid in ids:
        open_txn(sim, tid, "t", [0])
    listed: list[str] = []
    for broker in (1, 2, 3):
        resp = sim.list_txns(broker)
        assert resp.error_code == NONE
        for s in resp.transaction_states:
            assert sim.coordinator(s.transactional_id) == broker
            listed.append(s.transactional_id)
    assert sorted(listed) == sorted(ids)
    owner = sim.coordinator("tx-3")
    v2 = sim.list_txns(owner, version=2, transactional_id_pattern="tx-3")
    assert [s.transactional_id for s in v2.transaction_states] == ["tx-3"]
    unknown = sim.list_txns(owner, state_filters=["NotAState"])
    assert (list(unknown.unknown_state_filters), list(unknown.transaction_states)) == (
        ["NotAState"], [])
    sim.clock.advance(5000)
    assert sim.list_txns(owner, duration_filter=10_000).transaction_states == []
    assert sim.list_txns(owner, duration_filter=1000).transaction_states != []


def test_injected_errors_are_per_api_and_per_item() -> None:
    sim = Sim()
    sim.state.create_topic("t", 2)
    open_txn(sim, "tx", "t", [0])
    sim.state.inject_error(66, COORDINATOR_LOAD_IN_PROGRESS, broker_id=1, count=1)
    assert sim.list_txns(1).error_code == COORDINATOR_LOAD_IN_PROGRESS
    assert sim.list_txns(1).error_code == NONE
    sim.state.inject_error(61, NOT_LEADER_OR_FOLLOWER, topic="t", partition=1)
    assert sim.producers("t", 0).error_code == NONE
    assert sim.producers("t", 1).error_code == NOT_LEADER_OR_FOLLOWER
    sim.state.inject_error(65, NOT_COORDINATOR, transactional_id="tx")
    assert sim.describe_txn("tx").error_code == NOT_COORDINATOR
    sim.state.clear_errors()
    assert sim.describe_txn("tx").error_code == NONE


def test_deny_topic_read_fails_describe_producers_and_describe_hides_metadata() -> None:
    sim = Sim()
    sim.state.create_topic("secret", 1)
    sim.state.create_topic("open", 1)
    sim.state.deny_topic("User:bob", "secret", "READ")
    assert sim.producers("secret", 0, principal="User:bob").error_code == (
        TOPIC_AUTHORIZATION_FAILED)
    assert sim.producers("secret", 0, principal="User:alice").error_code == NONE
    sim.state.deny_topic("User:bob", "secret", "DESCRIBE")
    all_topics = sim.call(1, 3, 12, MetadataRequest(version=12, topics=None), "User:bob")
    assert [t.name for t in all_topics.topics] == ["open"]
    T = MetadataRequest.MetadataRequestTopic
    one = sim.call(1, 3, 12, MetadataRequest(version=12, topics=[T(name="secret")]), "User:bob")
    assert one.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED


def test_describe_producers_on_a_follower_and_on_a_non_replica() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1, replication_factor=2)
    r = sim.init_pid(None)
    sim.produce("t", 0, pid=r.producer_id, epoch=0)
    p = sim.state.partition("t", 0)
    assert p is not None
    follower = p.replicas[1]
    outsider = ({1, 2, 3} - set(p.replicas)).pop()
    assert len(sim.producers("t", 0, broker=follower).active_producers) == 1
    answer = sim.producers("t", 0, broker=outsider)
    assert answer.error_code == NOT_LEADER_OR_FOLLOWER
    assert answer.error_message.startswith("For requests intended only for the leader")


def test_dead_broker_leaves_metadata_and_its_markers_wait() -> None:
    sim = Sim()
    sim.state.create_topic("t", 3)
    pid, epoch = open_txn(sim, "tx", "t", [0])
    leader = sim.leader("t", 0)
    coordinator = sim.coordinator("tx")
    if coordinator == leader:
        sim.state.move_transaction_coordinator("tx", leader % 3 + 1)
    sim.state.set_broker_alive(leader, False)
    other = leader % 3 + 1
    meta = sim.call(other, 3, 12, MetadataRequest(version=12, topics=None))
    assert leader not in [b.node_id for b in meta.brokers]
    assert sim.end("tx", pid, epoch, True).error_code == NONE
    assert sim.describe_txn("tx").transaction_state == "PrepareCommit"
    sim.state.set_broker_alive(leader, True)
    assert sim.describe_txn("tx").transaction_state == "CompleteCommit"


# -- seeding --------------------------------------------------------------------------------
def test_seeded_states_look_like_the_write_path() -> None:
    sim = Sim()
    sim.state.create_topic("t", 3)
    seed_idempotent_producer(sim.state, "t", 0, timestamp_ms=T0 - 1000)
    hang = seed_hanging_transaction(sim.state, "hang", "t", 1, last_timestamp_ms=T0 - 3_600_000)
    tracked = seed_open_transaction(sim.state, "late", [("t", 2)], start_ms=T0 - 30_000,
                                    txn_state="PrepareCommit")
    sim.state.block_markers(sim.leader("t", 2), True)
    sim.tick_after(100)
    entry = sim.producers("t", 1).active_producers[0]
    assert (entry.producer_id, entry.current_txn_start_offset, entry.last_timestamp) == (
        hang.producer_id, 0, T0 - 3_600_000)
    assert sim.describe_txn("hang").transaction_state == "Empty"
    late = sim.describe_txn("late")
    assert (late.transaction_state, late.producer_id) == ("PrepareCommit", tracked.producer_id)
    assert sim.offsets("t", 2, 1) == 0
    sim.state.block_markers(sim.leader("t", 2), False)
    assert sim.offsets("t", 2, 1) == 2
    F = FetchRequest.FetchTopic
    resp = sim.call(sim.leader("t", 0), 1, 17, FetchRequest(
        version=17, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[F(topic_id=sim.state.topics["t"].topic_id,
                                                  partitions=[F.FetchPartition(
                                                      partition=0, fetch_offset=0,
                                                      partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""))
    assert resp.responses[0].partitions[0].records[:8] == bytes(8)  # a real batch at offset 0


def test_seed_cluster_builds_many_partitions_quickly() -> None:
    sim = Sim(brokers=5)
    for i in range(10):
        sim.state.create_topic(f"topic-{i}", 1000, 3)
    summary = seed_cluster(sim.state, idempotent_partitions={f"topic-{i}": 1000
                                                             for i in range(10)},
                           open_transactions=50, hanging_transactions=20)
    assert summary.idempotent_producers == 10_000
    assert len(summary.hanging_transactions) == 20
    hang = summary.hanging_transactions[0]
    topic, index = hang.partitions[0]
    open_offsets = [p.current_txn_start_offset for p in sim.producers(topic, index)
                    .active_producers if p.producer_id == hang.producer_id]
    assert open_offsets == [hang.first_offsets[0]]
