"""One function per Kafka API: a decoded kafka-python request in, a response message out.

Each handler answers as the broker `ctx.broker_id`. Field values follow the real Kafka 4.0
captures in tests/data/real-kafka-4.0 (file numbers cited inline; docs/kafka-semantics.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.admin.configs import DescribeConfigsResponse
from kafka.protocol.admin.groups import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.group import OffsetCommitResponse, OffsetFetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from kafka_sim.api import RequestContext
from kafka_sim.coordinator import (
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from kafka_sim.encode import (
    DescribeProducersPartitionRow,
    LeanResponse,
    ListOffsetsPartitionRow,
    MetadataBroker,
    MetadataPartitionRow,
    MetadataTopic,
    ProducerRow,
    encode_describe_producers,
    encode_list_offsets,
    encode_metadata,
)
from kafka_sim.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    CORRUPT_MESSAGE,
    FENCED_LEADER_EPOCH,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_GROUP_ID,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    INVALID_REQUEST,
    INVALID_TIMESTAMP,
    INVALID_TOPIC_EXCEPTION,
    INVALID_TXN_STATE,
    LEADER_NOT_AVAILABLE,
    MISMATCHED_ENDPOINT_TYPE,
    NONE,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTION_ABORTABLE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_ENDPOINT_TYPE,
)
from kafka_sim.fetch_sessions import (
    ContextKind,
    PartitionKey,
    RequestedPartition,
    generate_response,
    new_context,
)
from kafka_sim.groups import CLASSIC_GROUP_TYPE, DEAD_STATE
from kafka_sim.jvm_order import (
    java_hash_map_order,
    java_list_hash,
    java_string_hash,
    scala_immutable_set_order,
    scala_mutable_hash_order,
    scala_mutable_hash_order_of,
    topic_partition_hash,
)
from kafka_sim.log import PartitionLog, crc_ok, split_batches
from kafka_sim.state import CLUSTER_OPERATION_CODES, ClusterState, Partition, Topic

# Errors.message() texts, where a response carries them.
ERROR_MESSAGES: dict[int, str] = {
    UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    NOT_LEADER_OR_FOLLOWER: (
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition."
    ),
    COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    NOT_COORDINATOR: "This is not the correct coordinator.",
}

# authorized_operations not requested: None encodes as -2147483648 on the wire (04).
UNAUTHORIZED_OPERATIONS = None

Handler = Callable[[ClusterState, RequestContext, Any], Any]


def _leads(p: Partition, broker_id: int) -> bool:
    return p.leader_id == broker_id


# -- Metadata (3) ---------------------------------------------------------------------------
def _metadata_topic(state: ClusterState, t: Topic) -> MetadataTopic:
    cached = t.metadata_cache
    if cached is None or cached[0] != state.metadata_version:
        cached = t.metadata_cache = (
            state.metadata_version, _metadata_partition_rows(state, t), {})
    return MetadataTopic(NONE, t.name, t.topic_id, t.is_internal, cached[1], cached[2])


_P2, _P3, _P4, _P5, _P6 = 31**2, 31**3, 31**4, 31**5, 31**6


def _metadata_partition_rows(state: ClusterState, t: Topic) -> list[MetadataPartitionRow]:
    alive = state.alive
    all_alive = len(alive) == len(state.node_ids)
    list_hashes: dict[tuple[int, ...], int] = {}

    def list_hash(values: tuple[int, ...]) -> int:
        h = list_hashes.get(values)
        if h is None:
            h = list_hashes[values] = java_list_hash(values)
        return h

    rows: list[MetadataPartitionRow] = []
    hashes: list[int] = []
    for p in t.partitions:
        leader = p.leader_id if p.leader_id in alive else -1
        error = NONE if leader != -1 else LEADER_NOT_AVAILABLE
        offline = () if all_alive else tuple(r for r in p.replicas if r not in alive)
        rows.append((error, p.index, leader, p.leader_epoch, p.replicas, p.isr, offline))
        # java_fields_hash of the row's seven fields (list fields by their hashCode), expanded:
        # 31 * h + field from h = 0, i.e. the sum of field * 31^(6 - position), mod 2^32.
        hashes.append(error * _P6 + p.index * _P5 + leader * _P4 + p.leader_epoch * _P3
                      + list_hash(p.replicas) * _P2 + list_hash(p.isr) * 31
                      + list_hash(offline))
    if state.profile.metadata_partitions_in_index_order:
        return sorted(rows, key=lambda row: row[1])  # a live 4.4.0 broker: by index
    # Kafka 4.0 maps the partitions into a Scala mutable.HashSet of MetadataResponsePartition,
    # so they come out in that set's hash order (capture 04: 1, 2, 0).
    return scala_mutable_hash_order_of(hashes, rows)


def _metadata_error_topic(name: str | None, error: int, is_internal: bool = False) -> MetadataTopic:
    # Unknown / unauthorised topic: the all-zero topic id (None in kafka-python), no partitions.
    return MetadataTopic(error, name, None, is_internal, ())


def _metadata_message(
    v: int, brokers: list[MetadataBroker], cluster_id: str | None, controller_id: int,
    topics: list[MetadataTopic], error_code: int,
) -> Any:
    """kafka-python's message for the same answer (what the lean encoder is checked against)."""
    Topic_ = MetadataResponse.MetadataResponseTopic
    Part = Topic_.MetadataResponsePartition
    return MetadataResponse(
        version=v, throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=b[0], host=b[1], port=b[2],
                                                         rack=b[3]) for b in brokers],
        cluster_id=cluster_id, controller_id=controller_id,
        topics=[Topic_(
            error_code=t.error_code, name=t.name, topic_id=t.topic_id,
            is_internal=t.is_internal, authorized_operations=UNAUTHORIZED_OPERATIONS,
            partitions=[Part(error_code=r[0], partition_index=r[1], leader_id=r[2],
                             leader_epoch=r[3], replica_nodes=r[4], isr_nodes=r[5],
                             offline_replicas=r[6]) for r in t.partitions],
        ) for t in topics],
        authorized_operations=UNAUTHORIZED_OPERATIONS, error_code=error_code,
    )


