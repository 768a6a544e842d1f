"""`read()` of one input partition, in a Spark Python worker: exactly the offsets `[start, end)` as Arrow.

Rule 1: everything needed travels in the partition and the options. Inside a Spark task the consumer is
borrowed from the worker process's pool (consumer_pool.py: keyed by connection options, topic and
partition; `sparklog.consumer.cache.*`), sought to `start`, and given back parked (paused, nothing queued)
when the range is read or the reader is closed early; a read that raised, timed out or saw data loss closes
it instead, and a retried task attempt never reuses one. Outside a task (no TaskContext), or with
`sparklog.consumer.cache.enabled=false`, the read opens its own consumer and closes it, whatever happens.
Rule 2: the same `(start, end)` always yields the same rows: records before `start` in the first fetched
batch and records from `end` on are dropped, and control batches (transaction markers) are skipped by each
batch's next offset, not waited for. The offsets a compacted topic's cleaner removed are gaps *inside*
batches (the cleaner keeps every batch header, even of an emptied batch: records/retain.py Rule 3): the
position moves over them by each batch's next offset, silently, as over control batches. With
`kafka.isolation.level=read_committed` the consumer's chunks stop at the last stable offset (the source's
latest offsets are the LSO too) and the batches of aborted transactions are passed over as control batches
are (records/aborted.py). A gap *between*
batches is a range the broker fenced as damaged (bit rot): data loss, as Rule 3 (Spark's "Cannot fetch
records in [a, b)").
Rule 3: offsets of the range that are no longer in the log are data loss: `failOnDataLoss=true` fails the
task naming the topic, partition and missing range; false warns and reads what is left. A range the log
never reaches fails after `kafkaConsumer.pollTimeoutMs`, never hangs; the offset lookups are bounded by it too.
The log start is looked up only when a fetch is answered OFFSET_OUT_OF_RANGE, never before the first fetch:
on the happy path a task makes two requests (Metadata, then Fetch), not three.
Rule 4: records are decoded a whole batch at a time straight into Arrow's layout (`ColumnBuilder.append_batch`:
into the buffers of the Arrow batch being filled, records/buffers.py Rule 4), from the chunks of raw record batches the client Consumer fetched (its
fetcher thread fetches the next chunk while this one is decoded); that keeps the batch's timestamp type,
which the Consumer's per-record API does not carry, and creates no object per record. Headers, when asked
for and present, are the one column still read through `RecordBatch.columns()`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Iterator

import pyarrow as pa

from sparklog.datasource.arrow import ColumnBuilder
from sparklog.datasource.consumer_pool import POOL, ConsumerPool, PoolSettings
from sparklog.datasource.errors import missing_range, report_data_loss
from sparklog.datasource.metadata import bootstrap_servers
from sparklog.datasource.offsets import SparklogInputPartition
from sparklog.datasource.options import ReadOptions
from sparklog.records.batch import batches_overlapping

logger = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 65_536  # bounded memory per task: Spark streams the batches on as they come
POLL_INTERVAL_S = 0.5  # one poll's wait; the overall deadline is kafkaConsumer.pollTimeoutMs


class FetchTimeout(TimeoutError):
    """The range could not be read within kafkaConsumer.pollTimeoutMs."""


def read_partition(options: ReadOptions, part: SparklogInputPartition,
                   pool: ConsumerPool | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of `[part.start, part.end)`; `pool` replaces the worker's pool and pools outside a task too."""
    if part.end <= part.start:
        return iter(())
    if options.avro_options:  # valueFormat=avro: decode `value` into the reader schema's struct
        from sparklog.datasource.avro import decode_values

        return decode_values(dict(options.avro_options), _read(options, part, pool))
    return _read(options, part, pool)


def _open_consumer(options: ReadOptions, part: SparklogInputPartition):
    from sparklog.client.consumer import Consumer

    servers = part.bootstrap or bootstrap_servers(options.connection)
    settings = dict(options.connection.settings)
    settings["auto.offset.reset"] = "none"  # an out-of-range position is data loss here, never a silent reset
    consumer = Consumer(bootstrap_servers=servers, **settings)
    consumer.assign([(part.topic, part.partition)])
    return consumer


