"""The throttled replica lists of a topic (`leader.replication.throttled.replicas`,
`follower.replication.throttled.replicas`), in Kafka's format.

    ""                      no replica of the topic is throttled (the default)
    "*"                     every replica of every partition of the topic
    "0:101,0:102,1:102"     partition:broker pairs

Rule: throttled-format. A value is "*", empty, or comma-separated `partition:broker` pairs of non-negative
integers (spaces around an entry are allowed, as Kafka's ThrottledReplicaListValidator allows them); anything
else is refused in one line naming the value. A broker reads a list for itself: a partition is throttled on
broker B when the list is "*" or names `partition:B` (Kafka's TopicConfigHandler.parseThrottledPartitions).
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

WILDCARD = "*"
_PAIR = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*")


class ThrottledReplicas:
    """One parsed list: `everything` ("*") or the (partition, broker) pairs it names."""

    __slots__ = ("everything", "pairs")

    def __init__(self, everything: bool, pairs: frozenset[tuple[int, int]]) -> None:
        self.everything = everything
        self.pairs = pairs

    def covers(self, partition: int, broker: int) -> bool:
        return self.everything or (partition, broker) in self.pairs

    def __bool__(self) -> bool:
        return self.everything or bool(self.pairs)


NONE = ThrottledReplicas(False, frozenset())


@functools.lru_cache(maxsize=1024)
def parse(value: str) -> ThrottledReplicas:
    """The list `value` names (Rule: throttled-format); raises ValueError."""
    text = value.strip()
    if not text:
        return NONE
    if text == WILDCARD:
        return ThrottledReplicas(True, frozenset())
    pairs = set()
    for entry in text.split(","):
        match = _PAIR.fullmatch(entry)
        if match is None:
            raise ValueError(f"must be {WILDCARD} or a list of partition:broker pairs (0:101,1:102), not {value!r}")
        pairs.add((int(match.group(1)), int(match.group(2))))
    return ThrottledReplicas(False, frozenset(pairs))


def problem(value: str) -> str | None:
    """The storage config's rule for both settings: what is wrong with `value`, or None."""
    try:
        parse(value)
    except ValueError as exc:
        return str(exc)
    return None


def format_pairs(pairs: Iterable[tuple[int, int]]) -> str:
    """`partition:broker,...` of (partition, broker) pairs, sorted (what the reassignment tool writes)."""
    return ",".join(f"{p}:{b}" for p, b in sorted(set(pairs)))
