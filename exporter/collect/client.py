"""Cluster client: broker ids -> connections, Metadata asked of the first broker that answers
(its request and parse in `collect.apis.metadata`; the last full answer's parse kept here),
and the request builders/parsers of the APIs not yet in `collect.apis` (one module per API
on `collect.driver`).

Each function here does one Kafka API against one broker and returns plain data with per-item
error codes kept (never raised), because one bad partition or id must not discard a whole
answer (docs/kafka-semantics.md#kafka-python-admin).
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record.memory_records import MemoryRecords

# MetadataView is what `ClusterClient.metadata` answers: its readers import it from here.
from exporter.collect.apis.metadata import MetadataView as MetadataView
from exporter.collect.apis.metadata import build_metadata_request, decode_metadata
from exporter.collect.connection import (
    AuthenticationFailed,
    BrokerConnection,
    BrokerUnreachable,
    CollectError,
    ConnectionOptions,
    ConnectionPool,
    RequestTimeout,
    build_ssl_context,
    parse_bootstrap,
)
from exporter.collect.fastdecode import Decoder, metadata_identity
from exporter.collect.sasl.logins import make_login
from exporter.model import FinalizedFeatures
from exporter.settings import ClusterSettings

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FETCH_MAX_BYTES = 1024
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int


class ClusterClient:
    """Connections by broker id; a broker that failed once in a poll fails fast until the next."""

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        ssl_context = build_ssl_context(settings.tls) if settings.tls is not None else None
        self.pool = ConnectionPool(
            ConnectionOptions(
                client_id=settings.client_id,
                ssl_context=ssl_context,
                sasl=settings.sasl,
                login=make_login(settings.sasl) if settings.sasl is not None else None,
                connect_timeout_seconds=settings.request_timeout_seconds,
                max_response_bytes=settings.max_response_bytes,
            )
        )
        self.bootstrap = [parse_bootstrap(s) for s in settings.bootstrap_servers]
        self.brokers: dict[int, tuple[str, int]] = {}
        self.down: dict[int, CollectError] = {}
        self.timeout_seconds = settings.request_timeout_seconds
        self._last_full_metadata: tuple[int, bytes, MetadataView] | None = None
        self._on_metadata_change: list[Callable[[], None]] = []

    def on_metadata_change(self, forget: Callable[[], None]) -> None:
        """Call `forget` when a full Metadata answer differs from the last one, before it is
        parsed: a cache built from the previous view (batches keyed on its `by_leader`) lets
        go of it then, so the old and the new view are never alive at once (at 1M partitions
        each is ~100 MiB: benchmarks/RESULTS.md, bench_metadata_rss.py)."""
        self._on_metadata_change.append(forget)

    def begin_poll(self) -> None:
        self.down.clear()

    def _address(self, broker_id: int) -> tuple[str, int]:
        """The broker's address; its error when it failed already this poll."""
        error = self.down.get(broker_id)
        if error is not None:
            raise error
        address = self.brokers.get(broker_id)
        if address is None:
            raise BrokerUnreachable(f"broker {broker_id} is not in metadata")
        return address

    async def connection(self, broker_id: int) -> BrokerConnection:
        address = self._address(broker_id)
        try:
            return await self.pool.get(*address)
        except CollectError as exc:
            self.mark_down(broker_id, exc)
            raise

    def mark_down(self, broker_id: int, error: CollectError) -> None:
        if isinstance(error, BrokerUnreachable | RequestTimeout | AuthenticationFailed):
            self.down.setdefault(broker_id, error)

    async def send(
        self,
        broker_id: int,
        build: Callable[[BrokerConnection], Any],
        decode: Decoder | None = None,
    ) -> Any:
        """Build the request for the broker's negotiated versions, send it, await the answer
        (decoded by `decode`, see `BrokerConnection.request`)."""
        connection = await self.connection(broker_id)
        request = build(connection)
        try:
            return await connection.request(request, self.timeout_seconds, decode)
        except CollectError as exc:
            self.mark_down(broker_id, exc)
            raise

    async def send_apart(
        self,
        broker_id: int,
        build: Callable[[BrokerConnection], Any],
        decode: Decoder | None = None,
    ) -> Any:
        """`send` on a connection of its own, closed after the answer: an answer that costs
        its connection (a frame above `max_response_bytes`) costs nothing else asked of the
        broker."""
        address = self._address(broker_id)
        try:
            connection = await self.pool.connect_apart(*address)
        except CollectError as exc:
            self.mark_down(broker_id, exc)
            raise
        try:
            return await connection.request(build(connection), self.timeout_seconds, decode)
        except CollectError as exc:
            self.mark_down(broker_id, exc)
            raise
        finally:
            await connection.close()

    async def refresh_finalized_features(self, broker_id: int, max_age_seconds: float) -> None:
        """Ask the broker's ApiVersions again when its connection's answer is older than
        `max_age_seconds` (the answer at connect time is usually fresh enough)."""
        connection = await self.connection(broker_id)
        if time.monotonic() - connection.finalized_features_read_at < max_age_seconds:
            return
        try:
            await connection.refresh_finalized_features(self.timeout_seconds)
        except CollectError as exc:
            self.mark_down(broker_id, exc)
            raise

    def finalized_features(self) -> FinalizedFeatures | None:
        """The finalized features with the highest epoch among the brokers connected now (the
        epoch only grows, so the highest is the newest); None when none reported any."""
        best: FinalizedFeatures | None = None
        for broker_id, address in sorted(self.brokers.items()):
            if broker_id in self.down:
                continue
            connection = self.pool.open_connection(*address)
            features = connection.finalized_features if connection is not None else None
            if features is not None and (best is None or features.epoch > best.epoch):
                best = features
        return best

    async def metadata(self, topics: Sequence[str] | None = None) -> MetadataView:
        """Metadata from the first broker that answers: known brokers first, then bootstrap."""
        candidates = [a for b, a in sorted(self.brokers.items()) if b not in self.down]
        candidates += [a for a in self.bootstrap if a not in candidates]
        last_error: CollectError = BrokerUnreachable("no bootstrap servers")
        for host, port in candidates:
            try:
                connection = await self.pool.get(host, port)
                version = connection.version_for(MetadataRequest)
                request = build_metadata_request(topics, version)
                decode = self._decode_full_metadata if topics is None else decode_metadata
                view: MetadataView = await connection.request(
                    request, self.timeout_seconds, decode
                )
            except CollectError as exc:
                # The most telling failure is reported: a broker that answered (refused our
                # credentials or certificate) over one that timed out over one not reached.
                if _telling(exc) >= _telling(last_error):
                    last_error = exc
                continue
            if topics is None:
                self.brokers = dict(view.brokers)
            else:
                self.brokers.update(view.brokers)
            return view
        raise last_error

    def _decode_full_metadata(self, payload: bytes, version: int) -> MetadataView:
        """Full Metadata -> MetadataView. An answer byte-identical to the previous one (but
        for the fields `metadata_identity` leaves out) reuses the previous parse: at 200k
        partitions decoding and parsing cost more than the rest of a poll, and a cluster's
        metadata rarely changes between two polls. Any change (a leader, a leader epoch, a new
        topic or partition, a broker) changes the bytes, so nothing is served stale: every
        poll still asks for the full Metadata."""
        identity = metadata_identity(payload, version)
        cached = self._last_full_metadata
        if cached is not None and cached[0] == version and cached[1] == identity:
            return _share_view(cached[2])
        # Changed: the previous parse and what was built from it go before the new parse.
        self._last_full_metadata = None
        cached = None
        for forget in self._on_metadata_change:
            forget()
        view = decode_metadata(payload, version)
        self._last_full_metadata = (version, identity, view)
        return _share_view(view)

    def lost_broker_connection(self) -> bool:
        """Whether a broker of the last Metadata closed (or failed) its kept connection since
        the last poll: it may have stopped, and Metadata may have changed."""
        return any(self.pool.lost_connection(*address) for address in self.brokers.values())

    def broker_session_ended(self) -> bool:
        """Whether a kept connection to a broker of the last Metadata must log in again."""
        return any(self.pool.session_ended(*address) for address in self.brokers.values())

    def last_full_metadata(self) -> MetadataView | None:
        """The last full Metadata answer's view, for a poll that reuses it (a view of its own
        over the shared mappings); None before the first answer or after a change was seen
        and not yet parsed."""
        cached = self._last_full_metadata
        return None if cached is None else _share_view(cached[2])

    async def close(self) -> None:
        await self.pool.close()


