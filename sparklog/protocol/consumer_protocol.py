"""The consumer protocol's embedded messages: the Subscription a member sends in JoinGroup's protocol metadata
and the Assignment the leader hands it through SyncGroup (protocol type "consumer"), both versions 0-3, not
flexible. Transcribed from Kafka's ConsumerProtocolSubscription.json and ConsumerProtocolAssignment.json.

    Subscription: int16 version, topics [string], user_data nullable bytes,
                  v1 owned_partitions [(topic string, partitions [int32])], v2 generation_id int32,
                  v3 rack_id nullable string
    Assignment:   int16 version, assigned_partitions [(topic string, partitions [int32])],
                  user_data nullable bytes (v1-v3 add nothing: they follow the Subscription's version)

The broker treats both as opaque bytes; DescribeGroups hands them back, and `sparklog groups describe` decodes
them here to show who holds which partition.

Rule 1 (forward compatibility, as Kafka's ConsumerProtocol): a version above the highest known one is read
with the highest known layout, since newer versions only append fields; the bytes after them are the newer
fields and are ignored. For a known version, bytes left over are garbage: `MalformedConsumerProtocol`.
Rule 2: every count and length is checked against the bytes left before anything is built (schema.py's
contract), so a 10-byte blob cannot claim a billion topics. Bad bytes raise `MalformedConsumerProtocol`, never
`struct.error` or `IndexError`.
"""

from __future__ import annotations

import struct
from typing import Any

from sparklog.protocol.errors import RemoteProtocolError
from sparklog.protocol.schema import F, Message, message

__all__ = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "TopicPartitions",
           "MalformedConsumerProtocol", "encode_subscription", "decode_subscription", "encode_assignment",
           "decode_assignment", "assigned_partitions", "CONSUMER_PROTOCOL_TYPE", "HIGHEST_VERSION"]

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3
NOT_AN_API = -1  # these messages are embedded in JoinGroup/SyncGroup, not requests of their own
_VERSION = struct.Struct(">h")

ConsumerProtocolSubscription = message("ConsumerProtocolSubscription", api_key=NOT_AN_API, versions="0-3",
                                       module=__name__, fields=[
    F("topics", "[]string", "0+"),
    F("user_data", "bytes", "0+", nullable="0+", default=None),
    F("owned_partitions", "[]TopicPartitions", "1+", fields=[
        F("topic", "string", "1+"),
        F("partitions", "[]int32", "1+"),
    ]),
    F("generation_id", "int32", "2+", default=-1),
    F("rack_id", "string", "3+", nullable="3+", default=None),
])

ConsumerProtocolAssignment = message("ConsumerProtocolAssignment", api_key=NOT_AN_API, versions="0-3",
                                     module=__name__, fields=[
    F("assigned_partitions", "[]TopicPartitions", "0+", fields=[
        F("topic", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    ]),
    F("user_data", "bytes", "0+", nullable="0+", default=None),
])

TopicPartitions = ConsumerProtocolAssignment.TopicPartitions


class MalformedConsumerProtocol(RemoteProtocolError):
    """A member's subscription or assignment bytes do not follow the consumer protocol."""


def encode_subscription(subscription: Any, version: int = HIGHEST_VERSION) -> bytes:
    return _encode(ConsumerProtocolSubscription, subscription, version)


def decode_subscription(data: bytes) -> Any:
    return _decode(ConsumerProtocolSubscription, data)


def encode_assignment(assignment: Any, version: int = HIGHEST_VERSION) -> bytes:
    return _encode(ConsumerProtocolAssignment, assignment, version)


def decode_assignment(data: bytes) -> Any:
    return _decode(ConsumerProtocolAssignment, data)


def assigned_partitions(data: bytes) -> tuple[tuple[str, int], ...]:
    """The sorted (topic, partition) pairs of an Assignment; empty bytes (a member not yet synced) hold none."""
    if not data:
        return ()
    found = decode_assignment(data)
    return tuple(sorted((t.topic, p) for t in found.assigned_partitions for p in t.partitions))


def _encode(cls: type[Message], body: Any, version: int) -> bytes:
    out = bytearray(_VERSION.pack(version))
    chunks: list[Any] = []
    out = cls.encoder(version)(body, out, chunks)
    return b"".join([*map(bytes, chunks), bytes(out)])


def _decode(cls: type[Message], data: bytes) -> Any:
    """Rule 1 and Rule 2."""
    view = memoryview(data)
    if len(view) < _VERSION.size:
        raise MalformedConsumerProtocol(f"{cls.__name__}: {len(view)} bytes, too short for a version")
    (version,) = _VERSION.unpack_from(view, 0)
    if version < 0:
        raise MalformedConsumerProtocol(f"{cls.__name__}: negative version {version}")
    known = min(version, HIGHEST_VERSION)
    try:
        body, end = cls.decoder(known)(view, _VERSION.size, len(view))
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise MalformedConsumerProtocol(f"{cls.__name__} v{version}: {exc}") from None
    if end != len(view) and version <= HIGHEST_VERSION:
        raise MalformedConsumerProtocol(f"{cls.__name__} v{version}: {len(view) - end} bytes after the message")
    return body
