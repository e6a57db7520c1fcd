"""Screening of crowded partitions (issue 28): a partition's high watermark (HW) and last
stable offset (LSO) tell whether it holds an open transaction below the HW without
DescribeProducers, whose answer grows with every producer state the partition keeps
(idempotent ones included, for `producer.id.expiration.ms`). Kafka's LSO is the first offset
of the earliest open transaction, capped at the HW: LSO == HW means none below the HW
(docs/kafka-semantics.md#lso-equals-hw).

The two offsets come from one incremental fetch session per leader (KIP-227,
docs/kafka-semantics.md#fetch-sessions): a READ_COMMITTED Fetch at each partition's last
known HW, with no bytes allowed, whose answer leaves out every partition whose HW and log
start offset did not move since the session's last answer. The LSO moves only with them, so
an idle partition costs nothing after the first answer. A partition the session does not
know yet (its first poll, or after an error) is read with the two ListOffsets instead.

A partition is "clear" only when its offsets were read without error and LSO == HW; every
other partition (LSO < HW, an error, left out of a full answer, a failed request, an
impossible pair) must be asked DescribeProducers: never "no transaction" by default."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse

from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    gather_settled,
    list_offsets_request,
)
from exporter.collect.connection import BrokerConnection, CollectError, UnsupportedApi
from exporter.collect.errors import MISSING_FROM_ANSWER, error_name
from exporter.collect.fastdecode import lean
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

_DECODE_LIST_OFFSETS = lean(ListOffsetsResponse)
_DECODE_FETCH = lean(FetchResponse)

ByLeader = Mapping[int, Mapping[str, Sequence[int]]]

FETCH_SESSION_MIN_VERSION = 7
"""Fetch v7 (Kafka 1.1, KIP-227) is the first with sessions."""
FETCH_SESSION_MAX_VERSION = 12
"""v13+ names topics by id only; the session names them (every supported Kafka offers v12)."""
SESSION_ERRORS = frozenset({70, 71, 106})
"""FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR: the
broker no longer holds the session as the exporter does; a full fetch starts a new one."""
IMPOSSIBLE_OFFSETS = "IMPOSSIBLE_OFFSETS"


@dataclass(frozen=True, slots=True)
class Offsets:
    high_watermark: int
    last_stable_offset: int

    @property
    def clear(self) -> bool:
        return self.last_stable_offset == self.high_watermark


@dataclass(slots=True)
class ScreenResult:
    """What one poll's screening leaves to DescribeProducers."""

    ask: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    """By leader: the partitions with LSO < HW, or whose offsets could not be read."""
    unchanged: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """Of those, the ones whose session reports no change since the last poll (same leader,
    HW, LSO and log start offset): their last DescribeProducers answer still holds below
    the HW (docs/kafka-semantics.md#fetch-sessions)."""
    offsets: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """The offsets read this poll for the partitions in `ask` that have them."""

    def add(self, leader: int, tp: TopicPartition) -> None:
        self.ask.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)