def _telling(error: CollectError) -> int:
    """How much a failure says about the cluster: not reached 0, timed out 1, answered 2."""
    if isinstance(error, BrokerUnreachable):
        return 0
    return 1 if isinstance(error, RequestTimeout) else 2


def _share_view(view: MetadataView) -> MetadataView:
    """A view of its own for one poll, sharing the (read-only) mappings of `view`: a poll
    that re-routes replaces a mapping on its view, never writes into the shared one."""
    return MetadataView(
        view.brokers, view.leaders, view.by_leader, view.topic_ids, view.leaderless,
        view.replica_ids, view.unlisted_leader_topics,
    )


def batch_partitions(
    per_topic: Mapping[str, Sequence[int]], batch_size: int
) -> list[list[tuple[str, Sequence[int]]]]:
    """Split topic -> partitions into requests of at most `batch_size` partitions."""
    batches: list[list[tuple[str, Sequence[int]]]] = []
    current: list[tuple[str, Sequence[int]]] = []
    room = batch_size
    for topic, partitions in per_topic.items():
        start = 0
        while start < len(partitions):
            chunk = partitions[start : start + room]
            current.append((topic, chunk))
            start += len(chunk)
            room -= len(chunk)
            if room == 0:
                batches.append(current)
                current = []
                room = batch_size
    if current:
        batches.append(current)
    return batches


