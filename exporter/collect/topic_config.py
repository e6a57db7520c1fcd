"""Topic config: whether each topic holding a late or orphaned transaction is compacted
(`cleanup.policy`, DescribeConfigs over TOPIC resources), read only for those topics, cached and
refreshed every `config_refresh_seconds`. A poll without such transactions sends nothing."""

from __future__ import annotations

import time
from collections.abc import Iterable

from exporter.collect.client import ClusterClient, MetadataView, describe_topic_configs_request
from exporter.collect.connection import CollectError
from exporter.collect.errors import MISSING_FROM_ANSWER, error_name
from exporter.collect.parse import parse_cleanup_policies
from exporter.collect.pollstate import PollState
from exporter.settings import ClusterSettings

TOPICS_PER_REQUEST = 500
"""Topics per DescribeConfigs, like the admin tools' batches (one request almost always)."""


class TopicConfigReader:
    def __init__(self, client: ClusterClient, settings: ClusterSettings) -> None:
        self._client = client
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
        brokers = [b for b in sorted(meta.brokers) if b not in self._client.down]
        if not brokers:
            self._forget(topics)
            return
        broker_id = brokers[0]
        for start in range(0, len(topics), TOPICS_PER_REQUEST):
            batch = topics[start:start + TOPICS_PER_REQUEST]
            try:
                response = await self._client.send(broker_id, describe_topic_configs_request(batch))
            except CollectError as exc:
                state.error(broker_id, "DescribeConfigs", exc.kind)
                self._forget(batch)
                continue
            compacted, errors = parse_cleanup_policies(response)
            for _, code in errors:
                state.error(broker_id, "DescribeConfigs", error_name(code))
            failed = {name for name, _ in errors}
            if any(t not in compacted and t not in failed for t in batch):
                # A topic asked for and left out: unknown, and counted.
                state.error(broker_id, "DescribeConfigs", MISSING_FROM_ANSWER)
            now = time.monotonic()
            for topic in batch:
                if topic in compacted:
                    self._compacted[topic] = (compacted[topic], now)
                else:
                    self._compacted.pop(topic, None)  # unknown now; asked again next poll

    def _forget(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self._compacted.pop(topic, None)