@dataclass(slots=True)
class _Session:
    """The exporter's side of one leader's fetch session."""

    session_id: int = 0
    epoch: int = 0
    """The epoch of the next request; 0: a full fetch (which asks for a new session)."""
    fetch_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    """The partitions the broker's session holds, with the fetch offset it holds for each."""

    def reset(self) -> None:
        self.epoch = 0
        self.fetch_offsets = {}


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch for a live session: +1, wrapping to 1."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class Screen:
    """Screening for one cluster: its sessions by leader and the offsets last read."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client
        self._sessions: dict[int, _Session] = {}
        self._known: dict[TopicPartition, tuple[int, Offsets]] = {}
        """Per screened partition: (leader, offsets) as last read without error."""
        self._wanted: tuple[ByLeader, dict[int, list[TopicPartition]]] | None = None

    async def screen(self, by_leader: ByLeader, state: PollState) -> ScreenResult:
        result = ScreenResult()
        wanted = self._wanted_by_leader(by_leader)
        await asyncio.gather(
            *(self._screen_at(leader, tps, state, result) for leader, tps in wanted.items())
        )
        return result

    def _wanted_by_leader(self, by_leader: ByLeader) -> dict[int, list[TopicPartition]]:
        """`by_leader` as partitions; kept while it is the same mapping (Metadata and the
        crowded set unchanged), else the offsets and sessions of partitions no longer
        screened by the same leader are dropped."""
        cached = self._wanted
        if cached is not None and cached[0] is by_leader:
            return cached[1]
        wanted = {
            leader: [TopicPartition(topic, p) for topic, indexes in per_topic.items()
                     for p in indexes]
            for leader, per_topic in by_leader.items()
        }
        leader_of = {tp: leader for leader, tps in wanted.items() for tp in tps}
        known = self._known
        for tp in [tp for tp, (leader, _) in known.items() if leader_of.get(tp) != leader]:
            del known[tp]  # gone, or led elsewhere now: read afresh there
        for leader in [b for b in self._sessions if b not in wanted]:
            del self._sessions[leader]  # the broker evicts an idle session on its own
        self._wanted = (by_leader, wanted)
        return wanted

    async def _screen_at(
        self, leader: int, tps: list[TopicPartition], state: PollState, result: ScreenResult
    ) -> None:
        known = self._known
        warm = [tp for tp in tps if tp in known]
        cold = [tp for tp in tps if tp not in known]
        session = self._sessions.setdefault(leader, _Session())
        if warm:
            fetched = await self._fetch(leader, session, warm, state, result)
            if not fetched:
                cold.extend(warm)  # no session to be had: the two ListOffsets
        if cold:
            await self._list_offsets(leader, cold, state, result)

    def _verdict(
        self, leader: int, tp: TopicPartition, offsets: Offsets, unchanged: bool,
        result: ScreenResult,
    ) -> None:
        if offsets.clear:
            return
        result.add(leader, tp)
        result.offsets[tp] = offsets
        if unchanged:
            result.unchanged[tp] = offsets

    def _unknown(
        self, leader: int, tp: TopicPartition, result: ScreenResult, *, read_afresh: bool = True
    ) -> None:
        """To DescribeProducers; `read_afresh`: its offsets are read with ListOffsets next
        poll (an error on the partition itself), else the next full fetch reads them."""
        if read_afresh:
            self._known.pop(tp, None)
        result.add(leader, tp)

    async def _fetch(
        self, leader: int, session: _Session, warm: list[TopicPartition], state: PollState,
        result: ScreenResult,
    ) -> bool:
        """Screen `warm` through the leader's session; False when the broker cannot hold
        one (Fetch older than v7), so that ListOffsets reads them instead."""
        for attempt in range(2):
            full = session.epoch == 0
            send = self._to_send(session, warm, full)
            warm_set = set(warm)
            forget = [] if full else [tp for tp in session.fetch_offsets if tp not in warm_set]
            try:
                response = await self._client.send(
                    leader, _session_request(session, send, forget), _DECODE_FETCH
                )
            except UnsupportedApi:
                session.reset()
                return False
            except CollectError as exc:
                state.error(leader, "Fetch", exc.kind)
                session.reset()
                for tp in warm:
                    self._unknown(leader, tp, result, read_afresh=False)
                return True
            if response.error_code in SESSION_ERRORS and attempt == 0:
                state.error(leader, "Fetch", error_name(response.error_code))
                session.reset()
                continue
            if response.error_code:
                state.error(leader, "Fetch", error_name(response.error_code))
                session.reset()
                for tp in warm:
                    self._unknown(leader, tp, result, read_afresh=False)
                return True
            self._answered(leader, session, warm, send, forget, full, response, state, result)
            return True
        return True  # not reached: the second attempt returns

    def _to_send(
        self, session: _Session, warm: list[TopicPartition], full: bool
    ) -> dict[TopicPartition, int]:
        known = self._known
        held = session.fetch_offsets
        send: dict[TopicPartition, int] = {}
        for tp in warm:
            offset = known[tp][1].high_watermark
            if full or held.get(tp) != offset:
                send[tp] = offset
        return send

    async def _list_offsets(
        self, leader: int, tps: list[TopicPartition], state: PollState, result: ScreenResult
    ) -> None:
        """The two latest offsets of `tps`: READ_UNCOMMITTED gives the HW, READ_COMMITTED
        the LSO (the partitions' first poll, before the session holds them)."""
        partitions: dict[str, list[int]] = {}
        for tp in tps:
            partitions.setdefault(tp.topic, []).append(tp.partition)
        answers = await gather_settled(
            self._client.send(
                leader, list_offsets_request(partitions, READ_UNCOMMITTED), _DECODE_LIST_OFFSETS
            ),
            self._client.send(
                leader, list_offsets_request(partitions, READ_COMMITTED), _DECODE_LIST_OFFSETS
            ),
        )
        by_answer: list[dict[TopicPartition, Any]] = []
        for answer in answers:
            if isinstance(answer, CollectError):
                state.error(leader, "ListOffsets", answer.kind)
                for tp in tps:
                    self._unknown(leader, tp, result)
                return
            if isinstance(answer, BaseException):
                raise answer
            parts: dict[TopicPartition, Any] = {}
            for topic in answer.topics:
                for part in topic.partitions:
                    parts.setdefault(TopicPartition(topic.name, part.partition_index), part)
            by_answer.append(parts)
        high_watermarks, stable_offsets = by_answer
        for tp in tps:
            a, b = high_watermarks.get(tp), stable_offsets.get(tp)
            if a is None or b is None:  # left out of an answer: counted (issue 30)
                state.error(leader, "ListOffsets", MISSING_FROM_ANSWER)
            elif a.error_code or b.error_code:
                for part in (a, b):
                    if part.error_code:
                        state.error(leader, "ListOffsets", error_name(part.error_code))
            elif not 0 <= b.offset <= a.offset:
                state.error(leader, "ListOffsets", IMPOSSIBLE_OFFSETS)
            else:
                offsets = Offsets(a.offset, b.offset)
                self._known[tp] = (leader, offsets)
                self._verdict(leader, tp, offsets, False, result)
                continue
            self._unknown(leader, tp, result)

    def _answered(
        self, leader: int, session: _Session, warm: list[TopicPartition],
        send: dict[TopicPartition, int], forget: list[TopicPartition], full: bool,
        response: Any, state: PollState, result: ScreenResult,
    ) -> None:
        known = self._known
        held = session.fetch_offsets
        new = send if full else {tp: o for tp, o in send.items() if tp not in held}
        reported: set[TopicPartition] = set()
        broken = False
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                if tp not in send and tp not in held:
                    continue  # not asked about: ignored
                reported.add(tp)
                if part.error_code:
                    # Kept in the session (the broker reports it again once it can); read
                    # afresh with ListOffsets next poll, and forgotten by the session then.
                    state.error(leader, "Fetch", error_name(part.error_code))
                    self._unknown(leader, tp, result)
                    continue
                hw, lso = part.high_watermark, part.last_stable_offset
                if not 0 <= lso <= hw:
                    state.error(leader, "Fetch", IMPOSSIBLE_OFFSETS)
                    self._unknown(leader, tp, result)
                    broken = True
                    continue
                offsets = Offsets(hw, lso)
                known[tp] = (leader, offsets)
                self._verdict(leader, tp, offsets, False, result)
        missing = [tp for tp in new if tp not in reported]
        if missing:
            # A full answer, or a partition just added, always carries the partition.
            state.error(leader, "Fetch", MISSING_FROM_ANSWER)
            for tp in missing:
                self._unknown(leader, tp, result, read_afresh=False)
            broken = True
        for tp in warm:
            if tp not in reported and tp not in new:
                entry = known.get(tp)
                if entry is not None:
                    self._verdict(leader, tp, entry[1], True, result)
        if broken or response.session_id == 0:
            # Declined (the broker's cache is full) or in doubt: a full fetch next poll.
            session.session_id = response.session_id
            session.reset()
            return
        if full:
            held.clear()
            session.epoch = 1
        else:
            session.epoch = next_epoch(session.epoch)
            for tp in forget:
                held.pop(tp, None)
        session.session_id = response.session_id
        held.update(send)


def _session_request(
    session: _Session, send: dict[TopicPartition, int], forget: list[TopicPartition]
) -> Any:
    """Fetch READ_COMMITTED at each partition's last known HW with no bytes allowed (records
    come back only when committed data passed that HW, and then only the first partition's
    first batch: KIP-74), without waiting."""
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in send.items():
        by_topic.setdefault(tp.topic, []).append(
            FetchRequest.FetchTopic.FetchPartition(
                partition=tp.partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=0,
            )
        )
    forgotten: dict[str, list[int]] = {}
    for tp in forget:
        forgotten.setdefault(tp.topic, []).append(tp.partition)
    session_id, epoch = session.session_id, session.epoch

    def build(connection: BrokerConnection) -> Any:
        version = connection.version_for(FetchRequest, max_version=FETCH_SESSION_MAX_VERSION)
        if version < FETCH_SESSION_MIN_VERSION:
            raise UnsupportedApi(f"Fetch v{version}: no sessions before v7")
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=0,
            isolation_level=READ_COMMITTED,
            session_id=session_id,
            session_epoch=epoch,
            topics=[
                FetchRequest.FetchTopic(topic=topic, partitions=partitions)
                for topic, partitions in by_topic.items()
            ],
            forgotten_topics_data=[
                FetchRequest.ForgottenTopic(topic=topic, partitions=partitions)
                for topic, partitions in forgotten.items()
            ],
            rack_id="",
            version=version,
        )

    return build
