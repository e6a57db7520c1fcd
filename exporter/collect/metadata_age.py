"""When a poll asks Metadata again rather than reuse the previous poll's answer. Pure.

Standing still, Metadata is nearly all of a poll's bytes (a full answer names every
partition), yet it changes only when leadership, the brokers, or the topics change. Every
such change shows in the requests that follow it: the old leader answers a partition's
request with a leader error, a deleted partition is unknown, a stopped broker refuses the
connection, a coordinator moves (docs/kafka-semantics.md#metadata-between-polls). A poll
reuses the previous answer unless the poll before it saw one of those, saw a partition
without a leader or a replica's broker missing from the answer, or the answer is older
than `metadata_max_age_seconds` (new topics and partitions show only in Metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from exporter.model import RequestError


class MetadataRefresh(Enum):
    """Why a poll asked Metadata (the `reason` label of the refresh counter)."""

    START = "start"
    """No answer to reuse: the first poll, or the last Metadata request failed."""
    MAX_AGE = "max_age"
    LEADER_CHANGED = "leader_changed"
    UNKNOWN_PARTITION = "unknown_partition"
    BROKER_FAILED = "broker_failed"
    SESSION_ENDED = "session_ended"
    """A kept connection's SASL session ended (KIP-368): the next request must log in again,
    and Metadata is what tells whether it still can (and names the cause when not)."""
    COORDINATOR_MOVED = "coordinator_moved"
    BROKER_MISSING = "broker_missing"
    """A replica's broker is absent from Metadata (down): only Metadata tells it is back."""
    LEADERLESS = "leaderless"
    REQUEST_ERROR = "request_error"
    """Any other failed request or item: not known to be harmless, so asked again."""


_LEADER_CHANGED = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH",
    "LEADER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
    "OFFSET_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION",
})
_UNKNOWN_PARTITION = frozenset({
    "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID",
    "FETCH_SESSION_TOPIC_ID_ERROR",
})
_BROKER_FAILED = frozenset({"BROKER_UNREACHABLE", "REQUEST_TIMEOUT", "DECODE_ERROR"})
_COORDINATOR_MOVED = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"})
_UNRELATED = frozenset({
    # A refusal, a size, a release or a fetch session the broker let go: none of them says
    # where a partition lives, and each repeats every poll while it lasts.
    "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "AUTHENTICATION_FAILED", "UNSUPPORTED_VERSION", "ANSWER_TOO_LARGE",
    "FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH", "TRANSACTIONAL_ID_NOT_FOUND",
})
_ORDER = (
    (_LEADER_CHANGED, MetadataRefresh.LEADER_CHANGED),
    (_UNKNOWN_PARTITION, MetadataRefresh.UNKNOWN_PARTITION),
    (_BROKER_FAILED, MetadataRefresh.BROKER_FAILED),
    (_COORDINATOR_MOVED, MetadataRefresh.COORDINATOR_MOVED),
)


def stale_after(
    errors: Iterable[RequestError], leaderless: bool, broker_missing: bool
) -> MetadataRefresh | None:
    """Why the next poll must ask Metadata, from what this poll saw; None: it may reuse it.
    `leaderless`: a partition without a leader; `broker_missing`: a broker named as a replica
    but absent from Metadata's brokers."""
    names = {e.error for e in errors}
    for group, reason in _ORDER:
        if names & group:
            return reason
    if broker_missing:
        return MetadataRefresh.BROKER_MISSING
    if leaderless:
        return MetadataRefresh.LEADERLESS
    if names - _UNRELATED:
        return MetadataRefresh.REQUEST_ERROR
    return None


def refresh_reason(
    stale: MetadataRefresh | None, age_seconds: float, max_age_seconds: float
) -> MetadataRefresh | None:
    """Why this poll asks Metadata; None: it reuses the previous answer."""
    if stale is not None:
        return stale
    if age_seconds >= max_age_seconds:
        return MetadataRefresh.MAX_AGE
    return None
