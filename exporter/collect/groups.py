"""Committed offsets of consumer groups on the partitions with a late or orphaned transaction,
or one at least `blocked_groups_min_age_seconds` old: which groups it stops
(docs/kafka-semantics.md#blocked-groups, #blocked-before-late).

Asked only when some partition has such a transaction, and batched so the cost does not grow
with the number of groups times partitions one request at a time: ListGroups on every broker
(each lists the groups it coordinates), one FindCoordinator for all groups (v4+), then
OffsetFetch v8+ at each coordinator with many groups per request, each restricted to the
affected partitions. Whatever cannot be read (an API the broker lacks, GROUP_AUTHORIZATION_FAILED,
a broker down) makes the affected partitions' groups unknown, never "none blocked".

ListGroups silently leaves out the groups the principal may not Describe unless it may Describe
the cluster, so alongside it one DescribeCluster (cached for config_refresh_seconds) tells
whether the list is complete; when not, every count is unknown, while a group found at the LSO
is still reported (docs/kafka-semantics.md#describe-cluster).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.collect.apis.describe_cluster import CLUSTER, DescribeCluster
from exporter.collect.apis.find_coordinator import FindGroupCoordinators
from exporter.collect.apis.list_groups import list_groups
from exporter.collect.apis.offset_fetch import OffsetFetch
from exporter.collect.client import MetadataView
from exporter.collect.driver import AnyBroker, CoordinatorStrategy, Driver
from exporter.collect.pollstate import PollState
from exporter.logs import get_logger
from exporter.model import CommittedOffset, ConsumerGroupOffsets, TopicPartition
from exporter.settings import ClusterSettings

log = get_logger()

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(slots=True)
class _Lookup:
    partitions: list[tuple[str, list[int]]]
    """The affected partitions, by topic, as OffsetFetch asks for them."""
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    """(group, topic, partition) -> committed offset (>= 0)."""
    unknown: dict[TopicPartition, str] = field(default_factory=dict)
    incomplete: str | None = None
    """Why ListGroups may have left groups out (no Describe on the cluster, or not known)."""

    def all_unknown(self, detail: str) -> None:
        for topic, indexes in self.partitions:
            for p in indexes:
                self.unknown.setdefault(TopicPartition(topic, p), detail)


class ConsumerGroupReader:
    """Reads the committed offsets; remembers since when each (group, partition) has held the
    same offset, so a blocked group's duration can be told (Kafka does not report when an
    offset was committed). That memory holds only (group, partition) pairs read in the latest
    poll (or left unknown by it), so it is bounded by the groups on the partitions looked at."""

    def __init__(self, driver: Driver, settings: ClusterSettings) -> None:
        self._driver = driver
        self._settings = settings
        self._seen: dict[tuple[str, str, int], tuple[int, int]] = {}
        """(group, topic, partition) -> (committed offset, first seen with it, epoch ms)."""
        self._cluster_describe: tuple[str | None, float] | None = None
        """(None: may Describe the cluster, else why the group list may be incomplete; when
        asked, time.monotonic()), re-asked every config_refresh_seconds."""

    def cache_sizes(self) -> dict[str, int]:
        return {"committed_offsets": len(self._seen)}

    async def read(
        self,
        partitions: Iterable[TopicPartition],
        unknown: Mapping[TopicPartition, str],
        meta: MetadataView,
        state: PollState,
    ) -> ConsumerGroupOffsets | None:
        """Committed offsets of every consumer group on `partitions` (already known to need a
        look: a late, orphaned or old enough transaction with the high watermark past the
        LSO). `unknown`: partitions whose offsets could not even be compared (the LSO read
        failed), carried through.
        None, and no request at all, when there is no partition to look at."""
        asked = sorted(set(partitions))
        if not asked and not unknown:
            self._seen.clear()
            return None
        by_topic: dict[str, list[int]] = {}
        for tp in asked:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        lookup = _Lookup(list(by_topic.items()))
        if asked:
            await self._lookup(lookup, meta, state)
        lookup.unknown.update(unknown)
        return ConsumerGroupOffsets(
            partitions=frozenset(asked) | frozenset(unknown),
            committed=self._remember(lookup, state.now_ms),
            unknown=lookup.unknown,
            incomplete=lookup.incomplete,
        )

    async def _lookup(self, lookup: _Lookup, meta: MetadataView, state: PollState) -> None:
        # Both at once: DescribeCluster adds no round trip to the lookup.
        lookup.incomplete, listed = await asyncio.gather(
            self._list_incomplete(meta, state), list_groups(self._driver, meta, state)
        )
        groups: set[str] = set()
        for result in listed:
            if isinstance(result, str):
                lookup.all_unknown(result)
            else:
                groups.update(result)
        # A __consumer_offsets partition without a leader: its coordinator is not listing.
        if any(tp.topic == CONSUMER_OFFSETS_TOPIC for tp in meta.leaderless):
            lookup.all_unknown("LEADER_NOT_AVAILABLE")
        # Led by a broker Metadata does not list: that coordinator was not asked.
        if unlisted_leader(meta, CONSUMER_OFFSETS_TOPIC):
            lookup.all_unknown("BROKER_UNREACHABLE")
        # The coordinators are this lookup's own: a group moved or loading is looked up again.
        found: dict[str, int] = {}
        coordinators = CoordinatorStrategy(
            self._driver,
            lambda: FindGroupCoordinators(found, lookup.all_unknown),
            found,
            attempts=1,
        )
        fetch = OffsetFetch(lookup.partitions, lookup.offsets, lookup.unknown, lookup.all_unknown)
        await self._driver.run(fetch, coordinators, sorted(groups), meta, state, attempts=2)

    async def _list_incomplete(self, meta: MetadataView, state: PollState) -> str | None:
        """Whether ListGroups may leave groups out: None when the principal may Describe the
        cluster. A broker's answer (allowed, denied, an error code, an API it lacks) is kept for
        config_refresh_seconds; a broker that did not answer is asked again next time."""
        now = time.monotonic()
        cached = self._cluster_describe
        if cached is not None and now - cached[1] < self._settings.config_refresh_seconds:
            return cached[0]
        describe = DescribeCluster()
        await self._driver.run(describe, AnyBroker(self._driver.client), [CLUSTER], meta, state)
        answer = describe.answer
        if not describe.settled:
            return answer
        if answer is not None and (cached is None or cached[0] != answer):
            log.warning(
                "consumer_group_list_may_be_incomplete",
                cluster=self._settings.name,
                detail=answer,
                hint="ListGroups lists every group only with Describe on the cluster; "
                "blocked-group counts are unknown until it is granted",
            )
        self._cluster_describe = (answer, now)
        return answer

    def _remember(self, lookup: _Lookup, now_ms: int) -> tuple[CommittedOffset, ...]:
        """Keys are plain tuples (hashed in C): there are groups x late partitions of them."""
        previous_seen = self._seen
        seen: dict[tuple[str, str, int], tuple[int, int]] = {}
        committed: list[CommittedOffset] = []
        append = committed.append
        for key, offset in lookup.offsets.items():
            previous = previous_seen.get(key)
            first_seen = previous[1] if previous is not None and previous[0] == offset else now_ms
            seen[key] = (offset, first_seen)
            append(CommittedOffset(key[0], key[1], key[2], offset, first_seen))
        # A (group, partition) left unknown this poll keeps its memory for the next one.
        if lookup.unknown:
            for key, value in previous_seen.items():
                if key not in seen and TopicPartition(key[1], key[2]) in lookup.unknown:
                    seen[key] = value
        self._seen = seen
        return tuple(committed)


def unlisted_leader(meta: MetadataView, topic: str) -> bool:
    """Whether a partition of `topic` (an internal topic whose leaders coordinate) is led by a
    broker missing from Metadata's broker list: that coordinator's listing is not asked.
    Read from the topics the Metadata parse found so (no walk over every partition per poll
    while Metadata is reused); walked once, and kept on the view, when a poll changed its
    mappings."""
    topics = meta.unlisted_leader_topics
    if topics is None:
        brokers = meta.brokers
        topics = meta.unlisted_leader_topics = {
            tp.topic for tp, leader in meta.leaders.items()
            if leader >= 0 and leader not in brokers
        }
    return topic in topics
