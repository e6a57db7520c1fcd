"""Small read-only requests used by the relation tests (one raw connection each)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka_sim.client import RawKafkaClient
from simhelpers import latest_offsets_request

from .harness import decode_record_batches

T = TypeVar("T")

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
LIST_OFFSETS = 2


def client_for(cluster: Any, node_id: int = 1) -> RawKafkaClient:
    host, port = cluster.endpoints[node_id]
    return RawKafkaClient(host, port)


def describe_producers(cluster: Any, topic: str, partition: int) -> Any:
    """DescribeProducers v0 for one partition -> its PartitionResponse."""
    req = DescribeProducersRequest[0](
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])]
    )
    with client_for(cluster) as client:
        resp = client.request(req)
    return resp.topics[0].partitions[0]


def producer(cluster: Any, topic: str, partition: int, producer_id: int) -> Any:
    part = describe_producers(cluster, topic, partition)
    assert part.error_code == 0, part
    found = [p for p in part.active_producers if p.producer_id == producer_id]
    assert found, f"producer {producer_id} not active on {topic}-{partition}: {part}"
    return found[0]


def describe_transaction(cluster: Any, transactional_id: str) -> Any:
    with client_for(cluster) as client:
        resp = client.request(DescribeTransactionsRequest[0](transactional_ids=[transactional_id]))
    return resp.transaction_states[0]


def list_transactions(
    cluster: Any, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
) -> list[tuple[str, int, str]]:
    req = ListTransactionsRequest[1](
        state_filters=list(states), producer_id_filters=list(producer_ids), duration_filter=-1
    )
    with client_for(cluster) as client:
        resp = client.request(req)
    assert resp.error_code == 0, resp
    return [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in resp.transaction_states
    ]


def latest_offset(cluster: Any, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets v10, or the highest version an older broker has."""
    version = _highest(cluster, LIST_OFFSETS, 10)
    req = latest_offsets_request(topic, partition, isolation_level, 30000, version)
    with client_for(cluster) as client:
        resp = client.request(req)
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0, part
    return int(part.offset)


FIRST_FETCH_BY_TOPIC_ID = 13
"""Fetch names topics by id from v13 (Kafka 3.1); before, by name."""


def offers(cluster: Any, api_key: int) -> bool:
    """Whether the broker (or simulator) lists `api_key` in its ApiVersions answer."""
    with client_for(cluster) as client:
        return api_key in client.negotiate()


def _highest(cluster: Any, api_key: int, preferred: int) -> int:
    with client_for(cluster) as client:
        return min(preferred, client.negotiate()[api_key][1])


def topic_id(cluster: Any, topic: str) -> uuid.UUID:
    """The topic's id from Metadata v12, or the highest version the broker has (ids from v10,
    Kafka 2.8)."""
    req = MetadataRequest[_highest(cluster, MetadataRequest.API_KEY, 12)](
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    with client_for(cluster) as client:
        resp = client.request(req)
    return uuid.UUID(str(resp.topics[0].topic_id))


def fetch_from_start_request(
    topic_uuid: uuid.UUID | None, partition: int, version: int = 17, topic: str = ""
) -> Any:
    """Fetch v17 of a partition from offset 0 (READ_UNCOMMITTED, up to 1 MiB), as capture 26;
    a lower `version` for an older broker (before v13 the topic goes by name)."""
    part_cls = FetchRequest.FetchTopic.FetchPartition
    by = {"topic_id": topic_uuid} if version >= FIRST_FETCH_BY_TOPIC_ID else {"topic": topic}
    return FetchRequest[version](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=READ_UNCOMMITTED,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                **by,
                partitions=[
                    part_cls(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def control_batch_timestamp(fetch_response: Any, control_type: str) -> int | None:
    """Max timestamp of the first control batch of `control_type` (COMMIT or ABORT) in a Fetch
    response, None when there is none."""
    for topic in fetch_response.responses:
        for part in topic.partitions:
            for batch in decode_record_batches(bytes(part.records or b"")):
                for rec in batch["records"]:
                    if rec.get("control", {}).get("type") == control_type:
                        return int(batch["max_timestamp"])
    return None


def fetch_batches(cluster: Any, topic: str, partition: int) -> list[dict[str, Any]]:
    """Every record batch of the partition (READ_UNCOMMITTED), decoded."""
    version = _highest(cluster, FetchRequest.API_KEY, 17)
    ident = topic_id(cluster, topic) if version >= FIRST_FETCH_BY_TOPIC_ID else None
    req = fetch_from_start_request(ident, partition, version, topic)
    with client_for(cluster) as client:
        resp = client.request(req)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0, part
    return decode_record_batches(bytes(part.records or b""))


def control_batches(cluster: Any, topic: str, partition: int) -> list[dict[str, Any]]:
    return [b for b in fetch_batches(cluster, topic, partition) if b["is_control"]]


def stable(cluster: Any, topic: str, partition: int) -> bool:
    """No transaction open on the partition and every marker written: the last stable offset
    has reached the high watermark."""
    committed = latest_offset(cluster, topic, partition, READ_COMMITTED)
    return committed == latest_offset(cluster, topic, partition, READ_UNCOMMITTED)


DESCRIBE_TRANSACTIONS = 65


def marker_written(cluster: Any, topic: str, partition: int, producer_id: int) -> bool:
    """The partition holds a control batch (COMMIT or ABORT marker) of `producer_id`: how a
    replay sees a transaction completed where the broker has no DescribeTransactions (before
    Kafka 3.0)."""
    return any(
        b["is_control"] and int(b["producer_id"]) == producer_id
        for b in fetch_batches(cluster, topic, partition)
    )


def wait_until(probe: Callable[[], T], accept: Callable[[T], bool], timeout_s: float = 5.0) -> T:
    """Poll until `accept(probe())` (the simulator's sweep runs on real-time ticks)."""
    deadline = time.monotonic() + timeout_s
    value = probe()
    while not accept(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = probe()
    return value
