"""The streaming reader: offsets per micro-batch, admission control, planning, and progress commits.

Rule 1: Spark calls `initialOffset`, `latestOffset`, `partitions` and `commit` on one long-lived instance in
the driver's Python worker; `read` runs on fresh copies in executors. So the instance keeps only picklable
options plus lazily opened connections (dropped by `__getstate__`), and `read` needs only its partition.
Rule 2: `latestOffset(start, limit)` honours the limit Spark passes: `ReadAllAvailable` reads everything,
`ReadMaxRows(n)` caps the batch at n offsets shared in proportion to backlog, `ReadMinRows(n)` waits for n
offsets (or `maxTriggerDelay`). With Trigger.AvailableNow the latest offsets are frozen at
`prepareForTriggerAvailableNow()` and the default limit still applies, so the rate limit holds there too.
Rule 3: offsets are canonical JSON (see offsets.py); returning `start` unchanged means "no new data".
Rule 4: a query's initial offsets are resolved once. Spark calls `initialOffset()` more than once before
batch 0 commits (while planning batch 0 and again when running it), so the first answer is kept on the
instance and every later call returns it; "latest" moving between the calls would otherwise look like
offsets going backwards. With `zookeeper.connect` and a query key (`sparklog.queryId` or
`checkpointLocation`) it is also kept in ZooKeeper for a restart before batch 0 commits (progress.py).
Rule 5: `reportLatestOffset()` is the latest offset seen before any rate limit, so Spark's progress shows
how far the log really is; `offsets_behind_latest(progress)` derives Spark's Kafka source's
min/max/avgOffsetsBehindLatest from it, since Python sources cannot add source metrics to the progress.
Rule 6: `commit(end)` records the query's progress under its group (`kafka.group.id`, else `groupIdPrefix`
and a random suffix, as Spark's source names its group), so lag tools see the query: in the paper's ZooKeeper
registry with `zookeeper.connect` (progress.py), else as the Kafka group's offsets, committed member-less
(OffsetCommit with no generation, Kafka's admin commit) to the group's coordinator, where `sparklog groups
describe`, kafka-consumer-groups and Burrow read them. It is informational: a failure is logged, the
checkpoint stays the truth, and `sparklog.commitProgress=false` turns it off.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from sparklog.datasource import offsets as off
from sparklog.datasource.errors import report_data_loss
from sparklog.datasource.fetcher import read_partition
from sparklog.datasource.metadata import TopicNotFound
from sparklog.datasource.metadata import OffsetOracle, resolve
from sparklog.datasource.options import ReadOptions

logger = logging.getLogger(__name__)


class SparklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads of `subscribe` / `subscribePattern` / `assign` partitions (see module rules)."""

    def __init__(self, options: ReadOptions, oracle_factory=OffsetOracle, clock=time.time) -> None:
        self.options = options
        self._oracle_factory = oracle_factory
        self._clock = clock
        self._oracle = None
        self._initial: dict | None = None  # the query's initial offsets, once resolved (Rule 4)
        self._available_now: dict | None = None  # the frozen target of Trigger.AvailableNow
        self._latest: dict | None = None  # last latest offsets seen, for reportLatestOffset
        self._last_trigger_ms = 0.0  # as Spark's Kafka source: the first batch is never delayed
        self._group = options.group_id or f"{options.group_id_prefix}-{uuid.uuid4()}"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_oracle"] = None
        return state

    @property
    def oracle(self):
        if self._oracle is None:
            self._oracle = self._oracle_factory(self.options)
        return self._oracle

    # -- offsets

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = self._resolve_initial()
        return self._initial

    def _resolve_initial(self) -> dict:
        key = self.options.query_key
        zk = self.oracle.zookeeper() if key else None
        if zk is not None:
            from sparklog.datasource.progress import load_initial_offsets, store_initial_offsets

            stored = load_initial_offsets(zk, key)
            if stored is not None:
                return stored
        tps = self.oracle.partitions(self.options.subscription)
        resolved = resolve(self.options.starting, tps, self.oracle, strategy=self.options.starting_strategy)
        offsets = off.to_json(resolved)
        if zk is not None:
            offsets = store_initial_offsets(zk, key, offsets)
        return offsets

    def _fetch_latest(self, running: bool | None = None) -> dict[tuple[str, int], int]:
        """The latest offsets; a subscribed topic deleted under the running query is data loss (Spark's Kafka
        source), not the start-time advice to create it or wait for it."""
        try:
            tps = self.oracle.partitions(self.options.subscription)
        except TopicNotFound as exc:
            if not (self._initial is not None if running is None else running):
                raise
            report_data_loss(self.options.fail_on_data_loss, f"Topic {', '.join(exc.topics)} was deleted while "
                             "the query read it: its records not yet read are lost")
            tps = self.oracle.partitions(self.options.subscription, missing_ok=True)
        return self.oracle.latest(tps)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._fetch_latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_map = off.from_json(start)
        latest = dict(self._available_now) if self._available_now is not None else self._fetch_latest(running=True)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return off.to_json(latest)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.options.min_offsets_per_trigger
        if min_rows is not None and self._available_now is None and self._delay(min_rows, start_map, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            return off.to_json(off.rate_limit(limit.max_rows, start_map, latest))
        return off.to_json(latest)

    def _delay(self, min_rows: int, start: dict, latest: dict) -> bool:
        """Spark's Kafka source `delayBatch`: skip this trigger while fewer than `min_rows` offsets wait,
        unless `maxTriggerDelay` has passed since the last batch."""
        now_ms = self._clock() * 1000
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        if sum(off.backlog(start, latest).values()) < min_rows:
            return True
        self._last_trigger_ms = now_ms
        return False

    def reportLatestOffset(self) -> dict | None:
        return off.to_json(self._latest) if self._latest is not None else None

    # -- planning and reading

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start_map, end_map = off.from_json(start), off.from_json(end)
        check_offsets(start_map, end_map, self.options.fail_on_data_loss, first=start == self._initial)
        ranges = [r for r in off.offset_ranges(start_map, end_map) if r.end >= r.start]
        planned = off.plan(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        servers = self._servers()
        return [off.SparklogInputPartition(r.topic, r.partition, r.start, r.end, servers) for r in planned]

    def _servers(self) -> str | None:
        try:
            return self.oracle.bootstrap()
        except Exception as exc:  # noqa: BLE001 - read() looks the brokers up itself then
            logger.warning("could not list live brokers for planning: %s", exc)
            return None

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        if not self.options.commit_progress:
            return
        try:
            zk = self.oracle.zookeeper()
            if zk is not None:
                from sparklog.datasource.progress import commit_progress

                commit_progress(zk, self._group, off.from_json(end), "spark structured streaming")
            else:  # Rule 6: a Kafka group's offsets, which Kafka's tools read
                self.oracle.admin().commit_offsets(self._group, off.from_json(end))
        except Exception as exc:  # noqa: BLE001 - progress is informational (the checkpoint is the truth)
            logger.warning("could not record progress of group %s: %s", self._group, exc)

    def stop(self) -> None:
        if self._oracle is not None:
            self._oracle.close()
            self._oracle = None


def check_offsets(start: dict, end: dict, fail_on_data_loss: bool, first: bool = False) -> None:
    """Partitions gone since `start`, or whose offsets went backwards, are data loss (Spark's Kafka source);
    `first`: `start` is the query's starting offsets, so an offset past the end was never there."""
    gone = sorted(set(start) - set(end))
    if gone:
        names = ", ".join(f"{t}-{p}" for t, p in gone)
        report_data_loss(fail_on_data_loss, f"Partitions {names} are gone (offsets from {[start[tp] for tp in gone]})")
    for tp in sorted(set(start) & set(end)):
        if end[tp] < start[tp] and first:
            report_data_loss(fail_on_data_loss, f"Partition {tp[0]}-{tp[1]}: the starting offset {start[tp]} is "
                             f"greater than the latest offset {end[tp]} (startingOffsets past the end of the "
                             "partition: those offsets never existed)")
        elif end[tp] < start[tp]:
            report_data_loss(
                fail_on_data_loss,
                f"Partition {tp[0]}-{tp[1]}'s offset was changed from {start[tp]} to {end[tp]}: "
                f"offsets [{end[tp]}, {start[tp]}) were deleted or the topic was recreated",
            )


class RefusedStreamReader(DataSourceStreamReader):
    """What `streamReader` returns for options a streaming query cannot take (source.py Rule 4): every call
    raises the refusal, so the query fails with it; `stop()` has nothing to release."""

    def __init__(self, refusal: Exception) -> None:
        self.refusal = refusal

    def initialOffset(self) -> dict:
        raise self.refusal

    def latestOffset(self) -> dict:
        raise self.refusal

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        raise self.refusal

    def read(self, partition: InputPartition) -> Iterator:
        raise self.refusal

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        pass
