"""The simulator answers consumer-group and exposure requests like a real Kafka 4.0.0 broker.

tests/data/real-kafka-4.0-groups holds 16 exchanges captured for the blocked-consumer-group
scenario (README there). replay_groups.py makes the same scenario on a simulator (three groups
committing without membership behind a hanging transaction, a compacted topic, the
verification flag off), sends each captured request verbatim, and each answer is compared with
the real broker's field by field. Allowed differences are the listed normalisations
(GROUP_NORMALISATIONS: N1, N4 and N6 as in rules.NORMALISATIONS, and N9 for DescribeGroups);
when none was needed, the bytes must be equal too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka_sim.client import response_class

from .harness import (
    GROUPS_DATA_DIR,
    Capture,
    Rule,
    compare,
    exchange_files,
    load_captures,
    to_plain,
)
from .replay_groups import BROKER_CONFIG, NODE_ID, TOPICS, GroupsReplay

EXCHANGES = exchange_files(GROUPS_DATA_DIR)

GROUP_NORMALISATIONS: list[tuple[str, str]] = [
    ("N1 throttle_time_ms", "quota-dependent: any int >= 0 (the real broker sent 0 everywhere)."),
    (
        "N4 host/port",
        "the broker's address: the simulator listener of node 1 (capture: 127.0.0.1:19092).",
    ),
    (
        "N6 timestamps",
        "DescribeProducers last_timestamp (07): the simulator's value of the same fact "
        "(producers 0 and 2: their COMMIT marker's timestamp; producer 1: the hanging record's "
        "CreateTime, backdated 1 h).",
    ),
    (
        "N9 DescribeGroups order",
        "the groups of a DescribeGroups answer (14) may come in another order, each group equal "
        "field for field: the capture lists grp-lagging before grp-rc, which share a HashMap bin "
        "in the coordinator's per-shard map, where Kafka's source as read inserts grp-rc first; "
        "the simulator keeps that source order until a capture explains the difference.",
    ),
]


@pytest.fixture(scope="module")
def replay() -> Iterator[GroupsReplay]:
    from kafka_sim.cluster import SimCluster

    with SimCluster(
        brokers=1, node_ids=[NODE_ID], topics=TOPICS, broker_config=BROKER_CONFIG
    ) as cluster:
        run = GroupsReplay(cluster)
        run.run()
        yield run


def _address(captured: Any, simulated: Any) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if expected == captured and actual == simulated:
            return None
        return f"must be the simulator's {simulated!r} where the capture has {captured!r}"

    return check


def _throttle(expected: Any, actual: Any) -> str | None:
    return None if isinstance(actual, int) and actual >= 0 else "must be an int >= 0"


def _producer_timestamps(replay: GroupsReplay) -> Callable[[Any, Any], str | None]:
    """Captured last_timestamp -> the simulator's value of the same fact: for a producer whose
    transaction committed, the timestamp of its COMMIT marker (the marker is the producer's
    last append); for the hanging producer, its record's backdated CreateTime."""
    f = replay.facts
    capture = replay.captures["07-describeproducers-grp-test.json"].data["response"]
    producers = capture["topics"][0]["partitions"][0]["active_producers"]
    simulated = {0: f.marker_timestamps.get(0), 1: f.hang_timestamp_ms,
                 2: f.marker_timestamps.get(2)}
    relation = {int(p["last_timestamp"]): simulated.get(int(p["producer_id"])) for p in producers}

    def check(expected: Any, actual: Any) -> str | None:
        if expected not in relation:
            return "no relation known for this captured timestamp"
        want = relation[expected]
        return None if want is not None and actual == want else f"must be {want}"

    return check


def _same_groups_any_order(expected: Any, actual: Any) -> str | None:
    if not isinstance(expected, list) or not isinstance(actual, list):
        return "groups must be lists on both sides"

    def key(group: Any) -> str:
        return str(group.get("group_id"))

    result = compare(sorted(expected, key=key), sorted(actual, key=key), [], path="groups")
    return None if result.ok else result.report()