def _task_attempt() -> int | None:
    """The Spark task's attempt number (0 first), or None outside a Spark task (Rule 1)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - the data source always runs with pyspark
        return None
    context = TaskContext.get()
    return None if context is None else context.attemptNumber()


def _borrow(options: ReadOptions, part: SparklogInputPartition, pool: ConsumerPool | None):
    """(lease, pool settings) for this read (Rule 1): pooled only inside a Spark task."""
    attempt = _task_attempt()
    settings = options.consumer_cache
    if pool is None:
        pool = POOL
        if attempt is None:
            settings = replace(settings, enabled=False)
    key = (options.connection, part.topic, part.partition)
    lease = pool.borrow(key, lambda: _open_consumer(options, part), settings, fresh=bool(attempt))
    return pool, lease, settings


def _read(options: ReadOptions, part: SparklogInputPartition,
          pool: ConsumerPool | None = None) -> Iterator[pa.RecordBatch]:
    from sparklog.client.consumer import OffsetOutOfRange

    pool, lease, settings = _borrow(options, part, pool)
    consumer, tp = lease.consumer, (part.topic, part.partition)
    losses: list[tuple[int, int]] = []

    def lost(start: int, end: int) -> None:  # every data loss goes through here: such a consumer is closed
        losses.append((start, end))
        report_data_loss(options.fail_on_data_loss, missing_range(part.topic, part.partition, start, end))

    healthy = False
    try:
        position = part.start  # no ListOffsets first: a start retention removed is answered out of range
        consumer.seek(tp, position)
        consumer.fetch_until(tp, part.end)  # no fetch left waiting at the log's end (it would delay a seek)
        if lease.reused:
            consumer.resume(tp)
        builder = ColumnBuilder(part.topic, part.partition, options.include_headers, options.columns)
        timeout_s = options.poll_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        while position < part.end:
            try:
                new_position = _fetch_into(builder, consumer, position, part.end, lost)
            except OffsetOutOfRange:  # retention ran since we looked: report, then go on from the log start
                new_position = _first_available(consumer, options, part, position, lost)
                consumer.seek(tp, new_position)
            if len(builder) >= ROWS_PER_ARROW_BATCH:
                yield builder.build()
            if new_position > position:
                position, deadline = new_position, time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                if not _lost_tail(consumer, options, part, position, lost):
                    raise FetchTimeout(
                        f"Timed out after {options.poll_timeout_ms} ms reading offsets [{position}, {part.end}) of "
                        f"{part.topic}-{part.partition} (kafkaConsumer.pollTimeoutMs)"
                    )
                break
        if len(builder):
            yield builder.build()
        healthy = not losses
    except GeneratorExit:  # Spark stopped reading early (a limit): the consumer itself is fine
        healthy = not losses
        raise
    finally:
        _give_back(pool, lease, settings, healthy, part)


def _give_back(pool: ConsumerPool, lease, settings: PoolSettings, healthy: bool, part: SparklogInputPartition) -> None:
    """Park a consumer that goes back to the pool: paused, its queued chunks dropped (consumer_pool Rule 4)."""
    if healthy and lease.pooled and settings.enabled:
        tp = (part.topic, part.partition)
        try:
            lease.consumer.pause(tp)
            lease.consumer.seek(tp, part.end)  # drops what the fetcher queued past the range
        except Exception:
            logger.warning("parking the consumer of %s-%s failed; closing it", *tp, exc_info=True)
            healthy = False
    pool.give_back(lease, settings, healthy)


def _first_available(consumer, options: ReadOptions, part: SparklogInputPartition, position: int, lost) -> int:
    """`position`, or the log start offset when retention removed it (Rule 3); `lost(a, b)` reports."""
    tp = (part.topic, part.partition)
    earliest = consumer.beginning_offsets([tp], timeout=options.poll_timeout_ms / 1000)[tp]
    if position < earliest:
        lost(position, min(earliest, part.end))
        return min(earliest, part.end)
    return position


def _lost_tail(consumer, options: ReadOptions, part: SparklogInputPartition, position: int, lost) -> bool:
    """The log ends before `part.end` (topic deleted or recreated): data loss, not a timeout."""
    tp = (part.topic, part.partition)
    latest = consumer.end_offsets([tp], timeout=options.poll_timeout_ms / 1000)[tp]
    if latest >= part.end:
        return False
    lost(max(position, latest), part.end)
    return True


def _fetch_into(builder: ColumnBuilder, consumer, position: int, end: int, on_gap=None) -> int:
    """Append the records of one fetched chunk in `[position, end)`; return the next position.

    Decodes whole record batches straight into Arrow buffers (Rule 4); the position moves
    past control batches and compacted gaps too (Rule 2).
    """
    chunk = consumer.next_chunk(POLL_INTERVAL_S)  # raw fetched chunks; see Rule 4
    if chunk is None:
        return position
    _state, _epoch, view, _start, aborted = chunk
    for batch, data in batches_overlapping(view, position, end, consumer.config["check.crcs"]):
        if on_gap is not None and position < min(batch.base_offset, end):  # a fenced range (Rule 2)
            on_gap(position, min(batch.base_offset, end))
        if aborted is not None and aborted.skips(batch):  # kafka.isolation.level=read_committed
            data = False
        if data:
            builder.append_batch(batch, position, end)
        position = min(max(position, batch.next_offset), end)
    return position
