"""Which partition a record goes to (paper 3.2, design notes 4.4): a hash of the key, else random.

Rule 1: a keyed record goes to `toPositive(murmur2(key)) % numPartitions`, bit for bit as Kafka's Java
client (`Utils.murmur2`, `BuiltInPartitioner.partitionForKey`) and librdkafka's `murmur2_random` compute it,
so a key lands in the same partition whichever client wrote it. The hash is `sparklog.records.keyhash`'s
(compiled, with its pure-Python twin); `partitions_for_keys` does a whole column of keys in one call.
Rule 2: a record without a key goes to a random partition that stays the same for the whole batch ("sticky",
KIP-480): the accumulator calls `batch_closed(topic)` and the next keyless record picks a new one.
"""

from __future__ import annotations

import random

from sparklog.records.keyhash import murmur2, partitions_for_keys

__all__ = ["DefaultPartitioner", "murmur2", "partition_for_key", "partitions_for_keys", "to_positive"]


def to_positive(value: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not abs(), which overflows at MIN_VALUE)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class DefaultPartitioner:
    """Murmur2 for keys, a sticky random partition for keyless records; not thread-safe on its own
    (the producer calls it under its accumulator lock)."""

    __slots__ = ("_sticky", "_random")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._sticky: dict[str, int] = {}
        self._random = rng or random.Random()

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % num_partitions
        if num_partitions == 1:
            return 0
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= num_partitions:
            sticky = self._sticky[topic] = self._random.randrange(num_partitions)
        return sticky

    def batch_closed(self, topic: str, partition: int) -> None:
        """A batch of the sticky partition is full: the next keyless record picks a new partition."""
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]