def fetch_request(
    topic: str, topic_id: uuid.UUID | None, partition: int, offset: int
) -> Callable[[BrokerConnection], Any]:
    """Fetch a few bytes at `offset`, READ_UNCOMMITTED, without waiting for new data.

    The broker always returns the whole first batch even past max_bytes (KIP-74), and that
    batch header holds the max timestamp we want."""
    return fetch_batch_request([(topic, topic_id, partition, offset)])


def fetch_batch_request(
    reads: Sequence[tuple[str, uuid.UUID | None, int, int]],
) -> Callable[[BrokerConnection], Any]:
    """One Fetch for several (topic, topic id, partition, offset) reads, each partition once.

    Each partition gets FETCH_MAX_BYTES and the response as much in total. Only the first
    partition with data is promised its whole first batch (KIP-74); a later one whose batch is
    bigger gets a truncated batch (Kafka: a byte-limited slice of the log; its 61-byte v2
    header is enough, see `first_batch_header`) or no records: the poller then re-reads that
    partition alone."""

    def build(connection: BrokerConnection) -> Any:
        # v13+ names topics by id only; without a known id for every topic stay on v12.
        cap = (
            None
            if all(topic_id is not None and topic_id != _ZERO_UUID for _, topic_id, _, _ in reads)
            else 12
        )
        version = connection.version_for(FetchRequest, max_version=cap)
        by_topic: dict[str, tuple[uuid.UUID | None, list[Any]]] = {}
        for topic, topic_id, partition, offset in reads:
            by_topic.setdefault(topic, (topic_id, []))[1].append(
                FetchRequest.FetchTopic.FetchPartition(
                    partition=partition,
                    current_leader_epoch=-1,
                    fetch_offset=offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=FETCH_MAX_BYTES,
                )
            )
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=FETCH_MAX_BYTES * len(reads),
            isolation_level=READ_UNCOMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    topic_id=topic_id or _ZERO_UUID,
                    partitions=partitions,
                )
                for topic, (topic_id, partitions) in by_topic.items()
            ],
            forgotten_topics_data=[],
            rack_id="",
            version=version,
        )

    return build


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def first_batch_header(records: bytes | memoryview | None) -> BatchHeader | None:
    """Header of the first record batch (magic 2) in Fetch `records`, or None.

    kafka.record parses complete batches; a truncated one falls back to the fixed 61-byte
    v2 header layout, which is all we need (base offset, max timestamp, producer)."""
    if not records:
        return None
    data = bytes(records)
    try:
        batch = MemoryRecords(data).next_batch()
    except Exception:
        batch = None
    if batch is not None and getattr(batch, "magic", 2) == 2:
        return BatchHeader(
            base_offset=batch.base_offset,
            max_timestamp=batch.max_timestamp,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
        )
    if len(data) < _BATCH_HEADER.size:
        return None
    fields = _BATCH_HEADER.unpack_from(data, 0)
    if fields[3] != 2:
        return None
    return BatchHeader(
        base_offset=fields[0],
        max_timestamp=fields[8],
        producer_id=fields[9],
        producer_epoch=fields[10],
    )


def monotonic() -> float:
    return time.monotonic()


async def gather_settled(*aws: Any) -> list[Any]:
    """asyncio.gather that returns exceptions instead of raising (one failure is not all).
    A single awaitable is awaited in place: no task is made for it (one leader's fetch
    session, one coordinator's batch: most calls of a poll)."""
    if len(aws) == 1:
        try:
            return [await aws[0]]
        except Exception as exc:
            return [exc]
    return list(await asyncio.gather(*aws, return_exceptions=True))
