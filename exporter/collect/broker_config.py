"""Broker config and features: each broker's `transaction.max.timeout.ms` and
`transaction.partition.verification.enable` (one DescribeConfigs per broker), and the finalized
features of its ApiVersions answer, cached and refreshed every `config_refresh_seconds`.

With `transaction_max_timeout_ms` overridden in the settings only the verification flag is
asked for (docs/kafka-semantics.md#exposure)."""

from __future__ import annotations

import asyncio
import time

from exporter.collect.client import (
    BROKER_CONFIG_KEYS,
    ClusterClient,
    MetadataView,
    describe_broker_config_request,
    parse_transaction_max_timeout_ms,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    MISSING_FROM_ANSWER,
    NONE,
    error_name,
)
from exporter.collect.parse import PARTITION_VERIFICATION_CONFIG, parse_partition_verification
from exporter.collect.pollstate import PollState
from exporter.logs import get_logger
from exporter.model import FinalizedFeatures, PartitionVerification
from exporter.settings import ClusterSettings

log = get_logger()


class BrokerConfigReader:
    def __init__(self, client: ClusterClient, settings: ClusterSettings) -> None:
        self._client = client
        self._settings = settings
        self._max_timeouts: dict[int, tuple[int, float]] = {}  # broker -> (ms, read monotonic)
        self._verification: dict[int, PartitionVerification] = {}
        self._read_at: dict[int, float] = {}  # broker -> last answered DescribeConfigs
        self._not_offered_logged: set[int] = set()

    def cache_sizes(self) -> dict[str, int]:
        return {
            "max_timeouts": len(self._max_timeouts),
            "partition_verification": len(self._verification),
            "broker_config_read_at": len(self._read_at),
        }

    async def refresh(self, meta: MetadataView, state: PollState) -> None:
        now = time.monotonic()
        # Brokers gone from the cluster leave the caches (bounded by the brokers named).
        known = set(meta.brokers) | meta.replica_ids
        for cache in (self._max_timeouts, self._verification, self._read_at):
            for broker_id in [b for b in cache if b not in known]:
                del cache[broker_id]
        self._not_offered_logged &= known
        due = [
            b
            for b in meta.brokers
            if b not in self._read_at
            or now - self._read_at[b] >= self._settings.config_refresh_seconds
        ]
        await asyncio.gather(*(self._read(b, state) for b in due))

    def _keys(self) -> tuple[str, ...]:
        if self._settings.transaction_max_timeout_ms is not None:
            return (PARTITION_VERIFICATION_CONFIG,)
        return BROKER_CONFIG_KEYS

    async def _read(self, broker_id: int, state: PollState) -> None:
        try:
            response = await self._client.send(
                broker_id, describe_broker_config_request(broker_id, self._keys())
            )
        except CollectError as exc:
            state.error(broker_id, "DescribeConfigs", exc.kind)
            self._verification.pop(broker_id, None)  # a dynamic config: unknown now
            return
        # The broker answers: its finalized features too, if the last answer is stale (a
        # broker that does not answer is counted once, above, not once per API).
        await self._refresh_features(broker_id, state)
        errors = [r.error_code for r in response.results if r.error_code != NONE]
        for code in errors:
            state.error(broker_id, "DescribeConfigs", error_name(code))
        now = time.monotonic()
        missing = not errors and not response.results
        if missing:
            state.error(broker_id, "DescribeConfigs", MISSING_FROM_ANSWER)
        if self._settings.transaction_max_timeout_ms is None:
            value = parse_transaction_max_timeout_ms(response)
            if value is not None:
                self._max_timeouts[broker_id] = (value, now)
            elif not errors and response.results:
                # Asked for and left out (or not a number): unknown, counted, asked again.
                state.error(broker_id, "DescribeConfigs", MISSING_FROM_ANSWER)
                missing = True
        verification = parse_partition_verification(response)
        if verification is None:
            self._verification.pop(broker_id, None)
        else:
            self._verification[broker_id] = verification
            self._log_not_offered(broker_id, verification)
        if not missing and all(code == CLUSTER_AUTHORIZATION_FAILED for code in errors):
            # Answered, or refused: a refusal stands until the ACLs change, so it is asked
            # again at the refresh interval, not every poll; other errors are retried next poll.
            self._read_at[broker_id] = now

    async def _refresh_features(self, broker_id: int, state: PollState) -> None:
        """ApiVersions again once the connection's answer is older than the refresh interval:
        finalized features change without a reconnect."""
        try:
            await self._client.refresh_finalized_features(
                broker_id, self._settings.config_refresh_seconds
            )
        except CollectError as exc:
            state.error(broker_id, "ApiVersions", exc.kind)

    def _log_not_offered(self, broker_id: int, verification: PartitionVerification) -> None:
        if verification is not PartitionVerification.NOT_OFFERED:
            self._not_offered_logged.discard(broker_id)
            return
        if broker_id in self._not_offered_logged:
            return
        self._not_offered_logged.add(broker_id)
        log.warning(
            "config_not_offered_by_broker",
            cluster=self._settings.name,
            broker_id=broker_id,
            config=PARTITION_VERIFICATION_CONFIG,
            hint="brokers before Kafka 3.6 have no partition verification (KIP-890): "
            "a transactional Produce to a partition never added to the transaction is "
            "appended, and can hang",
        )

    def max_timeout_ms(self, broker_id: int) -> int | None:
        """The override, else the broker's value as last read; None when never read."""
        if self._settings.transaction_max_timeout_ms is not None:
            return self._settings.transaction_max_timeout_ms
        cached = self._max_timeouts.get(broker_id)
        return cached[0] if cached is not None else None

    def partition_verification(self, broker_id: int) -> PartitionVerification | None:
        """The flag as last read; None when unknown (never read, or the last read failed)."""
        return self._verification.get(broker_id)

    def finalized_features(self) -> FinalizedFeatures | None:
        return self._client.finalized_features()
