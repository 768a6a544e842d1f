"""The broker-side assignors of the consumer group protocol (KIP-848's `ConsumerGroupPartitionAssignor`):
pure functions from the members' subscriptions, the topics' partition counts and the current target
assignment to the next target assignment. `group.consumer.assignors` names the ones a broker offers; the
first is the default, a member's `ServerAssignor` picks another.

Rule 1: a partition goes only to a member subscribed to its topic, and to one member at most.
Rule 2: every partition of a subscribed topic goes to some member (no member is left idle while another
has two more partitions than it could take: `uniform` moves one until no such pair is left).
Rule 3: deterministic: the same input gives the same output (members and partitions are taken in order).
Rule 4 (`uniform`): sticky: a partition stays with its current owner unless balance needs it elsewhere.
`range` is Kafka's RangeAssignor per topic: the members subscribed to a topic, in member id order, take
contiguous ranges, the first (partitions % members) one partition more.
"""

from __future__ import annotations

from typing import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]
# (subscriptions: member id -> topics, partition counts: topic -> n, current target) -> new target
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, frozenset[TopicPartition]]],
                    Assignment]


def uniform(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            current: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Rules 1-4: keep what may be kept, give the rest to the least loaded eligible member, then move one
    partition at a time from a member to an eligible one with two fewer."""
    owner = _kept(subscriptions, partitions, current)
    load = {m: 0 for m in subscriptions}
    for member in owner.values():
        load[member] += 1
    for tp in _universe(subscriptions, partitions):
        if tp not in owner:
            eligible = [m for m in sorted(subscriptions) if tp[0] in subscriptions[m]]
            owner[tp] = min(eligible, key=lambda m: load[m])
            load[owner[tp]] += 1
    _balance(subscriptions, owner, load)
    return _by_member(subscriptions, owner)


def _kept(subscriptions, partitions, current) -> dict[TopicPartition, str]:
    owner: dict[TopicPartition, str] = {}
    for member in sorted(current):
        for topic, index in sorted(current[member]):
            if member in subscriptions and topic in subscriptions[member] and index < partitions.get(topic, 0):
                owner[(topic, index)] = member
    return owner


def _universe(subscriptions, partitions) -> list[TopicPartition]:
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partitions})
    return [(t, i) for t in topics for i in range(partitions[t])]


def _balance(subscriptions, owner: dict[TopicPartition, str], load: dict[str, int]) -> None:
    """Move a partition from a member to an eligible one holding two fewer, until none can be moved (each
    move lowers the sum of squared loads, so this ends)."""
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-load[owner[tp]], tp)):
            source = owner[tp]
            eligible = [m for m in sorted(subscriptions) if tp[0] in subscriptions[m]]
            target = min(eligible, key=lambda m: load[m])
            if load[target] + 1 < load[source]:
                owner[tp], moved = target, True
                load[source] -= 1
                load[target] += 1
                break


def range_(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
           current: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Kafka's range, topic by topic (`current` is not needed: the ranges follow from the members)."""
    owner: dict[TopicPartition, str] = {}
    for topic in sorted({t for ts in subscriptions.values() for t in ts if t in partitions}):
        members = sorted(m for m in subscriptions if topic in subscriptions[m])
        quotient, extra = divmod(partitions[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            count = quotient + (1 if i < extra else 0)
            for index in range(start, start + count):
                owner[(topic, index)] = member
            start += count
    return _by_member(subscriptions, owner)


def _by_member(subscriptions, owner: dict[TopicPartition, str]) -> Assignment:
    result: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for tp, member in owner.items():
        result[member].add(tp)
    return {m: frozenset(tps) for m, tps in result.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