def rules_for(replay: GroupsReplay) -> list[Rule]:
    host = _address("127.0.0.1", replay.host)
    port = _address(19092, replay.port)
    return [
        Rule("throttle_time_ms", "N1 throttle_time_ms", _throttle),
        Rule("coordinators[*].host", "N4 host/port", host),
        Rule("coordinators[*].port", "N4 host/port", port),
        Rule("*last_timestamp", "N6 timestamps", _producer_timestamps(replay)),
    ]


DESCRIBE_GROUPS = 15


NOT_REQUESTED = -2147483648


def expected_response(cap: Capture) -> Any:
    """The capture's decoded answer; its files write an authorized_operations bitfield that was
    not requested (INT32_MIN on the wire, 14) as null, the other capture set as the int."""

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: NOT_REQUESTED if k == "authorized_operations" and v is None else fix(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return fix(cap.data["response"])


def test_every_capture_file_is_replayed() -> None:
    assert len(load_captures(GROUPS_DATA_DIR)) == 16
    assert len(EXCHANGES) == 16


def test_every_rule_in_use_is_a_listed_normalisation(replay: GroupsReplay) -> None:
    listed = {name for name, _ in GROUP_NORMALISATIONS}
    used = {rule.name for rule in rules_for(replay)} | {"N9 DescribeGroups order"}
    assert used == listed


def test_the_scenario_is_the_captured_one(replay: GroupsReplay) -> None:
    """The groups read and committed what the capture's context says they did."""
    context = replay.captures["01-listgroups-v5-all.json"].data["context"]
    assert replay.step_errors == []
    consumed = replay.facts.consumed
    for group in ("grp-rc", "grp-ru"):
        want = context["groups"][group]
        assert consumed[group].records_read == want["records_read"]
        assert consumed[group].committed_offset == want["position"]
    assert replay.facts.hang is not None
    assert replay.facts.hang[2] == context["hanging"]["base_offset"]


@pytest.mark.parametrize("file", EXCHANGES)
def test_simulator_answers_like_kafka_4_0(replay: GroupsReplay, file: str) -> None:
    cap = replay.captures[file]
    ex = replay.exchanges.get(file)
    errors = "\n".join(replay.step_errors) or "(no step failed)"
    assert ex is not None and ex.error is None and ex.response is not None, (
        f"{file}: {ex.error if ex else 'never sent'}\n{errors}"
    )
    decoded = replay.decoded(file)
    problems: list[str] = []
    if decoded.header.correlation_id != cap.correlation_id:
        problems.append(f"correlation_id {decoded.header.correlation_id} != {cap.correlation_id}")
    rules = rules_for(replay)
    if cap.api_key == DESCRIBE_GROUPS:  # N9 applies to DescribeGroups only
        rules.append(Rule("groups", "N9 DescribeGroups order", _same_groups_any_order))
    result = compare(expected_response(cap), to_plain(decoded), rules)
    problems.extend(str(m) for m in result.mismatches)
    if not problems and not result.normalised and ex.response != cap.response_bytes:
        problems.append(
            "decoded fields are equal but the bytes differ:\n"
            f"  expected {cap.response_bytes.hex() if cap.response_bytes else None}\n"
            f"  actual   {ex.response.hex()}"
        )
    assert not problems, f"{file}: {cap.data.get('description', '')}\n" + "\n".join(problems)


def test_describe_groups_order_rule_still_compares_every_field() -> None:
    """N9 forgives the order only: a differing field of any group is still reported."""
    a = {"group_id": "a", "group_state": "Empty"}
    b = {"group_id": "b", "group_state": "Dead"}
    assert _same_groups_any_order([a, b], [b, a]) is None
    problem = _same_groups_any_order([a, b], [dict(b, group_state="Empty"), a])
    assert problem is not None and "group_state" in problem
    assert _same_groups_any_order([a, b], [a]) is not None


def test_harness_reads_the_group_captures_as_recorded() -> None:
    for file in EXCHANGES:
        cap = load_captures(GROUPS_DATA_DIR)[file]
        assert cap.api_key is not None and cap.response_bytes is not None
        cls = response_class(cap.api_key, cap.response_version)
        decoded = cls.decode(cap.response_bytes, version=cap.response_version, header=True)
        result = compare(expected_response(cap), to_plain(decoded), [])
        assert result.ok, f"{file}: {result.report()}"
        assert bytes(decoded.encode(header=True)) == cap.response_bytes
