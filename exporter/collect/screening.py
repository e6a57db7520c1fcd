"""Screening: a partition's high watermark (HW) and last stable offset (LSO) tell whether
it holds an open transaction below the HW without DescribeProducers, whose answer grows with
every producer state the partition keeps (idempotent ones included, for
`producer.id.expiration.ms`). Kafka's LSO is the first offset of the earliest open
transaction, capped at the HW: LSO == HW means none below the HW, whatever the state count
(docs/kafka-semantics.md#lso-equals-hw). The producer reader screens every partition
DescribeProducers has answered for (`collect.producers`).

The two offsets come from one incremental fetch session per leader (KIP-227,
docs/kafka-semantics.md#fetch-sessions): a READ_COMMITTED Fetch at each partition's last
known HW, with no bytes allowed, whose answer leaves out every partition whose HW and log
start offset did not move since the session's last answer. The LSO moves only with them, so
an idle partition costs nothing after the first answer. A partition the session does not
know yet (its first poll, or after an error) is read with the two ListOffsets instead. Each
exchange runs on the admin driver (`collect.apis.fetch`); the session's state and what its
answers mean stay here.

A partition is "clear" only when its offsets were read without error and LSO == HW; every
other partition (LSO < HW, an error, left out of a full answer, a failed request, an
impossible pair) must be asked DescribeProducers: never "no transaction" by default.

An answer that contradicts its request (a partition listed twice, an incremental answer
carrying another session's id) proves nothing: believed, it could hide an open transaction
for as long as the partition's offsets do not move. The session is dropped and started again
in full in the same poll, and the partitions that answer named are asked DescribeProducers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.apis.fetch import FetchSessionExchange, SessionRequest, next_epoch
from exporter.collect.client import MetadataView
from exporter.collect.driver import Driver, EveryBroker
from exporter.collect.errors import MISSING_FROM_ANSWER, error_name
from exporter.collect.lso import StableOffsets, read_stable_offsets
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

ByLeader = Mapping[int, Mapping[str, Sequence[int]]]

INVALID_OFFSET = "INVALID_OFFSET"
"""An LSO past the HW, or a negative offset: never used as true."""
_NO_VIEW = MetadataView(brokers={}, leaders={}, by_leader={}, topic_ids={})
"""Each leader's session is asked of that leader (`EveryBroker`): no Metadata is read."""
_EVERY_BROKER = EveryBroker()


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

    added: set[TopicPartition] = field(default_factory=set)
    """The partitions in `ask` (each asked once, whatever says so)."""

    def add(self, leader: int, tp: TopicPartition) -> None:
        if tp not in self.added:
            self.added.add(tp)
            self.ask.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)


