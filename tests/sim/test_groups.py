"""Consumer groups in the simulated brokers: commits without membership, what is read back.

Calls BrokerRouter.handle() directly on a 3-broker ClusterState, so which broker answers is
explicit. The behaviours are those of docs/kafka-semantics.md#consumer-groups; the real-broker
captures of tests/data/real-kafka-4.0-groups are checked separately in
tests/conformance/test_conformance_groups_4_0.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka_sim.api import RequestContext
from kafka_sim.clock import ManualClock
from kafka_sim.router import BrokerRouter
from kafka_sim.state import ClusterState

T0 = 1_800_000_000_000
NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE = 0, 3, 12
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 15, 16
ILLEGAL_GENERATION, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 22, 24, 25, 69
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 15, 16
DESCRIBE_CONFIGS = 32

CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
CommitPartition = CommitTopic.OffsetCommitRequestPartition
FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup
FetchTopics = FetchGroup.OffsetFetchRequestTopics


class Groups:
    """A 3-broker ClusterState with topic t (3 partitions) and __consumer_offsets created."""

    def __init__(self) -> None:
        self.state = ClusterState([1, 2, 3], ManualClock(T0))
        self.router = BrokerRouter(self.state)
        self.state.create_topic("t", 3)
        self.state.create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
        first = self.find_coordinator(1, "any")
        assert first.coordinators[0].error_code == COORDINATOR_NOT_AVAILABLE  # created now

    def call(self, broker: int, api_key: int, version: int, request: Any) -> Any:
        ctx = RequestContext(broker, api_key, version, 1, "t", "User:ANONYMOUS")
        return self.router.handle(ctx, request)

    def find_coordinator(self, broker: int, group: str) -> Any:
        req = FindCoordinatorRequest[6](key_type=0, coordinator_keys=[group])
        return self.call(broker, FIND_COORDINATOR, 6, req)

    def coordinator(self, group: str) -> int:
        answer = self.find_coordinator(1, group).coordinators[0]
        assert answer.error_code == NONE
        return int(answer.node_id)

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        broker: int | None = None,
        version: int = 8,
        generation: int = -1,
        member_id: str = "",
        metadata: str = "",
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                CommitPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata=metadata,
                )
            )
        req = OffsetCommitRequest[version](
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            topics=[CommitTopic(name=t, partitions=p) for t, p in by_topic.items()],
        )
        target = self.coordinator(group) if broker is None else broker
        resp = self.call(target, OFFSET_COMMIT, version, req)
        return {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }

    def fetch(
        self, groups: dict[str, dict[str, list[int]] | None], broker: int, version: int = 8
    ) -> Any:
        req = OffsetFetchRequest[version](
            groups=[
                FetchGroup(
                    group_id=g,
                    topics=None
                    if topics is None
                    else [FetchTopics(name=t, partition_indexes=ps) for t, ps in topics.items()],
                )
                for g, topics in groups.items()
            ],
            require_stable=False,
        )
        return self.call(broker, OFFSET_FETCH, version, req)

    def list_groups(
        self, broker: int, states: tuple[str, ...] = (), types: tuple[str, ...] = ()
    ) -> list[str]:
        req = ListGroupsRequest[5](states_filter=list(states), types_filter=list(types))
        resp = self.call(broker, LIST_GROUPS, 5, req)
        assert resp.error_code == NONE
        return [g.group_id for g in resp.groups]


@pytest.fixture
def sim() -> Groups:
    return Groups()


def test_commit_without_membership_creates_an_empty_simple_group(sim: Groups) -> None:
    assert sim.commit("g1", {("t", 0): 6, ("t", 1): 0}) == {("t", 0): NONE, ("t", 1): NONE}
    coordinator = sim.coordinator("g1")
    resp = sim.fetch({"g1": {"t": [0, 1, 2]}}, coordinator)
    (group,) = resp.groups
    assert group.error_code == NONE
    rows = [(p.partition_index, p.committed_offset, p.metadata) for p in group.topics[0].partitions]
    assert rows == [(0, 6, ""), (1, 0, ""), (2, -1, "")]
    listed = sim.list_groups(coordinator)
    assert listed == ["g1"]
    described = [
        sim.call(sim.coordinator(g), DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=[g]))
        .groups[0]
        for g in ("g1", "nope")
    ]
    assert [(g.group_id, g.group_state, g.error_code) for g in described] == [
        ("g1", "Empty", NONE),
        ("nope", "Dead", NONE),
    ]
    other = next(b for b in (1, 2, 3) if b != coordinator)
    refused = sim.call(other, DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["g1"]))
    assert refused.groups[0].error_code == NOT_COORDINATOR


def test_a_later_commit_replaces_the_offset(sim: Groups) -> None:
    sim.commit("g1", {("t", 0): 2})
    sim.commit("g1", {("t", 0): 9})
    resp = sim.fetch({"g1": {"t": [0]}}, sim.coordinator("g1"))
    assert resp.groups[0].topics[0].partitions[0].committed_offset == 9


@pytest.mark.parametrize(("version", "error"), [(8, ILLEGAL_GENERATION), (9, GROUP_ID_NOT_FOUND)])
def test_a_member_commit_to_an_unknown_group_is_refused(
    sim: Groups, version: int, error: int
) -> None:
    errors = sim.commit("g1", {("t", 0): 1}, version=version, generation=3, member_id="m-1")
    assert errors == {("t", 0): error}
    assert sim.list_groups(sim.coordinator("g1")) == []


def test_a_member_commit_to_a_group_without_that_member_is_refused(sim: Groups) -> None:
    sim.commit("g1", {("t", 0): 1})
    errors = sim.commit("g1", {("t", 0): 5}, generation=1, member_id="m-1")
    assert errors == {("t", 0): UNKNOWN_MEMBER_ID}
    resp = sim.fetch({"g1": {"t": [0]}}, sim.coordinator("g1"))
    assert resp.groups[0].topics[0].partitions[0].committed_offset == 1


def test_commit_errors_per_partition(sim: Groups) -> None:
    errors = sim.commit("g1", {("t", 0): 1, ("t", 7): 1, ("no-such-topic", 0): 1})
    assert errors == {
        ("t", 0): NONE,
        ("t", 7): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert sim.commit("g2", {("t", 0): 1}, metadata="x" * 4097) == {
        ("t", 0): OFFSET_METADATA_TOO_LARGE
    }
    assert sim.commit("", {("t", 0): 1}, broker=1) == {("t", 0): INVALID_GROUP_ID}


def test_only_the_coordinator_answers_for_a_group(sim: Groups) -> None:
    sim.commit("g1", {("t", 0): 4})
    coordinator = sim.coordinator("g1")
    other = next(b for b in (1, 2, 3) if b != coordinator)
    assert sim.commit("g1", {("t", 0): 5}, broker=other) == {("t", 0): NOT_COORDINATOR}
    group = sim.fetch({"g1": {"t": [0]}}, other).groups[0]
    assert (group.error_code, group.topics) == (NOT_COORDINATOR, [])
    assert "g1" not in sim.list_groups(other)
    assert sim.fetch({"g1": {"t": [0]}}, coordinator).groups[0].topics[0].partitions[
        0
    ].committed_offset == 4


def test_fetch_all_topics_and_unknown_groups(sim: Groups) -> None:
    sim.commit("g1", {("t", 2): 3, ("compacted", 0): 1})
    coordinator = sim.coordinator("g1")
    resp = sim.fetch({"g1": None}, coordinator)
    got = {
        (t.name, p.partition_index): p.committed_offset
        for t in resp.groups[0].topics
        for p in t.partitions
    }
    assert got == {("t", 2): 3, ("compacted", 0): 1}
    unknown = sim.fetch({"never": None}, sim.coordinator("never")).groups[0]
    assert (unknown.error_code, unknown.topics) == (NONE, [])


def test_fetch_many_groups_in_one_request_keeps_request_order(sim: Groups) -> None:
    for group, offset in (("a", 1), ("b", 2), ("c", 3)):
        sim.commit(group, {("t", 0): offset})
    # All on one broker's answer only when it coordinates all three; ask each coordinator.
    for group, offset in (("a", 1), ("b", 2), ("c", 3)):
        resp = sim.fetch({group: {"t": [0]}, "zz": {"t": [0]}}, sim.coordinator(group))
        assert [g.group_id for g in resp.groups] == [group, "zz"]
        assert resp.groups[0].topics[0].partitions[0].committed_offset == offset


def test_list_groups_filters_are_case_insensitive(sim: Groups) -> None:
    sim.commit("g1", {("t", 0): 1})
    coordinator = sim.coordinator("g1")
    assert sim.list_groups(coordinator, states=("empty",)) == ["g1"]
    assert sim.list_groups(coordinator, states=("Stable",)) == []
    assert sim.list_groups(coordinator, types=("CLASSIC",)) == ["g1"]
    assert sim.list_groups(coordinator, types=("consumer",)) == []


def test_topic_cleanup_policy_is_described_with_its_source(sim: Groups) -> None:
    Resource = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest[4](
        resources=[
            Resource(resource_type=2, resource_name=name, configuration_keys=["cleanup.policy"])
            for name in ("t", "compacted")
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    resp = sim.call(1, DESCRIBE_CONFIGS, 4, req)
    got = {
        r.resource_name: [(c.name, c.value, c.config_source, c.config_type) for c in r.configs]
        for r in resp.results
    }
    assert got == {
        "t": [("cleanup.policy", "delete", 5, 7)],
        "compacted": [("cleanup.policy", "compact", 1, 7)],
    }
