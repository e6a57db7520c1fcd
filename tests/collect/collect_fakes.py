"""A table-driven fake of the brokers' logic, plugged into the simulator's network layer.

It answers exactly the APIs the poller uses, from tables the test fills in, so each poller
behaviour (retries, re-routing, per-item errors) can be pinned without the full simulator.
Answers are shaped like the real Kafka 4.0 captures (tests/data/real-kafka-4.0).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.admin.configs import DescribeConfigsResponse
from kafka.protocol.admin.groups import ListGroupsResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka_sim.api import RequestContext
from kafka_sim.producer import build_record_batch
from kafka_sim.versions import PROFILES

Key = tuple[str, int]


@dataclass
class Producer:
    producer_id: int
    producer_epoch: int = 0
    last_timestamp: int = 0
    start_offset: int = -1
    coordinator_epoch: int = -1
    last_sequence: int = 0


@dataclass
class Txn:
    producer_id: int
    state: str
    coordinator: int
    partitions: list[Key] = field(default_factory=list)
    start_time_ms: int = -1


@dataclass
class FakeCluster:
    """Tables the dispatcher answers from; mutate them between polls (from the test thread
    through SimCluster.call, or before starting)."""

    node_ids: list[int]
    profile: str = "4.0"
    leaders: dict[Key, int] = field(default_factory=dict)
    producers: dict[Key, list[Producer]] = field(default_factory=dict)
    batches: dict[tuple[str, int, int], tuple[int, int, int]] = field(default_factory=dict)
    """(topic, partition, offset) -> (max_timestamp, producer_id, producer_epoch)."""
    offsets: dict[Key, tuple[int, int]] = field(default_factory=dict)  # (high watermark, LSO)
    """Set for a partition: answered as is; else `log_offsets` derives them from `producers`."""
    _logs: dict[Key, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    max_timeout_ms: dict[int, int] = field(default_factory=dict)
    cleanup_policies: dict[str, str] = field(default_factory=dict)
    """TOPIC cleanup.policy; a topic not listed answers the broker default, delete."""
    config_requests: list[tuple[int, int, str, list[str] | None]] = field(default_factory=list)
    """(broker, resource_type, resource_name, configuration_keys) of each DescribeConfigs."""
    transactions: dict[str, Txn] = field(default_factory=dict)
    errors: dict[tuple[int, Any], list[int]] = field(default_factory=dict)
    """(api_key, item) -> error codes to answer next, one per request, item = (topic, p) or id."""
    denied_topics: set[str] = field(default_factory=set)
    endpoints: dict[int, tuple[str, int]] = field(default_factory=dict)
    calls: list[tuple[int, int]] = field(default_factory=list)  # (broker, api_key)
    record_fetches: int = 0
    """Fetch requests that allow bytes (start-time reads), not the screening's (max_bytes 0)."""
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    after_metadata: list[Callable[[], None]] = field(default_factory=list)
    unelected_coordinators: set[int] = field(default_factory=set)
    """Brokers just restarted whose transaction coordinator has not taken its
    __transaction_state partitions yet (Kafka's TransactionStateManager owns and loads none):
    ListTransactions answers an empty list without error, DescribeTransactions NOT_COORDINATOR,
    while Metadata (so FindCoordinator) already names them."""
    omit_from_describe_producers: set[Key] = field(default_factory=set)
    """Partitions a DescribeProducers answer leaves out although asked (not what a healthy
    broker does: what a broken one or a proxy in the middle may)."""
    fetch_records_first_partition_only: bool = False
    """Emulate a Fetch byte budget used up by the first partition's batch: later partitions
    of a multi-partition request answer no records (KIP-74 promises only the first one)."""
    """Run once each after answering a Metadata request (e.g. move a leader right after)."""

    def log_offsets(self, key: Key) -> tuple[int, int]:
        """(high watermark, LSO) as a broker holding `producers` answers them: the table's when
        set; else the LSO at the earliest open transaction's first batch (the HW when none is
        open), the HW past every first batch, moving on whenever the open transactions change
        (a first batch or a marker was written) and never back."""
        if key in self.offsets:
            return self.offsets[key]
        starts = tuple(sorted(x.start_offset for x in self.producers.get(key, ())
                              if x.start_offset >= 0))
        hw, seen = self._logs.get(key, (0, ()))
        if starts != seen:
            hw = max([hw + 1, *(s + 1 for s in starts)])
            self._logs[key] = (hw, starts)
        return hw, (starts[0] if starts else hw)

    # -- Dispatcher -------------------------------------------------------------------------

    def set_endpoints(self, endpoints: Mapping[int, tuple[str, int]]) -> None:
        self.endpoints = dict(endpoints)

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return PROFILES[self.profile].api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        self.calls.append((ctx.broker_id, ctx.api_key))
        handler = getattr(self, f"_api_{ctx.api_key}")
        return handler(ctx, request)

    def _take_error(self, api_key: int, item: Any) -> int:
        queue = self.errors.get((api_key, item))
        if queue:
            return queue.pop(0)
        return 0

    def topic_id(self, topic: str) -> uuid.UUID:
        return self.topic_ids.setdefault(topic, uuid.uuid4())

    # Metadata
    def _api_3(self, ctx: RequestContext, request: Any) -> Any:
        wanted = None if request.topics is None else {t.name for t in request.topics}
        topics: dict[str, list[Any]] = {}
        for (topic, p), leader in sorted(self.leaders.items()):
            if wanted is not None and topic not in wanted:
                continue
            topics.setdefault(topic, []).append(
                MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=0,
                    partition_index=p,
                    leader_id=leader,
                    leader_epoch=0,
                    replica_nodes=[leader],
                    isr_nodes=[leader],
                    offline_replicas=[],
                )
            )
        response = MetadataResponse(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=port, rack=None)
                for n, (h, port) in sorted(self.endpoints.items())
            ],
            cluster_id="fake",
            controller_id=self.node_ids[0],
            topics=[
                MetadataResponse.MetadataResponseTopic(
                    error_code=0,
                    name=t,
                    topic_id=self.topic_id(t),
                    is_internal=t.startswith("__"),
                    partitions=ps,
                )
                for t, ps in topics.items()
            ],
        )
        if self.after_metadata:
            self.after_metadata.pop(0)()
        return response

    # DescribeProducers
    def _api_61(self, ctx: RequestContext, request: Any) -> Any:
        R = DescribeProducersResponse.TopicResponse
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partition_indexes:
                key = (t.name, p)
                if key in self.omit_from_describe_producers:
                    continue
                code = self._take_error(61, key)
                if not code and t.name in self.denied_topics:
                    code = 29
                if not code and self.leaders.get(key) != ctx.broker_id:
                    code = 6
                producers = [] if code else self.producers.get(key, [])
                partitions.append(
                    R.PartitionResponse(
                        partition_index=p,
                        error_code=code,
                        error_message=None,
                        active_producers=[
                            R.PartitionResponse.ProducerState(
                                producer_id=x.producer_id,
                                producer_epoch=x.producer_epoch,
                                last_sequence=x.last_sequence,
                                last_timestamp=x.last_timestamp,
                                coordinator_epoch=x.coordinator_epoch,
                                current_txn_start_offset=x.start_offset,
                            )
                            for x in producers
                        ],
                    )
                )
            topics.append(R(name=t.name, partitions=partitions))
        return DescribeProducersResponse(throttle_time_ms=0, topics=topics)

    # Fetch (one or more partitions per request: the poller batches per leader)
    def _api_1(self, ctx: RequestContext, request: Any) -> Any:
        if request.max_bytes > 0:
            self.record_fetches += 1
        by_id = {v: k for k, v in self.topic_ids.items()}
        P = FetchResponse.FetchableTopicResponse.PartitionData
        responses = []
        for topic in request.topics:
            name = topic.topic if request.API_VERSION < 13 else by_id[topic.topic_id]
            partitions = []
            for partition in topic.partitions:
                key = (name, partition.partition)
                code = self._take_error(1, key)
                records = b""
                found = self.batches.get((name, partition.partition, partition.fetch_offset))
                if self.fetch_records_first_partition_only and (responses or partitions):
                    found = None
                if not code and found is not None:
                    max_ts, pid, epoch = found
                    raw, _, _ = build_record_batch(
                        [(b"k", b"v", max_ts)],
                        producer_id=pid,
                        producer_epoch=epoch,
                        base_sequence=0,
                        transactional=True,
                    )
                    buf = bytearray(raw)
                    struct.pack_into(">q", buf, 0, partition.fetch_offset)
                    records = bytes(buf)
                hw, lso = self.log_offsets(key)
                partitions.append(
                    P(
                        partition_index=partition.partition,
                        error_code=code,
                        high_watermark=hw,
                        last_stable_offset=lso,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            responses.append(
                FetchResponse.FetchableTopicResponse(
                    topic=name, topic_id=topic.topic_id, partitions=partitions
                )
            )
        return FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=responses,
            node_endpoints=[],
        )

    # ListOffsets: READ_UNCOMMITTED -> high watermark, READ_COMMITTED -> LSO
    def _api_2(self, ctx: RequestContext, request: Any) -> Any:
        T = ListOffsetsResponse.ListOffsetsTopicResponse
        return ListOffsetsResponse(
            throttle_time_ms=0,
            topics=[
                T(
                    name=t.name,
                    partitions=[
                        T.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=0,
                            timestamp=-1,
                            offset=self.log_offsets((t.name, p.partition_index))[
                                request.isolation_level
                            ],
                            leader_epoch=0,
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )

    # ListGroups: this fake cluster has no consumer groups
    def _api_16(self, ctx: RequestContext, request: Any) -> Any:
        return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[])

    # DescribeCluster: as a broker without an authorizer (every cluster operation allowed)
    def _api_60(self, ctx: RequestContext, request: Any) -> Any:
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
            cluster_id="fake", controller_id=-1, brokers=[],
            authorized_operations={5, 7, 8, 9, 10, 11, 12})

    # DescribeConfigs (BROKER: as the capture's broker, verification off; TOPIC: cleanup.policy)
    def _api_32(self, ctx: RequestContext, request: Any) -> Any:
        R = DescribeConfigsResponse.DescribeConfigsResult
        results = []
        for res in request.resources:
            self.config_requests.append((ctx.broker_id, res.resource_type, res.resource_name,
                                         res.configuration_keys))
            if res.resource_type == 2:
                entries: tuple[tuple[str, str | None], ...] = (
                    ("cleanup.policy", self.cleanup_policies.get(res.resource_name, "delete")),
                )
            else:
                value = self.max_timeout_ms.get(int(res.resource_name), 900000)
                entries = (
                    ("log.retention.ms", None),
                    ("transaction.max.timeout.ms", str(value)),
                    ("transaction.partition.verification.enable", "false"),
                )
            configs = [
                R.DescribeConfigsResourceResult(
                    name=name,
                    value=v,
                    read_only=True,
                    config_source=5,
                    is_sensitive=False,
                    synonyms=[],
                    config_type=5,
                    documentation=None,
                )
                for name, v in entries
                if res.configuration_keys is None or name in res.configuration_keys
            ]
            results.append(
                R(
                    error_code=0,
                    error_message=None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=configs,
                )
            )
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    # ListTransactions: each broker lists the ids it coordinates
    def _api_66(self, ctx: RequestContext, request: Any) -> Any:
        code = self._take_error(66, ctx.broker_id)
        pids = set(request.producer_id_filters)
        return ListTransactionsResponse(
            throttle_time_ms=0,
            error_code=code,
            unknown_state_filters=[],
            transaction_states=[]
            if code
            else [
                ListTransactionsResponse.TransactionState(
                    transactional_id=tid, producer_id=t.producer_id, transaction_state=t.state
                )
                for tid, t in sorted(self.transactions.items())
                if t.coordinator == ctx.broker_id and (not pids or t.producer_id in pids)
                and ctx.broker_id not in self.unelected_coordinators
            ],
        )

    # FindCoordinator (key type 1)
    def _api_10(self, ctx: RequestContext, request: Any) -> Any:
        def node(tid: str) -> int:
            txn = self.transactions.get(tid)
            return txn.coordinator if txn is not None else self.node_ids[0]

        if request.API_VERSION >= 4:
            coordinators = []
            for tid in request.coordinator_keys:
                n = node(tid)
                host, port = self.endpoints[n]
                coordinators.append(
                    FindCoordinatorResponse.Coordinator(
                        key=tid, node_id=n, host=host, port=port, error_code=0, error_message=""
                    )
                )
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
        n = node(request.key)
        host, port = self.endpoints[n]
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=0, error_message="NONE", node_id=n, host=host, port=port
        )

    # DescribeTransactions
    def _api_65(self, ctx: RequestContext, request: Any) -> Any:
        S = DescribeTransactionsResponse.TransactionState
        states = []
        for tid in request.transactional_ids:
            txn = self.transactions.get(tid)
            code = self._take_error(65, tid)
            if not code and txn is None:
                code = 105
            unelected = ctx.broker_id in self.unelected_coordinators
            if not code and txn is not None and (txn.coordinator != ctx.broker_id or unelected):
                code = 16
            if code or txn is None:
                states.append(
                    S(
                        error_code=code,
                        transactional_id=tid,
                        transaction_state="",
                        transaction_timeout_ms=0,
                        transaction_start_time_ms=0,
                        producer_id=0,
                        producer_epoch=0,
                        topics=[],
                    )
                )
                continue
            by_topic: dict[str, list[int]] = {}
            for t, p in txn.partitions:
                by_topic.setdefault(t, []).append(p)
            states.append(
                S(
                    error_code=0,
                    transactional_id=tid,
                    transaction_state=txn.state,
                    transaction_timeout_ms=60000,
                    transaction_start_time_ms=txn.start_time_ms,
                    producer_id=txn.producer_id,
                    producer_epoch=0,
                    topics=[S.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
                )
            )
        return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
