"""Producer state: DescribeProducers's policy. Which partitions are asked, in which batches,
and what each answer teaches; the requests themselves run on the admin driver
(`collect.apis.describe_producers`: every batch sent at once, failures and left-out
partitions counted, and one retry, where a fresh Metadata says, of partitions whose
leadership moved since the poll's). Every partition asked for ends up either in
`PollState.open_entries` (its open transactions, if any) or in `PollState.unobserved`.

Every partition DescribeProducers has answered for is screened from the next poll on
(`collect.screening`: its high watermark and last stable offset, from a fetch session) and
asked DescribeProducers again only when its last stable offset is below its high watermark or
its offsets could not be read; and not even then when the session reports its offsets
unchanged since the poll that asked it: that answer still holds below the high watermark
(docs/kafka-semantics.md#fetch-sessions). Screening is exact whatever the producer states a
partition keeps, and an idle partition costs nothing in its session, where DescribeProducers
costs bytes per partition and per state: so no partition is left out of it by its count. A
partition not answered yet, or whose last answer was an error (or left it out), is asked
directly until it answers, so its errors are DescribeProducers' own.

A partition's first screening (two ListOffsets, then joining its leader's session) costs
more than one DescribeProducers of a partition with few states, so partitions with fewer than
SCREEN_AT_ONCE_FROM_STATES states join at most NEW_SCREENED_PER_POLL per poll (the others
asked directly meanwhile, as cheaply as before): a start on a large cluster spreads that cost
over polls instead of making its first poll many times a later one; all have joined after
a few polls, whatever the cluster's size (a screened partition's state is a few bytes:
`collect.screened`, `collect.screening`). A crowded partition, whose answer is dear, is
screened from its first answer on.

The first poll after a start: each leader is asked DescribeProducers for a sample of its
partitions. Where the sample holds a crowded partition, the leader's others are screened in
the same poll (their answers would be dear too), asking DescribeProducers only where that
leaves it to; elsewhere (few states, or the sample failed: a broker without
DescribeProducers, a garbage answer, a timeout) they are asked directly, and join the
screening poll by poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from exporter.collect.apis.describe_producers import (
    DescribeProducers,
    ProducersAnswer,
    ProducersBatch,
    describe_producers_request,
)
from exporter.collect.client import MetadataView, batch_partitions
from exporter.collect.connection import BrokerConnection, CollectError, ResponseTooLarge
from exporter.collect.driver import BatchRun, Driver, FreshLeaderStrategy
from exporter.collect.fastencode import LeanRequest
from exporter.collect.lso import Offsets
from exporter.collect.pollstate import PollState
from exporter.collect.screened import ScreenedPartitions
from exporter.collect.screening import Screen
from exporter.model import ProducerEntry, TopicPartition
from exporter.settings import ClusterSettings

FIRST_POLL_SAMPLE_PARTITIONS = 100
"""Partitions per leader the first poll asks DescribeProducers before choosing how to read the
leader's others (a topic's first partitions, one topic after another): a crowded one among
them, and the others are screened at once. Its answer grows with the sampled states."""

SCREEN_AT_ONCE_FROM_STATES = 3
"""Producer states from which a partition is crowded: screened from its first answer on,
outside NEW_SCREENED_PER_POLL."""

NEW_SCREENED_PER_POLL = 20_000
"""Partitions with fewer states that join the screening per poll (their first screening, two
ListOffsets and a place in the fetch session, is the dear part of screening)."""

ANSWER_BYTES_PER_STATE = 37
"""One producer state in a DescribeProducers v0 answer: id 8, epoch 4, last sequence 4, last
timestamp 8, coordinator epoch 4, txn start offset 8, tags 1."""
ANSWER_BYTES_PER_PARTITION = 16
"""A partition's own fields (index, error, message, array length, tags), rounded up."""
ANSWER_TOO_LARGE = "ANSWER_TOO_LARGE"
"""Unobserved detail of a partition whose answer alone crossed `max_response_bytes`: it is
not asked with the others (the oversized frame costs the whole connection, and with it
every partition of its leader) but alone, on a connection of its own, with back-off."""
TOO_LARGE_RETRY_MAX_POLLS = 4
"""A partition whose answer alone was too large is asked again alone 1, 2, 4, then every 4
polls after each failure (the frame may have been a broker's or a proxy's fault, or the
producer states may have expired since): observed again within 4 polls of a normal answer;
a partition truly that large costs its leader one answer, and the exporter one connection,
every 4 polls."""

