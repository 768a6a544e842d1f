"""Kafka's murmur2 key hash and the keyed partition it gives (`toPositive(murmur2(key)) % numPartitions`).

Bit for bit as Kafka's Java client (`Utils.murmur2`, `BuiltInPartitioner.partitionForKey`) and librdkafka's
`murmur2_random`, so a key lands in the same partition whichever client wrote it. It lives beside the record
codec because it has a compiled twin too, `_ckeyhash` (a producer hashes every keyed record).

Rule 1: `murmur2(key)` and `partitions_for_keys(keys, n)` are the compiled twins (`_ckeyhash.murmur2`,
        `_ckeyhash.murmur2_partitions`) unless SPARKLOG_NO_EXTENSIONS is set or the extension was not built
        (chosen once, at import, as `implementation.select` chooses the codec); `PYTHON_MURMUR2` and
        `PYTHON_PARTITIONS` stay the pure-Python authority.
Rule 2: both give the same ints and errors; the compiled one hands every key that is not exact `bytes`, and
        a partition count outside 1..2**31-1, to the pure-Python one.
Rule 3: in `partitions_for_keys`, a None key gets None (a keyless record: the sticky partitioner decides).
"""

from __future__ import annotations

import struct
from typing import Callable

from sparklog.records import implementation as _implementation

SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed
M = 0x5BD1E995
R = 24
MASK32 = 0xFFFFFFFF


def _murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of `data`, as a signed int like Java's."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * M) & MASK32
        k ^= k >> R
        k = (k * M) & MASK32
        h = ((h * M) & MASK32) ^ k
    tail = length & 3
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _partitions_for_keys(keys: list[bytes | None], num_partitions: int) -> list[int | None]:
    """The keyed partition of each key (None for a None key): one call for a column of keys."""
    return [None if key is None else (_murmur2(key) & 0x7FFFFFFF) % num_partitions for key in keys]


PYTHON_MURMUR2 = _murmur2
PYTHON_PARTITIONS = _partitions_for_keys


def _select() -> tuple[Callable[[bytes], int], Callable[[list[bytes | None], int], list[int | None]], str]:
    """(murmur2, partitions_for_keys, implementation name) per Rule 1."""
    kernel = _implementation.load("sparklog.records._ckeyhash", "key hash",
                                  ("bind_keyhash", "murmur2", "murmur2_partitions"))
    if kernel is None:
        return _murmur2, _partitions_for_keys, _implementation.PYTHON
    kernel.bind_keyhash(_murmur2, _partitions_for_keys)
    return kernel.murmur2, kernel.murmur2_partitions, _implementation.CYTHON


murmur2, partitions_for_keys, IMPLEMENTATION = _select()
