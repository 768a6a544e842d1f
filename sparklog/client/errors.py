"""Errors the clients raise besides the protocol's own (one class per Kafka error code lives in
`sparklog.protocol.errors`).

Rule: `is_retriable(exc)` is the one place that decides whether a failed request is tried again: Kafka
error codes carry `retriable`; lost connections and request timeouts are retriable too, unless their class says
`retriable = False` (a refused SASL login is a connection that failed, but retrying cannot make it succeed).
"""

from __future__ import annotations

# Error codes after which a partition's leader may have moved (Kafka's InvalidMetadataException family):
# UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
# UNKNOWN_LEADER_EPOCH. The client refreshes metadata before it retries.
METADATA_REFRESH_ERRORS = frozenset({3, 5, 6, 74, 75})
# Error codes that mean "find the group coordinator again and ask it again": COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (the coordinator is loading, or moved with its offsets partition).
COORDINATOR_MOVED_ERRORS = frozenset({14, 15, 16})


class ClientError(Exception):
    """Base of the client's own errors."""


class KafkaConnectionError(ClientError, ConnectionError):
    """The connection to a broker failed or closed with requests in flight (retriable)."""

    retriable = True


class RequestTimedOut(ClientError, TimeoutError):
    """No response within `request.timeout.ms`; the connection is closed (retriable)."""

    retriable = True


class NoBrokersAvailable(ClientError, ConnectionError):
    """None of the bootstrap servers (or registered brokers) answered."""

    retriable = True


class UnknownTopic(ClientError, LookupError):
    """Metadata still lacks the topic after `max.block.ms`."""


class UnknownPartition(ClientError, LookupError):
    """A record sent to a partition that the topic's metadata says it does not have."""


class InvalidPartition(ClientError, ValueError):
    """A record given a partition the topic does not have (after a metadata refresh): refused before it is queued."""

    def __init__(self, message: str, topic: str, partition: int, count: int | None) -> None:
        super().__init__(message)
        self.topic, self.partition, self.count = topic, partition, count


class CorrelationIdMismatch(ClientError):
    """A response arrived for a request other than the oldest in flight: the stream is out of sync."""


class ClientClosed(ClientError):
    """The producer or consumer was closed."""


# What a command line reports as one line (`sparklog.cli`, Rule 2): the clients' own errors, and every
# connection failure or timeout, ZooKeeper's included (`ZooKeeperUnavailable` is a ConnectionError).
UNREACHABLE = (ClientError, ConnectionError, TimeoutError)


def is_retriable(exc: BaseException) -> bool:
    declared = getattr(exc, "retriable", None)
    return bool(declared) if declared is not None else isinstance(exc, (ConnectionError, TimeoutError))
