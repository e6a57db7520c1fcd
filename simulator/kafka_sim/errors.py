"""Kafka error codes, named once for the whole simulator.

The numbers come from kafka-python's `kafka.errors` (which mirrors Kafka's `Errors` enum), so a
code is never retyped by hand. Names follow Kafka's `Errors` constants.
"""

from __future__ import annotations

from kafka import errors as _errors

NONE: int = _errors.NoError.errno
OFFSET_OUT_OF_RANGE: int = _errors.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE: int = _errors.CorruptRecordError.errno
UNKNOWN_TOPIC_OR_PARTITION: int = _errors.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE: int = _errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER: int = _errors.NotLeaderForPartitionError.errno
COORDINATOR_LOAD_IN_PROGRESS: int = _errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE: int = _errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR: int = _errors.NotCoordinatorError.errno
INVALID_TOPIC_EXCEPTION: int = _errors.InvalidTopicError.errno
TOPIC_AUTHORIZATION_FAILED: int = _errors.TopicAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: int = 53
GROUP_AUTHORIZATION_FAILED: int = _errors.GroupAuthorizationFailedError.errno
INVALID_TIMESTAMP: int = _errors.InvalidTimestampError.errno
UNSUPPORTED_SASL_MECHANISM: int = _errors.UnsupportedSaslMechanismError.errno
ILLEGAL_SASL_STATE: int = _errors.IllegalSaslStateError.errno
UNSUPPORTED_VERSION: int = _errors.UnsupportedVersionError.errno
INVALID_REQUEST: int = _errors.InvalidRequestError.errno
OUT_OF_ORDER_SEQUENCE_NUMBER: int = _errors.OutOfOrderSequenceNumberError.errno
INVALID_PRODUCER_EPOCH: int = _errors.InvalidProducerEpochError.errno
INVALID_TXN_STATE: int = _errors.InvalidTxnStateError.errno
TRANSACTION_ABORTABLE: int = _errors.TransactionAbortableError.errno
INVALID_PRODUCER_ID_MAPPING: int = _errors.InvalidProducerIdMappingError.errno
INVALID_TRANSACTION_TIMEOUT: int = _errors.InvalidTransactionTimeoutError.errno
CONCURRENT_TRANSACTIONS: int = _errors.ConcurrentTransactionsError.errno
TRANSACTION_COORDINATOR_FENCED: int = _errors.TransactionCoordinatorFencedError.errno
OPERATION_NOT_ATTEMPTED: int = _errors.OperationNotAttemptedError.errno
SASL_AUTHENTICATION_FAILED: int = _errors.SaslAuthenticationFailedError.errno
FENCED_LEADER_EPOCH: int = _errors.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH: int = _errors.UnknownLeaderEpochError.errno
INVALID_RECORD: int = _errors.InvalidRecordError.errno
PRODUCER_FENCED: int = _errors.ProducerFencedError.errno
UNKNOWN_TOPIC_ID: int = _errors.UnknownTopicIdError.errno
TRANSACTIONAL_ID_NOT_FOUND: int = _errors.TransactionalIdNotFoundError.errno
OFFSET_METADATA_TOO_LARGE: int = _errors.OffsetMetadataTooLargeError.errno
ILLEGAL_GENERATION: int = _errors.IllegalGenerationError.errno
INVALID_GROUP_ID: int = _errors.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID: int = _errors.UnknownMemberIdError.errno
GROUP_ID_NOT_FOUND: int = _errors.GroupIdNotFoundError.errno
MISMATCHED_ENDPOINT_TYPE: int = _errors.MismatchedEndpointTypeError.errno
UNSUPPORTED_ENDPOINT_TYPE: int = _errors.UnsupportedEndpointTypeError.errno

RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)
"""A client looks the coordinator up again and retries on these."""
