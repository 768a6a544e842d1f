"""Record types the applications see: the paper's `Message`/`MessageSet` and the consumer's `ConsumerRecord`."""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple


class ConsumerRecord(NamedTuple):
    """One consumed record (Kafka's ConsumerRecord fields)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


class Message:
    """The paper's message: "a payload of bytes" (plus Kafka's optional key, headers and timestamp)."""

    __slots__ = ("value", "key", "headers", "timestamp")

    def __init__(self, value: bytes | None, key: bytes | None = None, headers=None, timestamp: int | None = None):
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"Message({self.value!r}, key={self.key!r})"


class MessageSet:
    """The paper's set of messages sent in one publish request: `producer.send("topic1", MessageSet(m1, m2))`."""

    __slots__ = ("messages",)

    def __init__(self, *messages: Message | Iterable[Message]) -> None:
        flat: list[Message] = []
        for m in messages:
            if isinstance(m, Message):
                flat.append(m)
            else:
                flat.extend(m)
        self.messages = flat

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)
