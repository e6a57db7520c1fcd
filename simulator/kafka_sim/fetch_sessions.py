"""Incremental fetch sessions (KIP-227) of one simulated broker, as Kafka keeps them.

Why: a client that polls many idle partitions opens a session with one full Fetch and then
sends incremental Fetches that name only what changed; the broker answers only the partitions
whose high watermark or log start offset moved, that have records, or an error. The simulator
must keep the same books as Kafka's `FetchSession`/`FetchSessionCacheShard`/`FetchManager`
(core `kafka/server/FetchSession.scala` in 3.9; `org.apache.kafka.server.FetchSession` and
`FetchContext` in 4.x), so a client written against it works against a real broker
(docs/kafka-semantics.md#fetch-sessions).

This module is pure bookkeeping: the handler (handlers.handle_fetch) reads the logs.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from kafka_sim.errors import NONE

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
NUM_FETCH_SESSION_CACHE_SHARDS = 8
"""KafkaBroker.NumFetchSessionCacheShards: `max.incremental.fetch.session.cache.slots` is split
evenly over 8 shards, each owning one eighth of the session id range."""
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
"""KafkaBroker.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long is stale."""

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106

PartitionKey = tuple[Hashable, int]
"""(topic name, partition) below Fetch v13; (topic id, partition) from v13 (TopicIdPartition
equality: by id when the id is not zero)."""


def next_epoch(epoch: int) -> int:
    """FetchMetadata.nextEpoch: -1 stays -1, INT32_MAX wraps to 1, else + 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


@dataclass(slots=True)
class RequestedPartition:
    """One partition of a Fetch request (FetchRequest.PartitionData) and its topic."""

    topic: str | None
    """None: a topic id the broker does not know (Fetch v13+)."""
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


class PartitionAnswer(Protocol):
    """What a session looks at in one partition's answer (FetchResponseData.PartitionData)."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    preferred_read_replica: int
    records: bytes | None


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the request parameters it was last given and the high watermark
    and log start offset it was last answered with (-1: never, or an error since)."""

    request: RequestedPartition
    high_watermark: int = -1
    local_log_start_offset: int = -1

    def maybe_update_response_data(self, answer: PartitionAnswer, update: bool) -> bool:
        """CachedPartition.maybeUpdateResponseData: must this partition be in the answer?"""
        must_respond = bool(answer.records)
        if self.high_watermark != answer.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = answer.high_watermark
        if self.local_log_start_offset != answer.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = answer.log_start_offset
        if answer.preferred_read_replica >= 0:
            must_respond = True
        if answer.error_code != NONE:
            if update:
                self.high_watermark = -1
            must_respond = True
        return must_respond


@dataclass(eq=False)
class FetchSession:
    """FetchSession: an id, its epoch (the one the next request must carry) and its partitions
    in insertion order (a partition that returned records moves to the end)."""

    id: int
    privileged: bool
    partitions: dict[PartitionKey, CachedPartition]
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(
        self,
        fetch_data: Sequence[tuple[PartitionKey, RequestedPartition]],
        to_forget: Sequence[PartitionKey],
    ) -> None:
        """FetchSession.update: add new partitions at the end, update the parameters of known
        ones (their place stays), then remove the forgotten ones."""
        for key, requested in fetch_data:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(requested)
            else:
                cached.request = requested
        for key in to_forget:
            self.partitions.pop(key, None)


