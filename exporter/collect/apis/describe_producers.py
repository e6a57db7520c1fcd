"""DescribeProducers (Kafka 2.8+, KIP-664) at each partition's leader: the producer states it
keeps for each partition, with the first offset of each open transaction (reference
find-hanging step 2).

Its batches are many (a few hundred partitions each) and are built once and reused while
Metadata is unchanged, so the caller routes and builds them (`collect.producers`: which
partitions are asked, how they are batched, the answer-size back-off) and this handler runs
them on the driver as a `BatchHandler`: what an answer, a failed request or a partition left
out means for the poll."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

from exporter.collect.client import ClusterClient
from exporter.collect.connection import BrokerConnection, BrokerUnreachable, CollectError
from exporter.collect.driver import BatchHandler, Outcome
from exporter.collect.errors import (
    LEADER_NOT_AVAILABLE,
    MISSING_FROM_ANSWER,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    TOPIC_AUTHORIZATION_FAILED,
    error_name,
)
from exporter.collect.fastdecode import decode_open_producers
from exporter.collect.fastencode import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_PRODUCERS_VERSIONS,
    LeanRequest,
    encode_describe_producers,
)
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState
from exporter.logs import get_logger
from exporter.model import ProducerEntry, TopicPartition

log = get_logger()

# Lean and open-only: partitions with error 0 and no producer with an open transaction are
# not in the answer's partitions; they still count as answered. At 200k partitions that is
# ~198k fewer partitions (and ~20k fewer idempotent producers) decoded into objects per poll.
_DECODE = functools.partial(decode_open_producers, DescribeProducersResponse)


def describe_producers_request(
    batch: Sequence[tuple[str, Sequence[int]]],
) -> Callable[[BrokerConnection], LeanRequest]:
    """DescribeProducers for `batch`, written by `fastencode` (kafka-python's bytes). The body
    is encoded once per version and kept: a builder reused for the next poll sends the same
    bytes without encoding them again."""
    bodies: dict[int, bytes] = {}

    def body(version: int) -> bytes:
        encoded = bodies.get(version)
        if encoded is None:
            encoded = bodies[version] = encode_describe_producers(batch, version)
        return encoded

    def build(connection: BrokerConnection) -> LeanRequest:
        version = connection.version_for(
            DescribeProducersRequest, max_version=DESCRIBE_PRODUCERS_VERSIONS[-1]
        )
        return LeanRequest(
            api_key=DESCRIBE_PRODUCERS,
            version=version,
            flexible=True,
            name=DescribeProducersRequest.name,
            response_class=DescribeProducersResponse,
            encode_body=functools.partial(body, version),
        )

    return build


@dataclass(slots=True)
class ProducersAnswer:
    """What one DescribeProducers answer says about the partitions it was asked for."""

    entries: list[ProducerEntry] = field(default_factory=list)
    errors: list[tuple[TopicPartition, int]] = field(default_factory=list)
    """Partitions answered with an error code (not observed)."""
    missing: list[TopicPartition] = field(default_factory=list)
    """Partitions asked for that the answer leaves out (not observed either)."""
    state_counts: list[tuple[TopicPartition, int]] = field(default_factory=list)
    """Partitions answered (error 0) with two or more producer states, open or not, and how
    many: what the poller learns to screen by."""


def parse_describe_producers(
    response: Any,
    leader_id: int,
    requested: Sequence[tuple[str, Sequence[int]]],
    *,
    open_only: bool = True,
) -> ProducersAnswer:
    """DescribeProducers answer from `leader_id` (kafka-python's or the lean one from
    `collect.fastdecode`, same field names) -> entries (with an open transaction only, unless
    `open_only` is False), per-partition errors and partitions left out."""
    answer = ProducersAnswer()
    append_entry = answer.entries.append
    answered: dict[str, list[int]] = {}
    for topic in response.topics:
        name = topic.name
        lean_indexes = getattr(topic, "answered_indexes", None)
        indexes = (
            [p.partition_index for p in topic.partitions]  # kafka-python keeps every partition
            if lean_indexes is None
            else lean_indexes.tolist()
        )
        answered[name] = answered[name] + indexes if name in answered else indexes
        lean_counts = getattr(topic, "state_counts", None)
        if lean_counts is not None:
            answer.state_counts.extend(
                (TopicPartition(name, index), count) for index, count in lean_counts
            )
        for p in topic.partitions:
            code = p.error_code
            if code != NONE:
                answer.errors.append((TopicPartition(name, p.partition_index), code))
                continue
            if lean_counts is None and len(p.active_producers) >= 2:
                answer.state_counts.append(
                    (TopicPartition(name, p.partition_index), len(p.active_producers))
                )
            for producer in p.active_producers:
                start_offset = producer.current_txn_start_offset
                if start_offset >= 0 or not open_only:
                    append_entry(
                        ProducerEntry(
                            name,
                            p.partition_index,
                            leader_id,
                            producer.producer_id,
                            producer.producer_epoch,
                            producer.coordinator_epoch,
                            start_offset,
                            producer.last_timestamp,
                        )
                    )
    for topic_name, partitions in requested:
        got = answered.get(topic_name)
        if got is not None and (got == list(partitions) or not set(partitions).difference(got)):
            continue  # brokers answer in the order asked: the list compare is the fast path
        got_set = set(got or ())
        answer.missing.extend(
            TopicPartition(topic_name, p) for p in partitions if p not in got_set
        )
    return answer


class ProducersBatch(NamedTuple):
    """One DescribeProducers request to one leader: its partitions and their request."""

    partitions: Sequence[tuple[str, Sequence[int]]]
    build: Callable[[BrokerConnection], LeanRequest]
    apart: bool = False
    """Asked on a connection of its own (`ClusterClient.send_apart`): an answer that may cost
    its connection costs nothing else asked of the leader."""


def partitions_of(batch: ProducersBatch) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic, indexes in batch.partitions for p in indexes]


class DescribeProducers(BatchHandler[TopicPartition, ProducersBatch, ProducersAnswer]):
    """Every partition asked ends up with its open transactions in `PollState.open_entries`
    (none, if it has none) or in `PollState.unobserved` with the reason: its error, the failed
    request's kind, MISSING_FROM_ANSWER. A broker that predates the API is logged once and
    recorded in `PollState.unobservable_brokers`. A partition whose leader answered
    NOT_LEADER_OR_FOLLOWER or refused the connection is given back, to be asked again where a
    fresh Metadata says (`FreshLeaderStrategy`); on the last attempt its error stands.

    The reader's policy hooks: `answered` (what an answer teaches it), `failed_reason` (what a
    failed request means for its batch) and `build_batches` (how partitions routed anew are
    batched)."""

    api = unsupported_name = "DescribeProducers"

    def __init__(self, cluster: str, denied_topics_logged: set[str]) -> None:
        self._cluster = cluster
        self._denied_topics_logged = denied_topics_logged
        """Topics whose TOPIC_AUTHORIZATION_FAILED was logged (once per topic, the caller's
        set: kept across polls)."""

    def ask(
        self, client: ClusterClient, broker_id: int, batch: ProducersBatch
    ) -> Awaitable[Any]:
        send = client.send_apart if batch.apart else client.send
        return send(broker_id, batch.build, _DECODE)

    def parse(
        self, broker_id: int, batch: ProducersBatch, response: Any
    ) -> tuple[ProducersAnswer, Sequence[TopicPartition]]:
        answer = parse_describe_producers(response, broker_id, batch.partitions)
        return answer, answer.missing

    def handle(
        self, broker_id: int, batch: ProducersBatch, answer: ProducersAnswer,
        state: PollState, *, last: bool,
    ) -> Outcome[TopicPartition]:
        state.open_entries.extend(answer.entries)
        self.answered(broker_id, batch, answer)
        outcome: Outcome[TopicPartition] = Outcome()
        for tp, code in answer.errors:
            err = error_name(code)
            state.error(broker_id, self.api, err)
            if code == NOT_LEADER_OR_FOLLOWER and not last:
                outcome.retry.append(tp)
                continue
            state.unobserved[tp] = err
            if code == TOPIC_AUTHORIZATION_FAILED and tp.topic not in self._denied_topics_logged:
                self._denied_topics_logged.add(tp.topic)
                log.warning(
                    "topic_not_authorized",
                    cluster=self._cluster,
                    topic=tp.topic,
                    hint="DescribeProducers needs READ on the topic",
                )
        return outcome

    def left_out(
        self, broker_id: int, keys: Sequence[TopicPartition], state: PollState
    ) -> Outcome[TopicPartition]:
        # Asked for but not answered: unknown, not "no transaction".
        for tp in keys:
            state.unobserved.setdefault(tp, MISSING_FROM_ANSWER)
        return Outcome()

    def failed(
        self, broker_id: int, batch: ProducersBatch, error: CollectError, state: PollState,
        *, last: bool,
    ) -> Outcome[TopicPartition]:
        # Down or slow broker, garbage answer, or one that predates DescribeProducers
        # (Kafka < 2.8): its partitions are unknown, never "no transactions".
        reason = self.failed_reason(batch, error)
        if error.kind == UNSUPPORTED_API_KIND:
            state.unobservable_brokers.add(broker_id)
        tps = partitions_of(batch)
        for tp in tps:
            state.unobserved[tp] = reason
        if isinstance(error, BrokerUnreachable) and not last and not batch.apart:
            # Refused or closed: the broker may be gone and its partitions led elsewhere
            # (Metadata may be an earlier poll's); asked again where Metadata says now.
            return Outcome(retry=tps)
        return Outcome()

    def unrouted(
        self, keys: list[TopicPartition], state: PollState, error: CollectError | None
    ) -> None:
        if error is not None:
            # No fresh Metadata: a partition that answered NOT_LEADER_OR_FOLLOWER keeps that
            # error; one whose leader refused the connection keeps the request's kind.
            for tp in keys:
                state.unobserved.setdefault(tp, error_name(NOT_LEADER_OR_FOLLOWER))
            return
        for tp in keys:
            state.unobserved[tp] = error_name(LEADER_NOT_AVAILABLE)

    def batches(
        self, routes: Mapping[int, list[TopicPartition]], state: PollState
    ) -> list[tuple[int, ProducersBatch]]:
        by_leader: dict[int, dict[str, list[int]]] = {}
        for leader, tps in routes.items():
            per_topic = by_leader[leader] = {}
            for tp in tps:
                state.unobserved.pop(tp, None)  # asked again: its new answer or error decides
                per_topic.setdefault(tp.topic, []).append(tp.partition)
        return self.build_batches(by_leader, state)

    # The reader's policy.

    def answered(self, broker_id: int, batch: ProducersBatch, answer: ProducersAnswer) -> None:
        """What the reader learns from an answer (nothing by default)."""

    def failed_reason(self, batch: ProducersBatch, error: CollectError) -> str:
        """The reason a failed request leaves its partitions unobserved with."""
        return error.kind

    def build_batches(
        self, by_leader: Mapping[int, Mapping[str, Sequence[int]]], state: PollState
    ) -> list[tuple[int, ProducersBatch]]:
        """The batches of `by_leader` (leader -> topic -> partitions): one per leader by
        default."""
        batches: list[tuple[int, ProducersBatch]] = []
        for leader, per_topic in by_leader.items():
            partitions = list(per_topic.items())
            batches.append(
                (leader, ProducersBatch(partitions, describe_producers_request(partitions)))
            )
        return batches
