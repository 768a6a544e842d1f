"""Offsets as Spark's Kafka source writes them, the per-trigger rate limit, and input-partition planning.

Rule 1: an offset map's JSON form is canonical — topics sorted, partitions as string keys sorted numerically —
because Spark compares offsets as JSON strings: the same positions must always give the same text.
Rule 2: planning is a pure function of (start, end, options): the same (start, end) always yields the same
ranges, so a micro-batch replayed after a failure reads exactly what it read before.
Rule 3: a rate-limited end never exceeds the limit in total (Spark's Kafka source may overshoot by up to one
record per partition, because it rounds small shares up; we hand out the remainder instead) and never goes
past the latest offset of any partition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from pyspark.sql.datasource import InputPartition

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]

# A partition that appears in `end` but not in `start` (a new topic or partition) is read from here, as Spark's
# Kafka source assumes (a later earliest offset is reported as data loss when read).
NEW_PARTITION_START = 0


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{("t", 1): 5, ("t", 0): 3} -> {"t": {"0": 3, "1": 5}}, in canonical order (Rule 1)."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return result


def from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """The inverse of `to_json`; accepts partition keys in any order."""
    return {(str(topic), int(p)): int(offset) for topic, parts in data.items() for p, offset in parts.items()}


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class SparklogInputPartition(InputPartition):
    """One offset range `[start, end)` of one topic-partition: everything `read()` needs travels here.

    `bootstrap` is the broker list the driver saw when planning (None: `read()` looks it up itself); it
    does not take part in equality, which is the range alone.
    """

    def __init__(self, topic: str, partition: int, start: int, end: int, bootstrap: str | None = None) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.bootstrap = bootstrap

    def __repr__(self) -> str:
        return f"SparklogInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SparklogInputPartition) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Positive numbers of offsets between start and latest, per partition of `latest`."""
    sizes = {}
    for tp, end in latest.items():
        size = end - start.get(tp, NEW_PARTITION_START)
        if size > 0:
            sizes[tp] = size
    return sizes


def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """End offsets advancing at most `limit` offsets in total, shared in proportion to each backlog.

    Each partition first gets the floor of its share; the offsets left over go one each to the partitions
    with the largest fractional shares (ties: the larger backlog, then topic/partition order), so the total
    is exactly min(limit, total backlog) and a small partition is not starved while the limit allows.
    """
    if limit < 0:
        raise ValueError(f"limit must be non-negative, not {limit}")
    sizes = backlog(start, latest)
    total = sum(sizes.values())
    end = {tp: start.get(tp, NEW_PARTITION_START) if tp in sizes else off for tp, off in latest.items()}
    if total <= limit:
        return dict(latest)
    grants = {tp: limit * size // total for tp, size in sizes.items()}
    leftover = limit - sum(grants.values())
    by_remainder = sorted(sizes, key=lambda tp: (-(limit * sizes[tp] % total), -sizes[tp], tp))
    for tp in by_remainder[:leftover]:
        grants[tp] += 1
    for tp, grant in grants.items():
        end[tp] = min(latest[tp], start.get(tp, NEW_PARTITION_START) + grant)
    return end


def offset_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """One range per partition of `end`, sorted; partitions missing from `start` start at 0 (new ones)."""
    return [
        OffsetRange(topic, partition, start.get((topic, partition), NEW_PARTITION_START), end[(topic, partition)])
        for topic, partition in sorted(end)
    ]


def split_range(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` contiguous sub-ranges of sizes differing by at most one, the larger ones last."""
    parts = max(1, min(parts, r.size))
    result, position, remaining = [], r.start, r.size
    for i in range(parts):
        size = remaining // (parts - i)
        result.append(OffsetRange(r.topic, r.partition, position, position + size))
        position += size
        remaining -= size
    return result


def plan(
    ranges: Iterable[OffsetRange], min_partitions: int | None = None, max_records_per_partition: int | None = None
) -> list[OffsetRange]:
    """Split non-empty ranges into Spark input partitions (Spark's KafkaOffsetRangeCalculator).

    `maxRecordsPerPartition` first caps every range; then, if there are fewer than `minPartitions` ranges,
    each range is cut into round(size / (total / minPartitions)) pieces (at least one). Empty ranges are
    dropped. The result is a pure function of the input (Rule 2).
    """
    result = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        result = [piece for r in result for piece in split_range(r, -(-r.size // max_records_per_partition))]
    if min_partitions and len(result) < min_partitions:
        total = sum(r.size for r in result)
        ideal = total / min_partitions
        result = [piece for r in result for piece in split_range(r, max(1, round(r.size / ideal)))]
    return result


def behind_latest(consumed: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> dict[str, str]:
    """Spark's Kafka source metrics min/max/avgOffsetsBehindLatest (strings, as Spark reports them): how far
    each partition's consumed offset is behind its latest; empty when no partition is known."""
    behind = [end - consumed.get(tp, NEW_PARTITION_START) for tp, end in latest.items()]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}


def offsets_behind_latest(source_progress: Mapping) -> dict[str, str]:
    """`behind_latest` of one source of a query's progress (`query.lastProgress["sources"][0]`): its
    `endOffset` against its `latestOffset`, which the stream reader reports before any rate limit.

    Python data sources cannot add metrics to Spark's progress (pyspark's stream has no
    `ReportsSourceMetrics`), so this derives the same numbers from what the progress does carry.
    """
    def parse(value):
        return from_json(json.loads(value) if isinstance(value, str) else value or {})

    return behind_latest(parse(source_progress.get("endOffset")), parse(source_progress.get("latestOffset")))
