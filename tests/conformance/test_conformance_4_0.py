"""The simulator answers like a real Apache Kafka 4.0.0 broker (tests/data/real-kafka-4.0).

One test per captured exchange: the capture's timeline is replayed on a simulator (replay.py),
each captured request is sent as recorded, and the simulator's decoded answer is compared with
the real broker's decoded answer field by field. Allowed differences are exactly the listed
normalisations (rules.NORMALISATIONS); when none was needed, the bytes must be equal too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka_sim.client import response_class

from .harness import (
    Capture,
    Rule,
    compare,
    decode_record_batches,
    exchange_files,
    load_captures,
    to_plain,
)
from .replay import BROKER_CONFIG, NODE_ID, TOPICS, Replay
from .rules import NORMALISATIONS, rules_for

EXCHANGES = exchange_files()


@pytest.fixture(scope="module")
def replay() -> Iterator[Replay]:
    from kafka_sim.cluster import SimCluster

    with SimCluster(
        brokers=1, node_ids=[NODE_ID], topics=TOPICS, broker_config=BROKER_CONFIG
    ) as cluster:
        run = Replay(cluster)
        run.run()
        yield run


def _step_errors(replay: Replay) -> str:
    return "\n".join(replay.step_errors) or "(no step failed)"


def test_every_capture_file_is_covered() -> None:
    """54 files: 50 wire exchanges (replayed here) and 4 CLI/JMX records (not wire traffic)."""
    caps = load_captures()
    assert len(caps) == 54
    assert len(EXCHANGES) == 50
    assert sorted(set(caps) - set(EXCHANGES)) == [
        "42-hanging-cli-find-hanging.json",
        "43-hanging-cli-describe-producers-hang-test-0.json",
        "44-hanging-jmx-partitions-with-late-transactions.json",
        "54-final-jmx-partitions-with-late-transactions.json",
    ]
    assert [name for name, _ in NORMALISATIONS] == [
        "N1 throttle_time_ms",
        "N2 cluster_id",
        "N3 topic_id",
        "N4 host/port",
        "N5 endpoint config values",
        "N6 timestamps",
        "N7 record batch crc",
        "N8 Fetch records",
    ]


@pytest.mark.parametrize("file", EXCHANGES)
def test_harness_reads_the_capture_as_recorded(file: str) -> None:
    """The comparison is only as good as the decoding: kafka-python + to_plain must give back
    the capture's own decoded form, the batch decoder its decoded_record_batches, and a Fetch
    request must re-encode to the recorded bytes (so swapping topic ids changes nothing else)."""
    cap = load_captures()[file]
    if cap.response_bytes is None:
        assert cap.connection_closed
        return
    assert cap.api_key is not None
    cls = response_class(cap.api_key, cap.response_version)
    decoded = cls.decode(cap.response_bytes, version=cap.response_version, header=True)
    assert decoded.header.correlation_id == cap.correlation_id
    result = compare(cap.data["response"], to_plain(decoded), [])
    assert result.ok, result.report()
    if "decoded_record_batches" in cap.data:
        (expected,) = cap.data["decoded_record_batches"].values()
        (records_hex,) = [
            p["records"] for t in cap.data["response"]["responses"] for p in t["partitions"]
        ]
        batches = decode_record_batches(bytes.fromhex(records_hex))
        assert all(b["_crc_valid"] for b in batches)
        assert compare(expected, batches, []).ok
    if cap.api_key == 1:
        req = FetchRequest.decode(cap.request_bytes, version=cap.request_version, header=True)
        assert bytes(req.encode(header=True)) == cap.request_bytes


def _explain(cap: Capture, replay: Replay, body: str) -> str:
    return (
        f"{cap.file}: {cap.data.get('description', '')}\n{body}\n"
        f"--- replay step errors ---\n{_step_errors(replay)}"
    )


@pytest.mark.parametrize("file", EXCHANGES)
def test_simulator_answers_like_kafka_4_0(replay: Replay, file: str) -> None:
    cap = replay.captures[file]
    ex = replay.exchanges.get(file)
    assert ex is not None, _explain(cap, replay, "the replay never sent this request")
    if cap.connection_closed:
        # Kafka closes the connection without a reply for an unsupported version (40).
        assert ex.closed and ex.response is None, _explain(
            cap,
            replay,
            f"expected the connection closed without a reply; got "
            f"response={ex.response.hex() if ex.response else None} error={ex.error}",
        )
        return
    assert ex.error is None and ex.response is not None, _explain(cap, replay, str(ex.error))
    decoded = replay.decoded(file)
    problems: list[str] = []
    if decoded.header.correlation_id != cap.correlation_id:
        problems.append(
            f"response_header.correlation_id: expected {cap.correlation_id}, "
            f"actual {decoded.header.correlation_id}"
        )
    result = compare(cap.data["response"], to_plain(decoded), rules_for(replay))
    problems.extend(str(m) for m in result.mismatches)
    if not problems and not result.normalised and ex.response != cap.response_bytes:
        problems.append(
            "decoded fields are equal but the bytes differ (tagged fields or encoding):\n"
            f"  expected {cap.response_bytes.hex() if cap.response_bytes else None}\n"
            f"  actual   {ex.response.hex()}"
        )
    assert not problems, _explain(cap, replay, "\n".join(problems))


@pytest.mark.parametrize(
    "file", ["01-apiversions-v3.json", "02-apiversions-v0.json", "03-apiversions-v4.json"]
)
def test_api_versions_of_the_4_0_profile_are_byte_identical(replay: Replay, file: str) -> None:
    cap = replay.captures[file]
    ex = replay.exchanges[file]
    assert ex.response == cap.response_bytes, (
        f"expected {cap.data['response_hex']}\n"
        f"actual   {ex.response.hex() if ex.response else ex.error}\n"
        + json.dumps(to_plain(replay.decoded(file)) if ex.response else None)[:2000]
    )


def test_first_transaction_lookup_is_retried_like_the_capture(replay: Replay) -> None:
    """08 got COORDINATOR_NOT_AVAILABLE on a fresh cluster and the retry (09) succeeded; the
    replay retries 09 until it succeeds, so one or a few attempts are expected, not many."""
    assert 1 <= replay.facts.find_coordinator_attempts <= 20, _step_errors(replay)
    resp = replay.decoded("09-findcoordinator-v6-batched.json")
    assert resp is not None and all(c.error_code == 0 for c in resp.coordinators)


def test_comparison_reports_each_difference_by_path() -> None:
    """The comparison can fail: null vs empty, list lengths, extra fields and values are all
    reported with their path; a rule accepts a difference only when its relation holds."""
    expected = {"a": [{"x": 1, "m": None}], "ts": 5, "l": []}
    actual = {"a": [{"x": 2, "m": ""}, {"x": 3, "m": None}], "ts": 6, "l": [], "extra": 0}
    rules = [Rule("ts", "test", lambda e, a: None if a == e + 1 else "off by more than one")]
    result = compare(expected, actual, rules)
    assert [m.path for m in result.mismatches] == ["a.length", "a[0].x", "a[0].m", "extra"]
    assert result.normalised == ["ts [test]"]
    assert compare({"ts": 5}, {"ts": 9}, rules).mismatches[0].path == "ts"
