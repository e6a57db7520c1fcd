"""Exposure parsers (exporter/collect/parse.py): the verification flag and topic cleanup
policies from DescribeConfigs, finalized features from ApiVersions, against the real Kafka 4.0
captures and answers an older or broken broker would give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.metadata import ApiVersionsResponse
from simhelpers import capture

from exporter.collect.apis.describe_configs import (
    describe_broker_config_request,
    describe_topic_configs_request,
    is_compact_policy,
    parse_cleanup_policies,
    parse_partition_verification,
)
from exporter.collect.parse import parse_finalized_features
from exporter.model import PartitionVerification

GROUPS = Path(__file__).resolve().parent.parent / "data" / "real-kafka-4.0-groups"

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult


def _decode(golden: dict[str, Any], response_class: Any) -> Any:
    raw = bytes.fromhex(golden["response_hex"])
    return response_class.decode(raw, version=golden["request_version"], header=True)


def groups_capture(prefix: str) -> dict[str, Any]:
    path = next(GROUPS.glob(f"{prefix}-*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _broker_answer(*configs: tuple[str, str | None], error_code: int = 0) -> Any:
    return DescribeConfigsResponse(
        version=4, throttle_time_ms=0,
        results=[Result(
            error_code=error_code, error_message=None, resource_type=4, resource_name="1",
            configs=[Entry(name=n, value=v, read_only=False, config_source=4,
                           is_sensitive=False, synonyms=[], config_type=1, documentation=None)
                     for n, v in configs],
        )],
    )


class _V4Connection:
    def version_for(self, request_class: Any, max_version: int | None = None) -> int:
        return 4


# -- transaction.partition.verification.enable -----------------------------------------------


@pytest.mark.parametrize("source", ["real-kafka-4.0 06", "real-kafka-4.0 07", "groups 16"])
def test_captured_broker_reports_verification_disabled(source: str) -> None:
    # Every capture's broker ran with transaction.partition.verification.enable=false; 07 and
    # 16 list the entries in the broker's own order, not the request's.
    kind, prefix = source.rsplit(" ", 1)
    golden = capture(prefix) if kind == "real-kafka-4.0" else groups_capture(prefix)
    response = _decode(golden, DescribeConfigsResponse)
    assert parse_partition_verification(response) is PartitionVerification.DISABLED


def test_verification_true_in_any_case_is_enabled() -> None:
    answer = _broker_answer(("transaction.partition.verification.enable", " TRUE "))
    assert parse_partition_verification(answer) is PartitionVerification.ENABLED


def test_broker_without_the_key_did_not_offer_it() -> None:
    # A broker lists only the requested keys it knows: before 3.6 the answer has no entry.
    answer = _broker_answer(("transaction.max.timeout.ms", "900000"))
    assert parse_partition_verification(answer) is PartitionVerification.NOT_OFFERED


@pytest.mark.parametrize("value", [None, "", "yes", "1"])
def test_verification_value_not_a_boolean_is_unknown(value: str | None) -> None:
    answer = _broker_answer(("transaction.partition.verification.enable", value))
    assert parse_partition_verification(answer) is None


def test_refused_describe_configs_leaves_verification_unknown() -> None:
    answer = _broker_answer(("transaction.partition.verification.enable", "true"),
                            error_code=31)  # CLUSTER_AUTHORIZATION_FAILED
    assert parse_partition_verification(answer) is None


def _encoded_like(golden: dict[str, Any], request: Any) -> str:
    """The request's bytes with the capture's header (correlation id, client id)."""
    header = golden.get("request_header") or {}
    raw = bytes.fromhex(golden["request_hex"])
    correlation_id = header.get("correlation_id", int.from_bytes(raw[4:8], "big"))
    client_id = header.get("client_id") or raw[10:10 + int.from_bytes(raw[8:10], "big")].decode()
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    encoded: bytes = request.encode(header=True)
    return encoded.hex()


def test_broker_request_is_the_captured_one() -> None:
    # Groups capture 16 asked for the same two keys (in the other order).
    golden = groups_capture("16")
    request: Any = describe_broker_config_request(  # type: ignore[arg-type]
        1, ("transaction.partition.verification.enable", "transaction.max.timeout.ms"),
    )(_V4Connection())
    assert _encoded_like(golden, request) == golden["request_hex"]


def test_override_asks_for_the_verification_key_only() -> None:
    request: Any = describe_broker_config_request(  # type: ignore[arg-type]
        1, ("transaction.partition.verification.enable",))(_V4Connection())
    assert [r.configuration_keys for r in request.resources] == [
        ["transaction.partition.verification.enable"]]


# -- cleanup.policy --------------------------------------------------------------------------


def test_captured_topic_policies_tell_the_compacted_topic() -> None:
    response = _decode(groups_capture("15"), DescribeConfigsResponse)
    assert parse_cleanup_policies(response) == ({"grp-test": False, "grp-compacted": True}, [])


def test_topic_request_matches_the_capture() -> None:
    golden = groups_capture("15")
    request: Any = describe_topic_configs_request(  # type: ignore[arg-type]
        ["grp-test", "grp-compacted"])(_V4Connection())
    assert isinstance(request, DescribeConfigsRequest)
    assert _encoded_like(golden, request) == golden["request_hex"]


@pytest.mark.parametrize(
    ("value", "compacted"),
    [("delete", False), ("compact", True), ("compact,delete", True), ("delete, compact", True),
     ("", False), ("compaction", False)],
)
def test_compact_policy_is_the_list_naming_compact(value: str, compacted: bool) -> None:
    assert is_compact_policy(value) is compacted


def test_topic_errors_and_missing_values_are_unknown_not_uncompacted() -> None:
    response = DescribeConfigsResponse(
        version=4, throttle_time_ms=0,
        results=[
            Result(error_code=29, error_message=None, resource_type=2, resource_name="secret",
                   configs=[]),
            Result(error_code=0, error_message="", resource_type=2, resource_name="nulled",
                   configs=[Entry(name="cleanup.policy", value=None, read_only=False,
                                  config_source=1, is_sensitive=True, synonyms=[],
                                  config_type=7, documentation=None)]),
            Result(error_code=0, error_message="", resource_type=2, resource_name="empty",
                   configs=[]),
        ],
    )
    assert parse_cleanup_policies(response) == ({}, [("secret", 29)])


# -- finalized features ----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["01", "03"])
def test_captured_4_0_broker_finalizes_transaction_version_2(prefix: str) -> None:
    golden = capture(prefix)
    response = _decode(golden, ApiVersionsResponse)
    features = parse_finalized_features(response, golden["request_version"])
    assert features is not None
    assert features.epoch == 10
    assert features.level("transaction.version") == 2
    assert features.level("metadata.version") == 25


def test_api_versions_v0_carries_no_features() -> None:
    golden = capture("02")
    response = _decode(golden, ApiVersionsResponse)
    assert parse_finalized_features(response, 0) is None


def _api_versions(epoch: int, *features: tuple[str, int, int]) -> Any:
    return ApiVersionsResponse(
        version=3, error_code=0, api_keys=[], throttle_time_ms=0, supported_features=[],
        finalized_features_epoch=epoch,
        finalized_features=[
            ApiVersionsResponse.FinalizedFeatureKey(
                name=n, min_version_level=lo, max_version_level=hi)
            for n, lo, hi in features
        ],
        zk_migration_ready=False,
    )


def test_epoch_minus_one_means_the_broker_reports_no_features() -> None:
    assert parse_finalized_features(_api_versions(-1), 3) is None


def test_feature_not_finalized_is_level_0() -> None:
    # KIP-1022: a feature at level 0 is not listed; the cluster runs without it.
    features = parse_finalized_features(_api_versions(4, ("metadata.version", 20, 20)), 3)
    assert features is not None
    assert features.level("transaction.version") == 0


def test_impossible_levels_make_the_answer_unknown() -> None:
    bad = _api_versions(4, ("transaction.version", 2, 1))
    assert parse_finalized_features(bad, 3) is None
    negative = _api_versions(4, ("transaction.version", -1, -1))
    assert parse_finalized_features(negative, 3) is None
