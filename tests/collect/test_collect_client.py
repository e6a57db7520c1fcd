"""Request builders and response parsers (exporter/collect/client.py) against the real
Kafka 4.0 captures in tests/data/real-kafka-4.0."""

from __future__ import annotations

import json
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsResponse
from kafka.protocol.admin.groups import ListGroupsResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.group import OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from simhelpers import CAPTURES, capture

from exporter.collect.apis.describe_configs import (
    TRANSACTION_MAX_TIMEOUT_CONFIG,
    describe_broker_config_request,
    parse_transaction_max_timeout_ms,
)
from exporter.collect.apis.find_coordinator import parse_find_coordinator
from exporter.collect.apis.list_groups import parse_list_groups
from exporter.collect.apis.metadata import parse_metadata
from exporter.collect.apis.offset_fetch import parse_offset_fetch_groups
from exporter.collect.client import batch_partitions, first_batch_header
from exporter.model import TopicPartition

GROUPS_CAPTURES = CAPTURES.parent / "real-kafka-4.0-groups"


def decode(name: str, response_class: Any) -> Any:
    golden = capture(name)
    raw = bytes.fromhex(golden["response_hex"])
    return response_class.decode(raw, version=golden["request_version"], header=True)


def test_parse_metadata_groups_partitions_by_leader_in_broker_order() -> None:
    view = parse_metadata(decode("04", MetadataResponse))
    assert view.brokers == {1: ("127.0.0.1", 19092)}
    assert view.by_leader == {
        1: {"txn-open": [1, 2, 0], "txn-committed": [0], "hang-test": [1, 2, 0]}
    }
    assert view.leaders[TopicPartition("hang-test", 0)] == 1
    assert len(view.leaders) == 7
    assert set(view.topic_ids) == {"txn-open", "txn-committed", "hang-test"}


def test_unknown_topic_in_metadata_is_skipped() -> None:
    view = parse_metadata(decode("05", MetadataResponse))
    assert view.leaders == {}


def test_transaction_max_timeout_from_all_broker_configs() -> None:
    # The capture's broker ran with transaction.max.timeout.ms=60000.
    assert parse_transaction_max_timeout_ms(decode("06", DescribeConfigsResponse)) == 60000


class _V4Connection:
    def version_for(self, request_class: Any, max_version: int | None = None) -> int:
        return 4


def test_describe_configs_asks_only_for_the_two_transaction_keys_of_that_broker() -> None:
    request: Any = describe_broker_config_request(7)(_V4Connection())  # type: ignore[arg-type]
    assert [
        (r.resource_type, r.resource_name, r.configuration_keys) for r in request.resources
    ] == [(4, "7", ["transaction.max.timeout.ms", "transaction.partition.verification.enable"])]


def test_requested_key_is_answered_even_when_default() -> None:
    # Capture 07 names keys: the one left at its default (transactional.id.expiration.ms,
    # config_source 5 DEFAULT_CONFIG) is still returned, so naming the key drops nothing.
    response = decode("07", DescribeConfigsResponse)
    sources = {c.name: c.config_source for r in response.results for c in r.configs}
    assert sources["transactional.id.expiration.ms"] == 5
    assert TRANSACTION_MAX_TIMEOUT_CONFIG in sources
    assert parse_transaction_max_timeout_ms(response) == 60000


def test_find_coordinator_batched_and_single_shapes() -> None:
    batched = parse_find_coordinator(decode("09", FindCoordinatorResponse), None)
    assert {key for key, _, _ in batched} == {
        "tx-open-1",
        "tx-committed-1",
        "hang-1",
        "never-used-id",
    }
    assert all(node == 1 and code == 0 for _, node, code in batched)
    assert parse_find_coordinator(decode("10", FindCoordinatorResponse), "tx-open-1") == [
        ("tx-open-1", 1, 0)
    ]
    first = parse_find_coordinator(decode("08", FindCoordinatorResponse), None)
    assert {code for _, _, code in first} == {15}  # COORDINATOR_NOT_AVAILABLE on a fresh cluster


def test_first_batch_header_of_the_hanging_transaction_capture_33() -> None:
    response = decode("33", FetchResponse)
    records = response.responses[0].partitions[0].records
    header = first_batch_header(records)
    assert header is not None
    assert (header.base_offset, header.producer_id, header.producer_epoch) == (0, 3, 0)
    # = the backdated CreateTime = DescribeProducers LastTimestamp (capture 27).
    assert header.max_timestamp == 1795216736141


def test_first_batch_header_takes_the_first_of_several_batches_capture_35() -> None:
    golden = capture("35")
    response = decode("35", FetchResponse)
    header = first_batch_header(response.responses[0].partitions[0].records)
    (first, *_rest) = next(iter(golden["decoded_record_batches"].values()))
    assert header is not None
    assert header.base_offset == first["base_offset"] == 0
    assert header.max_timestamp == first["max_timestamp"]


def test_first_batch_header_of_a_truncated_batch_reads_the_fixed_header() -> None:
    response = decode("33", FetchResponse)
    records = bytes(response.responses[0].partitions[0].records)
    header = first_batch_header(records[:61])
    assert header is not None
    assert header.max_timestamp == 1795216736141
    assert first_batch_header(records[:40]) is None
    assert first_batch_header(b"") is None
    assert first_batch_header(None) is None


def test_batch_partitions_never_exceeds_batch_size_and_keeps_every_partition() -> None:
    per_topic = {"a": list(range(7)), "b": [0], "c": list(range(5))}
    batches = batch_partitions(per_topic, 3)
    assert all(sum(len(ps) for _, ps in batch) <= 3 for batch in batches)
    flat = sorted((t, p) for batch in batches for t, ps in batch for p in ps)
    assert flat == sorted((t, p) for t, ps in per_topic.items() for p in ps)
    assert len(batches) == 5


def _groups_capture(prefix: str, response_class: Any) -> Any:
    path = next(GROUPS_CAPTURES.glob(f"{prefix}-*.json"))
    golden = json.loads(path.read_text())
    raw = bytes.fromhex(golden["response_hex"])
    return response_class.decode(raw, version=golden["request_version"], header=True)


def test_parse_list_groups_keeps_the_simple_consumer_groups_of_the_real_answer() -> None:
    code, groups = parse_list_groups(_groups_capture("01", ListGroupsResponse))
    assert code == 0 and groups == ["grp-lagging", "grp-rc", "grp-ru"]
    # v4 has no group_type (kafka-python leaves it ""): the groups are kept all the same.
    assert parse_list_groups(_groups_capture("02", ListGroupsResponse)) == (code, groups)


def test_parse_offset_fetch_groups_reads_each_group_of_the_real_v8_answer() -> None:
    answers = parse_offset_fetch_groups(_groups_capture("08", OffsetFetchResponse))
    assert [(a.group_id, a.error_code, a.offsets[0]) for a in answers] == [
        ("grp-rc", 0, ("grp-test", 0, 6)), ("grp-ru", 0, ("grp-test", 0, 11)),
        ("grp-lagging", 0, ("grp-test", 0, 2)), ("no-such-group", 0, ("grp-test", 0, -1)),
    ]
    assert all([p for _, p, _ in a.offsets] == [0, 1, 2] for a in answers)
    assert all(not a.errors for a in answers)