_ByLeader = Mapping[int, Mapping[str, Sequence[int]]]

_Request = tuple[
    int, list[tuple[str, Sequence[int]]], Callable[[BrokerConnection], LeanRequest]
]
"""(leader, batch of (topic, partition indexes), its request builder)."""


class ProducerStateReader:
    """DescribeProducers for one cluster; remembers which denied topics it has logged."""

    def __init__(
        self, driver: Driver, settings: ClusterSettings, *, screening: bool = True
    ) -> None:
        self._client = driver.client
        self._settings = settings
        self._driver = driver
        self._screening = screening
        """False: every partition asked DescribeProducers every poll (the reference strategy
        of the differential test)."""
        self._denied_topics_logged: set[str] = set()
        self._cached_requests: (
            tuple[_ByLeader, int, list[_Request], int, list[tuple[int, TopicPartition]]] | None
        ) = None
        self._screened = ScreenedPartitions()
        """Partitions screened: answered by DescribeProducers without error at their last
        answer, with the producer states it held (counted from 2; 0 for fewer, and for a
        partition the first poll screened before asking it), for batching; pruned to
        Metadata when it changes."""
        self._screened_version = 0
        """Changes with the members of `_screened`, `_ask_alone` and `_too_large`: built
        batches are stale."""
        self._ask_alone: set[TopicPartition] = set()
        """Partitions of a batch whose answer crossed `max_response_bytes`: asked one per
        request until answered (their counts are learnt then)."""
        self._too_large: dict[TopicPartition, tuple[int, int]] = {}
        """Partitions whose answer alone crossed `max_response_bytes`, with the failures in
        a row and the poll from which they are asked again (alone, on a connection of their
        own); screened meanwhile, and ANSWER_TOO_LARGE when they must be asked. Forgotten
        at the first answer."""
        self._polls = 0
        self._joined_this_poll = 0
        """Partitions with fewer states that joined the screening this poll."""
        self._started = False
        """Whether the first poll (`_screened_start`) was made."""
        self._split_cache: tuple[_ByLeader, int, _ByLeader, _ByLeader] | None = None
        self._screen = Screen(driver)
        self._answers: dict[TopicPartition, tuple[int, Offsets, list[ProducerEntry]]] = {}
        """Screened partitions with LSO < HW: (leader, offsets, open entries) of the last
        DescribeProducers answer, reused while the session reports the offsets unchanged."""
        self.offsets_read: Mapping[TopicPartition, Offsets] = {}
        """This poll's screening: the offsets of the partitions with LSO < HW, as their
        leader reported them (the LSO lag needs no ListOffsets for them)."""
        driver.client.on_metadata_change(self._forget_batches)

    def _forget_batches(self) -> None:
        """Metadata changed: the batches and the split were built from the previous view's
        `by_leader` (never reused for another): dropped now, not after the next parse."""
        self._cached_requests = None
        self._split_cache = None
        self._screen.forget_scope()

    def screened_partitions(self) -> int:
        return len(self._screened)

    async def read(self, meta: MetadataView, state: PollState) -> None:
        self._polls += 1
        self._joined_this_poll = 0
        self.offsets_read = {}
        first, self._started = self._screening and not self._started, True
        # NOT_LEADER_OR_FOLLOWER, or a leader that refused the connection: leadership may
        # have moved since Metadata; asked again where a fresh one says, once per poll.
        run: BatchRun[TopicPartition, ProducersBatch] = BatchRun(
            self._driver, FreshLeaderStrategy(self._client)
        )
        if first and any(
            sum(map(len, per_topic.values())) > FIRST_POLL_SAMPLE_PARTITIONS
            for per_topic in meta.by_leader.values()
        ):  # else every partition is in its leader's sample: all asked at once
            await self._screened_start(run, meta, state)
        elif not (self._screening and (self._screened or self._too_large)):
            # Nothing screened (yet): every partition asked (and learnt from while screening).
            await self._round(run, meta.by_leader, state, cache=True)
        else:
            direct, screened = self._split(meta.by_leader, meta.leaders)
            _, screen = await asyncio.gather(
                self._round(run, direct, state, cache=True),
                self._screen.screen(screened, state),
            )
            flagged = self._reuse_answers(screen.ask, screen.unchanged, state)
            # LSO < HW, or offsets unknown: asked as before (never "no transaction").
            await self._round(run, flagged, state, cache=False, offsets=screen.offsets)
            self.offsets_read = screen.read
        await run.retry(self._handler(None), meta, state)

    async def _screened_start(
        self, run: BatchRun[TopicPartition, ProducersBatch], meta: MetadataView, state: PollState
    ) -> None:
        """The first poll: each leader is asked DescribeProducers for a sample of its
        partitions (FIRST_POLL_SAMPLE_PARTITIONS) first. Where the sample holds a crowded
        partition, the leader's other partitions are screened (their fetch session started
        at once, so a topic the principal may not Read answers its error now) and asked only
        where LSO < HW or the offsets are unknown; elsewhere (few states, or a broker that
        predates DescribeProducers, a garbage answer, a timeout) they are asked directly, so
        their verdicts and errors are those of DescribeProducers, and join the screening
        NEW_SCREENED_PER_POLL at a time."""
        sample: dict[int, dict[str, list[int]]] = {}
        rest: dict[int, dict[str, list[int]]] = {}
        for leader, per_topic in meta.by_leader.items():
            taken = _sample(per_topic, FIRST_POLL_SAMPLE_PARTITIONS)
            sample[leader] = {topic: list(per_topic[topic][:n]) for topic, n in taken.items()}
            left = {
                topic: list(indexes[taken.get(topic, 0):])
                for topic, indexes in per_topic.items() if len(indexes) > taken.get(topic, 0)
            }
            if left:
                rest[leader] = left
        await self._round(run, sample, state, cache=False)
        answered = self._screened
        direct: dict[int, dict[str, list[int]]] = {}
        screened: dict[int, dict[str, list[int]]] = {}
        for leader, per_topic in rest.items():
            sampled = sample.get(leader, {})
            if any(
                (answered.get(topic, p) or 0) >= SCREEN_AT_ONCE_FROM_STATES
                for topic, indexes in sampled.items() for p in indexes
            ):
                screened[leader] = per_topic
            else:
                direct[leader] = per_topic
        for per_topic in screened.values():
            for topic, indexes in per_topic.items():
                for p in indexes:
                    if answered.get(topic, p) is None:
                        answered.set(topic, p, 0)
        self._screened_version += 1
        _, screen = await asyncio.gather(
            self._round(run, direct, state, cache=False),
            self._screen.screen(screened, state, start_session=True),
        )
        await self._round(run, screen.ask, state, cache=False, offsets=screen.offsets)
        self.offsets_read = screen.read

    def _reuse_answers(
        self,
        ask: dict[int, dict[str, list[int]]],
        unchanged: Mapping[TopicPartition, Offsets],
        state: PollState,
    ) -> dict[int, dict[str, list[int]]]:
        """`ask` without the partitions whose last answer still holds (their entries go to
        `state`); the answers of partitions no longer asked are forgotten."""
        answers = self._answers
        kept: dict[TopicPartition, tuple[int, Offsets, list[ProducerEntry]]] = {}
        flagged: dict[int, dict[str, list[int]]] = {}
        for leader, per_topic in ask.items():
            for topic, indexes in per_topic.items():
                still: list[int] = []
                for p in indexes:
                    tp = TopicPartition(topic, p)
                    last = answers.get(tp)
                    if last is not None and last[0] == leader and last[1] == unchanged.get(tp):
                        state.open_entries.extend(last[2])
                        kept[tp] = last
                    else:
                        still.append(p)
                if still:
                    flagged.setdefault(leader, {})[topic] = still
        self._answers = kept
        return flagged

    def _split(
        self, by_leader: _ByLeader, leaders: Mapping[TopicPartition, int]
    ) -> tuple[_ByLeader, _ByLeader]:
        """(partitions asked DescribeProducers directly, partitions to screen), by leader;
        kept while Metadata and the screened set are unchanged (same objects, so the direct
        batches' request cache holds too). A Metadata change forgets the partitions it no
        longer lists."""
        cached = self._split_cache
        if (
            cached is not None
            and cached[0] is by_leader
            and cached[1] == self._screened_version
        ):
            return cached[2], cached[3]
        if cached is None or cached[0] is not by_leader:
            self._forget_unlisted(leaders)
        too_large: dict[str, set[int]] = {}
        for tp in self._too_large:
            too_large.setdefault(tp.topic, set()).add(tp.partition)
        direct: dict[int, dict[str, Sequence[int]]] = {}
        screened: dict[int, dict[str, Sequence[int]]] = {}
        for leader, per_topic in by_leader.items():
            for topic, indexes in per_topic.items():
                asked, kept = self._screened.split(topic, indexes)
                refused = too_large.get(topic)
                if refused:  # screened meanwhile (`_too_large`)
                    listed = refused.union(kept)
                    asked = [p for p in indexes if p not in listed]
                    kept = [p for p in indexes if p in listed]
                if asked:
                    direct.setdefault(leader, {})[topic] = asked
                if kept:
                    screened.setdefault(leader, {})[topic] = kept
        self._split_cache = (by_leader, self._screened_version, direct, screened)
        return direct, screened

    def _handler(self, offsets: Mapping[TopicPartition, Offsets] | None) -> _Answers:
        return _Answers(self, offsets)

    async def _round(
        self,
        run: BatchRun[TopicPartition, ProducersBatch],
        by_leader: _ByLeader,
        state: PollState,
        *,
        cache: bool,
        offsets: Mapping[TopicPartition, Offsets] | None = None,
    ) -> None:
        """`offsets`: the screened partitions' offsets, to remember their answers by."""
        await run.ask(self._handler(offsets), self._batches(by_leader, state, cache=cache), state)

    def _batches(
        self, by_leader: _ByLeader, state: PollState, *, cache: bool
    ) -> list[tuple[int, ProducersBatch]]:
        """The requests of `by_leader` (`_requests`), with each partition whose answer alone
        was too large asked alone, on a connection of its own, once its back-off is over
        (ANSWER_TOO_LARGE until then)."""
        requests, too_large = self._requests(by_leader, cache=cache)
        batches = [(leader, ProducersBatch(batch, build)) for leader, batch, build in requests]
        for leader, tp in too_large:
            if self._polls < self._too_large.get(tp, (0, 0))[1]:
                state.error(leader, "DescribeProducers", ANSWER_TOO_LARGE)
                state.unobserved[tp] = ANSWER_TOO_LARGE
                continue
            alone: list[tuple[str, Sequence[int]]] = [(tp.topic, [tp.partition])]
            batches.append(
                (leader, ProducersBatch(alone, describe_producers_request(alone), apart=True))
            )
        return batches

    def _requests(
        self, by_leader: _ByLeader, cache: bool
    ) -> tuple[list[_Request], list[tuple[int, TopicPartition]]]:
        """The batches of `by_leader` with their request builders, and the partitions too
        large to ask (with their leader). The client shares one `by_leader` between polls
        while Metadata is unchanged, so the batches (and the bytes each builder encodes) are
        kept for it and reused, not rebuilt every poll. Batches hold at most
        `describe_producers_batch_size` partitions and, by the states learnt from earlier
        answers, at most half of `max_response_bytes` of expected answer."""
        batch_size = max(1, self._settings.describe_producers_batch_size)
        cached = self._cached_requests
        version = self._screened_version
        if (
            cache and cached is not None and cached[0] is by_leader
            and cached[1] == batch_size and cached[3] == version
        ):
            return cached[2], cached[4]
        budget = self._settings.max_response_bytes // 2
        requests: list[_Request] = []
        too_large: list[tuple[int, TopicPartition]] = []
        for leader, per_topic in by_leader.items():
            for batch in batch_partitions(per_topic, batch_size):
                for part in self._fit(batch, budget, leader, too_large):
                    requests.append((leader, part, describe_producers_request(part)))
        if cache:
            self._cached_requests = (by_leader, batch_size, requests, version, too_large)
        return requests, too_large

    def _fit(
        self,
        batch: list[tuple[str, Sequence[int]]],
        budget: int,
        leader: int,
        too_large: list[tuple[int, TopicPartition]],
    ) -> list[list[tuple[str, Sequence[int]]]]:
        """`batch` split so that no part's expected answer exceeds `budget` bytes; a
        partition that alone would is asked alone, and one whose answer alone crossed
        `max_response_bytes` goes to `too_large`."""
        counts = self._screened
        alone, refused = self._ask_alone, self._too_large
        if not (counts or alone or refused):
            return [batch]
        per_state, per_partition = ANSWER_BYTES_PER_STATE, ANSWER_BYTES_PER_PARTITION

        def cost_of(topic: str, p: int) -> int:
            if alone and TopicPartition(topic, p) in alone:
                return budget
            return per_partition + per_state * (counts.get(topic, p) or 0)

        if not (refused or alone):
            expected = sum(
                per_partition * len(indexes) + per_state * counts.states(t, indexes)
                for t, indexes in batch
            )
            if expected <= budget:
                return [batch]
        parts: list[list[tuple[str, Sequence[int]]]] = []
        current: list[tuple[str, list[int]]] = []
        size = 0
        for topic, indexes in batch:
            for p in indexes:
                tp = TopicPartition(topic, p)
                if tp in refused:
                    too_large.append((leader, tp))
                    continue
                cost = cost_of(topic, p)
                if cost >= budget:
                    parts.append([(topic, [p])])
                    continue
                if size + cost > budget and current:
                    parts.append(list(current))
                    current, size = [], 0
                if current and current[-1][0] == topic:
                    current[-1][1].append(p)
                else:
                    current.append((topic, [p]))
                size += cost
        if current:
            parts.append(list(current))
        return parts

    def _answered(
        self,
        leader: int,
        batch: ProducersBatch,
        answer: ProducersAnswer,
        offsets: Mapping[TopicPartition, Offsets] | None,
    ) -> None:
        """What an answer teaches: the counts to batch and screen by, the answer itself for a
        screened partition (`offsets`), and the partitions it answered of those asked alone."""
        partitions = batch.partitions
        if batch.apart:
            tp = TopicPartition(partitions[0][0], partitions[0][1][0])
            fits = tp not in answer.missing and all(tp != e for e, _ in answer.errors)
            if fits and self._too_large.pop(tp, None) is not None:
                # What the oversized answers taught is unlearnt.
                self._screened_version += 1
        if self._screening:
            self._learn(partitions, answer, screened_batch=offsets is not None)
            if offsets:
                self._remember(leader, partitions, answer, offsets)
        if self._ask_alone:
            answered = [
                tp for topic, indexes in partitions for p in indexes
                if (tp := TopicPartition(topic, p)) in self._ask_alone
            ]
            if answered:
                self._ask_alone.difference_update(answered)
                self._screened_version += 1

    def _failed_reason(self, batch: ProducersBatch, error: CollectError) -> str:
        """A batch whose answer crossed `max_response_bytes` is split (`_answer_too_large`);
        a partition asked alone whose answer did is ANSWER_TOO_LARGE."""
        if isinstance(error, ResponseTooLarge):
            self._answer_too_large(batch.partitions)
            if batch.apart:
                return ANSWER_TOO_LARGE
        return error.kind

    def _forget_unlisted(self, leaders: Mapping[TopicPartition, int]) -> None:
        """Drop what is learnt of partitions Metadata no longer lists."""
        changed = self._screened.keep_only(leaders.__contains__)
        dropped = {tp for tp in self._ask_alone if tp not in leaders}
        self._ask_alone.difference_update(dropped)
        gone = [tp for tp in self._too_large if tp not in leaders]
        for tp in gone:
            del self._too_large[tp]
        if changed or dropped or gone:
            self._screened_version += 1

    def _remember(
        self,
        leader: int,
        batch: Sequence[tuple[str, Sequence[int]]],
        answer: ProducersAnswer,
        offsets: Mapping[TopicPartition, Offsets],
    ) -> None:
        unanswered = {tp for tp, _ in answer.errors} | set(answer.missing)
        entries: dict[TopicPartition, list[ProducerEntry]] = {}
        for entry in answer.entries:
            entries.setdefault(TopicPartition(entry.topic, entry.partition), []).append(entry)
        for topic, partitions in batch:
            for p in partitions:
                tp = TopicPartition(topic, p)
                read = offsets.get(tp)
                if read is not None and tp not in unanswered:
                    self._answers[tp] = (leader, read, entries.get(tp, []))

    def _answer_too_large(self, batch: Sequence[tuple[str, Sequence[int]]]) -> None:
        """The batch's answer crossed `max_response_bytes`: ask its partitions alone next
        time; one asked alone is asked again only alone, on a connection of its own, after
        1, 2, 4 and then every TOO_LARGE_RETRY_MAX_POLLS polls (ANSWER_TOO_LARGE between)."""
        tps = [TopicPartition(topic, p) for topic, indexes in batch for p in indexes]
        if len(tps) == 1:
            failures = self._too_large.get(tps[0], (0, 0))[0] + 1
            wait = min(2 ** (failures - 1), TOO_LARGE_RETRY_MAX_POLLS)
            self._too_large[tps[0]] = (failures, self._polls + wait)
            self._ask_alone.discard(tps[0])
        else:
            self._ask_alone.update(tps)
        self._screened_version += 1

    def _learn(
        self,
        batch: Sequence[tuple[str, Sequence[int]]],
        answer: ProducersAnswer,
        screened_batch: bool,
    ) -> None:
        """The partitions of the batch answered without error are screened from the next
        poll on, with their state counts: crowded ones at once, the others while this poll
        has room (NEW_SCREENED_PER_POLL); those answered with an error, or left out, are
        asked directly until they answer (their errors stay DescribeProducers' own). The
        batch's partitions are walked only where that can change something (a batch of
        screened partitions, or room to join): the rest of a joining poll costs no walk."""
        screened = self._screened
        unanswered = {tp for tp, _ in answer.errors}
        unanswered.update(answer.missing)
        changed = False
        for tp in unanswered:
            if screened.discard(tp.topic, tp.partition):
                changed = True
        counts = dict(answer.state_counts)
        for tp, count in counts.items():
            if tp in unanswered:
                continue
            if tp not in screened and count < SCREEN_AT_ONCE_FROM_STATES:
                continue  # joins below, if there is room
            if screened.set(tp.topic, tp.partition, count):
                changed = True
        room = NEW_SCREENED_PER_POLL - self._joined_this_poll
        if screened_batch or room > 0:
            for topic, partitions in batch:
                for p in partitions:
                    tp = TopicPartition(topic, p)
                    if tp in unanswered:
                        continue
                    if tp in screened:
                        screened.set(topic, p, counts.get(tp, 0))
                    elif room > 0:
                        screened.set(topic, p, counts.get(tp, 0))
                        self._joined_this_poll += 1
                        room -= 1
                        changed = True
        if changed:
            self._screened_version += 1

