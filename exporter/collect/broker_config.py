"""Broker config and features: each broker's `transaction.max.timeout.ms` and
`transaction.partition.verification.enable` (one DescribeConfigs per broker), and the finalized
features of its ApiVersions answer, cached and refreshed every `config_refresh_seconds`.

With `transaction_max_timeout_ms` overridden in the settings only the verification flag is
asked for (docs/kafka-semantics.md#exposure)."""

from __future__ import annotations

import asyncio
import time

from exporter.collect.apis.describe_configs import PARTITION_VERIFICATION_CONFIG, BrokerConfigs
from exporter.collect.client import MetadataView
from exporter.collect.connection import CollectError
from exporter.collect.driver import Driver, EveryBroker
from exporter.collect.pollstate import PollState
from exporter.logs import get_logger
from exporter.model import FinalizedFeatures, PartitionVerification
from exporter.settings import ClusterSettings

log = get_logger()


class BrokerConfigReader:
    def __init__(self, driver: Driver, settings: ClusterSettings) -> None:
        self._client = driver.client
        self._driver = driver
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
        if not due:
            return
        read = BrokerConfigs(max_timeout=self._settings.transaction_max_timeout_ms is None)
        await self._driver.run(read, EveryBroker(), due, meta, state)
        for broker_id in read.failed_brokers:
            self._verification.pop(broker_id, None)  # a dynamic config: unknown now
        # The brokers that answered: their finalized features too, if the last answer is stale
        # (a broker that does not answer is counted once, by the driver, not once per API).
        await asyncio.gather(*(self._refresh_features(b, state) for b in sorted(read.read)))
        now = time.monotonic()
        for broker_id, (max_timeout_ms, verification, settled) in read.read.items():
            if max_timeout_ms is not None:
                self._max_timeouts[broker_id] = (max_timeout_ms, now)
            if verification is None:
                self._verification.pop(broker_id, None)
            else:
                self._verification[broker_id] = verification
                self._log_not_offered(broker_id, verification)
            if settled:
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
