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
other partition (LSO < HW, an error, left out of a full answer, an impossible pair, offsets
that could not be read at all) must be asked DescribeProducers: never "no transaction" by
default. When a leader's Fetch brings no answer, its partitions are read with ListOffsets
first, as on their first poll.

An answer that contradicts its request (a partition listed twice, an incremental answer
carrying another session's id) proves nothing: believed, it could hide an open transaction
for as long as the partition's offsets do not move. The session is dropped and started again
in full in the same poll, and the partitions that answer named are asked DescribeProducers."""

from __future__ import annotations

import asyncio
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from operator import attrgetter
from typing import Any

from exporter.collect.apis.fetch import FetchSessionExchange, SessionRequest, next_epoch
from exporter.collect.client import MetadataView
from exporter.collect.driver import Driver, EveryBroker
from exporter.collect.errors import MISSING_FROM_ANSWER, error_name
from exporter.collect.lso import Offsets, StableOffsets, read_stable_offsets
from exporter.collect.pollstate import PollState
from exporter.model import TopicPartition

ByLeader = Mapping[int, Mapping[str, Sequence[int]]]

INVALID_OFFSET = "INVALID_OFFSET"
"""An LSO past the HW, or a negative offset: never used as true."""
_NO_VIEW = MetadataView(brokers={}, leaders={}, by_leader={}, topic_ids={})
"""Each leader's session is asked of that leader (`EveryBroker`): no Metadata is read."""
_EVERY_BROKER = EveryBroker()


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
    """The last offsets read for the partitions in `ask` that have them."""
    read: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """Of those, the ones their leader reported this poll (read, or unchanged in its
    session): a Fetch up to v10 is answered only by the leader (`collect.apis.fetch`)."""
    fresh: set[TopicPartition] = field(default_factory=set)
    """Partitions whose offsets were read this poll."""

    added: set[TopicPartition] = field(default_factory=set)
    """The partitions in `ask` (each asked once, whatever says so)."""

    def add(self, leader: int, tp: TopicPartition) -> None:
        if tp not in self.added:
            self.added.add(tp)
            self.ask.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)


def _ascending(indexes: Sequence[int]) -> bool:
    return all(a < b for a, b in pairwise(indexes))


def _none(size: int) -> array[int]:
    return array("q", [NO_OFFSET]) * size


_IN_ORDER = attrgetter("topic", "partition")
"""Sorts partitions as their dataclass order does, without a Python call per comparison."""
NO_OFFSET = -1
"""In `_Topic`'s arrays: no HW read (the partition is cold) / not held by the session."""


@dataclass(slots=True)
class _Topic:
    """A leader's screened partitions of one topic, ascending, with, at the same position,
    the HW last read without error and the fetch offset the leader's session holds (each
    NO_OFFSET when there is none). Arrays, not dicts keyed by TopicPartition: a screened
    partition costs a few bytes here, so every partition of a large cluster can be screened."""

    partitions: array[int]
    """A copy, not Metadata's list: a Metadata answer's parse is let go when the next one
    comes (`ClusterClient.on_metadata_change`)."""
    high_watermarks: array[int]
    held: array[int]

    @classmethod
    def of(cls, indexes: Sequence[int]) -> _Topic:
        partitions = array("i", indexes if _ascending(indexes) else sorted(indexes))
        return cls(partitions, _none(len(partitions)), _none(len(partitions)))

    def slots(self) -> Iterator[tuple[int, int, int]]:
        """(partition, HW, held fetch offset) of each partition."""
        return zip(self.partitions, self.high_watermarks, self.held, strict=True)

    def position(self, partition: int) -> int:
        """Where `partition` is in the arrays; -1 when it is not screened here."""
        i = bisect_left(self.partitions, partition)
        if i < len(self.partitions) and self.partitions[i] == partition:
            return i
        return -1


