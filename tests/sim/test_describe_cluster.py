"""DescribeCluster (60) in the simulated brokers, and Describe on the cluster as ListGroups sees
it (docs/kafka-semantics.md#describe-cluster). Calls BrokerRouter.handle() directly on a
3-broker ClusterState; the answers are then encoded and decoded as kafka-python's messages of
each version, as the server would send them."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka_sim.api import RequestContext
from kafka_sim.clock import ManualClock
from kafka_sim.router import BrokerRouter
from kafka_sim.state import ClusterState
from kafka_sim.versions import PROFILES

T0 = 1_800_000_000_000
NONE, INVALID_REQUEST, MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 0, 42, 114, 115
DESCRIBE_CLUSTER, LIST_GROUPS, OFFSET_COMMIT, FIND_COORDINATOR = 60, 16, 8, 10
PRINCIPAL = "User:exporter"
ALL_CLUSTER_OPERATIONS = {5, 7, 8, 9, 10, 11, 12}
"""CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE."""
INT32_MIN = -(2**31)


class Cluster:
    def __init__(self) -> None:
        self.state = ClusterState([1, 2, 3], ManualClock(T0))
        self.router = BrokerRouter(self.state)
        self.state.create_topic("t", 1)

    def call(self, broker: int, api_key: int, version: int, request: Any,
             principal: str = PRINCIPAL) -> Any:
        ctx = RequestContext(broker, api_key, version, 1, "t", principal)
        answer = self.router.handle(ctx, request)
        # What goes on the wire, read back as a client would.
        return type(answer)[version].decode(answer.encode())

    def describe(self, version: int, *, include_ops: bool = True, endpoint: int = 1,
                 fenced: bool = False, principal: str = PRINCIPAL) -> Any:
        fields: dict[str, Any] = {"include_cluster_authorized_operations": include_ops}
        if version >= 1:
            fields["endpoint_type"] = endpoint
        if version >= 2:
            fields["include_fenced_brokers"] = fenced
        req = DescribeClusterRequest(version=version, **fields)
        return self.call(1, DESCRIBE_CLUSTER, version, req, principal)

    def commit(self, group: str) -> int:
        find = FindCoordinatorRequest[6](key_type=0, coordinator_keys=[group])
        for _ in range(2):  # the first lookup creates __consumer_offsets
            node = self.call(1, FIND_COORDINATOR, 6, find).coordinators[0]
        assert node.error_code == NONE
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        req = OffsetCommitRequest[9](
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time_ms=-1,
            topics=[Topic(name="t", partitions=[Topic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata="")])])
        answer = self.call(node.node_id, OFFSET_COMMIT, 9, req)
        assert answer.topics[0].partitions[0].error_code == NONE
        return int(node.node_id)

    def list_groups(self, broker: int) -> list[str]:
        req = ListGroupsRequest[5](states_filter=[], types_filter=[])
        answer = self.call(broker, LIST_GROUPS, 5, req)
        assert answer.error_code == NONE
        return [g.group_id for g in answer.groups]


@pytest.fixture
def sim() -> Cluster:
    return Cluster()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_version_reports_the_cluster_and_all_cluster_operations(
    sim: Cluster, version: int
) -> None:
    answer = sim.describe(version)
    assert answer.error_code == NONE and answer.error_message is None
    assert answer.cluster_id == sim.state.cluster_id
    assert [b.broker_id for b in answer.brokers] == [1, 2, 3]
    assert answer.controller_id in (1, 2, 3)
    assert answer.authorized_operations == ALL_CLUSTER_OPERATIONS
    if version >= 1:
        assert answer.endpoint_type == 1


def test_the_bit_field_on_the_wire_is_kafkas(sim: Cluster) -> None:
    """Bit n = AclOperation code n: the seven cluster operations are 0x1FA0."""
    req = DescribeClusterRequest(version=0, include_cluster_authorized_operations=True)
    ctx = RequestContext(1, DESCRIBE_CLUSTER, 0, 1, "t", PRINCIPAL)
    wire = bytes(sim.router.handle(ctx, req).encode())
    assert int.from_bytes(wire[-5:-1], "big", signed=True) == 0x1FA0  # before the tag buffer
    assert sum(1 << op for op in ALL_CLUSTER_OPERATIONS) == 0x1FA0


def test_without_describe_on_the_cluster_no_operation_and_no_error(sim: Cluster) -> None:
    sim.state.deny_cluster(PRINCIPAL, "DESCRIBE")
    answer = sim.describe(2)
    assert answer.error_code == NONE
    assert answer.authorized_operations == set()  # 0: the broker answers, it does not refuse
    assert [b.broker_id for b in answer.brokers] == [1, 2, 3]
    # Another principal is not affected.
    assert sim.describe(2, principal="User:other").authorized_operations == ALL_CLUSTER_OPERATIONS


def test_not_asking_for_operations_answers_int32_min(sim: Cluster) -> None:
    req = DescribeClusterRequest(version=0, include_cluster_authorized_operations=False)
    ctx = RequestContext(1, DESCRIBE_CLUSTER, 0, 1, "t", PRINCIPAL)
    wire = bytes(sim.router.handle(ctx, req).encode())
    assert int.from_bytes(wire[-5:-1], "big", signed=True) == INT32_MIN
    assert sim.describe(0, include_ops=False).authorized_operations is None


def test_endpoint_types_other_than_broker_are_refused(sim: Cluster) -> None:
    controller = sim.describe(1, endpoint=2)
    assert controller.error_code == MISMATCHED_ENDPOINT_TYPE
    assert controller.brokers == [] and controller.cluster_id == ""
    assert controller.authorized_operations is None
    unknown = sim.describe(1, endpoint=7)
    assert unknown.error_code == UNSUPPORTED_ENDPOINT_TYPE
    assert unknown.error_message == "Unsupported endpoint type 7"


def test_fenced_brokers_only_when_asked(sim: Cluster) -> None:
    sim.state.set_broker_alive(3, False)
    assert [b.broker_id for b in sim.describe(2).brokers] == [1, 2]
    listed = sim.describe(2, fenced=True).brokers
    assert [(b.broker_id, b.is_fenced) for b in listed] == [(1, False), (2, False), (3, True)]


def test_list_groups_without_describe_on_the_cluster_leaves_out_undescribable_groups(
    sim: Cluster,
) -> None:
    seen = sim.commit("seen")
    hidden = sim.commit("hidden")
    sim.state.deny_group(PRINCIPAL, "hidden", "DESCRIBE")
    assert "hidden" in sim.list_groups(hidden)  # Describe on the cluster: every group
    sim.state.deny_cluster(PRINCIPAL)
    assert "hidden" not in sim.list_groups(hidden)  # silently left out, no error
    assert "seen" in sim.list_groups(seen)


def test_only_describe_on_the_cluster_can_be_denied(sim: Cluster) -> None:
    with pytest.raises(ValueError, match="DESCRIBE"):
        sim.state.deny_cluster(PRINCIPAL, "ALL")


@pytest.mark.parametrize(("profile", "expected"), [
    ("2.7", None), ("2.8", (0, 0)), ("3.0", (0, 0)), ("3.8", (0, 1)), ("4.0", (0, 2)),
    ("4.1", (0, 2)),
])
def test_describe_cluster_versions_by_release(profile: str, expected: Any) -> None:
    assert PROFILES[profile].api_versions.get(DESCRIBE_CLUSTER) == expected
    assert DescribeClusterResponse.max_version >= 2
