"""DescribeConfigs: each broker's `transaction.max.timeout.ms` and
`transaction.partition.verification.enable` (a BROKER resource, asked of that broker), and the
`cleanup.policy` of topics (TOPIC resources, which any broker answers; reference groups
capture 15)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest

from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    MISSING_FROM_ANSWER,
    NONE,
    error_name,
)
from exporter.collect.pollstate import PollState
from exporter.model import PartitionVerification

TOPIC_RESOURCE_TYPE = 2
BROKER_RESOURCE_TYPE = 4
TRANSACTION_MAX_TIMEOUT_CONFIG = "transaction.max.timeout.ms"
PARTITION_VERIFICATION_CONFIG = "transaction.partition.verification.enable"
CLEANUP_POLICY_CONFIG = "cleanup.policy"
BROKER_CONFIG_KEYS = (TRANSACTION_MAX_TIMEOUT_CONFIG, PARTITION_VERIFICATION_CONFIG)
TOPICS_PER_REQUEST = 500
"""Topics per DescribeConfigs, like the admin tools' batches (one request almost always)."""


def describe_configs_request(
    resource_type: int, names: Sequence[str], keys: Sequence[str]
) -> Callable[[BrokerConnection], Any]:
    """`keys` of each resource of `resource_type` named in `names`, asked for by name."""

    def build(connection: BrokerConnection) -> Any:
        return DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=name, configuration_keys=list(keys)
                )
                for name in names
            ],
            include_synonyms=False,
            include_documentation=False,
            version=connection.version_for(DescribeConfigsRequest),
        )

    return build


def describe_broker_config_request(
    broker_id: int, keys: Sequence[str] = BROKER_CONFIG_KEYS
) -> Callable[[BrokerConnection], Any]:
    """`keys` (by default `transaction.max.timeout.ms` and
    `transaction.partition.verification.enable`) of BROKER `broker_id`, asked for by name.

    Naming the keys keeps the answer to those entries (all configs: ~200 per broker). It does
    not filter defaults: a broker returns a requested key whatever its source (reference
    capture 07 answers `transactional.id.expiration.ms` with config_source 5,
    DEFAULT_CONFIG), and leaves out a key it does not know. The reference's "ask for all"
    warns against kafka-python's `describe_configs` filter, which drops defaults; null keys
    (all) would be the fallback if a broker ignored the list."""
    return describe_configs_request(BROKER_RESOURCE_TYPE, [str(broker_id)], keys)


def describe_topic_configs_request(topics: Sequence[str]) -> Callable[[BrokerConnection], Any]:
    """`cleanup.policy` of each TOPIC resource in `topics`."""
    return describe_configs_request(TOPIC_RESOURCE_TYPE, topics, [CLEANUP_POLICY_CONFIG])


def parse_transaction_max_timeout_ms(response: Any) -> int | None:
    for result in response.results:
        if result.error_code != 0:
            return None
        for config in result.configs:
            if config.name == TRANSACTION_MAX_TIMEOUT_CONFIG and config.value is not None:
                try:
                    value = int(config.value)
                except ValueError:
                    return None  # not a number: unknown, like an error (never a crash)
                return value if value > 0 else None
    return None


def parse_partition_verification(response: Any) -> PartitionVerification | None:
    """DescribeConfigs (one BROKER resource) -> its `transaction.partition.verification.enable`.

    None when the resource failed or the value is not a boolean. An answer without the key is
    `NOT_OFFERED`: a broker lists only the requested keys it knows, and brokers before 3.6
    do not know this one (docs/kafka-semantics.md#exposure). The entries come in the
    broker's own order (reference capture 07), so the key is looked up by name.
    """
    for result in response.results:
        if result.error_code != NONE:
            return None
        for config in result.configs:
            if config.name != PARTITION_VERIFICATION_CONFIG:
                continue
            # Kafka's ConfigDef reads a boolean trimmed and case-insensitively.
            value = (config.value or "").strip().lower()
            if value == "true":
                return PartitionVerification.ENABLED
            if value == "false":
                return PartitionVerification.DISABLED
            return None
        return PartitionVerification.NOT_OFFERED
    return None


def is_compact_policy(value: str) -> bool:
    """`cleanup.policy` is a list ("delete", "compact", "compact,delete"): compacted when it
    names compact."""
    return "compact" in (item.strip() for item in value.split(","))


