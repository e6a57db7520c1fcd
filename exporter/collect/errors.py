"""Kafka protocol error codes the exporter acts on, taken from kafka-python's `kafka.errors`
(one place for the exporter; the codes are Kafka's, listed in its `Errors.java`), and their
names as Kafka spells them today. Pure."""

from __future__ import annotations

from typing import Any

import kafka.errors as kafka_errors

NONE = kafka_errors.NoError.errno
OFFSET_OUT_OF_RANGE = kafka_errors.OffsetOutOfRangeError.errno
UNKNOWN_TOPIC_OR_PARTITION = kafka_errors.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = kafka_errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = kafka_errors.NotLeaderForPartitionError.errno
"""kafka-python keeps the pre-KIP-497 name NOT_LEADER_FOR_PARTITION for code 6."""
COORDINATOR_LOAD_IN_PROGRESS = kafka_errors.CoordinatorLoadInProgressError.errno
NOT_COORDINATOR = kafka_errors.NotCoordinatorError.errno
TOPIC_AUTHORIZATION_FAILED = kafka_errors.TopicAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED = kafka_errors.GroupAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED = kafka_errors.ClusterAuthorizationFailedError.errno
INVALID_PRODUCER_EPOCH = kafka_errors.InvalidProducerEpochError.errno
TRANSACTION_COORDINATOR_FENCED = kafka_errors.TransactionCoordinatorFencedError.errno
TRANSACTIONAL_ID_NOT_FOUND = kafka_errors.TransactionalIdNotFoundError.errno
UNSUPPORTED_VERSION = kafka_errors.UnsupportedVersionError.errno

MISSING_FROM_ANSWER = "MISSING_FROM_ANSWER"
"""Reason (not a Kafka code) for something asked for that an answer left out: unknown, never
"none"."""

INCONSISTENT_ANSWER = "INCONSISTENT_ANSWER"
"""Reason (not a Kafka code) for an answer that contradicts its request (a partition listed
twice, a fetch session's answer carrying another session's id): it proves nothing."""

# kafka-python still uses pre-KIP-497 names for a few codes; metrics use Kafka's current names.
_ERROR_NAME_OVERRIDES = {NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_OR_FOLLOWER"}


def error_name(error_code: int) -> str:
    """Kafka's name for a protocol error code (e.g. 29 -> TOPIC_AUTHORIZATION_FAILED)."""
    if error_code in _ERROR_NAME_OVERRIDES:
        return _ERROR_NAME_OVERRIDES[error_code]
    cls: Any = kafka_errors.for_code(error_code)
    message = getattr(cls, "message", None)
    if isinstance(message, str) and message and cls.__name__ != "UnrecognizedBrokerError":
        return message
    return f"UNKNOWN_ERROR_CODE_{error_code}"