@dataclass(slots=True)
class _Leader:
    """One leader's screened partitions and the exporter's side of its fetch session. Kept
    so that a poll where nothing moved costs work only for what it reports (and for the
    partitions with LSO < HW), not for every screened partition."""

    topics: dict[str, _Topic] = field(default_factory=dict)
    session_id: int = 0
    epoch: int = 0
    """The epoch of the next request; 0: a full fetch (which asks for a new session)."""
    read_count: int = 0
    """Screened partitions with a HW read without error."""
    unclear: dict[TopicPartition, Offsets] = field(default_factory=dict)
    """Of those, the ones with LSO < HW, and their offsets."""
    cold: set[TopicPartition] = field(default_factory=set)
    """Screened partitions without offsets: read with ListOffsets."""
    to_send: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions to add to the session, or whose fetch offset to move, next request."""
    to_forget: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions the session holds that are no longer screened here, with the fetch offset
    it holds (kept if one comes back): removed next request."""

    def _slot(self, tp: TopicPartition) -> tuple[_Topic, int] | None:
        topic = self.topics.get(tp.topic)
        if topic is None:
            return None
        i = topic.position(tp.partition)
        return None if i < 0 else (topic, i)

    def high_watermark(self, tp: TopicPartition) -> int:
        """The HW last read without error; NO_OFFSET when none (or not screened here)."""
        slot = self._slot(tp)
        return NO_OFFSET if slot is None else slot[0].high_watermarks[slot[1]]

    def held_at(self, tp: TopicPartition) -> int:
        slot = self._slot(tp)
        return NO_OFFSET if slot is None else slot[0].held[slot[1]]

    def _read_high_watermarks(self) -> Iterator[tuple[TopicPartition, int]]:
        """Every screened partition with a HW, and that HW."""
        for name, topic in self.topics.items():
            for p, hw, _ in topic.slots():
                if hw != NO_OFFSET:
                    yield TopicPartition(name, p), hw

    def read_partitions(self) -> list[TopicPartition]:
        return [tp for tp, _ in self._read_high_watermarks()]

    def next_request(self) -> SessionRequest:
        """Full (epoch 0): every partition with offsets, at its HW; else what moved or
        joined, and what left."""
        if self.epoch == 0:
            return SessionRequest(self.session_id, 0, dict(self._read_high_watermarks()), [])
        return SessionRequest(
            self.session_id, self.epoch, dict(self.to_send), sorted(self.to_forget)
        )

    def reset(self) -> None:
        self.epoch = 0
        self.forget_held()
        self.to_send = {}

    def forget_held(self) -> None:
        """The session holds nothing (a new one starts)."""
        for topic in self.topics.values():
            topic.held = _none(len(topic.partitions))
        self.to_forget = {}

    def read(self, tp: TopicPartition, offsets: Offsets) -> None:
        slot = self._slot(tp)
        if slot is None:
            return
        topic, i = slot
        hw = offsets.high_watermark
        if topic.high_watermarks[i] == NO_OFFSET:
            self.read_count += 1
        topic.high_watermarks[i] = hw
        if offsets.clear:
            self.unclear.pop(tp, None)
        else:
            self.unclear[tp] = offsets
        if topic.held[i] != hw:
            self.to_send[tp] = hw

    def unread(self, tp: TopicPartition) -> None:
        """Its offsets are read afresh with ListOffsets (an error on the partition itself)."""
        slot = self._slot(tp)
        if slot is None:
            return
        topic, i = slot
        if topic.high_watermarks[i] != NO_OFFSET:
            self.read_count -= 1
            topic.high_watermarks[i] = NO_OFFSET
        self.unclear.pop(tp, None)
        self.to_send.pop(tp, None)
        self.cold.add(tp)

    def unread_all(self) -> list[TopicPartition]:
        """Every partition's offsets forgotten (to be read with ListOffsets): returned."""
        read = self.read_partitions()
        for topic in self.topics.values():
            topic.high_watermarks = _none(len(topic.partitions))
        self.read_count = 0
        self.unclear.clear()
        return read

    def sent(self, send: Mapping[TopicPartition, int]) -> None:
        """The session now holds `send` at those offsets: a partition whose HW has not moved
        since is sent no more."""
        for tp, offset in send.items():
            slot = self._slot(tp)
            if slot is None:
                continue
            topic, i = slot
            topic.held[i] = offset
            hw = topic.high_watermarks[i]
            if hw in (NO_OFFSET, offset):
                self.to_send.pop(tp, None)
        if not self.to_send:
            self.to_send = {}  # an emptied dict keeps its table

    def rescope(self, per_topic: Mapping[str, Sequence[int]]) -> None:
        """The leader's screened partitions are now `per_topic`: a partition no longer
        screened here is forgotten (the session drops it next request), one new here is
        cold."""
        topics: dict[str, _Topic] = {}
        for name, indexes in per_topic.items():
            old = self.topics.get(name)
            topic = _Topic.of(indexes)
            if old is not None and old.partitions == topic.partitions:
                topics[name] = old
                continue
            kept: dict[int, tuple[int, int]] = {}
            if old is not None:
                kept = {p: (hw, held) for p, hw, held in old.slots()}
            for i, p in enumerate(topic.partitions):
                was = kept.pop(p, None)
                if was is None:
                    tp = TopicPartition(name, p)
                    self.cold.add(tp)
                    topic.held[i] = self.to_forget.pop(tp, NO_OFFSET)
                else:
                    topic.high_watermarks[i], topic.held[i] = was
            for p, (hw, held) in kept.items():
                self._drop(TopicPartition(name, p), hw, held)
            topics[name] = topic
        for name, old in self.topics.items():
            if name not in topics:
                for p, hw, held in old.slots():
                    self._drop(TopicPartition(name, p), hw, held)
        self.topics = topics

    def _drop(self, tp: TopicPartition, hw: int, held: int) -> None:
        if hw != NO_OFFSET:
            self.read_count -= 1
        self.unclear.pop(tp, None)
        self.to_send.pop(tp, None)
        self.cold.discard(tp)
        if held != NO_OFFSET:
            self.to_forget[tp] = held


