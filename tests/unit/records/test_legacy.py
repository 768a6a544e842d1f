"""The legacy message format (records/legacy.py): round trips through the decoder and the up-conversion to
RecordBatch v2, corrupt and truncated sets refused in one line, and bounded memory on absurd sizes."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records import compression, legacy
from sparklog.records.batch import NO_TIMESTAMP, iter_batches, iter_records

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
maybe_bytes = st.none() | st.binary(max_size=64)
messages = st.lists(st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**41)), min_size=1, max_size=8)
codecs = st.sampled_from(legacy.LEGACY_CODECS)
magics = st.sampled_from([legacy.MAGIC_V0, legacy.MAGIC_V1])


def expected_timestamps(items, magic):
    return [ts if magic == legacy.MAGIC_V1 else NO_TIMESTAMP for _, _, ts in items]


@SETTINGS
@given(items=messages, magic=magics, codec=codecs)
def test_decode_gives_back_what_was_encoded(items, magic, codec):
    decoded = legacy.decode(legacy.encode(items, magic, codec))
    assert [(m.key, m.value) for m in decoded] == [(k, v) for k, v, _ in items]
    assert [m.timestamp for m in decoded] == expected_timestamps(items, magic)
    assert {m.magic for m in decoded} == {magic}


@SETTINGS
@given(items=messages, magic=magics, codec=codecs)
def test_up_conversion_is_one_v2_batch_of_the_same_records(items, magic, codec):
    converted = legacy.up_convert(legacy.encode(items, magic, codec))
    (batch,) = list(iter_batches(converted))
    assert batch.compression == codec and batch.record_count == len(items) and batch.producer_id == -1
    records = list(iter_records(converted))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (i, k, v, ts) for i, ((k, v, _), ts) in enumerate(zip(items, expected_timestamps(items, magic)))]


def test_a_log_append_time_wrapper_gives_its_timestamp_to_every_inner_message():
    items = [(b"k", b"v1", 5), (None, b"v2", 9)]
    wrapped = legacy.encode(items, legacy.MAGIC_V1, compression.GZIP, timestamp_type=1)
    assert [m.timestamp for m in legacy.decode(wrapped)] == [9, 9]


@SETTINGS
@given(items=st.lists(st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**41)), min_size=1, max_size=1),
       magic=magics, data=st.data())
def test_any_byte_changed_after_the_offset_is_refused(items, magic, data):
    """The offset (bytes 0-7) is the producer's and ignored; everything after it is checked: the size by the
    bytes that remain, the rest by the CRC."""
    encoded = bytearray(legacy.encode(items, magic))
    i = data.draw(st.integers(8, len(encoded) - 1))
    encoded[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(legacy.CorruptMessageSet):
        legacy.decode(bytes(encoded))


@SETTINGS
@given(items=messages, magic=magics, codec=codecs, data=st.data())
def test_every_truncation_is_refused_but_at_a_message_boundary(items, magic, codec, data):
    """A plain set cut between two messages is a shorter valid set (the format has no count); any other cut,
    and every cut of a compressed wrapper, is refused."""
    encoded = legacy.encode(items, magic, codec)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    boundaries = {} if codec else {len(legacy.encode(items[:k], magic)): k for k in range(1, len(items))}
    if cut in boundaries:
        assert [m.value for m in legacy.decode(encoded[:cut])] == [v for _, v, _ in items[:boundaries[cut]]]
        return
    with pytest.raises(legacy.CorruptMessageSet):
        legacy.decode(encoded[:cut])


@SETTINGS
@given(blob=st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_refused_in_one_line(blob):
    try:
        legacy.decode(blob)
    except legacy.CorruptMessageSet as exc:
        assert "\n" not in str(exc)


def raw_entry(magic: int, attributes: int, value: bytes, size: int | None = None, crc: int | None = None) -> bytes:
    body = struct.pack(">bB", magic, attributes) + (struct.pack(">q", 0) if magic else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body) if crc is None else crc) + body
    return struct.pack(">qi", 0, len(message) if size is None else size) + message


@pytest.mark.parametrize("blob, message", [
    (raw_entry(0, 0, b"v", size=2**31 - 1), "message size 2147483647 is outside"),
    (raw_entry(1, 0, b"v", crc=7), "CRC mismatch"),
    (raw_entry(2, 0, b"v"), "magic 2 is not a legacy message"),
    (raw_entry(1, 4, b"v"), "compression 4 is not one of the legacy codecs"),
    (raw_entry(0, 1, legacy.encode([(None, b"x", 0)], 0, compression.GZIP)[26:] + b"junk"), "gzip"),
    (raw_entry(1, 1, gzip.compress(legacy.encode([(None, b"x", 0)], 1, compression.GZIP), mtime=0)),
     "a compressed message inside a compressed one"),
    (raw_entry(1, 1, gzip.compress(legacy.encode([(None, b"x", 0)], 0), mtime=0)), "inner magic 0 differs"),
    (raw_entry(1, 1, gzip.compress(b"", mtime=0)), "the message set is empty"),
    (b"", "the message set is empty"),
], ids=["absurd-size", "crc", "magic-2", "codec-4", "junk-gzip", "nested-compression", "inner-magic",
        "empty-compressed", "empty"])
def test_corrupt_sets_name_what_is_wrong(blob, message):
    with pytest.raises(legacy.CorruptMessageSet, match=message) as caught:
        legacy.decode(blob)
    assert "\n" not in str(caught.value)


def test_absurd_sizes_and_a_decompression_bomb_hold_bounded_memory():
    bomb = raw_entry(1, compression.GZIP, gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9))
    lengths = raw_entry(0, 0, b"v")[:-5] + struct.pack(">i", 2**31 - 2) + b"v"
    tracemalloc.start()
    try:
        for blob in (bomb, lengths, raw_entry(0, 0, b"v", size=2**31 - 1) * 1000):
            with pytest.raises(legacy.CorruptMessageSet):
                legacy.decode(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, peak  # the bomb's bound is output_limit: 16 MiB of output, plus the input
    assert legacy.is_legacy(raw_entry(1, 0, b"v")) and not legacy.is_legacy(b"\0" * 16 + b"\x02")
