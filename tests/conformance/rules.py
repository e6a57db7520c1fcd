"""The listed normalisations: where and how the simulator's answer may differ from the capture.

Everything not covered here must be equal to the real broker's decoded answer, and when no rule
had to accept a difference the response bytes must be equal too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .harness import Rule, compare, decode_record_batches
from .replay import Replay, Window

NORMALISATIONS: list[tuple[str, str]] = [
    ("N1 throttle_time_ms", "quota-dependent: any int >= 0 (the real broker sent 0 everywhere)."),
    (
        "N2 cluster_id",
        "random per cluster: a 22-character base64url Kafka cluster id, the same in every answer.",
    ),
    (
        "N3 topic_id",
        "random per topic: must be the simulator's id of the same topic (its Metadata 04 answer), "
        "never the zero UUID. Fetch requests (26, 33, 34, 35, 49) are re-encoded with those ids; "
        "nothing else in any request changes.",
    ),
    (
        "N4 host/port",
        "the broker's address: the simulator listener of node 1 (capture: 127.0.0.1:19092).",
    ),
    (
        "N5 endpoint config values",
        "DescribeConfigs values naming listeners (listeners, advertised.listeners, "
        "controller.quorum.voters): 127.0.0.1:19092 -> the simulator's listener; the controller "
        "port 19094 -> any port. Every other config value must be equal.",
    ),
    (
        "N6 timestamps",
        "wall-clock ms (last_timestamp, transaction_start_time_ms, record batch base/max "
        "timestamps, record timestamps): each captured value maps to the relation it stands for "
        "- a record's CreateTime = the timestamp the replay sent; a marker's timestamp = the "
        "simulator's own control batch timestamp, inside the simulator-clock window in which the "
        "commit/abort happened; a coordinator start time = inside the simulator-clock window of "
        "the first AddPartitionsToTxn. -1 and 0 are never normalised.",
    ),
    ("N7 record batch crc", "depends on timestamps: must be the valid CRC-32C of the sim's batch."),
    (
        "N8 Fetch records",
        "compared decoded: every record batch v2 header field and record field, under N6/N7.",
    ),
]


def _throttle(expected: Any, actual: Any) -> str | None:
    return None if isinstance(actual, int) and actual >= 0 else "must be an int >= 0"


_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def _cluster_id(replay: Replay) -> Callable[[Any, Any], str | None]:
    seen: set[str] = set()

    def check(expected: Any, actual: Any) -> str | None:
        if not isinstance(actual, str) or not _CLUSTER_ID.match(actual):
            return "not a 22-character base64url cluster id"
        seen.add(actual)
        return None if len(seen) == 1 else f"cluster id changed between answers: {sorted(seen)}"

    return check


def _topic_id(replay: Replay) -> Callable[[Any, Any], str | None]:
    by_capture_id = {v: k for k, v in replay.facts.capture_topic_ids.items()}

    def check(expected: Any, actual: Any) -> str | None:
        name = by_capture_id.get(expected)
        if name is None:
            return "capture topic id not known (capture 04 context)"
        sim_id = replay.facts.sim_topic_ids.get(name)
        if sim_id is None:
            return f"simulator's id of {name} unknown (Metadata 04 failed)"
        if actual != sim_id:
            return f"must be the simulator's id of {name}: {sim_id}"
        return None

    return check


def _host(replay: Replay) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if expected == "127.0.0.1" and actual == replay.host:
            return None
        return f"must be the simulator's host {replay.host!r} where the capture has 127.0.0.1"

    return check


def _port(replay: Replay) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if expected == 19092 and actual == replay.port:
            return None
        return f"must be the simulator's port {replay.port} where the capture has 19092"

    return check


def _endpoint_value(replay: Replay) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if not isinstance(expected, str) or not isinstance(actual, str):
            return "not an endpoint value"
        if "19092" not in expected and "19094" not in expected:
            return "not an endpoint value: must be equal"
        pattern = re.escape(expected)
        sim_address = re.escape(f"{replay.host}:{replay.port}")
        pattern = pattern.replace(re.escape("127.0.0.1:19092"), sim_address)
        pattern = pattern.replace("19094", r"\d+")
        if re.fullmatch(pattern, actual):
            return None
        return f"must match {pattern!r}"

    return check


Relation = tuple[str, Callable[[int], bool]]


def _equals(what: str, value: int | None) -> Relation:
    return (f"= {what} ({value})", lambda actual: value is not None and actual == value)


def _within(what: str, window: Window | None) -> Relation:
    if window is None:
        return (f"inside {what} (window unknown: step failed)", lambda actual: False)
    return (
        f"inside {what} [{window.lo_ms}, {window.hi_ms}]",
        lambda actual: window.holds(actual),
    )


def _both(a: Relation, b: Relation) -> Relation:
    return (f"{a[0]} and {b[0]}", lambda actual: a[1](actual) and b[1](actual))


def timestamp_relations(replay: Replay) -> dict[int, Relation]:
    """Each timestamp of the capture -> the relation it stands for in the replay."""
    caps = replay.captures
    f = replay.facts
    rel: dict[int, Relation] = {}

    c23 = caps["23-committed-describeproducers-txn-committed-0.json"].data["context"]
    idem = f.idempotent.batches[0].max_timestamp_ms if f.idempotent else None
    idem_ts = int(c23["idempotent_producer"]["timestamp"])
    rel[idem_ts] = _equals("idempotent record CreateTime", idem)
    committed = f.committed.batches[0].max_timestamp_ms if f.committed else None
    for ts in c23["transactional_producer"]["timestamps"]:
        rel[int(ts)] = _equals("tx-committed-1 record CreateTime", committed)

    d26 = caps["26-committed-fetch-txn-committed-0-read-uncommitted.json"].data
    d26_batches = d26["decoded_record_batches"]["txn-committed-0"]
    commit_marker = next(b["max_timestamp"] for b in d26_batches if b["is_control"])
    ex23 = replay.exchanges.get("23-committed-describeproducers-txn-committed-0.json")
    marker_window = (
        Window(f.committed_window.lo_ms, ex23.sent_at_ms) if f.committed_window and ex23 else None
    )
    rel[int(commit_marker)] = _both(
        _equals("the sim's COMMIT control batch timestamp (its 26 answer)", f.commit_marker_ts),
        _within("the commit's sim-clock window", marker_window),
    )
    d24 = caps["24-committed-describetransactions-tx-committed-1.json"].data["response"]
    rel[int(d24["transaction_states"][0]["transaction_start_time_ms"])] = _within(
        "tx-committed-1's sim-clock window", f.committed_window
    )

    c14 = caps["14-open-describeproducers-txn-open-0-1-2.json"].data["context"]
    open_batches = f.open_txn.batches if f.open_txn else []
    for i, rec in enumerate(c14["records"]):
        sent = open_batches[i].max_timestamp_ms if i < len(open_batches) else None
        rel[int(rec["timestamp"])] = _equals(f"tx-open-1 batch {i} CreateTime", sent)
    d22 = caps["22-open-describetransactions-tx-open-1.json"].data["response"]
    rel[int(d22["transaction_states"][0]["transaction_start_time_ms"])] = _within(
        "tx-open-1's first AddPartitionsToTxn window", f.open_add_window
    )

    c30 = caps["30-hanging-describetransactions-hang-1.json"].data["context"]
    rel[int(c30["record_timestamp_ms"])] = _equals(
        "hang-1's backdated CreateTime (sim now - 400000)", f.hang_timestamp_ms
    )

    c45 = caps["45-timeout-before-describeproducers-txn-open-2.json"].data["context"]
    timeout_sent = f.timeout_txn.batches[0].max_timestamp_ms if f.timeout_txn else None
    rel[int(c45["timestamp"])] = _equals("tx-timeout-1 record CreateTime", timeout_sent)
    d46 = caps["46-timeout-before-describetransactions-tx-timeout-1.json"].data["response"]
    rel[int(d46["transaction_states"][0]["transaction_start_time_ms"])] = _within(
        "tx-timeout-1's AddPartitionsToTxn window", f.timeout_add_window
    )

    d49 = caps["49-timeout-after-fetch-txn-open-2-read-uncommitted.json"].data
    timeout_marker = next(
        b["max_timestamp"] for b in d49["decoded_record_batches"]["txn-open-2"] if b["is_control"]
    )
    ex47 = replay.exchanges.get("47-timeout-after-describeproducers-txn-open-2.json")
    abort_window = (
        Window(f.timeout_abort_window.lo_ms, ex47.sent_at_ms)
        if f.timeout_abort_window and ex47
        else None
    )
    rel[int(timeout_marker)] = _both(
        _equals("the sim's ABORT batch timestamp (its 49 answer)", f.timeout_abort_marker_ts),
        _within("the sim-clock window of tx-timeout-1's timeout abort", abort_window),
    )

    d50 = caps["50-final-describeproducers-all.json"].data["response"]
    open_marker = d50["topics"][0]["partitions"][0]["active_producers"][0]["last_timestamp"]
    ex50 = replay.exchanges.get("50-final-describeproducers-all.json")
    open_window = (
        Window(f.open_abort_window.lo_ms, ex50.sent_at_ms) if f.open_abort_window and ex50 else None
    )
    # One value in the capture for both partitions, but each marker is stamped when it is
    # appended (MemoryRecords.withEndTransactionMarker per partition), so either may differ by
    # a millisecond: the value must be the sim's ABORT batch timestamp on txn-open-0 or -1.
    open_markers = {ts for ts in f.open_abort_marker_ts.values() if ts is not None}
    rel[int(open_marker)] = _both(
        (
            f"one of the sim's ABORT batch timestamps on txn-open-0/1 {sorted(open_markers)}",
            lambda actual: actual in open_markers,
        ),
        _within("the sim-clock window of tx-open-1's timeout abort", open_window),
    )
    return rel


def _timestamp(replay: Replay) -> Callable[[Any, Any], str | None]:
    relations = timestamp_relations(replay)

    def check(expected: Any, actual: Any) -> str | None:
        if expected in (-1, 0) or not isinstance(expected, int):
            return "sentinel values must be equal"
        relation = relations.get(expected)
        if relation is None:
            return "no relation known for this captured timestamp"
        what, holds = relation
        if not isinstance(actual, int) or not holds(actual):
            return f"must be {what}"
        return None

    return check


def _crc(expected: Any, actual: Any) -> str | None:
    return None  # validity is checked on the decoded batch (`_crc_valid`), see _records


def _records(replay: Replay, rules: list[Rule]) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if not isinstance(expected, str) or not isinstance(actual, str):
            return "records must be bytes on both sides"
        exp = decode_record_batches(bytes.fromhex(expected))
        act = decode_record_batches(bytes.fromhex(actual))
        problems = [
            f"batch {i} (base_offset {b['base_offset']}): CRC-32C invalid"
            for i, b in enumerate(act)
            if not b["_crc_valid"]
        ]
        nested = compare(exp, act, rules, path="<batches>")
        problems.extend(str(m) for m in nested.mismatches)
        return "; ".join(problems) if problems else None

    return check


def rules_for(replay: Replay) -> list[Rule]:
    ts = _timestamp(replay)
    batch_rules = [
        Rule("*crc", "N7 record batch crc", _crc),
        Rule("*base_timestamp", "N6 timestamps", ts),
        Rule("*max_timestamp", "N6 timestamps", ts),
        Rule("*records[*].timestamp", "N6 timestamps", ts),
    ]
    return [
        Rule("throttle_time_ms", "N1 throttle_time_ms", _throttle),
        Rule("cluster_id", "N2 cluster_id", _cluster_id(replay)),
        Rule("*topic_id", "N3 topic_id", _topic_id(replay)),
        Rule("host", "N4 host/port", _host(replay)),
        Rule("port", "N4 host/port", _port(replay)),
        Rule("brokers[*].host", "N4 host/port", _host(replay)),
        Rule("brokers[*].port", "N4 host/port", _port(replay)),
        Rule("coordinators[*].host", "N4 host/port", _host(replay)),
        Rule("coordinators[*].port", "N4 host/port", _port(replay)),
        Rule("results[*].configs[*].value", "N5 endpoint config values", _endpoint_value(replay)),
        Rule("*last_timestamp", "N6 timestamps", ts),
        Rule("*transaction_start_time_ms", "N6 timestamps", ts),
        Rule(
            "responses[*].partitions[*].records",
            "N8 Fetch records",
            _records(replay, batch_rules),
        ),
    ]