class _Answers(DescribeProducers):
    """One round of the poll's DescribeProducers, with the reader's policy: what each answer
    teaches it, what a too-large answer means, and how re-routed partitions are batched."""

    def __init__(
        self, reader: ProducerStateReader, offsets: Mapping[TopicPartition, Offsets] | None
    ) -> None:
        super().__init__(reader._settings.name, reader._denied_topics_logged)
        self._reader = reader
        self._offsets = offsets

    def answered(self, broker_id: int, batch: ProducersBatch, answer: ProducersAnswer) -> None:
        self._reader._answered(broker_id, batch, answer, self._offsets)

    def failed_reason(self, batch: ProducersBatch, error: CollectError) -> str:
        return self._reader._failed_reason(batch, error)

    def build_batches(
        self, by_leader: Mapping[int, Mapping[str, Sequence[int]]], state: PollState
    ) -> list[tuple[int, ProducersBatch]]:
        return self._reader._batches(by_leader, state, cache=False)


def _sample(per_topic: Mapping[str, Sequence[int]], size: int) -> dict[str, int]:
    """How many of each topic's first partitions make a sample of `size`: taken in turn, one
    per topic at a time, so that a leader of many topics has each of the first `size` topics
    in it (crowding is mostly a topic's: its producers write to many of its partitions)."""
    taken: dict[str, int] = {}
    depth = 0
    while size > 0:
        progressed = False
        for topic, indexes in per_topic.items():
            if size == 0:
                break
            if len(indexes) > depth:
                taken[topic] = depth + 1
                size -= 1
                progressed = True
        if not progressed:
            break
        depth += 1
    return taken
