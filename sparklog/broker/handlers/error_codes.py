"""Kafka error codes as plain ints for the hot paths, and the one table from storage exceptions to them.

Rule 1: what a storage call raised becomes a Kafka error code through `STORAGE_ERRORS` alone, looked up along
the exception's class hierarchy (`storage_error_code`): the nearest class listed wins, so a subclass may be
answered apart from its base. An exception the table does not list is a broker bug: the caller raises it again.
"""

from __future__ import annotations

from sparklog.protocol import errors
from sparklog.records.batch import CorruptRecordError
from sparklog.storage.errors import (DuplicateSequence, InvalidProducerEpoch, InvalidRecordError, InvalidTimestampError,
                                     LogClosedError, OffsetOutOfRange, OutOfOrderSequence, RecordBatchTooLarge,
                                     StorageError, TransactionRefusedError)

NONE = 0
OFFSET_OUT_OF_RANGE = errors.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE = errors.CorruptMessageError.errno
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
UNKNOWN_TOPIC_ID = errors.UnknownTopicIdError.errno
LEADER_NOT_AVAILABLE = errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
MESSAGE_TOO_LARGE = errors.MessageTooLargeError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
INVALID_TOPIC_EXCEPTION = errors.InvalidTopicError.errno
INVALID_REQUIRED_ACKS = errors.InvalidRequiredAcksError.errno
OFFSET_METADATA_TOO_LARGE = errors.OffsetMetadataTooLargeError.errno
INVALID_GROUP_ID = errors.InvalidGroupIdError.errno
TOPIC_ALREADY_EXISTS = errors.TopicAlreadyExistsError.errno
INVALID_PARTITIONS = errors.InvalidPartitionsError.errno
INVALID_REPLICATION_FACTOR = errors.InvalidReplicationFactorError.errno
INVALID_REPLICA_ASSIGNMENT = errors.InvalidReplicaAssignmentError.errno
INVALID_CONFIG = errors.InvalidConfigError.errno
INVALID_REQUEST = errors.InvalidRequestError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = errors.TransactionalIdAuthorizationFailedError.errno
KAFKA_STORAGE_ERROR = errors.KafkaStorageError.errno
TOPIC_DELETION_DISABLED = errors.TopicDeletionDisabledError.errno
INVALID_RECORD = errors.InvalidRecordError.errno
INVALID_TXN_STATE = errors.InvalidTxnStateError.errno
INVALID_TIMESTAMP = errors.InvalidTimestampError.errno
UNKNOWN_SERVER_ERROR = errors.UnknownServerError.errno
UNSTABLE_OFFSET_COMMIT = errors.UnstableOffsetCommitError.errno
REQUEST_TIMED_OUT = errors.RequestTimedOutError.errno
UNSUPPORTED_VERSION = errors.UnsupportedVersionError.errno
NOT_ENOUGH_REPLICAS = errors.NotEnoughReplicasError.errno
OFFSET_NOT_AVAILABLE = errors.OffsetNotAvailableError.errno
FETCH_SESSION_ID_NOT_FOUND = errors.FetchSessionIdNotFoundError.errno
INVALID_FETCH_SESSION_EPOCH = errors.InvalidFetchSessionEpochError.errno

# Rule 1's table. OSError is a disk's refusal (EIO, ENOSPC): the partition is answered KAFKA_STORAGE_ERROR, as
# Kafka answers a failed log dir.
STORAGE_ERRORS: dict[type[BaseException], int] = {
    CorruptRecordError: CORRUPT_MESSAGE,
    RecordBatchTooLarge: MESSAGE_TOO_LARGE,
    InvalidTimestampError: INVALID_TIMESTAMP,
    InvalidRecordError: INVALID_RECORD,  # a null key in a compacted topic, a control batch, malformed records
    TransactionRefusedError: INVALID_TXN_STATE,
    LogClosedError: NOT_LEADER_OR_FOLLOWER,  # closed under the request: the partition moved on
    OffsetOutOfRange: OFFSET_OUT_OF_RANGE,
    # the idempotent producer's refusals (storage/producer_state.py Rule 1)
    OutOfOrderSequence: errors.OutOfOrderSequenceNumberError.errno,
    InvalidProducerEpoch: errors.InvalidProducerEpochError.errno,
    DuplicateSequence: errors.DuplicateSequenceNumberError.errno,
    StorageError: KAFKA_STORAGE_ERROR,  # CorruptSegmentError and the rest: damage not yet fenced; clients retry
    OSError: KAFKA_STORAGE_ERROR,
}
# The codes of the storage's own faults (the broker logs them as errors): the rest are the client's or the
# partition's state.
STORAGE_FAULTS = frozenset({KAFKA_STORAGE_ERROR})


def storage_error_code(exc: BaseException) -> int | None:
    """Rule 1: the Kafka error code of what a storage call raised, or None for an exception the table does not
    list (a broker bug, which the caller raises again)."""
    for cls in type(exc).__mro__:
        code = STORAGE_ERRORS.get(cls)
        if code is not None:
            return code
    return None


class NotServedFast:
    """What a fast entry point (one-partition Produce or Fetch) returns for a request it leaves to the general
    path, having done nothing the general path would do again."""


NOT_SERVED_FAST = NotServedFast()
NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH
