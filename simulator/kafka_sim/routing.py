"""Routing over raw connections: partition leaders, coordinators and one connection per broker.

A client sends each request to the broker that can answer it: Produce and ListOffsets to the
partition's leader (learnt from Metadata), transaction requests to the transaction coordinator
and group requests to the group coordinator (both learnt from FindCoordinator).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from kafka_sim.client import KafkaProtocolError, RawKafkaClient, VersionRange, parse_bootstrap
from kafka_sim.errors import NONE, RETRIABLE_COORDINATOR_ERRORS, UNKNOWN_TOPIC_OR_PARTITION

__all__ = [
    "FIND_COORDINATOR_VERSIONS",
    "GROUP_KEY_TYPE",
    "METADATA_VERSIONS",
    "TRANSACTION_KEY_TYPE",
    "RawCluster",
]

# key_type from v1; v4+ batches coordinator keys (another request and response shape).
FIND_COORDINATOR_VERSIONS = VersionRange(1, 3)
# allow_auto_topic_creation from v4.
METADATA_VERSIONS = VersionRange(4, 12)
# FindCoordinator key_type (CoordinatorType in Kafka).
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


class RawCluster:
    """Connections per broker, partition leaders and coordinators."""

    def __init__(self, bootstrap: str | Sequence[str], client_id: str, timeout_s: float) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._clients: dict[tuple[str, int], RawKafkaClient] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def client_at(self, address: tuple[str, int]) -> RawKafkaClient:
        client = self._clients.get(address)
        if client is None:
            client = RawKafkaClient(
                address[0], address[1], client_id=self._client_id, timeout_s=self._timeout_s
            )
            try:
                client.negotiate()  # on connect, as a client's NetworkClient does
            except BaseException:
                client.close()
                raise
            self._clients[address] = client
        return client

    def any_client(self) -> RawKafkaClient:
        last: OSError | None = None
        for address in list(self._clients) + self._bootstrap:
            try:
                return self.client_at(address)
            except OSError as exc:
                last = exc
        raise ConnectionError(f"no broker reachable in {self._bootstrap}: {last}")

    def node_client(self, node_id: int) -> RawKafkaClient:
        if node_id not in self._nodes:
            self.refresh_metadata([])
        return self.client_at(self._nodes[node_id])

    def refresh_metadata(self, topics: Sequence[str]) -> Any:
        client = self.any_client()
        req = MetadataRequest[client.api_version(MetadataRequest.API_KEY, METADATA_VERSIONS)](
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics] or None,
            allow_auto_topic_creation=False,
        )
        resp = client.request(req)
        for broker in resp.brokers:
            self._nodes[broker.node_id] = (broker.host, broker.port)
        for topic in resp.topics:
            for part in topic.partitions:
                if part.error_code == NONE and part.leader_id >= 0:
                    self._leaders[(topic.name, part.partition_index)] = part.leader_id
        return resp

    def leader_client(self, topic: str, partition: int) -> RawKafkaClient:
        key = (topic, partition)
        if key not in self._leaders:
            deadline = time.monotonic() + self._timeout_s
            while True:
                self.refresh_metadata([topic])
                if key in self._leaders or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        if key not in self._leaders:
            raise KafkaProtocolError(
                f"no leader for {topic}-{partition}", UNKNOWN_TOPIC_OR_PARTITION
            )
        return self.node_client(self._leaders[key])

    def coordinator_client(self, key: str, key_type: int = TRANSACTION_KEY_TYPE) -> RawKafkaClient:
        """FindCoordinator for a transactional id (key type 1) or a group id (0), retrying while
        the coordinator's internal topic is being created."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            client = self.any_client()
            version = client.api_version(FindCoordinatorRequest.API_KEY, FIND_COORDINATOR_VERSIONS)
            req = FindCoordinatorRequest[version](key=key, key_type=key_type)
            resp = client.request(req)
            if resp.error_code == NONE:
                self._nodes[resp.node_id] = (resp.host, resp.port)
                return self.client_at((resp.host, resp.port))
            if resp.error_code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
                what = f"FindCoordinator({key!r}, key_type={key_type})"
                raise KafkaProtocolError(what, resp.error_code)
            time.sleep(0.02)