class Screen:
    """Screening for one cluster: per leader, its partitions' offsets and fetch session."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._leaders: dict[int, _Leader] = {}
        self._by_leader: ByLeader | None = None

    def forget_scope(self) -> None:
        """Metadata changed: `by_leader` (Metadata's lists) is let go with its parse; the next
        screen rescopes."""
        self._by_leader = None

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
            at = self._leaders.get(leader) or _Leader()
            at.rescope(per_topic)
            leaders[leader] = at  # a leader left out: the broker evicts its idle session
        self._leaders = leaders
        self._by_leader = by_leader

    async def _screen_at(
        self, leader: int, at: _Leader, state: PollState, result: ScreenResult,
        start_session: bool,
    ) -> None:
        cold = sorted(at.cold, key=_IN_ORDER)
        reported: set[TopicPartition] = set()
        fetched = True
        if at.read_count:
            fetched = await self._fetch(leader, at, state, result, reported)
            if not fetched:  # no session, or no answer to go by: the two ListOffsets for all
                cold.extend(at.unread_all())
        if cold:
            await self._list_offsets(leader, at, cold, state, result, reported)
            if start_session and fetched and at.read_count:
                await self._fetch(leader, at, state, result, reported)
        for tp, offsets in at.unclear.items():
            result.add(leader, tp)
            result.offsets[tp] = offsets
            if tp not in reported:
                result.unchanged[tp] = offsets
                result.read[tp] = offsets
            elif tp in result.fresh:
                result.read[tp] = offsets

    async def _fetch(
        self, leader: int, at: _Leader, state: PollState, result: ScreenResult,
        reported: set[TopicPartition],
    ) -> bool:
        """Screen the leader's partitions with offsets through its session; False when the
        broker cannot hold one (Fetch older than v7) or gave no answer to go by (a failed
        request, an error code, a contradiction again), so that ListOffsets reads them: a few
        bytes per partition whatever its producer states, where DescribeProducers of them all
        would load most the broker that just failed to answer. A new session starts next
        poll."""
        exchange = FetchSessionExchange(at)
        await self._driver.run(exchange, _EVERY_BROKER, [leader], _NO_VIEW, state, attempts=2)
        sent = exchange.sent
        if exchange.unsupported or exchange.answer is None or sent is None:
            self._ask(leader, at, exchange.doubted, result, reported)
            at.reset()
            return False
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
            if at.high_watermark(tp) != NO_OFFSET and tp not in at.unclear:
                result.add(leader, tp)
        reported.update(tps)

    def _answered(
        self, leader: int, at: _Leader, sent: SessionRequest, response: Any,
        state: PollState, result: ScreenResult, reported: set[TopicPartition],
    ) -> None:
        send, forget, full = sent.send, sent.forget, sent.full
        new = send if full else {
            tp: o for tp, o in send.items() if at.held_at(tp) == NO_OFFSET
        }
        broken = False
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                if at.high_watermark(tp) == NO_OFFSET:
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
                result.fresh.add(tp)
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
            at.forget_held()  # the new session holds only what was sent
            at.epoch = 1
        else:
            at.epoch = next_epoch(at.epoch)
            for tp in forget:
                at.to_forget.pop(tp, None)
        at.session_id = response.session_id
        at.sent(send)

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
                result.fresh.add(tp)
