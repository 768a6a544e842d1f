"""Compression codecs: round trips, the framings real clients write, and corrupt input."""

import gzip
import struct

import cramjam
import kafka.codec
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records import compression
from support.bombs import zstd_rle_bomb
from sparklog.records.compression import (
    CODECS,
    XERIAL_BLOCK_SIZE,
    XERIAL_HEADER,
    CompressionError,
    UnknownCodecError,
    codec_id,
    compress,
    decompress,
)

ALL_CODECS = sorted(CODECS.values())
COMPRESSED_CODECS = [c for c in ALL_CODECS if c]
# Compressible and incompressible data across xerial's 32 KiB block boundary.
SAMPLES = [b"", b"x", b"abc" * 20000, bytes(range(256)) * 300, b"\x00" * (XERIAL_BLOCK_SIZE + 1)]


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(ALL_CODECS), data=st.binary(max_size=3000))
def test_round_trip_property(codec, data):
    packed = compress(codec, memoryview(data))
    assert decompress(codec, memoryview(packed)) == data


def test_codec_names_are_kafkas_compression_types():
    assert CODECS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert codec_id("ZSTD") == 4 and codec_id(2) == 2


@pytest.mark.parametrize("bad", ["brotli", 5, -1, 7])
def test_unknown_codec_raises(bad):
    with pytest.raises(UnknownCodecError):
        codec_id(bad)
    if isinstance(bad, int):
        with pytest.raises(UnknownCodecError):
            compress(bad, b"x")
        with pytest.raises(UnknownCodecError):
            decompress(bad, b"x")


def test_snappy_writes_xerial_framing():
    data = b"sparklog " * 8000  # 72 000 bytes: three xerial blocks
    packed = compress(compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) == XERIAL_HEADER
    position, blocks = 16, []
    while position < len(packed):
        (length,) = struct.unpack_from(">i", packed, position)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[position + 4 : position + 4 + length])))
        position += 4 + length
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE, XERIAL_BLOCK_SIZE, len(data) - 2 * XERIAL_BLOCK_SIZE]
    assert b"".join(blocks) == data
    assert kafka.codec.snappy_decode(packed) == data  # what the kafka-python consumer does


