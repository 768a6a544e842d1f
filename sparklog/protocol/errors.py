"""Errors of the wire protocol: Kafka's error codes, and the codec's own failures.

Two families, kept apart:

* ``KafkaError`` subclasses, one per Kafka error code (``errno``), as they appear in ``error_code`` fields
  of responses. ``for_code(code)`` maps a code to its class; ``retriable`` follows Kafka's Java client
  (a subclass of ``RetriableException`` there is retriable here).
* ``ProtocolError`` subclasses, raised by the codec itself, split as h11 does:
  ``RemoteProtocolError`` -- the peer sent bytes we cannot accept (a frame too large, a malformed body,
  an api version we do not serve); ``LocalProtocolError`` -- our own caller misused the API (a body of the
  wrong type, a value that does not fit its field, data after end of stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparklog.protocol.headers import RequestHeader

__all__ = [
    "ProtocolError", "RemoteProtocolError", "LocalProtocolError", "FrameTooLarge", "MalformedRequest",
    "MalformedResponse", "UnsupportedVersion", "KafkaError", "for_code",
]


# --------------------------------------------------------------------------------------------------
# codec errors


class ProtocolError(Exception):
    """Base of the codec's own errors."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something we cannot accept. A server usually answers (if it can) and closes."""


class LocalProtocolError(ProtocolError):
    """We misused the codec: a programming error on our side, never caused by the peer's bytes."""


class FrameTooLarge(RemoteProtocolError):
    """A size prefix that is negative or over the decoder's limit; raised before the body is buffered."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame size {size} outside [0, {limit}]")
        self.size = size
        self.limit = limit


class MalformedRequest(RemoteProtocolError):
    """A request frame that does not parse. ``header`` is the parsed RequestHeader, or None when even
    the header was garbage (then the broker cannot answer and closes the connection)."""

    def __init__(self, message: str, header: RequestHeader | None = None):
        super().__init__(message)
        self.header = header


class MalformedResponse(RemoteProtocolError):
    """A response frame that does not parse (client side)."""


class UnsupportedVersion(RemoteProtocolError):
    """A request for an api key or version this codec does not serve.

    Carries what the broker needs to answer: ``api_key``, ``api_version``, ``correlation_id``. For
    ApiVersions the broker answers with ``encode_api_versions_fallback(correlation_id)``; for any other
    api Kafka closes the connection. Being a RemoteProtocolError, catch it *before* RemoteProtocolError.
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


# --------------------------------------------------------------------------------------------------
# Kafka error codes


class KafkaError(Exception):
    """Base of the error-code classes. ``errno`` is the wire code, ``message`` Kafka's constant name."""

    errno: int = -1
    message: str = "UNKNOWN_SERVER_ERROR"
    description: str = ""
    retriable: bool = False

    def __str__(self) -> str:
        detail = super().__str__()
        return f"[Error {self.errno}] {self.message}" + (f": {detail}" if detail else "")


_BY_CODE: dict[int, type[KafkaError]] = {}


def _code(errno: int, name: str, message: str, retriable: bool, description: str,
          export: bool = True) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {
        "errno": errno, "message": message, "retriable": retriable, "description": description,
        "__doc__": description, "__module__": __name__,
    })
    _BY_CODE[errno] = cls
    if export:
        globals()[name] = cls
        __all__.append(name)
    return cls