class FetchSessionCacheShard:
    """FetchSessionCacheShard: at most `max_entries` sessions with ids in
    [max(1, shard * id_range), (shard + 1) * id_range); eviction as Kafka's tryEvict."""

    def __init__(self, max_entries: int, eviction_ms: int, id_range: int, shard_num: int,
                 rng: random.Random) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.id_range = id_range
        self.shard_num = shard_num
        self.sessions: dict[int, FetchSession] = {}
        self._rng = rng

    def new_session_id(self) -> int:
        low = max(1, self.shard_num * self.id_range)
        high = (self.shard_num + 1) * self.id_range
        while True:
            session_id = self._rng.randrange(low, high)
            if session_id not in self.sessions and session_id != INVALID_SESSION_ID:
                return session_id

    def maybe_create_session(
        self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool,
        create_partitions: Callable[[], dict[PartitionKey, CachedPartition]],
    ) -> int:
        """The new session's id, or INVALID_SESSION_ID when the shard has no room."""
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, size, now_ms):
            session = FetchSession(
                id=self.new_session_id(), privileged=privileged, partitions=create_partitions(),
                uses_topic_ids=uses_topic_ids, creation_ms=now_ms, last_used_ms=now_ms,
                epoch=next_epoch(INITIAL_EPOCH))
            self.sessions[session.id] = session
            self.touch(session, now_ms)
            return session.id
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """The least recently used session if stale; else the first evictable one (by
        (privileged, size, id)) if the new session is worth more."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        first = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < first.evictable_key():
            return False
        self.remove(first.id)
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """FetchSessionCacheShard.touch: last use, size, and which evictable sets it is in
        (decided now: a session created less than eviction_ms ago is not evictable by size)."""
        session.last_used_ms = now_ms
        session.cached_size = len(session.partitions)
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough


class FetchSessionCache:
    """One broker's FetchSessionCache: 8 shards, new sessions go to them in turn."""

    def __init__(self, slots: int, *, eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        id_range = INT32_MAX // NUM_FETCH_SESSION_CACHE_SHARDS
        self.shards = [
            FetchSessionCacheShard(slots // NUM_FETCH_SESSION_CACHE_SHARDS, eviction_ms,
                                   id_range, n, self._rng)
            for n in range(NUM_FETCH_SESSION_CACHE_SHARDS)
        ]
        self._counter = 0

    def shard_for(self, session_id: int) -> FetchSessionCacheShard | None:
        """getCacheShard: session_id / id_range (truncated toward zero, as Scala's Int division);
        None where Kafka's index is out of bounds (its request then fails as a whole)."""
        index = int(session_id / self.shards[0].id_range)
        return self.shards[index] if 0 <= index < len(self.shards) else None

    def next_shard(self) -> FetchSessionCacheShard:
        shard = self.shards[self._counter % len(self.shards)]
        self._counter = (self._counter + 1) & INT32_MAX
        return shard

    def session(self, session_id: int) -> FetchSession | None:
        shard = self.shard_for(session_id)
        return shard.sessions.get(session_id) if shard is not None else None

    def __len__(self) -> int:
        return sum(len(s.sessions) for s in self.shards)


class ContextKind(Enum):
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"
    SESSION_ERROR = "session error"
    SHARD_OUT_OF_RANGE = "shard out of range"


@dataclass
class FetchContext:
    """FetchManager.newContext's answer: which partitions to read, and how to answer."""

    kind: ContextKind
    fetch_data: list[tuple[PartitionKey, RequestedPartition]] = field(default_factory=list)
    session: FetchSession | None = None
    error_code: int = NONE
    uses_topic_ids: bool = False
    privileged: bool = False

    def partitions(self) -> list[tuple[PartitionKey, RequestedPartition]]:
        """foreachPartition: the request's partitions, or (incremental) the session's."""
        if self.kind is ContextKind.INCREMENTAL:
            assert self.session is not None
            return [(k, c.request) for k, c in self.session.partitions.items()]
        if self.kind in (ContextKind.SESSIONLESS, ContextKind.FULL):
            return list(self.fetch_data)
        return []


def new_context(
    cache: FetchSessionCache,
    version: int,
    session_id: int,
    epoch: int,
    fetch_data: list[tuple[PartitionKey, RequestedPartition]],
    to_forget: Sequence[PartitionKey],
    now_ms: int,
    privileged: bool = False,
) -> FetchContext:
    """FetchManager.newContext. Epoch 0 or -1 is a full fetch (a given session is closed
    first); -1 asks for no new session. Any other epoch continues session `session_id`."""
    uses_topic_ids = version >= 13
    if version < 7:
        session_id, epoch = INVALID_SESSION_ID, FINAL_EPOCH  # FetchMetadata.LEGACY
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            shard = cache.shard_for(session_id)
            if shard is None:
                return FetchContext(ContextKind.SHARD_OUT_OF_RANGE)
            shard.remove(session_id)
        kind = ContextKind.SESSIONLESS if epoch == FINAL_EPOCH else ContextKind.FULL
        return FetchContext(kind, fetch_data, uses_topic_ids=uses_topic_ids,
                            privileged=privileged)
    shard = cache.shard_for(session_id)
    if shard is None:
        return FetchContext(ContextKind.SHARD_OUT_OF_RANGE)
    session = shard.sessions.get(session_id)
    if session is None:
        return FetchContext(ContextKind.SESSION_ERROR, error_code=FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext(ContextKind.SESSION_ERROR, error_code=INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext(ContextKind.SESSION_ERROR, error_code=FETCH_SESSION_TOPIC_ID_ERROR)
    session.update(fetch_data, to_forget)
    if not session.partitions:
        shard.remove(session.id)
        return FetchContext(ContextKind.SESSIONLESS, fetch_data, uses_topic_ids=uses_topic_ids)
    shard.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return FetchContext(ContextKind.INCREMENTAL, session=session, uses_topic_ids=uses_topic_ids)


def generate_response(
    cache: FetchSessionCache,
    context: FetchContext,
    answers: list[tuple[PartitionKey, PartitionAnswer]],
    now_ms: int,
) -> tuple[int, int, list[tuple[PartitionKey, PartitionAnswer]]]:
    """updateAndGenerateResponseData: (top-level error code, session id, partitions to send).

    Full: every partition, and a new session holding them all (if a shard has room).
    Incremental: only the partitions maybeUpdateResponseData keeps, in the session's order;
    a partition that returned records moves to the end of the session."""
    if context.kind is ContextKind.SESSION_ERROR:
        return context.error_code, INVALID_SESSION_ID, []
    if context.kind is ContextKind.SESSIONLESS:
        return NONE, INVALID_SESSION_ID, answers
    if context.kind is ContextKind.FULL:
        requested = dict(context.fetch_data)

        def create() -> dict[PartitionKey, CachedPartition]:
            return {key: CachedPartition(requested[key], answer.high_watermark,
                                         answer.log_start_offset)
                    for key, answer in answers}

        session_id = cache.next_shard().maybe_create_session(
            now_ms, context.privileged, len(answers), context.uses_topic_ids, create)
        return NONE, session_id, answers
    assert context.kind is ContextKind.INCREMENTAL and context.session is not None
    session = context.session
    kept: list[tuple[PartitionKey, PartitionAnswer]] = []
    for key, answer in answers:
        cached = session.partitions.get(key)
        if cached is None or not cached.maybe_update_response_data(answer, True):
            continue
        kept.append((key, answer))
        if answer.records:
            session.partitions[key] = session.partitions.pop(key)
    return NONE, session.id, kept
