"""The paper's consumer rebalance (Algorithm 1) as a pure function; no ZooKeeper here.

Rule 1: every consumer sorts the same partition and consumer lists, so each computes its own share without
talking to the others, and the shares partition the partitions exactly.
Rule 2: shares differ in size by at most one: the first `len(P) % len(C)` consumers get one extra partition
(Kafka's range assignor), where the paper's `N = |P|/|C|` alone would leave the remainder unowned.
"""

from __future__ import annotations

from typing import Hashable, Iterable, TypeVar

P = TypeVar("P", bound=Hashable)


def chunk(index: int, total: int, consumers: int) -> range:
    """The positions (in the sorted partition list) owned by consumer `index` of `consumers`."""
    base, extra = divmod(total, consumers)
    start = index * base + min(index, extra)
    return range(start, start + base + (1 if index < extra else 0))


def assign(partitions: Iterable[P], consumers: Iterable[str], me: str) -> list[P]:
    """The partitions consumer `me` owns; `[]` if `me` is not among `consumers`.

    `partitions` are `(topic, partition)` pairs (the paper's broker-partitions) or anything sortable;
    duplicates count once. The result is in sorted order and does not depend on the input order.
    """
    ordered_partitions = sorted(set(partitions))
    ordered_consumers = sorted(set(consumers))
    if me not in ordered_consumers:
        return []
    j = ordered_consumers.index(me)
    return [ordered_partitions[i] for i in chunk(j, len(ordered_partitions), len(ordered_consumers))]


def assign_all(partitions: Iterable[P], consumers: Iterable[str]) -> dict[str, list[P]]:
    """Every consumer's share at once (for tools and tests)."""
    partitions = list(partitions)
    consumers = sorted(set(consumers))
    return {c: assign(partitions, consumers, c) for c in consumers}
