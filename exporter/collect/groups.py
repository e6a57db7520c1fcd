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

from exporter.collect.client import (
    ClusterClient,
    MetadataView,
    describe_cluster_request,
    find_group_coordinators_request,
    gather_settled,
    list_groups_request,
    offset_fetch_request,
    parse_find_coordinator,
)
from exporter.collect.connection import CollectError
from exporter.collect.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    MISSING_FROM_ANSWER,
    NONE,
    NOT_COORDINATOR,
    error_name,
)
from exporter.collect.parse import (
    GroupOffsetsAnswer,
    parse_cluster_describe,
    parse_list_groups,
    parse_offset_fetch_groups,
)
from exporter.collect.pollstate import (
    RETRY_DELAY_SECONDS,
    UNSUPPORTED_API_KIND,
    ApiSupportLog,
    PollState,
)
from exporter.logs import get_logger
from exporter.model import CommittedOffset, ConsumerGroupOffsets, TopicPartition
from exporter.settings import ClusterSettings

log = get_logger()

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_FETCH_MAX_ENTRIES = 10_000
"""Group x partition entries per OffsetFetch request: keeps each request and answer to a few
hundred KB however many groups and late partitions there are."""
_RETRIABLE = frozenset({NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS})


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

    def __init__(
        self, client: ClusterClient, support: ApiSupportLog, settings: ClusterSettings
    ) -> None:
        self._client = client
        self._support = support
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
            self._list_incomplete(meta, state),
            asyncio.gather(*(self._list_at(b, state) for b in sorted(meta.brokers))),
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
        pending = sorted(groups)
        for attempt in range(2):
            if not pending:
                return
            coordinators = await self._find_coordinators(pending, lookup, meta, state)
            by_coordinator: dict[int, list[str]] = {}
            for group_id, node in coordinators.items():
                by_coordinator.setdefault(node, []).append(group_id)
            retries = await asyncio.gather(
                *(
                    self._fetch_at(node, ids, lookup, state, last=attempt == 1)
                    for node, ids in sorted(by_coordinator.items())
                )
            )
            pending = sorted(g for retry in retries for g in retry)
            if pending and attempt == 0:
                await asyncio.sleep(RETRY_DELAY_SECONDS)

    async def _list_incomplete(self, meta: MetadataView, state: PollState) -> str | None:
        """Whether ListGroups may leave groups out: None when the principal may Describe the
        cluster. A broker's answer (allowed, denied, an error code, an API it lacks) is kept for
        config_refresh_seconds; a broker that did not answer is asked again next time."""
        now = time.monotonic()
        cached = self._cluster_describe
        if cached is not None and now - cached[1] < self._settings.config_refresh_seconds:
            return cached[0]
        broker = next((b for b in sorted(meta.brokers) if b not in self._client.down), None)
        if broker is None:
            return "BROKER_UNREACHABLE"
        try:
            response = await self._client.send(broker, describe_cluster_request())
        except CollectError as exc:
            if exc.kind != UNSUPPORTED_API_KIND:
                state.error(broker, "DescribeCluster", exc.kind)
                return exc.kind
            self._support.unsupported(broker, "DescribeCluster")
            answer: str | None = exc.kind
        else:
            self._support.supported(broker, "DescribeCluster")
            answer = parse_cluster_describe(response)
            if response.error_code != NONE:
                state.error(broker, "DescribeCluster", error_name(response.error_code))
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

    async def _list_at(self, broker_id: int, state: PollState) -> list[str] | str:
        """The consumer groups this broker coordinates, or why they are unknown."""
        try:
            response = await self._client.send(broker_id, list_groups_request())
        except CollectError as exc:
            state.error(broker_id, "ListGroups", exc.kind)
            return exc.kind
        code, groups = parse_list_groups(response)
        if code != NONE:
            state.error(broker_id, "ListGroups", error_name(code))
            return error_name(code)
        return groups

    async def _find_coordinators(
        self, group_ids: list[str], lookup: _Lookup, meta: MetadataView, state: PollState
    ) -> dict[str, int]:
        broker = next((b for b in sorted(meta.brokers) if b not in self._client.down), None)
        if broker is None:
            lookup.all_unknown("BROKER_UNREACHABLE")
            return {}
        try:
            response = await self._client.send(broker, find_group_coordinators_request(group_ids))
        except CollectError as exc:
            if exc.kind == UNSUPPORTED_API_KIND:
                self._support.unsupported(broker, "FindCoordinator v4")
            else:
                state.error(broker, "FindCoordinator", exc.kind)
            lookup.all_unknown(exc.kind)
            return {}
        found: dict[str, int] = {}
        answered: set[str] = set()
        for group_id, node_id, code in parse_find_coordinator(response, None):
            answered.add(group_id)
            if code == NONE and node_id >= 0:
                found[group_id] = node_id
            else:
                name = error_name(code) if code != NONE else "COORDINATOR_NOT_AVAILABLE"
                state.error(broker, "FindCoordinator", name)
                lookup.all_unknown(name)
        if not answered.issuperset(group_ids):
            state.error(broker, "FindCoordinator", MISSING_FROM_ANSWER)
            lookup.all_unknown(MISSING_FROM_ANSWER)  # a key the answer left out
        return found

    async def _fetch_at(
        self,
        coordinator: int,
        group_ids: list[str],
        lookup: _Lookup,
        state: PollState,
        *,
        last: bool,
    ) -> list[str]:
        """OffsetFetch at one coordinator; returns the groups worth one more lookup (moved or
        loading), unless this is the `last` try."""
        size = sum(len(indexes) for _, indexes in lookup.partitions)
        per_request = max(1, OFFSET_FETCH_MAX_ENTRIES // max(1, size))
        chunks = [group_ids[i : i + per_request] for i in range(0, len(group_ids), per_request)]
        results = await gather_settled(
            *(
                self._client.send(coordinator, offset_fetch_request(chunk, lookup.partitions))
                for chunk in chunks
            )
        )
        retry: list[str] = []
        for chunk, result in zip(chunks, results, strict=True):
            if isinstance(result, CollectError):
                if result.kind == UNSUPPORTED_API_KIND:
                    self._support.unsupported(coordinator, "OffsetFetch v8")
                else:
                    state.error(coordinator, "OffsetFetch", result.kind)
                lookup.all_unknown(result.kind)
                continue
            if isinstance(result, BaseException):
                raise result
            answers = parse_offset_fetch_groups(result)
            self._check_complete(coordinator, chunk, answers, lookup, state)
            for answer in answers:
                if answer.error_code != NONE:
                    state.error(coordinator, "OffsetFetch", error_name(answer.error_code))
                    if answer.error_code in _RETRIABLE and not last:
                        retry.append(answer.group_id)
                    else:
                        lookup.all_unknown(error_name(answer.error_code))
                    continue
                for tp, code in answer.errors:
                    state.error(coordinator, "OffsetFetch", error_name(code))
                    lookup.unknown.setdefault(tp, error_name(code))
                group_id = answer.group_id
                for topic, partition, offset in answer.offsets:
                    if offset >= 0:  # -1: nothing committed on that partition
                        lookup.offsets[(group_id, topic, partition)] = offset
        return retry

    @staticmethod
    def _check_complete(
        coordinator: int,
        asked: list[str],
        answers: list[GroupOffsetsAnswer],
        lookup: _Lookup,
        state: PollState,
    ) -> None:
        """A group, or a partition of a group, that the answer leaves out is not "nothing
        committed": its partitions' groups are unknown. A group not answered at all
        may have committed on any affected partition, so every one is unknown."""
        answered = {a.group_id for a in answers}
        if not answered.issuperset(asked):
            state.error(coordinator, "OffsetFetch", MISSING_FROM_ANSWER)
            lookup.all_unknown(MISSING_FROM_ANSWER)
            return
        wanted = {(topic, p) for topic, indexes in lookup.partitions for p in indexes}
        for answer in answers:
            if answer.error_code != NONE:
                continue
            got = {(topic, p) for topic, p, _ in answer.offsets}
            got.update((tp.topic, tp.partition) for tp, _ in answer.errors)
            left_out = wanted - got
            if left_out:
                state.error(coordinator, "OffsetFetch", MISSING_FROM_ANSWER)
                for topic, p in left_out:
                    lookup.unknown.setdefault(TopicPartition(topic, p), MISSING_FROM_ANSWER)

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