def test_snappy_reads_kafka_python_xerial_and_librdkafka_raw():
    data = b"record section " * 5000
    assert decompress(compression.SNAPPY, kafka.codec.snappy_encode(data)) == data
    assert decompress(compression.SNAPPY, kafka.codec.snappy_encode(data, xerial_blocksize=1000)) == data
    assert decompress(compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(compression.SNAPPY, snappy.compress(data)) == data  # python-snappy: raw too


def test_other_codecs_read_and_write_standard_frames():
    data = b"frame " * 10000
    assert gzip.decompress(compress(compression.GZIP, data)) == data
    assert decompress(compression.GZIP, gzip.compress(data) + gzip.compress(data)) == data * 2
    packed = compress(compression.LZ4, data)
    assert lz4.frame.decompress(packed) == data and kafka.codec.lz4_decode(packed) == data
    assert decompress(compression.LZ4, lz4.frame.compress(data)) == data  # content size, linked blocks
    assert kafka.codec.zstd_decode(compress(compression.ZSTD, data)) == data


def test_zstd_frames_without_content_size_and_back_to_back():
    """Java and librdkafka stream their zstd frames, so the frame header has no content size."""
    compressor = zstandard.ZstdCompressor().compressobj()
    frame = compressor.compress(b"streamed " * 1000) + compressor.flush()
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(compression.ZSTD, frame) == b"streamed " * 1000
    assert decompress(compression.ZSTD, frame + frame) == b"streamed " * 2000


@pytest.mark.parametrize("codec", COMPRESSED_CODECS)
def test_truncated_or_garbage_input_raises_compression_error(codec):
    packed = compress(codec, bytes(range(256)) * 100)
    with pytest.raises(CompressionError):
        decompress(codec, packed[: len(packed) // 2])
    with pytest.raises(CompressionError):
        decompress(codec, b"\xff" * 40)


def test_xerial_block_overrunning_the_stream_raises():
    packed = compress(compression.SNAPPY, b"abc" * 100)
    with pytest.raises(CompressionError, match="overruns"):
        decompress(compression.SNAPPY, packed[:-1])
    with pytest.raises(CompressionError, match="block length"):
        decompress(compression.SNAPPY, packed + b"\x00\x00")


# ---------------------------------------------------------------------------------------------------------
# Decompression bombs (Rule 3): a small section that expands without end is refused at its bound, and the
# bytes held on the way stay near that bound.


def gzip_bomb(members: int) -> bytes:
    return gzip.compress(b"\x00" * (1 << 20), compresslevel=9) * members  # ~1 KB in per MiB out


def lz4_bomb(frames: int) -> bytes:
    return lz4.frame.compress(b"\x00" * (4 << 20)) * frames  # ~16 KB in per 4 MiB out


def peak_bytes(call) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_one_kilobyte_zstd_bomb_is_refused_at_the_default_bound():
    bomb = zstd_rle_bomb(8 << 30)[:1024]  # the first KB of an 8 GiB frame: 250 blocks, 32 MiB
    assert compression.output_limit(len(bomb)) == compression.MIN_OUTPUT_LIMIT
    with pytest.raises(compression.DecompressedTooLarge, match="expands beyond 16777216 bytes"):
        decompress(compression.ZSTD, bomb)


def test_a_zstd_bomb_of_gigabytes_holds_no_more_than_its_bound():
    bomb = zstd_rle_bomb(4 << 30)  # 128 KiB in, 4 GiB out
    limit = compression.output_limit(len(bomb))

    def refuse():
        with pytest.raises(compression.DecompressedTooLarge):
            decompress(compression.ZSTD, bomb)

    assert peak_bytes(refuse) < 2 * limit + (4 << 20)


@pytest.mark.parametrize("codec, bomb", [(compression.GZIP, gzip_bomb(32)), (compression.LZ4, lz4_bomb(8))],
                         ids=["gzip", "lz4"])
def test_gzip_and_lz4_bombs_are_refused_at_the_given_bound(codec, bomb):
    limit = 4 << 20  # the bombs expand to 32 MiB

    def refuse():
        with pytest.raises(compression.DecompressedTooLarge, match=f"expands beyond {limit} bytes"):
            decompress(codec, bomb, limit)

    assert peak_bytes(refuse) < 2 * limit + (4 << 20)
    assert len(decompress(codec, bomb, 32 << 20)) == 32 << 20  # at the bound it still decodes


def test_a_raw_snappy_block_claiming_gigabytes_is_refused_before_it_is_decoded():
    claims_4gib = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 20
    with pytest.raises(compression.DecompressedTooLarge):
        decompress(compression.SNAPPY, claims_4gib)
    xerial = XERIAL_HEADER + struct.pack(">i", len(claims_4gib)) + claims_4gib
    with pytest.raises(compression.DecompressedTooLarge):
        decompress(compression.SNAPPY, xerial)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS)
def test_a_section_of_exactly_its_bound_decodes(codec):
    data = b"\x00" * (1 << 16)
    assert decompress(codec, compress(codec, data), limit=len(data)) == data
    with pytest.raises(compression.DecompressedTooLarge):
        decompress(codec, compress(codec, data), limit=len(data) - 1)


def test_many_lz4_frames_back_to_back_decode():
    frames = lz4.frame.compress(b"frame") * 2000  # more than the recursion limit
    assert decompress(compression.LZ4, frames) == b"frame" * 2000


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(COMPRESSED_CODECS), data=st.binary(max_size=3000), frames=st.integers(1, 3),
       limit=st.integers(0, 10_000))
def test_a_bound_decodes_everything_within_it_and_refuses_anything_beyond(codec, data, frames, limit):
    packed = compress(codec, data)
    if codec != compression.SNAPPY:
        packed *= frames  # gzip members, LZ4 and zstd frames back to back
    else:
        frames = 1
    if len(data) * frames <= limit:
        assert decompress(codec, packed, limit) == data * frames
    else:
        with pytest.raises(compression.DecompressedTooLarge):
            decompress(codec, packed, limit)
