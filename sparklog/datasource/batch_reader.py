"""The batch reader: `startingOffsets` .. `endingOffsets` resolved once at planning, read in parallel.

Rule 1: `partitions()` runs once, in the driver; it resolves both ends and plans the input partitions, so
every task reads a fixed `[start, end)` (Spark's KafkaRelation).
Rule 2: a range whose end precedes its start is refused, as Spark's Kafka source refuses it ("You either
provided an invalid fromOffset, or the topic has been damaged").
Rule 3: an `endingOffsets` past a partition's latest offset is refused at planning, naming the partition and
its end, instead of a task waiting kafkaConsumer.pollTimeoutMs for records that do not exist.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from sparklog.datasource import offsets as off
from sparklog.datasource.fetcher import read_partition
from sparklog.datasource.metadata import OffsetOracle, resolve
from sparklog.datasource.options import ReadOptions


class SparklogBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, oracle_factory=OffsetOracle) -> None:
        self.options = options
        self._oracle_factory = oracle_factory

    def partitions(self) -> Sequence[InputPartition]:
        oracle = self._oracle_factory(self.options)
        try:
            tps = oracle.partitions(self.options.subscription)
            start = resolve(self.options.starting, tps, oracle, strategy=self.options.starting_strategy)
            end = resolve(self.options.ending, tps, oracle, is_start=False)
            check_ending_reachable(self.options.ending, end, oracle)
            servers = oracle.bootstrap()
        finally:
            oracle.close()
        ranges = off.offset_ranges(start, end)
        for r in ranges:
            if r.end < r.start:
                raise ValueError(
                    f"Beginning offset {r.start} is after the ending offset {r.end} for topic {r.topic} "
                    f"partition {r.partition}. You either provided an invalid fromOffset, or the topic has "
                    "been damaged"
                )
        planned = off.plan(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [off.SparklogInputPartition(r.topic, r.partition, r.start, r.end, servers) for r in planned]

    def read(self, partition: InputPartition) -> Iterator:
        # Spark plans one InputPartition(None) when `partitions()` returns none: nothing to read then.
        if not isinstance(partition, off.SparklogInputPartition):
            return iter(())
        return read_partition(self.options, partition)


def check_ending_reachable(spec, end: dict, oracle) -> None:
    """Rule 3: explicit ending offsets must not lie past the partitions' latest offsets."""
    explicit = [tp for tp, offset in spec.offsets if offset >= 0] if spec.kind == "offsets" else []
    latest = oracle.latest(explicit)
    beyond = [tp for tp in explicit if end[tp] > latest[tp]]
    if beyond:
        detail = ", ".join(f"{t}-{p} asks {end[(t, p)]} but ends at {latest[(t, p)]}" for t, p in beyond)
        raise ValueError(
            f"endingOffsets lie past the end of the log ({detail}): lower them, or use -1 to read up to the latest offset")
