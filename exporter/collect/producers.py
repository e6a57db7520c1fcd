"""Producer state: DescribeProducers on every partition's leader, batched, with one retry of
partitions whose leadership moved since Metadata. Every partition asked for ends up either in
`PollState.open_entries` (its open transactions, if any) or in `PollState.unobserved`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence

from kafka.protocol.admin.transactions import DescribeProducersResponse

from exporter.collect.client import (
    ClusterClient,
    MetadataView,
    batch_partitions,
    describe_producers_request,
)
from exporter.collect.connection import BrokerConnection, CollectError
from exporter.collect.errors import NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED, error_name
from exporter.collect.fastdecode import decode_open_producers
from exporter.collect.fastencode import LeanRequest
from exporter.collect.parse import parse_describe_producers
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, ApiSupportLog, PollState
from exporter.logs import get_logger
from exporter.model import TopicPartition
from exporter.settings import ClusterSettings

log = get_logger()

MISSING_FROM_ANSWER = "MISSING_FROM_ANSWER"
"""Unobserved detail of a partition asked for but left out of the leader's answer."""

# Lean and open-only: partitions with error 0 and no producer with an open transaction are
# not in the answer's partitions; they still count as answered. At 200k partitions that is
# ~198k fewer partitions (and ~20k fewer idempotent producers) decoded into objects per poll.
_DECODE_DESCRIBE_PRODUCERS = functools.partial(decode_open_producers, DescribeProducersResponse)


_Request = tuple[
    int, list[tuple[str, Sequence[int]]], Callable[[BrokerConnection], LeanRequest]
]
"""(leader, batch of (topic, partition indexes), its request builder)."""


class ProducerStateReader:
    """DescribeProducers for one cluster; remembers which denied topics it has logged."""

    def __init__(
        self, client: ClusterClient, settings: ClusterSettings, support: ApiSupportLog
    ) -> None:
        self._client = client
        self._settings = settings
        self._support = support
        self._denied_topics_logged: set[str] = set()
        self._cached_requests: (
            tuple[Mapping[int, Mapping[str, Sequence[int]]], int, list[_Request]] | None
        ) = None

    async def read(self, meta: MetadataView, state: PollState) -> None:
        retry = await self._round(meta.by_leader, state, retry_allowed=True)
        if not retry:
            return
        # NOT_LEADER_OR_FOLLOWER: leadership moved since Metadata; ask again, retry once.
        topics = sorted({tp.topic for tp in retry})
        try:
            fresh = await self._client.metadata(topics)
        except CollectError as exc:
            state.error(-1, "Metadata", exc.kind)
            for tp in retry:
                state.unobserved[tp] = "NOT_LEADER_OR_FOLLOWER"
            return
        by_leader: dict[int, dict[str, list[int]]] = {}
        # New mappings on this poll's view: the old ones may be shared with the client's
        # parse of the last Metadata answer, which the next poll may reuse (never written).
        leaders = dict(meta.leaders)
        for tp in sorted(retry):
            leader = fresh.leaders.get(tp, -1)
            if leader < 0:
                state.unobserved[tp] = "LEADER_NOT_AVAILABLE"
                continue
            leaders[tp] = leader
            by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)
        meta.leaders = leaders
        meta.brokers = {**meta.brokers, **fresh.brokers}
        await self._round(by_leader, state, retry_allowed=False)

    async def _round(
        self,
        by_leader: Mapping[int, Mapping[str, Sequence[int]]],
        state: PollState,
        retry_allowed: bool,
    ) -> list[TopicPartition]:
        calls = [
            self._batch(leader, batch, build, state, retry_allowed)
            for leader, batch, build in self._requests(by_leader, cache=retry_allowed)
        ]
        retry: list[TopicPartition] = []
        for result in await asyncio.gather(*calls):
            retry.extend(result)
        return retry

    def _requests(
        self, by_leader: Mapping[int, Mapping[str, Sequence[int]]], cache: bool
    ) -> list[_Request]:
        """The batches of `by_leader` with their request builders. The client shares one
        `by_leader` between polls while Metadata is unchanged, so the batches (and the bytes
        each builder encodes) are kept for it and reused, not rebuilt every poll."""
        batch_size = max(1, self._settings.describe_producers_batch_size)
        cached = self._cached_requests
        if cache and cached is not None and cached[0] is by_leader and cached[1] == batch_size:
            return cached[2]
        requests = [
            (leader, batch, describe_producers_request(batch))
            for leader, per_topic in by_leader.items()
            for batch in batch_partitions(per_topic, batch_size)
        ]
        if cache:
            self._cached_requests = (by_leader, batch_size, requests)
        return requests

    async def _batch(
        self,
        leader: int,
        batch: list[tuple[str, Sequence[int]]],
        build: Callable[[BrokerConnection], LeanRequest],
        state: PollState,
        retry_allowed: bool,
    ) -> list[TopicPartition]:
        try:
            response = await self._client.send(leader, build, _DECODE_DESCRIBE_PRODUCERS)
        except CollectError as exc:
            # Down or slow broker, garbage answer, or one that predates DescribeProducers
            # (Kafka < 2.8): its partitions are unknown, never "no transactions".
            if exc.kind == UNSUPPORTED_API_KIND:
                state.unobservable_brokers.add(leader)
                self._support.unsupported(leader, "DescribeProducers")
            else:
                state.error(leader, "DescribeProducers", exc.kind)
            reason = exc.kind
            for topic, partitions in batch:
                for p in partitions:
                    state.unobserved[TopicPartition(topic, p)] = reason
            return []
        answer = parse_describe_producers(response, leader, batch)
        state.open_entries.extend(answer.entries)
        retry: list[TopicPartition] = []
        for tp, code in answer.errors:
            err = error_name(code)
            state.error(leader, "DescribeProducers", err)
            if code == NOT_LEADER_OR_FOLLOWER and retry_allowed:
                retry.append(tp)
                continue
            state.unobserved[tp] = err
            if code == TOPIC_AUTHORIZATION_FAILED and tp.topic not in self._denied_topics_logged:
                self._denied_topics_logged.add(tp.topic)
                log.warning(
                    "topic_not_authorized",
                    cluster=self._settings.name,
                    topic=tp.topic,
                    hint="DescribeProducers needs READ on the topic",
                )
        if answer.missing:
            # Asked for but not answered: unknown, not "no transaction".
            state.error(leader, "DescribeProducers", MISSING_FROM_ANSWER)
            for tp in answer.missing:
                state.unobserved.setdefault(tp, MISSING_FROM_ANSWER)
        return retry
