"""Fetch as the screening uses it: one exchange of a leader's incremental fetch session
(KIP-227, docs/kafka-semantics.md#fetch-sessions), READ_COMMITTED with no bytes allowed, whose
answer carries each reported partition's high watermark and last stable offset. The session's
state (what it holds, its epoch, what to send next) is the caller's (`collect.screening`): this
module builds one request from it, reads the answer, and checks that the answer can be the one
to that request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

from exporter.collect.client import READ_COMMITTED, ClusterClient
from exporter.collect.connection import BrokerConnection, CollectError, UnsupportedApi
from exporter.collect.driver import Outcome, WholeAnswer
from exporter.collect.errors import INCONSISTENT_ANSWER
from exporter.collect.fastdecode import lean
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState
from exporter.model import TopicPartition

_DECODE_FETCH = lean(FetchResponse)

FETCH_SESSION_MIN_VERSION = 7
"""Fetch v7 (Kafka 1.1, KIP-227) is the first with sessions."""
FETCH_SESSION_MAX_VERSION = 10
"""From v11 on, a broker serves a consumer's Fetch from a follower too (KIP-392,
docs/kafka-semantics.md#metadata-between-polls); up to v10 only the leader answers, and an
old leader answers NOT_LEADER_OR_FOLLOWER, so the session itself tells that a partition
moved and its offsets are the leader's (every supported Kafka offers v7-v10)."""
SESSION_ERRORS = frozenset({70, 71, 106})
"""FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR: the
broker no longer holds the session as the exporter does; a full fetch starts a new one."""


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch for a live session: +1, wrapping to 1."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What one request of a session says: epoch 0 is a full fetch (a new session)."""

    session_id: int
    epoch: int
    send: dict[TopicPartition, int]
    """Partitions to add, or whose fetch offset moves (all of them when full), at that offset."""
    forget: list[TopicPartition]
    """Partitions the session holds that it is to drop."""

    @property
    def full(self) -> bool:
        return self.epoch == 0


class FetchSession(Protocol):
    """The caller's side of one leader's session."""

    def next_request(self) -> SessionRequest:
        """The request the session is due to send now."""
        ...

    def reset(self) -> None:
        """Drop the session: the next request is full."""
        ...


def fetch_session_request(request: SessionRequest) -> Callable[[BrokerConnection], Any]:
    """Fetch READ_COMMITTED at each partition's last known HW with no bytes allowed (records
    come back only when committed data passed that HW, and then only the first partition's
    first batch: KIP-74), without waiting. A broker without sessions (Fetch before v7) raises
    `UnsupportedApi`."""
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in request.send.items():
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
    for tp in request.forget:
        forgotten.setdefault(tp.topic, []).append(tp.partition)
    session_id, epoch = request.session_id, request.epoch

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


def contradictions(request: SessionRequest, response: Any) -> set[TopicPartition] | None:
    """None when the answer can be the one to `request`; else the partitions it names (it
    lists a partition twice, or answers an incremental request with another session's id; 0
    is the broker closing a session the request left empty)."""
    named: set[TopicPartition] = set()
    twice = False
    for topic in response.responses:
        for part in topic.partitions:
            tp = TopicPartition(topic.topic, part.partition_index)
            twice = twice or tp in named
            named.add(tp)
    if twice or (not request.full and response.session_id not in (0, request.session_id)):
        return named
    return None


class FetchSessionExchange(WholeAnswer[int]):
    """One exchange of `session` with its leader (the key: the leader's broker id, on
    `EveryBroker`), run with `attempts=2`. The driver counts a failed request and a top-level
    error code under "Fetch". What is left for the caller:

    - `answer` (with `sent`, the request it answers): an answer that can be the one to its
      request, to read; `doubted`: the partitions an earlier, contradicting answer named;
    - `unsupported`: the broker holds no sessions (Fetch before v7: its release, logged once
      by the driver, not counted); the session is reset;
    - neither: no answer to go by (a failed request, an error code, a contradiction again).

    A session error code (the broker no longer holds the session as the caller does) or a
    contradicting answer (counted INCONSISTENT_ANSWER: it proves nothing) resets the session
    and asks again, in full, once."""

    api = "Fetch"
    unsupported_name = "Fetch sessions"

    def __init__(self, session: FetchSession) -> None:
        self._session = session
        self.sent: SessionRequest | None = None
        self.answer: Any = None
        self.doubted: set[TopicPartition] = set()
        self.unsupported = False

    def request(self, keys: list[int]) -> Callable[[BrokerConnection], Any]:
        self.sent = self._session.next_request()
        return fetch_session_request(self.sent)

    def ask(self, client: ClusterClient, broker_id: int, keys: list[int]) -> Any:
        return client.send(broker_id, self.request(keys), _DECODE_FETCH)

    def handle(
        self, broker_id: int, keys: list[int], answer: Any, state: PollState, *, last: bool
    ) -> Outcome[int]:
        sent = self.sent
        assert sent is not None  # `request` ran for this answer
        if answer.error_code:
            if answer.error_code in SESSION_ERRORS and not last:
                self._session.reset()
                return Outcome(retry=keys)
            return Outcome()
        contradicting = contradictions(sent, answer)
        if contradicting is not None:
            # Proves nothing: a new session, in full, at once (once per exchange).
            state.error(broker_id, self.api, INCONSISTENT_ANSWER)
            self.doubted.update(contradicting)
            self._session.reset()
            return Outcome() if last else Outcome(retry=keys)
        self.answer = answer
        return Outcome()

    def failed(
        self, broker_id: int, keys: list[int], error: CollectError, state: PollState
    ) -> Outcome[int]:
        if error.kind == UNSUPPORTED_API_KIND:
            self.unsupported = True
            self._session.reset()
        return Outcome()