def handle_metadata(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    principal = ctx.principal
    topics_out: list[MetadataTopic] = []
    requested = req.topics
    if requested is None or (v == 0 and not requested):
        for each in state.topics.values():
            if state.authorized(principal, "DESCRIBE", each.name):
                topics_out.append(_metadata_topic(state, each))
    else:
        allow_auto = bool(req.allow_auto_topic_creation) if v >= 4 else True
        names: list[str] = []
        by_id_errors = []
        for rt in requested:
            if rt.name is None and getattr(rt, "topic_id", None) is not None:
                found = state.topics_by_id.get(rt.topic_id)
                if found is None:
                    by_id_errors.append(_metadata_error_topic(None, UNKNOWN_TOPIC_ID))
                else:
                    names.append(found.name)
            else:
                names.append(rt.name)
        # The names become a Scala immutable Set: request order up to 4 topics, else hash order.
        # Answers: existing topics, then missing ones, then unauthorised ones (KafkaApis).
        existing, missing, unauthorized = [], [], []
        for name in scala_immutable_set_order(names, java_string_hash):
            injected = state.injected_error(3, ctx.broker_id, topic=name)
            t = state.topics.get(name)
            if injected is not None:
                existing.append(_metadata_error_topic(name, injected))
            elif not state.authorized(principal, "DESCRIBE", name):
                unauthorized.append(_metadata_error_topic(
                    name, TOPIC_AUTHORIZATION_FAILED,
                    name in (TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC)))
            elif t is not None:
                existing.append(_metadata_topic(state, t))
            elif not _valid_topic_name(name):
                missing.append(_metadata_error_topic(name, INVALID_TOPIC_EXCEPTION))
            elif (allow_auto and state.config_bool("auto.create.topics.enable")
                  and not name.startswith("__")):
                # Auto-creation: KRaft forwards CreateTopics and answers this Metadata with
                # UNKNOWN_TOPIC_OR_PARTITION; the client's next Metadata finds the topic.
                state.create_topic(name, state.config_int("num.partitions"),
                                   min(state.config_int("default.replication.factor"),
                                       len(state.node_ids)))
                missing.append(_metadata_error_topic(name, UNKNOWN_TOPIC_OR_PARTITION))
            else:
                missing.append(_metadata_error_topic(name, UNKNOWN_TOPIC_OR_PARTITION))
        topics_out = existing + missing + by_id_errors + unauthorized
    brokers: list[MetadataBroker] = [
        (b, state.endpoints[b][0], state.endpoints[b][1], None) for b in state.alive_brokers()
    ]
    top_error = state.injected_error(3, ctx.broker_id)
    error_code = top_error if top_error is not None else NONE
    cluster_id, controller_id = state.cluster_id, state.controller_id()
    return LeanResponse(
        MetadataResponse,
        lambda version: encode_metadata(version, brokers, cluster_id, controller_id,
                                        topics_out, error_code),
        lambda: _metadata_message(v, brokers, cluster_id, controller_id, topics_out, error_code),
    )


def _valid_topic_name(name: str) -> bool:
    import re

    return (0 < len(name) <= 249 and name not in (".", "..")
            and re.fullmatch(r"[a-zA-Z0-9._-]+", name) is not None)


# -- FindCoordinator (10) -------------------------------------------------------------------
def handle_find_coordinator(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    key_type = req.key_type if v >= 1 else 0
    keys = list(req.coordinator_keys) if v >= 4 else [req.key]
    if key_type == 1:
        existed = state.ensure_internal_topic(TRANSACTION_STATE_TOPIC)
    elif key_type == 0:
        existed = state.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC)
    else:
        existed = True
    answers: list[tuple[str, int, int, str, int]] = []  # key, error, node, host, port
    for key in keys:
        error = state.injected_error(10, ctx.broker_id,
                                     transactional_id=key if key_type == 1 else None)
        coord = None
        if error is None:
            if key_type not in (0, 1):
                error = INVALID_REQUEST
            elif key_type == 0 and not state.group_authorized(ctx.principal, "DESCRIBE", key):
                error = GROUP_AUTHORIZATION_FAILED  # KafkaApis checks before any lookup
            elif not existed:
                error = COORDINATOR_NOT_AVAILABLE  # the lookup that created the topic (08)
            else:
                coord = (state.coordinator.coordinator_for(key) if key_type == 1
                         else state.group_coordinator(key))
                error = NONE if coord is not None else COORDINATOR_NOT_AVAILABLE
        if error == NONE and coord is not None:
            host, port = state.endpoints[coord[0]]
            answers.append((key, NONE, coord[0], host, port))
        else:
            answers.append((key, error, -1, "", -1))
    if v >= 4:
        # v4+: error_message "" on success and on error alike (08, 09).
        return FindCoordinatorResponse(
            version=v, throttle_time_ms=0,
            coordinators=[FindCoordinatorResponse.Coordinator(
                key=k, node_id=n, host=h, port=p, error_code=e, error_message="")
                for k, e, n, h, p in answers])
    _, e, n, h, p = answers[0]
    # v0-3: error_message is Errors.message(): "NONE" on success (10-13).
    return FindCoordinatorResponse(
        version=v, throttle_time_ms=0, error_code=e,
        error_message="NONE" if e == NONE else ERROR_MESSAGES.get(e),
        node_id=n, host=h, port=p)


# -- DescribeConfigs (32) -------------------------------------------------------------------
def handle_describe_configs(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    Result = DescribeConfigsResponse.DescribeConfigsResult
    Entry = Result.DescribeConfigsResourceResult
    results = []
    for res in req.resources:
        # null or empty configuration_keys: every config (06)
        keys = set(res.configuration_keys) if res.configuration_keys else None
        rtype, rname = res.resource_type, res.resource_name
        error: int = NONE
        message: str | None = ""
        configs: list[Any] = []
        injected = state.injected_error(32, ctx.broker_id,
                                        topic=rname if rtype == 2 else None)
        if injected is not None:
            error, message = injected, None
        elif rtype == 4:  # BROKER
            if rname == "":
                configs = []  # cluster-wide dynamic defaults: none are set
            elif rname == str(ctx.broker_id):
                entries = state.broker_configs(ctx.broker_id)
                if keys is not None:
                    # Filtering builds a Scala mutable.HashMap: its hash order, not 06's (07).
                    entries = scala_mutable_hash_order(
                        [e for e in entries if e.name in keys],
                        lambda e: java_string_hash(e.name))
                configs = [Entry(
                    name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                    is_sensitive=e.is_sensitive, synonyms=[], config_type=e.config_type,
                    documentation=None) for e in entries]
            else:
                error = INVALID_REQUEST
                message = (f"Unexpected broker id, expected {ctx.broker_id} or empty string, "
                           f"but received {rname}")
        elif rtype == 2:  # TOPIC
            t = state.topics.get(rname)
            if not state.authorized(ctx.principal, "DESCRIBE_CONFIGS", rname):
                error, message = TOPIC_AUTHORIZATION_FAILED, None
            elif t is None:
                error, message = UNKNOWN_TOPIC_OR_PARTITION, None
            else:
                for name, value, source, ctype in state.topic_configs(t, keys):
                    configs.append(Entry(
                        name=name, value=value, read_only=False, config_source=source,
                        is_sensitive=False, synonyms=[], config_type=ctype, documentation=None))
        else:
            error, message = INVALID_REQUEST, f"Unsupported resource type {rtype}"
        results.append(Result(error_code=error, error_message=message, resource_type=rtype,
                              resource_name=rname, configs=configs))
    return DescribeConfigsResponse(version=v, throttle_time_ms=0, results=results)


# -- InitProducerId (22) --------------------------------------------------------------------
TWO_PHASE_TIMEOUT_MS = 2_147_483_647


def handle_init_producer_id(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    tid = req.transactional_id
    injected = state.injected_error(22, ctx.broker_id, transactional_id=tid)
    if injected is not None:
        return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=injected,
                                      producer_id=-1, producer_epoch=-1)
    timeout_ms, max_timeout_ms = req.transaction_timeout_ms, state.transaction_max_timeout_ms
    if v >= 6 and req.enable2_pc:
        # TransactionCoordinator.handleInitProducerId (4.x): 2PC refused unless the broker
        # allows it; otherwise the timeout becomes Integer.MAX_VALUE, which the reaper skips
        # (docs/kafka-semantics.md#two-phase-commit).
        if tid is None or not state.config_bool("transaction.two.phase.commit.enable"):
            return InitProducerIdResponse(
                version=v, throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1, producer_epoch=-1)
        timeout_ms = max_timeout_ms = TWO_PHASE_TIMEOUT_MS
    result = state.coordinator.init_producer_id(
        ctx.broker_id, tid, timeout_ms,
        max_timeout_ms=max_timeout_ms,
        expected_producer_id=req.producer_id if v >= 3 else -1,
        expected_producer_epoch=req.producer_epoch if v >= 3 else -1,
    )
    return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=result.error_code,
                                  producer_id=result.producer_id,
                                  producer_epoch=result.producer_epoch)


# -- AddPartitionsToTxn (24) ----------------------------------------------------------------
def _add_partitions_one(
    state: ClusterState, ctx: RequestContext, tid: str, pid: int, epoch: int,
    topics: list[Any], verify_only: bool, client_tv: int,
) -> dict[tuple[str, int], int]:
    errors: dict[tuple[str, int], int] = {}
    ok: list[tuple[str, int]] = []
    for t in topics:
        for part in t.partitions:
            tp = (t.name, part)
            if not state.authorized(ctx.principal, "WRITE", t.name):
                errors[tp] = TOPIC_AUTHORIZATION_FAILED
            elif not state.partition_exists(t.name, part):
                errors[tp] = UNKNOWN_TOPIC_OR_PARTITION
            else:
                ok.append(tp)
    if errors:
        # Any failed check fails the whole request; the rest are OPERATION_NOT_ATTEMPTED.
        for tp in ok:
            errors[tp] = OPERATION_NOT_ATTEMPTED
        return errors
    injected = state.injected_error(24, ctx.broker_id, transactional_id=tid)
    if injected is not None:
        return dict.fromkeys(ok, injected)
    if verify_only:
        return {tp: state.coordinator.verify_partition(tid, pid, epoch, tp) for tp in ok}
    err = state.coordinator.add_partitions(ctx.broker_id, tid, pid, epoch, ok,
                                           client_transaction_version=client_tv)
    return dict.fromkeys(ok, err)


def _topic_results(errors: dict[tuple[str, int], int]) -> list[Any]:
    TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    PartResult = TopicResult.AddPartitionsToTxnPartitionResult
    by_topic: dict[str, list[Any]] = {}
    for (topic, part), err in errors.items():
        by_topic.setdefault(topic, []).append(
            PartResult(partition_index=part, partition_error_code=err))
    return [TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


def handle_add_partitions_to_txn(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    if v <= 3:
        errors = _add_partitions_one(
            state, ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch, list(req.v3_and_below_topics), False, 0)
        return AddPartitionsToTxnResponse(version=v, throttle_time_ms=0,
                                          results_by_topic_v3_and_below=_topic_results(errors))
    # v4+: the broker-to-coordinator batched form (KIP-890), verify_only or add.
    results = []
    for txn in req.transactions:
        errors = _add_partitions_one(state, ctx, txn.transactional_id, txn.producer_id,
                                     txn.producer_epoch, list(txn.topics), bool(txn.verify_only),
                                     2 if v >= 5 else 0)
        results.append(AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id, topic_results=_topic_results(errors)))
    return AddPartitionsToTxnResponse(version=v, throttle_time_ms=0, error_code=NONE,
                                      results_by_transaction=results)


# -- AddOffsetsToTxn (25) / TxnOffsetCommit (28) --------------------------------------------
def handle_add_offsets_to_txn(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    state.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC)
    injected = state.injected_error(25, ctx.broker_id, transactional_id=req.transactional_id)
    if injected is not None:
        return AddOffsetsToTxnResponse(version=v, throttle_time_ms=0, error_code=injected)
    tp = (CONSUMER_OFFSETS_TOPIC,
          partition_for(req.group_id, state.config_int("offsets.topic.num.partitions")))
    err = state.coordinator.add_partitions(ctx.broker_id, req.transactional_id, req.producer_id,
                                           req.producer_epoch, [tp])
    return AddOffsetsToTxnResponse(version=v, throttle_time_ms=0, error_code=err)


def handle_txn_offset_commit(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """Minimal: the group coordinator accepts the offsets (they are not stored)."""
    v = ctx.api_version
    coord = state.group_coordinator(req.group_id)
    base_error = NONE if coord is not None and coord[0] == ctx.broker_id else NOT_COORDINATOR
    TopicR = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    PartR = TopicR.TxnOffsetCommitResponsePartition
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            err = base_error
            if err == NONE and not state.partition_exists(t.name, p.partition_index):
                err = UNKNOWN_TOPIC_OR_PARTITION
            parts.append(PartR(partition_index=p.partition_index, error_code=err))
        topics.append(TopicR(name=t.name, partitions=parts))
    return TxnOffsetCommitResponse(version=v, throttle_time_ms=0, topics=topics)


# -- EndTxn (26) ----------------------------------------------------------------------------
def handle_end_txn(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    injected = state.injected_error(26, ctx.broker_id, transactional_id=req.transactional_id)
    if injected is not None:
        return EndTxnResponse(version=v, throttle_time_ms=0, error_code=injected,
                              producer_id=-1, producer_epoch=-1)
    # EndTxn v5+ means a transaction.version 2 client (epoch bump on every EndTxn).
    result = state.coordinator.end_txn(
        ctx.broker_id, req.transactional_id, req.producer_id, req.producer_epoch,
        bool(req.committed), client_transaction_version=2 if v >= 5 else 0)
    ok = result.error_code == NONE
    return EndTxnResponse(version=v, throttle_time_ms=0, error_code=result.error_code,
                          producer_id=result.producer_id if ok else -1,
                          producer_epoch=result.producer_epoch if ok else -1)


# -- WriteTxnMarkers (27) -------------------------------------------------------------------
def handle_write_txn_markers(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """Markers from an admin abort (kafka-transactions.sh abort) or another coordinator."""
    v = ctx.api_version
    MarkerR = WriteTxnMarkersResponse.WritableTxnMarkerResult
    TopicR = MarkerR.WritableTxnMarkerTopicResult
    PartR = TopicR.WritableTxnMarkerPartitionResult
    markers = []
    for m in req.markers:
        tv = m.transaction_version if v >= 2 else 0
        topics = []
        for t in m.topics:
            parts = []
            for idx in t.partition_indexes:
                p = state.partition(t.name, idx)
                err = state.injected_error(27, ctx.broker_id, topic=t.name, partition=idx)
                if err is None:
                    if p is None:
                        err = UNKNOWN_TOPIC_OR_PARTITION
                    elif not _leads(p, ctx.broker_id):
                        err = NOT_LEADER_OR_FOLLOWER
                    else:
                        err = state.log_of(p).append_marker(
                            producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                            commit=bool(m.transaction_result),
                            coordinator_epoch=m.coordinator_epoch,
                            timestamp_ms=state.now_ms(), leader_epoch=p.leader_epoch,
                            transaction_version=tv)
                parts.append(PartR(partition_index=idx, error_code=err))
            topics.append(TopicR(name=t.name, partitions=parts))
        markers.append(MarkerR(producer_id=m.producer_id, topics=topics))
    return WriteTxnMarkersResponse(version=v, markers=markers)


# -- Produce (0) ----------------------------------------------------------------------------
def _produce_partition(
    state: ClusterState, ctx: RequestContext, tid: str | None, t: Topic | None, name: str,
    index: int, records: bytes | None,
) -> tuple[int, int, int, str | None]:
    """(error, base offset, log append time, error message) for one partition's batch."""
    v = ctx.api_version
    if not state.authorized(ctx.principal, "WRITE", name):
        return TOPIC_AUTHORIZATION_FAILED, -1, -1, None
    p = state.partition(name, index) if t is not None else None
    if p is None:
        return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None
    injected = state.injected_error(0, ctx.broker_id, topic=name, partition=index)
    if injected is not None:
        return injected, -1, -1, None
    if not _leads(p, ctx.broker_id):
        return NOT_LEADER_OR_FOLLOWER, -1, -1, None
    batches = split_batches(records or b"")
    if batches is None or len(batches) != 1:
        # ProduceRequest.validateRecords: v3+ carries exactly one v2 batch.
        return INVALID_RECORD, -1, -1, None
    header, raw = batches[0]
    if not crc_ok(raw):
        return CORRUPT_MESSAGE, -1, -1, None
    if header.is_control:
        return INVALID_RECORD, -1, -1, "Clients are not allowed to write control records"
    now = state.now_ms()
    log_append_time = state.log_append_time(p.topic)
    if not log_append_time:
        after_ms = int(state.config("log.message.timestamp.after.max.ms") or 3600000)
        before_ms = int(state.config("log.message.timestamp.before.max.ms") or 2**63 - 1)
        if header.max_timestamp > now + after_ms or header.base_timestamp < now - before_ms:
            return INVALID_TIMESTAMP, -1, -1, None
    log = state.log_of(p)
    if header.is_transactional and tid is not None and not log.has_ongoing_transaction(
            header.producer_id, header.producer_epoch):
        tp = (name, index)
        coord = state.coordinator.coordinator_for(tid)
        err = NONE
        if v >= 12:
            # transaction.version 2 clients: the broker adds the partition itself (KIP-890).
            err = (state.coordinator.add_partitions(
                coord[0], tid, header.producer_id, header.producer_epoch, [tp],
                client_transaction_version=2) if coord is not None else NOT_COORDINATOR)
        elif (state.profile_for(ctx.broker_id).supports_partition_verification
              and state.config_bool("transaction.partition.verification.enable")):
            # KIP-890 part 1 (3.6+): the partition must already be in the coordinator's
            # transaction. Brokers before 3.6 append the batch unverified, whatever the config.
            err = state.coordinator.verify_partition(tid, header.producer_id,
                                                     header.producer_epoch, tp)
            if err == INVALID_TXN_STATE and v >= 11:
                # Produce v11 clients (KIP-890, 3.8+) are told TRANSACTION_ABORTABLE; older ones
                # INVALID_TXN_STATE (measured on 3.9.2, 4.0.2 and 4.4.0: docs/kafka-semantics.md).
                err = TRANSACTION_ABORTABLE
        if err == PRODUCER_FENCED:
            err = INVALID_PRODUCER_EPOCH
        if err in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
                   51):
            err = 19  # NOT_ENOUGH_REPLICAS: retriable for every producer version
        if err != NONE:
            return err, -1, -1, None
    check = log.validate_producer_batch(header)
    if check is not None:
        return check.error_code, check.base_offset, check.log_append_time_ms, None
    result = log.append_client_batch(header, raw, leader_epoch=p.leader_epoch, now_ms=now,
                                     log_append_time=log_append_time)
    return result.error_code, result.base_offset, result.log_append_time_ms, None


def handle_produce(state: ClusterState, ctx: RequestContext, req: Any) -> Any | None:
    v = ctx.api_version
    TopicR = ProduceResponse.TopicProduceResponse
    PartR = TopicR.PartitionProduceResponse
    responses = []
    for td in req.topic_data:
        t: Topic | None
        if v >= 13:
            t = state.topics_by_id.get(td.topic_id)
            name = t.name if t is not None else ""
        else:
            name = td.name
            t = state.topics.get(name)
        parts = []
        for pd in td.partition_data:
            err, base, append_time, message = _produce_partition(
                state, ctx, req.transactional_id, t, name, pd.index, pd.records)
            p = state.partition(name, pd.index) if t is not None else None
            log_start = p.log.log_start_offset if (p is not None and p.log is not None) else 0
            parts.append(PartR(index=pd.index, error_code=err, base_offset=base,
                               log_append_time_ms=append_time,
                               log_start_offset=log_start if err == NONE else -1,
                               record_errors=[], error_message=message))
        if v >= 13:
            responses.append(TopicR(topic_id=td.topic_id, partition_responses=parts))
        else:
            responses.append(TopicR(name=name, partition_responses=parts))
    if req.acks == 0:
        return None
    return ProduceResponse(version=v, responses=responses, throttle_time_ms=0)


# -- Fetch (1) ------------------------------------------------------------------------------
UNKNOWN_SERVER_ERROR = -1
_ZERO_UUID = uuid.UUID(int=0)


def _fetch_request_data(
    state: ClusterState, v: int, req: Any
) -> tuple[list[tuple[PartitionKey, RequestedPartition]], list[PartitionKey]]:
    """The request's partitions (FetchRequest.fetchData) and forgotten partitions, keyed as
    Kafka's TopicIdPartition compares them: by topic id from v13, by name below."""
    fetch_data: list[tuple[PartitionKey, RequestedPartition]] = []
    seen: set[PartitionKey] = set()
    for ft in req.topics:
        if v >= 13:
            t = state.topics_by_id.get(ft.topic_id)
            name: str | None = t.name if t is not None else None
            topic_id: uuid.UUID = ft.topic_id
        else:
            name = ft.topic
            known = state.topics.get(ft.topic)
            topic_id = known.topic_id if known is not None else _ZERO_UUID
        for fp in ft.partitions:
            key: PartitionKey = (ft.topic_id if v >= 13 else ft.topic, fp.partition)
            if key in seen:  # a LinkedHashMap: the last one wins, at the first one's place
                fetch_data = [(k, r) for k, r in fetch_data if k != key]
            seen.add(key)
            fetch_data.append((key, RequestedPartition(
                topic=name, topic_id=topic_id, partition=fp.partition,
                fetch_offset=fp.fetch_offset, partition_max_bytes=fp.partition_max_bytes,
                current_leader_epoch=fp.current_leader_epoch if v >= 9 else -1,
                last_fetched_epoch=fp.last_fetched_epoch if v >= 12 else -1,
                log_start_offset=fp.log_start_offset if v >= 5 else -1)))
    forgotten: list[PartitionKey] = []
    if v >= 7:
        for ff in req.forgotten_topics_data:
            for index in ff.partitions:
                forgotten.append((ff.topic_id if v >= 13 else ff.topic, index))
    return fetch_data, forgotten


def _fetch_error_response(v: int, req: Any, error: int) -> Any:
    """FetchRequest.getErrorResponse: the top-level error; below v13 also every requested
    partition with it (high watermark -1)."""
    TopicR = FetchResponse.FetchableTopicResponse
    PartR = TopicR.PartitionData
    responses = []
    if v < 13:
        for ft in req.topics:
            responses.append(TopicR(topic=ft.topic, partitions=[
                PartR(partition_index=fp.partition, error_code=error, high_watermark=-1,
                      last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[],
                      preferred_read_replica=-1, records=b"")
                for fp in ft.partitions]))
    return FetchResponse(version=v, throttle_time_ms=0, error_code=error,
                         session_id=req.session_id if v >= 7 else 0, responses=responses)


def handle_fetch(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """Fetch as Kafka's KafkaApis.handleFetchRequest with its FetchManager (KIP-227 sessions,
    kafka_sim.fetch_sessions; docs/kafka-semantics.md#fetch-sessions): the partitions to read
    come from the request or from the session; partitions of unknown topics or partitions, or
    of topics the principal may not read, answer after the readable ones (KafkaApis'
    `erroneous`); readable ones in order, only the first with data promised a whole batch
    beyond the byte limits (KIP-74)."""
    v = ctx.api_version
    Aborted = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
    read_committed = v >= 4 and req.isolation_level == 1
    now = state.now_ms()
    cache = state.fetch_session_cache(ctx.broker_id)
    fetch_data, forgotten = _fetch_request_data(state, v, req)
    context = new_context(
        cache, v, req.session_id if v >= 7 else 0, req.session_epoch if v >= 7 else -1,
        fetch_data, forgotten, now)
    if context.kind is ContextKind.SHARD_OUT_OF_RANGE:
        return _fetch_error_response(v, req, UNKNOWN_SERVER_ERROR)
    remaining = req.max_bytes if v >= 3 else 2**31 - 1
    min_one = v >= 3  # versions 0-2 hold to the byte limits (hardMaxBytesLimit)
    read: list[tuple[PartitionKey, Any]] = []
    erroneous: list[tuple[PartitionKey, Any]] = []

    def failed(partition: int, error: int, aborted: list[Any] | None) -> Any:
        """An error answer: KafkaApis' `erroneous` ones (FetchResponse.partitionResponse)
        carry an empty aborted-transactions list, a failed log read (LogReadResult) null."""
        return _FetchAnswer(partition, error, -1, -1, -1, aborted, b"")

    session = context.session if context.kind is ContextKind.INCREMENTAL else None
    rules = any(rule.api_key == 1 for rule in state.errors)
    readable: dict[str, bool] = {}
    for key, rp in context.partitions():
        name = rp.topic
        if name is None:
            erroneous.append((key, failed(rp.partition, UNKNOWN_TOPIC_ID, [])))
            continue
        allowed = readable.get(name)
        if allowed is None:
            allowed = readable[name] = state.authorized(ctx.principal, "READ", name)
        if not allowed:
            erroneous.append((key, failed(rp.partition, TOPIC_AUTHORIZATION_FAILED, [])))
            continue
        p = state.partition(name, rp.partition)
        if p is None:
            erroneous.append((key, failed(rp.partition, UNKNOWN_TOPIC_OR_PARTITION, [])))
            continue
        error = (state.injected_error(1, ctx.broker_id, topic=name, partition=rp.partition)
                 if rules else None)
        if error is None:
            error = NONE
            # A consumer's Fetch v11+ carries client metadata (KIP-392): a follower serves it
            # (FetchParams.fetchOnlyLeader), from its log; before v11 only the leader does.
            if not (_leads(p, ctx.broker_id) or (v >= 11 and ctx.broker_id in p.replicas)):
                error = NOT_LEADER_OR_FOLLOWER
            elif v >= 9 and rp.current_leader_epoch not in (-1, p.leader_epoch):
                error = (FENCED_LEADER_EPOCH if rp.current_leader_epoch < p.leader_epoch
                         else UNKNOWN_LEADER_EPOCH)
        log = p.log
        hw = log.high_watermark if log is not None else 0
        lso = log.last_stable_offset if log is not None else 0
        start = log.log_start_offset if log is not None else 0
        leo = log.log_end_offset if log is not None else 0
        # UnifiedLog.read: below the log start or beyond the log end offset is out of range;
        # anything in between (above the LSO or HW too) reads as empty.
        if error == NONE and not start <= rp.fetch_offset <= leo:
            error = OFFSET_OUT_OF_RANGE
        if error != NONE:
            read.append((key, failed(rp.partition, error, None)))
            continue
        upper = lso if read_committed else hw
        if session is not None and log is not None and rp.fetch_offset >= upper:
            cached = session.partitions[key]
            if cached.high_watermark == hw and cached.local_log_start_offset == start:
                # Nothing to read, nothing moved: CachedPartition.maybeUpdateResponseData
                # leaves it out of an incremental answer, so no answer is built for it.
                continue
        records = b""
        aborted: list[Any] | None = None
        if log is not None:
            limit = max(0, min(rp.partition_max_bytes, remaining))
            records, end = log.read(rp.fetch_offset, limit, upper, min_one=min_one)
            if records:
                min_one = False
                remaining = max(0, remaining - len(records))
            if read_committed:
                aborted = [
                    Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in log.aborted_between(rp.fetch_offset, end)
                ] if records else []
        elif read_committed:
            aborted = []
        # READ_UNCOMMITTED: aborted_transactions null; READ_COMMITTED: a list (33, 34).
        read.append((key, _FetchAnswer(rp.partition, NONE, hw, lso, start,
                                       aborted if read_committed else None, records)))
    error_code, session_id, answers = generate_response(cache, context, read + erroneous, now)
    topic_of = {key: rp for key, rp in context.partitions()}
    topic_of.update(fetch_data)
    return FetchResponse(version=v, throttle_time_ms=0, error_code=error_code,
                         session_id=session_id,
                         responses=_fetch_topics(v, answers, topic_of))


@dataclass(slots=True)
class _FetchAnswer:
    """One partition's Fetch answer before the session decides whether it is sent (an
    incremental answer leaves most out: no protocol object is built for those)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[Any] | None
    records: bytes
    preferred_read_replica: int = -1


def _fetch_topics(
    v: int, answers: list[tuple[PartitionKey, Any]],
    requested: dict[PartitionKey, RequestedPartition],
) -> list[Any]:
    """FetchResponse.toMessage: consecutive partitions of one topic share a topic entry; a topic
    seen again after another one starts a new entry (the partitions' order is kept)."""
    TopicR = FetchResponse.FetchableTopicResponse
    PartR = TopicR.PartitionData
    topics: list[Any] = []
    last: Hashable = None
    for key, answer in answers:
        rp = requested[key]
        if not topics or key[0] != last:
            topics.append(TopicR(topic_id=rp.topic_id, partitions=[]) if v >= 13
                          else TopicR(topic=key[0], partitions=[]))
            last = key[0]
        topics[-1].partitions.append(PartR(
            partition_index=answer.partition_index, error_code=answer.error_code,
            high_watermark=answer.high_watermark, last_stable_offset=answer.last_stable_offset,
            log_start_offset=answer.log_start_offset,
            aborted_transactions=answer.aborted_transactions,
            preferred_read_replica=answer.preferred_read_replica, records=answer.records))
    return topics


# -- ListOffsets (2) ------------------------------------------------------------------------
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _in_hash_order(
    topic: str, partitions: list[ListOffsetsPartitionRow]
) -> list[ListOffsetsPartitionRow]:
    def hash_of(row: ListOffsetsPartitionRow) -> int:
        return topic_partition_hash((topic, row[0]))

    return scala_mutable_hash_order(partitions, hash_of)


def handle_list_offsets(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    read_committed = v >= 2 and req.isolation_level == 1
    topics: list[tuple[str, list[ListOffsetsPartitionRow]]] = []
    for lt in req.topics:
        parts: list[ListOffsetsPartitionRow] = []
        for lp in lt.partitions:
            p = state.partition(lt.name, lp.partition_index)
            err = state.injected_error(2, ctx.broker_id, topic=lt.name,
                                       partition=lp.partition_index)
            if err is None:
                if not state.authorized(ctx.principal, "DESCRIBE", lt.name):
                    err = TOPIC_AUTHORIZATION_FAILED
                elif p is None:
                    err = UNKNOWN_TOPIC_OR_PARTITION
                elif not _leads(p, ctx.broker_id):
                    err = NOT_LEADER_OR_FOLLOWER
                elif v >= 4 and lp.current_leader_epoch not in (-1, p.leader_epoch):
                    err = (FENCED_LEADER_EPOCH if lp.current_leader_epoch < p.leader_epoch
                           else UNKNOWN_LEADER_EPOCH)
            if (err is not None and err != NONE) or p is None:
                parts.append((lp.partition_index, err if err is not None else NONE, -1, -1, -1))
                continue
            log = p.log
            hw = log.high_watermark if log is not None else 0
            lso = log.last_stable_offset if log is not None else 0
            start = log.log_start_offset if log is not None else 0
            ts, offset, epoch = -1, -1, p.leader_epoch
            target = lp.timestamp
            if target == LATEST:
                offset = lso if read_committed else hw  # 31, 32
            elif target in (EARLIEST, EARLIEST_LOCAL):
                offset = start
                if log is not None and log.batches:
                    epoch = log.batches[0].leader_epoch
            elif target == MAX_TIMESTAMP:
                found = log.max_timestamp_offset() if log is not None else None
                if found is not None:
                    offset, ts = found
                else:
                    epoch = -1
            elif target == LATEST_TIERED:
                epoch = -1  # no tiered storage: no offset
            else:
                found = log.offset_for_timestamp(target) if log is not None else None
                upper = lso if read_committed else hw
                if found is not None and found[0] < upper:
                    offset, ts = found
                else:
                    epoch = -1
            parts.append((lp.partition_index, NONE, ts, offset, epoch))
        # Topics come in request order, a topic's partitions in TopicPartition hash order
        # (groups 05/06: grp-test 1, 0, 2; 53: txn-open 0, 1, 2).
        if not state.profile_for(ctx.broker_id).list_offsets_in_request_order:
            parts = _in_hash_order(lt.name, parts)
        topics.append((lt.name, parts))
    return LeanResponse(
        ListOffsetsResponse,
        lambda version: encode_list_offsets(version, topics),
        lambda: _list_offsets_message(v, topics),
    )


def _list_offsets_message(
    v: int, topics: list[tuple[str, list[ListOffsetsPartitionRow]]]
) -> Any:
    TopicR = ListOffsetsResponse.ListOffsetsTopicResponse
    PartR = TopicR.ListOffsetsPartitionResponse
    return ListOffsetsResponse(version=v, throttle_time_ms=0, topics=[
        TopicR(name=name, partitions=[
            PartR(partition_index=r[0], error_code=r[1], timestamp=r[2], offset=r[3],
                  leader_epoch=r[4]) for r in parts])
        for name, parts in topics])


# -- DescribeProducers (61) -----------------------------------------------------------------
NOT_LEADER_MESSAGE = ERROR_MESSAGES[NOT_LEADER_OR_FOLLOWER]


def _producer_columns(
    state: ClusterState, t: Topic
) -> tuple[list[tuple[int, ...]], list[PartitionLog | None]]:
    """Each partition's replicas and log, rebuilt when replicas may have changed (Metadata
    version) or a log was created anywhere (`ClusterState.log_of`)."""
    key = (state.metadata_version, len(state.logs))
    cached = t.producer_columns
    if cached is None or cached[0] != key:
        cached = t.producer_columns = (
            key, [p.replicas for p in t.partitions], [p.log for p in t.partitions])
    return cached[1], cached[2]


def _producer_rows(log: PartitionLog) -> list[ProducerRow]:
    if len(log.producers) == 1 and log.idle_blocks is None:  # most: no order to work out
        (e,) = log.producers.values()
        return [(e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp,
                 e.coordinator_epoch, e.current_txn_first_offset)]
    return log.producer_rows()


def handle_describe_producers(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    broker_id = ctx.broker_id
    # Per-partition checks that cannot differ between partitions are made once per topic.
    rules = any(rule.api_key == 61 for rule in state.errors)
    # A 2.8 broker answers a topic it does not know with the error code alone.
    messages = state.profile_for(broker_id).describe_producers_error_messages
    unknown_message = ERROR_MESSAGES[UNKNOWN_TOPIC_OR_PARTITION] if messages else None
    topics: list[tuple[str, list[DescribeProducersPartitionRow]]] = []
    for rt in req.topics:
        name = rt.name
        t = state.topics.get(name)
        allowed = state.authorized(ctx.principal, "READ", name)
        partitions = t.partitions if t is not None else []
        parts: list[DescribeProducersPartitionRow] = []
        append = parts.append
        if allowed and not rules and t is not None:
            # The common case, the same answers as the loop below with its checks decided,
            # read from dense per-topic lists (a million Partition objects are slow to visit).
            replicas_of, logs = _producer_columns(state, t)
            count = len(partitions)
            for idx in rt.partition_indexes:
                if not 0 <= idx < count:
                    append((idx, UNKNOWN_TOPIC_OR_PARTITION, None, ()))
                    continue
                log = logs[idx]
                if broker_id not in replicas_of[idx]:
                    append((idx, NOT_LEADER_OR_FOLLOWER, NOT_LEADER_MESSAGE, ()))
                elif log is None or not log.has_producer_states:
                    append(idx)  # error 0, no message, no producers
                else:
                    append((idx, NONE, None, _producer_rows(log)))
            topics.append((name, parts))
            continue
        for idx in rt.partition_indexes:
            injected = (state.injected_error(61, broker_id, topic=name, partition=idx)
                        if rules else None)
            p = partitions[idx] if 0 <= idx < len(partitions) else None
            if not allowed:
                append((idx, TOPIC_AUTHORIZATION_FAILED, None, ()))  # needs READ; no message
            elif injected is not None:
                append((idx, injected, ERROR_MESSAGES.get(injected), ()))
            elif t is None:
                append((idx, UNKNOWN_TOPIC_OR_PARTITION, unknown_message, ()))
            elif p is None:
                append((idx, UNKNOWN_TOPIC_OR_PARTITION, None, ()))  # no such partition (37)
            elif broker_id not in p.replicas:
                append((idx, NOT_LEADER_OR_FOLLOWER, NOT_LEADER_MESSAGE, ()))
            elif p.log is None:
                append((idx, NONE, None, ()))
            else:
                append((idx, NONE, None, _producer_rows(p.log)))
        topics.append((name, parts))
    return LeanResponse(
        DescribeProducersResponse,
        lambda version: encode_describe_producers(version, topics),
        lambda: _describe_producers_message(v, topics),
    )


def _full_row(row: DescribeProducersPartitionRow) -> tuple[int, int, str | None, Any]:
    return (row, NONE, None, ()) if isinstance(row, int) else row


def _describe_producers_message(
    v: int, topics: list[tuple[str, list[DescribeProducersPartitionRow]]]
) -> Any:
    TopicR = DescribeProducersResponse.TopicResponse
    PartR = TopicR.PartitionResponse
    Prod = PartR.ProducerState
    return DescribeProducersResponse(version=v, throttle_time_ms=0, topics=[
        TopicR(name=name, partitions=[
            PartR(partition_index=idx, error_code=err, error_message=msg, active_producers=[
                Prod(producer_id=e[0], producer_epoch=e[1], last_sequence=e[2],
                     last_timestamp=e[3], coordinator_epoch=e[4], current_txn_start_offset=e[5])
                for e in producers])
            for idx, err, msg, producers in map(_full_row, parts)])
        for name, parts in topics])


# -- ListTransactions (66) ------------------------------------------------------------------
def handle_list_transactions(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    injected = state.injected_error(66, ctx.broker_id)
    if injected is not None:
        return ListTransactionsResponse(version=v, throttle_time_ms=0, error_code=injected,
                                        unknown_state_filters=[], transaction_states=[])
    result = state.coordinator.list_transactions(
        ctx.broker_id,
        state_filters=list(req.state_filters or []),
        producer_id_filters=list(req.producer_id_filters or []),
        duration_filter_ms=req.duration_filter if v >= 1 else -1,
        transactional_id_pattern=req.transactional_id_pattern if v >= 2 else None,
    )
    TS = ListTransactionsResponse.TransactionState
    return ListTransactionsResponse(
        version=v, throttle_time_ms=0, error_code=result.error_code,
        unknown_state_filters=result.unknown_state_filters,
        transaction_states=[TS(transactional_id=x.transactional_id, producer_id=x.producer_id,
                               transaction_state=x.state) for x in result.transactions])


# -- DescribeTransactions (65) --------------------------------------------------------------
def handle_describe_transactions(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    TS = DescribeTransactionsResponse.TransactionState
    TopicData = TS.TopicData
    out = []
    for tid in req.transactional_ids:
        err = state.injected_error(65, ctx.broker_id, transactional_id=tid)
        md = None
        if err is None:
            err, md = state.coordinator.describe(ctx.broker_id, tid)
        if md is None or err != NONE:
            # Only the id and the error are set; the rest are zero values (38).
            out.append(TS(error_code=err, transactional_id=tid, transaction_state="",
                          transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                          producer_epoch=0, topics=[]))
            continue
        grouped: dict[str, list[int]] = {}
        for topic, part in md.ordered_partitions():
            if state.authorized(ctx.principal, "DESCRIBE", topic):
                grouped.setdefault(topic, []).append(part)
        out.append(TS(error_code=NONE, transactional_id=tid, transaction_state=md.state.value,
                      transaction_timeout_ms=md.txn_timeout_ms,
                      transaction_start_time_ms=md.txn_start_timestamp,
                      producer_id=md.producer_id, producer_epoch=md.producer_epoch,
                      topics=[TopicData(topic=t, partitions=ps) for t, ps in grouped.items()]))
    return DescribeTransactionsResponse(version=v, throttle_time_ms=0, transaction_states=out)


# -- Consumer groups: OffsetCommit (8), OffsetFetch (9), ListGroups (16) ----------------------
# Semantics: docs/kafka-semantics.md#consumer-groups
def _is_group_coordinator(state: ClusterState, broker_id: int, group_id: str) -> bool:
    coord = state.group_coordinator(group_id)
    return coord is not None and coord[0] == broker_id


def handle_offset_commit(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """Topics unknown to the broker's metadata are refused per partition before the group
    coordinator sees the rest (KafkaApis); the coordinator's errors cover every partition."""
    v = ctx.api_version
    TopicR = OffsetCommitResponse.OffsetCommitResponseTopic
    PartR = TopicR.OffsetCommitResponsePartition
    answers: dict[str, list[Any]] = {}
    valid: list[tuple[str, int, int, int, str | None]] = []
    for t in req.topics:
        for p in t.partitions:
            if not state.partition_exists(t.name, p.partition_index):
                answers.setdefault(t.name, []).append(
                    PartR(partition_index=p.partition_index, error_code=UNKNOWN_TOPIC_OR_PARTITION))
            else:
                epoch = p.committed_leader_epoch if v >= 6 else -1
                valid.append((t.name, p.partition_index, p.committed_offset, epoch,
                              p.committed_metadata))
    if valid:
        generation = req.generation_id_or_member_epoch if v >= 1 else -1
        member_id = req.member_id if v >= 1 else ""
        if not req.group_id:
            errors = [INVALID_GROUP_ID] * len(valid)
        elif not _is_group_coordinator(state, ctx.broker_id, req.group_id):
            errors = [NOT_COORDINATOR] * len(valid)
        else:
            _, errors = state.groups.commit(req.group_id, generation, member_id, v, valid,
                                            state.now_ms())
        for (topic, partition, _o, _e, _m), error in zip(valid, errors, strict=True):
            answers.setdefault(topic, []).append(
                PartR(partition_index=partition, error_code=error))
    return OffsetCommitResponse(
        version=v, throttle_time_ms=0,
        topics=[TopicR(name=name, partitions=parts) for name, parts in answers.items()])


def _fetched_offsets(
    state: ClusterState, group_id: str, topics: list[tuple[str, list[int]]] | None
) -> list[tuple[str, list[tuple[int, int, int, str]]]]:
    """(topic, [(partition, offset, leader epoch, metadata)]) as the coordinator answers:
    -1/-1/"" where nothing is committed (also for an unknown group); topics=None -> every
    committed offset of the group."""
    if topics is None:
        return [(topic, [(p, c.offset, c.leader_epoch, c.metadata) for p, c in entries])
                for topic, entries in state.groups.committed_topics(group_id).items()]
    out: list[tuple[str, list[tuple[int, int, int, str]]]] = []
    for topic, partitions in topics:
        rows = []
        for p in partitions:
            c = state.groups.committed(group_id, topic, p)
            rows.append((p, -1, -1, "") if c is None else (p, c.offset, c.leader_epoch, c.metadata))
        out.append((topic, rows))
    return out


def handle_offset_fetch(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """No pending transactional offsets are ever kept (TxnOffsetCommit stores nothing), so
    require_stable never has an unstable offset to refuse. A group the principal may not
    Describe is answered GROUP_AUTHORIZATION_FAILED with no topics before any coordinator check
    (KafkaApis authorizes first); pre-v8 that is the request's error."""
    v = ctx.api_version
    if v >= 8:
        GroupR = OffsetFetchResponse.OffsetFetchResponseGroup
        TopicsR = GroupR.OffsetFetchResponseTopics
        PartsR = TopicsR.OffsetFetchResponsePartitions
        groups = []
        for g in req.groups:
            if not state.group_authorized(ctx.principal, "DESCRIBE", g.group_id):
                groups.append(GroupR(group_id=g.group_id, topics=[],
                                     error_code=GROUP_AUTHORIZATION_FAILED))
                continue
            if not _is_group_coordinator(state, ctx.broker_id, g.group_id):
                groups.append(GroupR(group_id=g.group_id, topics=[], error_code=NOT_COORDINATOR))
                continue
            wanted = (None if g.topics is None
                      else [(t.name, list(t.partition_indexes)) for t in g.topics])
            topics = [TopicsR(name=name, partitions=[
                PartsR(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                       metadata=m, error_code=NONE) for p, o, e, m in rows])
                for name, rows in _fetched_offsets(state, g.group_id, wanted)]
            groups.append(GroupR(group_id=g.group_id, topics=topics, error_code=NONE))
        if state.profile_for(ctx.broker_id).offset_fetch_groups_in_hash_order:
            # A 3.0 broker collects the groups' answers in a Scala mutable.HashMap by group id.
            groups = scala_mutable_hash_order(groups, lambda g: java_string_hash(g.group_id))
        return OffsetFetchResponse(version=v, throttle_time_ms=0, groups=groups)
    TopicR = OffsetFetchResponse.OffsetFetchResponseTopic
    PartR = TopicR.OffsetFetchResponsePartition
    if v >= 2 and not state.group_authorized(ctx.principal, "DESCRIBE", req.group_id):
        return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=[],
                                   error_code=GROUP_AUTHORIZATION_FAILED)
    if not _is_group_coordinator(state, ctx.broker_id, req.group_id):
        if v >= 2:
            return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=[],
                                       error_code=NOT_COORDINATOR)
        return OffsetFetchResponse(version=v, topics=[TopicR(name=t.name, partitions=[
            PartR(partition_index=p, committed_offset=-1, metadata="", error_code=NOT_COORDINATOR)
            for p in t.partition_indexes]) for t in req.topics])
    wanted = None if req.topics is None else [(t.name, list(t.partition_indexes))
                                              for t in req.topics]
    topics = [TopicR(name=name, partitions=[
        PartR(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
              error_code=NONE) for p, o, e, m in rows])
        for name, rows in _fetched_offsets(state, req.group_id, wanted)]
    return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=topics, error_code=NONE)


def handle_list_groups(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    def shard_hash(partition: int) -> int:
        return topic_partition_hash((CONSUMER_OFFSETS_TOPIC, partition))

    listed = state.groups.listed(
        state.group_partitions_led_by(ctx.broker_id), shard_hash,
        list(req.states_filter) if v >= 4 else [],
        list(req.types_filter) if v >= 5 else [],
        one_map=state.profile_for(ctx.broker_id).classic_group_coordinator)
    if not state.cluster_authorized(ctx.principal, "DESCRIBE"):
        # Without Describe on the cluster, only the groups the principal may Describe: no error.
        listed = [g for g in listed
                  if state.group_authorized(ctx.principal, "DESCRIBE", g.group_id)]
    Listed = ListGroupsResponse.ListedGroup
    return ListGroupsResponse(
        version=v, throttle_time_ms=0, error_code=NONE,
        groups=[Listed(group_id=g.group_id, protocol_type=g.protocol_type,
                       group_state=g.state, group_type=CLASSIC_GROUP_TYPE) for g in listed])


def handle_describe_groups(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """Groups are answered per coordinator shard: Kafka's GroupCoordinatorService groups the ids
    in a HashMap keyed by __consumer_offsets TopicPartition and concatenates the shards'
    answers. An id the coordinator does not know is "Dead" without error (14). No group has
    members; authorized_operations is never filled in (as in Metadata)."""
    v = ctx.api_version
    Described = DescribeGroupsResponse.DescribedGroup
    by_shard: dict[int, list[str]] = {}
    for group_id in req.groups:
        by_shard.setdefault(state.group_partition_for(group_id), []).append(group_id)
    shards = java_hash_map_order(
        list(by_shard), lambda p: topic_partition_hash((CONSUMER_OFFSETS_TOPIC, p)))
    described = []
    for shard in shards:
        for group_id in by_shard[shard]:
            if not _is_group_coordinator(state, ctx.broker_id, group_id):
                described.append(Described(
                    error_code=NOT_COORDINATOR, error_message=None, group_id=group_id,
                    group_state="", protocol_type="", protocol_data="", members=[],
                    authorized_operations=UNAUTHORIZED_OPERATIONS))
                continue
            group = state.groups.groups.get(group_id)
            described.append(Described(
                error_code=NONE, error_message=None, group_id=group_id,
                group_state=DEAD_STATE if group is None else group.state,
                protocol_type="" if group is None else group.protocol_type,
                protocol_data="", members=[], authorized_operations=UNAUTHORIZED_OPERATIONS))
    return DescribeGroupsResponse(version=v, throttle_time_ms=0, groups=described)


# -- DescribeCluster (60) ----------------------------------------------------------------------
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}


def handle_describe_cluster(state: ClusterState, ctx: RequestContext, req: Any) -> Any:
    """A broker answers DescribeCluster without any authorization check; with
    IncludeClusterAuthorizedOperations it reports the cluster operations the principal may do,
    or none (0) without Describe on the cluster; without it, Int32.MIN_VALUE (None here).
    Fenced brokers (here: the ones down) only with v2's IncludeFencedBrokers
    (docs/kafka-semantics.md#describe-cluster)."""
    v = ctx.api_version
    endpoint = req.endpoint_type if v >= 1 else BROKER_ENDPOINT
    if endpoint != BROKER_ENDPOINT:
        if endpoint == CONTROLLER_ENDPOINT:
            error = INVALID_REQUEST if v == 0 else MISMATCHED_ENDPOINT_TYPE
            message = ("The request was sent to an endpoint of type BROKER, but we wanted an "
                       f"endpoint of type {_ENDPOINT_NAMES[endpoint]}")
        else:
            error = INVALID_REQUEST if v == 0 else UNSUPPORTED_ENDPOINT_TYPE
            message = f"Unsupported endpoint type {endpoint}"
        return DescribeClusterResponse(
            version=v, throttle_time_ms=0, error_code=error, error_message=message,
            endpoint_type=BROKER_ENDPOINT, cluster_id="", controller_id=-1, brokers=[],
            authorized_operations=None)
    operations: set[int] | None = None
    if req.include_cluster_authorized_operations:
        operations = set()
        if state.cluster_authorized(ctx.principal, "DESCRIBE"):
            operations = {code for op, code in CLUSTER_OPERATION_CODES.items()
                          if state.cluster_authorized(ctx.principal, op)}
    include_fenced = v >= 2 and bool(req.include_fenced_brokers)
    Broker = DescribeClusterResponse.DescribeClusterBroker
    brokers = []
    for b in sorted(state.node_ids):
        fenced = b not in state.alive
        if fenced and not include_fenced:
            continue
        host, port = state.endpoints[b][0], state.endpoints[b][1]
        brokers.append(Broker(broker_id=b, host=host, port=port, rack=None, is_fenced=fenced))
    return DescribeClusterResponse(
        version=v, throttle_time_ms=0, error_code=NONE, error_message=None,
        endpoint_type=BROKER_ENDPOINT, cluster_id=state.cluster_id,
        controller_id=state.controller_id(), brokers=brokers, authorized_operations=operations)


HANDLERS: dict[int, Handler] = {
    0: handle_produce,
    1: handle_fetch,
    2: handle_list_offsets,
    3: handle_metadata,
    8: handle_offset_commit,
    9: handle_offset_fetch,
    10: handle_find_coordinator,
    22: handle_init_producer_id,
    24: handle_add_partitions_to_txn,
    25: handle_add_offsets_to_txn,
    26: handle_end_txn,
    27: handle_write_txn_markers,
    15: handle_describe_groups,
    16: handle_list_groups,
    28: handle_txn_offset_commit,
    32: handle_describe_configs,
    60: handle_describe_cluster,
    61: handle_describe_producers,
    65: handle_describe_transactions,
    66: handle_list_transactions,
}
