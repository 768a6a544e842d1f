"""`_fetch_into`: one fetched chunk of raw batches into columns, cut to exactly `[position, end)`."""

import pyarrow as pa

from sparklog.datasource.arrow import ColumnBuilder
from sparklog.datasource.fetcher import _fetch_into
from sparklog.records.batch import LOG_APPEND_TIME, build_batch


class FakeConsumer:
    """Hands out one chunk of concatenated batches, as `Consumer.next_chunk` does, then nothing."""

    config = {"check.crcs": True}

    def __init__(self, *batches: bytes) -> None:
        self.chunks = [(None, 0, memoryview(b"".join(batches)), 0)]

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
