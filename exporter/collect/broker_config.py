"""Broker config: each broker's transaction.max.timeout.ms (DescribeConfigs), cached and
refreshed every `config_refresh_seconds`; skipped when the settings override it."""

from __future__ import annotations

import asyncio
import time

from exporter.collect.client import (
    ClusterClient,
    MetadataView,
    describe_broker_config_request,
    parse_transaction_max_timeout_ms,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import error_name
from exporter.collect.pollstate import PollState
from exporter.settings import ClusterSettings


class MaxTimeoutReader:
    def __init__(self, client: ClusterClient, settings: ClusterSettings) -> None:
        self._client = client
        self._settings = settings
        self._max_timeouts: dict[int, tuple[int, float]] = {}  # broker -> (ms, read monotonic)

    def cache_sizes(self) -> dict[str, int]:
        return {"max_timeouts": len(self._max_timeouts)}

    async def refresh(self, meta: MetadataView, state: PollState) -> None:
        if self._settings.transaction_max_timeout_ms is not None:
            return
        now = time.monotonic()
        due = [
            b
            for b in meta.brokers
            if b not in self._max_timeouts
            or now - self._max_timeouts[b][1] >= self._settings.config_refresh_seconds
        ]
        await asyncio.gather(*(self._read(b, state) for b in due))

    async def _read(self, broker_id: int, state: PollState) -> None:
        try:
            response = await self._client.send(broker_id, describe_broker_config_request(broker_id))
        except CollectError as exc:
            state.error(broker_id, "DescribeConfigs", exc.kind)
            return
        for result in response.results:
            if result.error_code != 0:
                state.error(broker_id, "DescribeConfigs", error_name(result.error_code))
        value = parse_transaction_max_timeout_ms(response)
        if value is not None:
            self._max_timeouts[broker_id] = (value, time.monotonic())

    def max_timeout_ms(self, broker_id: int) -> int | None:
        """The override, else the broker's value as last read; None when never read."""
        if self._settings.transaction_max_timeout_ms is not None:
            return self._settings.transaction_max_timeout_ms
        cached = self._max_timeouts.get(broker_id)
        return cached[0] if cached is not None else None
