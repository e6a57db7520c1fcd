"""DescribeConfigs on a topic needs DescribeConfigs on it, as on a real broker, where neither
Read nor Describe implies it (tests/realkafka/test_real_security.py found README's grants
lacked it; docs/kafka-semantics.md#acls-on-a-real-broker)."""

from __future__ import annotations

from kafka.protocol.admin.configs import DescribeConfigsRequest
from sim.test_state_logic import NONE, TOPIC_AUTHORIZATION_FAILED, Sim

R = DescribeConfigsRequest.DescribeConfigsResource


def cleanup_policy(sim: Sim, principal: str) -> tuple[int, list[str]]:
    resp = sim.call(1, 32, 4, DescribeConfigsRequest(version=4, resources=[
        R(resource_type=2, resource_name="t", configuration_keys=["cleanup.policy"])]),
        principal)
    (result,) = resp.results
    return result.error_code, [c.value for c in result.configs]


def test_describe_configs_on_a_topic_is_its_own_operation() -> None:
    sim = Sim()
    sim.state.create_topic("t", 1)
    sim.state.deny_topic("User:no-configs", "t", "DESCRIBE_CONFIGS")
    sim.state.deny_topic("User:no-read", "t", "READ")
    sim.state.deny_topic("User:no-describe", "t", "DESCRIBE")
    assert cleanup_policy(sim, "User:no-configs") == (TOPIC_AUTHORIZATION_FAILED, [])
    assert sim.producers("t", 0, principal="User:no-configs").error_code == NONE
    for principal in ("User:no-read", "User:no-describe", "User:ANONYMOUS"):
        assert cleanup_policy(sim, principal) == (NONE, ["delete"])
