"""DescribeCluster (Kafka 2.8+, KIP-700) asking for the cluster's authorized operations:
whether this principal may Describe the cluster, i.e. whether ListGroups lists every group
(docs/kafka-semantics.md#describe-cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.admin.cluster import DescribeClusterRequest

from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Outcome, WholeAnswer
from exporter.collect.errors import NONE, error_name
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState

BROKER_ENDPOINT_TYPE = 1
DESCRIBE_OPERATION = 8
"""AclOperation DESCRIBE's code: its bit in DescribeCluster's ClusterAuthorizedOperations."""
INT32_MIN = -(2**31)
"""ClusterAuthorizedOperations when the broker did not report them ("not asked")."""
CLUSTER_DESCRIBE_DENIED = "CLUSTER_AUTHORIZATION_FAILED"
CLUSTER_OPERATIONS_UNKNOWN = "CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN"
CLUSTER = "cluster"
"""The one key DescribeCluster is asked about."""


def describe_cluster_request() -> Callable[[BrokerConnection], Any]:
    def build(connection: BrokerConnection) -> Any:
        version = connection.version_for(DescribeClusterRequest)
        fields: dict[str, Any] = {"include_cluster_authorized_operations": True}
        if version >= 1:
            fields["endpoint_type"] = BROKER_ENDPOINT_TYPE
        if version >= 2:
            fields["include_fenced_brokers"] = False
        return DescribeClusterRequest(version=version, **fields)

    return build


def parse_cluster_describe(response: Any) -> str | None:
    """DescribeCluster answer (asked with IncludeClusterAuthorizedOperations) -> None when the
    principal may Describe the cluster (ListGroups then lists every group), else why the group
    list may be incomplete: CLUSTER_AUTHORIZATION_FAILED when bit 8 is unset (a broker answers 0
    without Describe on the cluster), the answer's error name, or
    CLUSTER_AUTHORIZED_OPERATIONS_UNKNOWN when the operations were not reported (Int32.MIN_VALUE;
    kafka-python decodes that as None). docs/kafka-semantics.md#describe-cluster"""
    if response.error_code != NONE:
        return error_name(response.error_code)
    operations = response.authorized_operations
    if operations is None:
        return CLUSTER_OPERATIONS_UNKNOWN
    if isinstance(operations, int):  # the raw 32-bit field
        if operations == INT32_MIN:
            return CLUSTER_OPERATIONS_UNKNOWN
        allowed = bool(operations & (1 << DESCRIBE_OPERATION))
    else:
        allowed = DESCRIBE_OPERATION in operations
    return None if allowed else CLUSTER_DESCRIBE_DENIED


class DescribeCluster(WholeAnswer[str]):
    """`answer`: None when the principal may Describe the cluster, else why the group list may
    be incomplete; `settled`: the broker answered (or predates the API), so the answer may be
    kept; a broker that did not answer is asked again next time."""

    api = unsupported_name = "DescribeCluster"

    def __init__(self) -> None:
        self.answer: str | None = "BROKER_UNREACHABLE"
        self.settled = False

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return describe_cluster_request()

    def handle(
        self, broker_id: int, keys: list[str], answer: Any, state: PollState, *, last: bool
    ) -> Outcome[str]:
        self.answer, self.settled = parse_cluster_describe(answer), True
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        self.answer, self.settled = error.kind, error.kind == UNSUPPORTED_API_KIND
        return Outcome()
