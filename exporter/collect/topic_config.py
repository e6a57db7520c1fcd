"""Topic config: whether each topic holding a late or orphaned transaction is compacted
(`cleanup.policy`, DescribeConfigs over TOPIC resources), read only for those topics, cached and
refreshed every `config_refresh_seconds`. A poll without such transactions sends nothing."""

from __future__ import annotations

import time
from collections.abc import Iterable

from exporter.collect.apis.describe_configs import TopicConfigs
from exporter.collect.client import MetadataView
from exporter.collect.driver import AnyBroker, Driver
from exporter.collect.pollstate import PollState
from exporter.settings import ClusterSettings


class TopicConfigReader:
    def __init__(self, driver: Driver, settings: ClusterSettings) -> None:
        self._driver = driver
        self._settings = settings
        self._compacted: dict[str, tuple[bool, float]] = {}  # topic -> (compacted, read at)

    def cache_sizes(self) -> dict[str, int]:
        return {"compacted_topics": len(self._compacted)}

    async def compacted(
        self, topics: Iterable[str], meta: MetadataView, state: PollState
    ) -> dict[str, bool]:
        """topic -> compacted for `topics` whose cleanup.policy is known. The cache keeps only
        these topics, so it is bounded by the topics with a late or orphaned transaction."""
        wanted = set(topics)
        for topic in [t for t in self._compacted if t not in wanted]:
            del self._compacted[topic]
        now = time.monotonic()
        due = sorted(
            t for t in wanted
            if t not in self._compacted
            or now - self._compacted[t][1] >= self._settings.config_refresh_seconds
        )
        if due:
            await self._read(due, meta, state)
        return {t: self._compacted[t][0] for t in sorted(wanted) if t in self._compacted}

    async def _read(self, topics: list[str], meta: MetadataView, state: PollState) -> None:
        # Any broker answers for any topic: the lowest id that is up.
        handler = TopicConfigs(self._compacted)
        await self._driver.run(handler, AnyBroker(self._driver.client), topics, meta, state)