# (errno, class name, Kafka constant, retriable, description) -- from Kafka's Errors.java
_CODES = [
    (-1, "UnknownServerError", "UNKNOWN_SERVER_ERROR", False, "unexpected server error"),
    (0, "NoError", "NONE", False, "no error"),
    (1, "OffsetOutOfRangeError", "OFFSET_OUT_OF_RANGE", False, "offset outside the log's range"),
    (2, "CorruptMessageError", "CORRUPT_MESSAGE", True, "a record batch failed its CRC or is malformed"),
    (3, "UnknownTopicOrPartitionError", "UNKNOWN_TOPIC_OR_PARTITION", True,
     "this server does not host this topic-partition"),
    (4, "InvalidFetchSizeError", "INVALID_FETCH_SIZE", False, "the requested fetch size is invalid"),
    (5, "LeaderNotAvailableError", "LEADER_NOT_AVAILABLE", True, "no leader for this partition yet"),
    (6, "NotLeaderOrFollowerError", "NOT_LEADER_OR_FOLLOWER", True,
     "this server is not the leader (or a follower) for the partition"),
    (7, "RequestTimedOutError", "REQUEST_TIMED_OUT", True, "the request timed out"),
    (8, "BrokerNotAvailableError", "BROKER_NOT_AVAILABLE", False, "the broker is not available"),
    (9, "ReplicaNotAvailableError", "REPLICA_NOT_AVAILABLE", True, "the replica is not available"),
    (10, "MessageTooLargeError", "MESSAGE_TOO_LARGE", False, "a batch is larger than the maximum allowed"),
    (11, "StaleControllerEpochError", "STALE_CONTROLLER_EPOCH", False, "the controller moved"),
    (12, "OffsetMetadataTooLargeError", "OFFSET_METADATA_TOO_LARGE", False,
     "the commit metadata string is too large"),
    (13, "NetworkExceptionError", "NETWORK_EXCEPTION", True, "the server disconnected before a response"),
    (14, "CoordinatorLoadInProgressError", "COORDINATOR_LOAD_IN_PROGRESS", True,
     "the coordinator is loading and cannot serve yet"),
    (15, "CoordinatorNotAvailableError", "COORDINATOR_NOT_AVAILABLE", True,
     "the coordinator is not available"),
    (16, "NotCoordinatorError", "NOT_COORDINATOR", True, "this is not the correct coordinator"),
    (17, "InvalidTopicError", "INVALID_TOPIC_EXCEPTION", False, "the topic name is invalid"),
    (18, "RecordListTooLargeError", "RECORD_LIST_TOO_LARGE", False,
     "the record set is larger than the segment size"),
    (19, "NotEnoughReplicasError", "NOT_ENOUGH_REPLICAS", True, "fewer in-sync replicas than required"),
    (20, "NotEnoughReplicasAfterAppendError", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True,
     "written, but to fewer in-sync replicas than required"),
    (21, "InvalidRequiredAcksError", "INVALID_REQUIRED_ACKS", False, "acks must be -1, 0 or 1"),
    (22, "IllegalGenerationError", "ILLEGAL_GENERATION", False, "the generation id is not current"),
    (23, "InconsistentGroupProtocolError", "INCONSISTENT_GROUP_PROTOCOL", False,
     "the member's protocols do not match the group's"),
    (24, "InvalidGroupIdError", "INVALID_GROUP_ID", False, "the group id is invalid"),
    (25, "UnknownMemberIdError", "UNKNOWN_MEMBER_ID", False, "the member id is not in the generation"),
    (26, "InvalidSessionTimeoutError", "INVALID_SESSION_TIMEOUT", False,
     "the session timeout is outside the allowed range"),
    (27, "RebalanceInProgressError", "REBALANCE_IN_PROGRESS", False, "the group is rebalancing"),
    (28, "InvalidCommitOffsetSizeError", "INVALID_COMMIT_OFFSET_SIZE", False,
     "the committed offset data is too large"),
    (29, "TopicAuthorizationFailedError", "TOPIC_AUTHORIZATION_FAILED", False, "topic not authorized"),
    (30, "GroupAuthorizationFailedError", "GROUP_AUTHORIZATION_FAILED", False, "group not authorized"),
    (31, "ClusterAuthorizationFailedError", "CLUSTER_AUTHORIZATION_FAILED", False,
     "cluster action not authorized"),
    (32, "InvalidTimestampError", "INVALID_TIMESTAMP", False, "a timestamp is out of the acceptable range"),
    (33, "UnsupportedSaslMechanismError", "UNSUPPORTED_SASL_MECHANISM", False,
     "the SASL mechanism is not supported"),
    (34, "IllegalSaslStateError", "ILLEGAL_SASL_STATE", False, "unexpected request in the SASL state"),
    (35, "UnsupportedVersionError", "UNSUPPORTED_VERSION", False, "the version of the api is not supported"),
    (36, "TopicAlreadyExistsError", "TOPIC_ALREADY_EXISTS", False, "the topic already exists"),
    (37, "InvalidPartitionsError", "INVALID_PARTITIONS", False, "the number of partitions is invalid"),
    (38, "InvalidReplicationFactorError", "INVALID_REPLICATION_FACTOR", False,
     "the replication factor is invalid"),
    (39, "InvalidReplicaAssignmentError", "INVALID_REPLICA_ASSIGNMENT", False,
     "the replica assignment is invalid"),
    (40, "InvalidConfigError", "INVALID_CONFIG", False, "a configuration is invalid"),
    (41, "NotControllerError", "NOT_CONTROLLER", True, "this is not the controller"),
    (42, "InvalidRequestError", "INVALID_REQUEST", False, "the request is malformed or inconsistent"),
    (43, "UnsupportedForMessageFormatError", "UNSUPPORTED_FOR_MESSAGE_FORMAT", False,
     "the message format does not support this request"),
    (44, "PolicyViolationError", "POLICY_VIOLATION", False, "a request parameter violates a policy"),
    (45, "OutOfOrderSequenceNumberError", "OUT_OF_ORDER_SEQUENCE_NUMBER", False,
     "the broker received an out of order sequence number"),
    (46, "DuplicateSequenceNumberError", "DUPLICATE_SEQUENCE_NUMBER", False,
     "the broker received a duplicate sequence number"),
    (47, "InvalidProducerEpochError", "INVALID_PRODUCER_EPOCH", False, "the producer has been fenced"),
    (48, "InvalidTxnStateError", "INVALID_TXN_STATE", False, "invalid transaction state transition"),
    (49, "InvalidProducerIdMappingError", "INVALID_PRODUCER_ID_MAPPING", False,
     "the producer id does not match the transactional id"),
    (50, "InvalidTransactionTimeoutError", "INVALID_TRANSACTION_TIMEOUT", False,
     "the transaction timeout is too large"),
    (51, "ConcurrentTransactionsError", "CONCURRENT_TRANSACTIONS", True,
     "another transaction of this producer is still completing"),
    (52, "TransactionCoordinatorFencedError", "TRANSACTION_COORDINATOR_FENCED", False,
     "a newer transaction coordinator exists"),
    (53, "TransactionalIdAuthorizationFailedError", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False,
     "transactional id not authorized"),
    (54, "SecurityDisabledError", "SECURITY_DISABLED", False, "security features are disabled"),
    (55, "OperationNotAttemptedError", "OPERATION_NOT_ATTEMPTED", False,
     "the operation was not attempted because of an earlier error"),
    (56, "KafkaStorageError", "KAFKA_STORAGE_ERROR", True, "disk error while serving the request"),
    (57, "LogDirNotFoundError", "LOG_DIR_NOT_FOUND", False, "the log directory is not found"),
    (58, "SaslAuthenticationFailedError", "SASL_AUTHENTICATION_FAILED", False, "SASL authentication failed"),
    (59, "UnknownProducerIdError", "UNKNOWN_PRODUCER_ID", False, "the broker has no state for this producer"),
    (60, "ReassignmentInProgressError", "REASSIGNMENT_IN_PROGRESS", False,
     "a partition reassignment is in progress"),
    (68, "NonEmptyGroupError", "NON_EMPTY_GROUP", False, "the group is not empty"),
    (69, "GroupIdNotFoundError", "GROUP_ID_NOT_FOUND", False, "the group id does not exist"),
    (70, "FetchSessionIdNotFoundError", "FETCH_SESSION_ID_NOT_FOUND", True, "the fetch session id is unknown"),
    (71, "InvalidFetchSessionEpochError", "INVALID_FETCH_SESSION_EPOCH", True,
     "the fetch session epoch is invalid"),
    (72, "ListenerNotFoundError", "LISTENER_NOT_FOUND", True, "no endpoint for the listener on the leader"),
    (73, "TopicDeletionDisabledError", "TOPIC_DELETION_DISABLED", False, "topic deletion is disabled"),
    (74, "FencedLeaderEpochError", "FENCED_LEADER_EPOCH", True,
     "the request's leader epoch is older than the broker's"),
    (75, "UnknownLeaderEpochError", "UNKNOWN_LEADER_EPOCH", True,
     "the request's leader epoch is newer than the broker's"),
    (76, "UnsupportedCompressionTypeError", "UNSUPPORTED_COMPRESSION_TYPE", False,
     "the compression type is not supported"),
    (77, "StaleBrokerEpochError", "STALE_BROKER_EPOCH", False, "the broker epoch has changed"),
    (78, "OffsetNotAvailableError", "OFFSET_NOT_AVAILABLE", True,
     "the leader's high watermark has not caught up"),
    (79, "MemberIdRequiredError", "MEMBER_ID_REQUIRED", False, "the group member needs a member id"),
    (80, "PreferredLeaderNotAvailableError", "PREFERRED_LEADER_NOT_AVAILABLE", True,
     "the preferred leader is not available"),
    (81, "GroupMaxSizeReachedError", "GROUP_MAX_SIZE_REACHED", False, "the group is full"),
    (82, "FencedInstanceIdError", "FENCED_INSTANCE_ID", False, "a newer member has the same instance id"),
    (83, "EligibleLeadersNotAvailableError", "ELIGIBLE_LEADERS_NOT_AVAILABLE", True,
     "no replica the election may choose is available"),
    (84, "ElectionNotNeededError", "ELECTION_NOT_NEEDED", True, "the partition already has the leader asked for"),
    (85, "NoReassignmentInProgressError", "NO_REASSIGNMENT_IN_PROGRESS", False,
     "no partition reassignment is in progress"),
    (86, "GroupSubscribedToTopicError", "GROUP_SUBSCRIBED_TO_TOPIC", False,
     "a member of the group consumes the topic: its offsets cannot be deleted"),
    (87, "InvalidRecordError", "INVALID_RECORD", False, "a record failed the broker's validation"),
    (88, "UnstableOffsetCommitError", "UNSTABLE_OFFSET_COMMIT", True, "there are unstable offsets"),
    (89, "ThrottlingQuotaExceededError", "THROTTLING_QUOTA_EXCEEDED", True, "the quota was exceeded"),
    (90, "ProducerFencedError", "PRODUCER_FENCED", False, "a newer producer has the same transactional id"),
    (91, "ResourceNotFoundError", "RESOURCE_NOT_FOUND", False, "a request illegally referred to a missing resource"),
    (92, "DuplicateResourceError", "DUPLICATE_RESOURCE", False, "a request illegally referred to a resource twice"),
    (93, "UnacceptableCredentialError", "UNACCEPTABLE_CREDENTIAL", False,
     "the requested credential would not meet the criteria for acceptability"),
    (100, "UnknownTopicIdError", "UNKNOWN_TOPIC_ID", True, "this server does not host this topic id"),
    (105, "TransactionalIdNotFoundError", "TRANSACTIONAL_ID_NOT_FOUND", False,
     "the transactional id is not known to its coordinator"),
    (110, "FencedMemberEpochError", "FENCED_MEMBER_EPOCH", False,
     "the member epoch is fenced: the member must abandon its partitions and rejoin"),
    (111, "UnreleasedInstanceIdError", "UNRELEASED_INSTANCE_ID", False,
     "the instance id is still used by another member of the consumer group"),
    (112, "UnsupportedAssignorError", "UNSUPPORTED_ASSIGNOR", False, "the consumer group does not support the assignor"),
    (113, "StaleMemberEpochError", "STALE_MEMBER_EPOCH", False, "the member epoch is stale"),
    (128, "InvalidRegularExpressionError", "INVALID_REGULAR_EXPRESSION", False, "the regular expression is not valid"),
]

for _row in _CODES:
    _code(*_row)
del _row


def for_code(code: int) -> type[KafkaError]:
    """The class of a Kafka error code; codes this table lacks get a (cached) class of their own whose
    ``errno`` is the code, so nothing is lost when a newer broker sends a code we do not know."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _code(code, f"UnknownErrorCode{code}".replace("-", "_"), f"UNKNOWN_CODE_{code}", False,
                    "an error code this codec does not know", export=False)
    return cls
