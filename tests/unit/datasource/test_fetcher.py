"""`_fetch_into`: one fetched chunk of raw batches into columns, cut to exactly `[position, end)`."""

import pyarrow as pa
import pytest

from sparklog.datasource.arrow import ColumnBuilder
from sparklog.datasource.fetcher import _fetch_into
from sparklog.records.batch import LOG_APPEND_TIME, build_batch


class FakeConsumer:
    """Hands out one chunk of concatenated batches, as `Consumer.next_chunk` does, then nothing."""

    config = {"check.crcs": True}

    def __init__(self, *batches: bytes) -> None:
        self.chunks = [(None, 0, memoryview(b"".join(batches)), 0, None)]

    def next_chunk(self, timeout):
        return self.chunks.pop(0) if self.chunks else None


def batch(base: int, count: int, **kwargs) -> bytes:
    return build_batch([(b"k%d" % (base + i), b"v%d" % (base + i), None, 100 + base + i) for i in range(count)],
                       base_offset=base, **kwargs)


def test_range_cuts_batches_on_both_sides_and_skips_control_batches():
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", None, 0)], base_offset=10, is_control=True)
    consumer = FakeConsumer(batch(0, 10), marker, batch(11, 10, timestamp_type=LOG_APPEND_TIME))
    builder = ColumnBuilder("t", 3)
    assert _fetch_into(builder, consumer, 4, 15) == 15
    rows = builder.build().to_pylist()
    assert [r["offset"] for r in rows] == [4, 5, 6, 7, 8, 9, 11, 12, 13, 14]
    assert [r["value"] for r in rows] == [b"v%d" % o for o in (4, 5, 6, 7, 8, 9, 11, 12, 13, 14)]
    assert [r["timestampType"] for r in rows] == [0] * 6 + [1] * 4
    assert {r["timestamp"].timestamp() for r in rows[6:]} == {(100 + 20) / 1000}  # maxTimestamp of the batch
    assert _fetch_into(builder, consumer, 15, 20) == 15  # no chunk: the position stays


def test_batches_wholly_before_the_position_or_after_the_end_add_nothing():
    builder = ColumnBuilder("t", 0)
    assert _fetch_into(builder, FakeConsumer(batch(0, 5), batch(5, 5), batch(10, 5)), 5, 10) == 10
    assert builder.build().column("offset") == pa.array(range(5, 10), pa.int64())


class RangeConsumer(FakeConsumer):
    """A consumer for `_read`: one chunk per seek, from where the seek put it; the log starts at `log_start`,
    and a fetch before it is answered out of range, as a broker answers."""

    def __init__(self, log_start: int, *batches: bytes) -> None:
        self.log_start, self.batches, self.lookups, self.position = log_start, batches, 0, None
        self.chunks = []

    def assign(self, tps) -> None:
        pass

    def fetch_until(self, tp, offset) -> None:
        pass

    def pause(self, tp) -> None:
        self.paused = True

    def resume(self, tp) -> None:
        self.paused = False

    def seek(self, tp, offset: int) -> None:
        from sparklog.client.consumer import OffsetOutOfRange

        self.position = offset
        if offset < self.log_start:
            self.chunks = [OffsetOutOfRange(f"{tp}: offset {offset} is out of range")]
        else:
            self.chunks = [(None, 0, memoryview(b"".join(self.batches)), offset, None)]

    def next_chunk(self, timeout):
        chunk = self.chunks.pop(0) if self.chunks else None
        if isinstance(chunk, Exception):
            raise chunk
        return chunk

    def beginning_offsets(self, tps, timeout=None) -> dict:
        self.lookups += 1
        return {tp: self.log_start for tp in tps}

    def close(self) -> None:
        self.closed = True


def read(consumer, monkeypatch, start: int, end: int, pool=None, **options) -> list[int]:
    from sparklog.datasource import fetcher
    from sparklog.datasource.offsets import SparklogInputPartition
    from sparklog.datasource.options import parse_read_options

    monkeypatch.setattr(fetcher, "_open_consumer", lambda *_: consumer)
    parsed = parse_read_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", **options},
                                streaming=False)
    rows = [b for b in fetcher.read_partition(parsed, SparklogInputPartition("t", 0, start, end), pool)]
    return [o for b in rows for o in b.column("offset").to_pylist()]


def test_a_task_looks_up_no_offsets_before_its_first_fetch(monkeypatch):
    consumer = RangeConsumer(0, batch(0, 10))
    assert read(consumer, monkeypatch, 2, 8) == list(range(2, 8))
    assert consumer.lookups == 0  # Metadata, then Fetch: no ListOffsets on the happy path


def test_a_start_retention_removed_is_found_by_the_fetch_and_reported(monkeypatch, caplog):
    consumer = RangeConsumer(5, batch(5, 10))
    assert read(consumer, monkeypatch, 2, 12, failOnDataLoss="false") == list(range(5, 12))
    assert consumer.lookups == 1
    assert "Offsets [2, 5) of t-0 are missing" in caplog.text


def test_a_start_retention_removed_fails_the_task_with_fail_on_data_loss(monkeypatch):
    from sparklog.datasource.errors import DataLossError

    with pytest.raises(DataLossError, match=r"Offsets \[2, 5\) of t-0 are missing"):
        read(RangeConsumer(5, batch(5, 10)), monkeypatch, 2, 12)


def test_a_read_gives_its_consumer_back_parked_and_the_next_read_reuses_it(monkeypatch):
    from sparklog.datasource.consumer_pool import ConsumerPool

    pool, consumer = ConsumerPool(), RangeConsumer(0, batch(0, 10))
    assert read(consumer, monkeypatch, 0, 4, pool) == [0, 1, 2, 3]
    assert consumer.paused and consumer.position == 4  # parked at the range's end: nothing fetched, nothing queued
    monkeypatch.setattr("sparklog.datasource.fetcher._open_consumer", lambda *_: pytest.fail("opened again"))
    assert read(consumer, monkeypatch, 4, 9, pool) == [4, 5, 6, 7, 8]
    assert pool.statistics().reused == 1 and consumer.paused  # parked again
    pool.close_all()
    assert consumer.closed


def test_a_read_that_saw_data_loss_closes_its_consumer_instead_of_pooling_it(monkeypatch):
    from sparklog.datasource.consumer_pool import ConsumerPool

    pool, consumer = ConsumerPool(), RangeConsumer(5, batch(5, 10))
    assert read(consumer, monkeypatch, 2, 12, pool, failOnDataLoss="false") == list(range(5, 12))
    assert getattr(consumer, "closed", False) and pool.statistics().idle == 0


def test_a_read_that_failed_closes_its_consumer_instead_of_pooling_it(monkeypatch):
    from sparklog.datasource.consumer_pool import ConsumerPool
    from sparklog.datasource.errors import DataLossError

    pool, consumer = ConsumerPool(), RangeConsumer(5, batch(5, 10))
    with pytest.raises(DataLossError):
        read(consumer, monkeypatch, 2, 12, pool)
    assert getattr(consumer, "closed", False) and pool.statistics().idle == 0


def test_outside_a_spark_task_a_read_closes_its_consumer(monkeypatch):
    consumer = RangeConsumer(0, batch(0, 10))
    assert read(consumer, monkeypatch, 0, 4) == [0, 1, 2, 3]
    assert consumer.closed
