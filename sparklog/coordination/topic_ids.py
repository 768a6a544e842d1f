"""Topic ids (KIP-516): one UUID per life of a topic, in Kafka's string form.

A topic gets a random id when it is created (`new_topic_id`, as Kafka's `Uuid.randomUuid`: a version-4 UUID,
never the all-zero id, never Kafka's reserved metadata-topic id 1, never one whose string starts with '-',
which a command line would take for an option). The id is stored in the `"topic_id"` field of the topic's
`/brokers/topics/<t>` JSON, as Kafka's ZK-mode brokers write it, and in each partition's `partition.metadata`.

String form (Kafka's `Uuid.toString`): the 16 bytes in URL-safe base64 without padding, 22 characters.

Topics created before topic ids existed (their JSON has no `"topic_id"`) have the id derived from the
czxid of their `/brokers/topics/<t>` znode (`from_czxid`: the czxid in the low 8 bytes; unique in the
ensemble, new on every re-creation): earlier sparklog releases wrote exactly that into `partition.metadata`,
so the controller's one-time migration (`topics.assign_missing_topic_ids`) writes it into the JSON and every
existing log directory keeps matching its topic.
"""

from __future__ import annotations

import base64
import binascii
import uuid

__all__ = ["ZERO", "METADATA_TOPIC_ID", "new_topic_id", "from_czxid", "to_uuid", "to_string"]

ZERO = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID: reserved
_STRING_LENGTH = 22


def to_string(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString`: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def to_uuid(text: str) -> uuid.UUID:
    """Kafka's `Uuid.fromString`; raises ValueError for anything that is not 22 characters of 16 bytes."""
    if len(text) != _STRING_LENGTH:
        raise ValueError(f"topic id {text!r} is not {_STRING_LENGTH} characters of URL-safe base64")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"topic id {text!r} is not URL-safe base64: {exc}") from None
    if len(raw) != 16 or to_string(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"topic id {text!r} is not the string form of 16 bytes")
    return uuid.UUID(bytes=raw)


def new_topic_id() -> str:
    """A random topic id, as Kafka's `Uuid.randomUuid` draws one."""
    while True:
        value = uuid.uuid4()
        text = to_string(value)
        if value not in (ZERO, METADATA_TOPIC_ID) and not text.startswith("-"):
            return text


def from_czxid(czxid: int) -> str:
    """The id of a topic created before topic ids, whose assignment znode was created by transaction `czxid`."""
    return to_string(uuid.UUID(int=czxid & ((1 << 128) - 1)))