@dataclass(slots=True)
class _Leader:
    """One leader's screened partitions and the exporter's side of its fetch session. Kept
    so that a poll where nothing moved costs work only for what it reports (and for the
    partitions with LSO < HW), not for every screened partition."""

    wanted: frozenset[TopicPartition] = frozenset()
    session_id: int = 0
    epoch: int = 0
    """The epoch of the next request; 0: a full fetch (which asks for a new session)."""
    held: dict[TopicPartition, int] = field(default_factory=dict)
    """The partitions the broker's session holds, with the fetch offset it holds for each."""
    offsets: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """Of `wanted`, the offsets last read without error."""
    unclear: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """Of `offsets`, those with LSO < HW."""
    cold: set[TopicPartition] = field(default_factory=set)
    """Of `wanted`, those without offsets: read with ListOffsets."""
    to_send: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions to add to the session, or whose fetch offset to move, next request."""
    to_forget: set[TopicPartition] = field(default_factory=set)
    """Partitions the session holds that are no longer screened here: removed next request."""

    def next_request(self) -> SessionRequest:
        """Full (epoch 0): every partition with offsets, at its HW; else what moved or
        joined, and what left."""
        if self.epoch == 0:
            send = {tp: offsets.high_watermark for tp, offsets in self.offsets.items()}
            return SessionRequest(self.session_id, 0, send, [])
        return SessionRequest(
            self.session_id, self.epoch, dict(self.to_send), sorted(self.to_forget)
        )

    def reset(self) -> None:
        self.epoch = 0
        self.held = {}
        self.to_send = {}
        self.to_forget = set()

    def read(self, tp: TopicPartition, offsets: Offsets) -> None:
        self.offsets[tp] = offsets
        if offsets.clear:
            self.unclear.pop(tp, None)
        else:
            self.unclear[tp] = offsets
        if self.held.get(tp) != offsets.high_watermark:
            self.to_send[tp] = offsets.high_watermark

    def unread(self, tp: TopicPartition) -> None:
        """Its offsets are read afresh with ListOffsets (an error on the partition itself)."""
        if tp in self.wanted:
            self.offsets.pop(tp, None)
            self.unclear.pop(tp, None)
            self.to_send.pop(tp, None)
            self.cold.add(tp)


class Screen:
    """Screening for one cluster: per leader, its partitions' offsets and fetch session."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._leaders: dict[int, _Leader] = {}
        self._by_leader: ByLeader | None = None

    async def screen(
        self, by_leader: ByLeader, state: PollState, *, start_session: bool = False
    ) -> ScreenResult:
        """`start_session`: the partitions read with ListOffsets join their leader's fetch
        session in the same poll (the first poll after a start: the Fetch needs Read on the
        topic, as DescribeProducers does, where ListOffsets needs only Describe)."""
        if by_leader is not self._by_leader:
            self._rescope(by_leader)
        result = ScreenResult()
        await asyncio.gather(
            *(self._screen_at(leader, at, state, result, start_session)
              for leader, at in self._leaders.items())
        )
        return result

    def _rescope(self, by_leader: ByLeader) -> None:
        """The screened partitions changed (Metadata, or the screened set): a partition no
        longer screened by the same leader is forgotten there (read afresh where it went)."""
        leaders: dict[int, _Leader] = {}
        for leader, per_topic in by_leader.items():
            wanted = frozenset(
                TopicPartition(topic, p) for topic, indexes in per_topic.items()
                for p in indexes
            )
            at = self._leaders.get(leader) or _Leader()
            if wanted != at.wanted:
                for tp in at.wanted - wanted:
                    at.offsets.pop(tp, None)
                    at.unclear.pop(tp, None)
                    at.to_send.pop(tp, None)
                    at.cold.discard(tp)
                    if tp in at.held:
                        at.to_forget.add(tp)
                added = wanted - at.wanted
                at.cold.update(added)
                at.to_forget.difference_update(added)
                at.wanted = wanted
            leaders[leader] = at  # a leader left out: the broker evicts its idle session
        self._leaders = leaders
        self._by_leader = by_leader

    async def _screen_at(
        self, leader: int, at: _Leader, state: PollState, result: ScreenResult,
        start_session: bool,
    ) -> None:
        cold = sorted(at.cold)
        reported: set[TopicPartition] = set()
        fetched = True
        if at.offsets:
            fetched = await self._fetch(leader, at, state, result, reported)
            if not fetched:  # no session to be had: the two ListOffsets for all
                cold.extend(at.offsets)
                at.offsets.clear()
                at.unclear.clear()
        if cold:
            await self._list_offsets(leader, at, cold, state, result, reported)
            if start_session and fetched and at.offsets:
                await self._fetch(leader, at, state, result, reported)
        for tp, offsets in at.unclear.items():
            result.add(leader, tp)
            result.offsets[tp] = offsets
            if tp not in reported:
                result.unchanged[tp] = offsets

    async def _fetch(
        self, leader: int, at: _Leader, state: PollState, result: ScreenResult,
        reported: set[TopicPartition],
    ) -> bool:
        """Screen the leader's partitions with offsets through its session; False when the
        broker cannot hold one (Fetch older than v7), so that ListOffsets reads them."""
        exchange = FetchSessionExchange(at)
        await self._driver.run(exchange, _EVERY_BROKER, [leader], _NO_VIEW, state, attempts=2)
        if exchange.unsupported:
            return False
        sent = exchange.sent
        if exchange.answer is None or sent is None:
            self._in_doubt(leader, at, result, reported)
            return True
        self._answered(leader, at, sent, exchange.answer, state, result, reported)
        self._ask(leader, at, exchange.doubted, result, reported)
        return True

    @staticmethod
    def _ask(
        leader: int, at: _Leader, tps: set[TopicPartition], result: ScreenResult,
        reported: set[TopicPartition],
    ) -> None:
        """`tps` to DescribeProducers whatever their offsets say (those with LSO < HW are
        asked already), none of them "unchanged"."""
        for tp in tps:
            if tp in at.offsets and tp not in at.unclear:
                result.add(leader, tp)
        reported.update(tps)

    def _in_doubt(
        self, leader: int, at: _Leader, result: ScreenResult, reported: set[TopicPartition]
    ) -> None:
        """No answer to go by: every partition to DescribeProducers, a full fetch next."""
        at.reset()
        for tp in at.offsets:
            if tp not in at.unclear:
                result.add(leader, tp)
        reported.update(at.offsets)  # nothing "unchanged" this poll

    def _answered(
        self, leader: int, at: _Leader, sent: SessionRequest, response: Any,
        state: PollState, result: ScreenResult, reported: set[TopicPartition],
    ) -> None:
        send, forget, full = sent.send, sent.forget, sent.full
        held = at.held
        new = send if full else {tp: o for tp, o in send.items() if tp not in held}
        broken = False
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                if tp not in at.offsets:
                    continue  # not screened here (any more), or read afresh this poll
                reported.add(tp)
                if part.error_code:
                    # Kept in the session (after an error the broker reports it again);
                    # read afresh with ListOffsets next poll.
                    state.error(leader, "Fetch", error_name(part.error_code))
                    at.unread(tp)
                    result.add(leader, tp)
                    continue
                hw, lso = part.high_watermark, part.last_stable_offset
                if not 0 <= lso <= hw:
                    state.error(leader, "Fetch", INVALID_OFFSET)
                    at.unread(tp)
                    result.add(leader, tp)
                    broken = True
                    continue
                at.read(tp, Offsets(hw, lso))
        missing = [tp for tp in new if tp not in reported]
        if missing:
            # A full answer, or a partition just added, always carries the partition.
            state.error(leader, "Fetch", MISSING_FROM_ANSWER)
            for tp in missing:
                if tp not in at.unclear:
                    result.add(leader, tp)
                reported.add(tp)
            broken = True
        if broken or response.session_id == 0:
            # Declined (the broker's cache is full) or in doubt: a full fetch next poll.
            at.session_id = response.session_id
            at.reset()
            return
        if full:
            held.clear()
            at.epoch = 1
            at.to_forget.clear()  # the new session holds only what was sent
        else:
            at.epoch = next_epoch(at.epoch)
            for tp in forget:
                held.pop(tp, None)
            at.to_forget.difference_update(forget)
        at.session_id = response.session_id
        held.update(send)
        for tp in send:
            offsets = at.offsets.get(tp)
            if offsets is None or offsets.high_watermark == held[tp]:
                at.to_send.pop(tp, None)

    async def _list_offsets(
        self, leader: int, at: _Leader, tps: list[TopicPartition], state: PollState,
        result: ScreenResult, reported: set[TopicPartition],
    ) -> None:
        """The two latest offsets of `tps` (the partitions' first poll, before the session
        holds them)."""
        at.cold.difference_update(tps)
        reported.update(tps)
        partitions: dict[str, list[int]] = {}
        for tp in tps:
            partitions.setdefault(tp.topic, []).append(tp.partition)
        read = StableOffsets()
        await read_stable_offsets(self._driver, leader, partitions, read, state)
        for tp in tps:
            hw = read.high_watermarks.get(tp)
            if hw is None:
                at.unread(tp)
                result.add(leader, tp)
            else:
                at.read(tp, Offsets(hw, read.last_stable_offsets[tp]))