def parse_cleanup_policies(response: Any) -> tuple[dict[str, bool], list[tuple[str, int]]]:
    """DescribeConfigs over TOPIC resources -> (topic -> compacted, [(topic, error_code)]).

    A topic answered without a readable `cleanup.policy` (null value, key left out) is in
    neither: unknown, not "not compacted"."""
    compacted: dict[str, bool] = {}
    errors: list[tuple[str, int]] = []
    for result in response.results:
        if result.error_code != NONE:
            errors.append((result.resource_name, result.error_code))
            continue
        for config in result.configs:
            if config.name == CLEANUP_POLICY_CONFIG and config.value is not None:
                compacted[result.resource_name] = is_compact_policy(config.value)
    return compacted, errors


BrokerConfig = tuple[int | None, PartitionVerification | None, bool]
"""(transaction.max.timeout.ms, partition verification, settled: answered or refused, so
kept until the refresh interval)."""


class BrokerConfigs(Handler[int, Any]):
    """Keys are broker ids, each asked of itself. `read`: broker -> what its answer told (a
    value not told is None: unknown); a broker whose request failed is in `failed_brokers`.
    With `max_timeout` False only the verification flag is asked for."""

    api = "DescribeConfigs"

    def __init__(self, *, max_timeout: bool) -> None:
        self.max_timeout = max_timeout
        self.read: dict[int, BrokerConfig] = {}
        self.failed_brokers: set[int] = set()

    def request(self, keys: list[int]) -> Callable[[BrokerConnection], Any]:
        (broker_id,) = keys
        wanted = BROKER_CONFIG_KEYS if self.max_timeout else (PARTITION_VERIFICATION_CONFIG,)
        return describe_broker_config_request(broker_id, wanted)

    def parse(self, keys: list[int], response: Any) -> tuple[Any, Collection[int]]:
        return response, keys if response.results else ()

    def handle(
        self, broker_id: int, keys: list[int], answer: Any, state: PollState, *, last: bool
    ) -> Outcome[int]:
        errors = [r.error_code for r in answer.results if r.error_code != NONE]
        for code in errors:
            state.error(broker_id, self.api, error_name(code))
        missing = not answer.results
        max_timeout_ms = None
        if self.max_timeout:
            max_timeout_ms = parse_transaction_max_timeout_ms(answer)
            if max_timeout_ms is None and not errors and answer.results:
                # Asked for and left out (or not a number): unknown, counted, asked again.
                state.error(broker_id, self.api, MISSING_FROM_ANSWER)
                missing = True
        # Answered, or refused: a refusal stands until the ACLs change, so it is asked again at
        # the refresh interval, not every poll; other errors are retried next poll.
        settled = not missing and all(code == CLUSTER_AUTHORIZATION_FAILED for code in errors)
        self.read[broker_id] = (max_timeout_ms, parse_partition_verification(answer), settled)
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[int], error: CollectError, state: PollState
    ) -> Outcome[int]:
        self.failed_brokers.add(broker_id)
        return Outcome()


class TopicConfigs(Handler[str, tuple[dict[str, bool], list[tuple[str, int]]]]):
    """Keys are topics, asked of any broker in batches of TOPICS_PER_REQUEST. Writes into
    `compacted` (topic -> (compacted, read at, time.monotonic)) and drops a topic whose
    policy is not known now (asked again next poll)."""

    api = "DescribeConfigs"

    def __init__(self, compacted: dict[str, tuple[bool, float]]) -> None:
        self.compacted = compacted

    def batches(self, keys: list[str], connection: BrokerConnection | None) -> list[list[str]]:
        return [keys[i : i + TOPICS_PER_REQUEST] for i in range(0, len(keys), TOPICS_PER_REQUEST)]

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return describe_topic_configs_request(keys)

    def parse(
        self, keys: list[str], response: Any
    ) -> tuple[tuple[dict[str, bool], list[tuple[str, int]]], Collection[str]]:
        compacted, errors = parse_cleanup_policies(response)
        return (compacted, errors), set(compacted) | {name for name, _ in errors}

    def handle(
        self, broker_id: int, keys: list[str],
        answer: tuple[dict[str, bool], list[tuple[str, int]]], state: PollState, *, last: bool,
    ) -> Outcome[str]:
        compacted, errors = answer
        for _, code in errors:
            state.error(broker_id, self.api, error_name(code))
        now = time.monotonic()
        for topic in keys:
            if topic in compacted:
                self.compacted[topic] = (compacted[topic], now)
            else:
                self.compacted.pop(topic, None)
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        self.unrouted(keys)
        return Outcome()

    def unrouted(self, keys: list[str]) -> None:
        for topic in keys:
            self.compacted.pop(topic, None)
