"""How many partitions a request may create: the limits CreateTopics checks before any ZooKeeper write.

Rule 1: a topic may have at most `max.partitions.per.topic` partitions (INVALID_PARTITIONS, as Kafka
answers a partition count it cannot use).
Rule 2: one request may ask for at most `max.partitions.per.request` partitions over all its topics; a
request over that creates none of them (POLICY_VIOLATION for every topic), so a client cannot reach the
limit by splitting one absurd topic into a million small ones.
Rule 3: no broker may hold more than `max.broker.partitions` replicas (KIP-578's name), counting what the
metadata snapshot already places on it plus the most a new topic can add to one broker under the
round-robin placement (POLICY_VIOLATION).
The checks are pure arithmetic on the request and the snapshot: nothing is allocated per partition, so a
request for a billion partitions costs what one for a single partition does.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from sparklog.protocol import errors

INVALID_PARTITIONS = errors.InvalidPartitionsError.errno
POLICY_VIOLATION = errors.PolicyViolationError.errno


def request_problem(config, counts: list[int]) -> tuple[int, str] | None:
    """(error code, message) if a request for topics of these partition counts is over Rule 2. A topic
    that is refused on its own (a count below 1 or over Rule 1) does not count toward the total."""
    requested = sum(n for n in counts if 0 < n <= config.max_partitions_per_topic)
    limit = config.max_partitions_per_request
    if requested > limit:
        return POLICY_VIOLATION, (f"the request asks for {requested} partitions in total, more than "
                                  f"max.partitions.per.request={limit}")
    return None


def topic_problem(config, topics: Mapping, live: list[int], partitions: int,
                  replication: int) -> tuple[int, str] | None:
    """(error code, message) if a new topic of `partitions` x `replication` on the `live` brokers breaks
    Rule 1 or Rule 3; `topics` is the snapshot's {name: TopicMeta} (their `assignment`s are counted)."""
    if partitions > config.max_partitions_per_topic:
        return INVALID_PARTITIONS, (f"{partitions} partitions is more than max.partitions.per.topic="
                                    f"{config.max_partitions_per_topic}")
    if not live:
        return None
    per_broker = replicas_per_broker(topics)
    adds = -(-partitions * replication // len(live))  # round-robin placement: at most ceil(p * r / brokers)
    fullest = max(live, key=lambda b: per_broker[b])
    limit = config.max_broker_partitions
    if per_broker[fullest] + adds > limit:
        return POLICY_VIOLATION, (f"broker {fullest} holds {per_broker[fullest]} partitions; {adds} more would "
                                  f"exceed max.broker.partitions={limit}")
    return None


def replicas_per_broker(topics: Mapping) -> Counter:
    """{broker id: replicas it holds} over every topic's assignment."""
    counts: Counter = Counter()
    for topic in topics.values():
        for replicas in topic.assignment.values():
            counts.update(replicas)
    return counts
