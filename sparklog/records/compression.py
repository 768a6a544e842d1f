"""Compression codecs of a RecordBatch v2 records section, framed as Kafka's own clients frame them.

Rule 1: we write what the Java client writes (gzip stream, xerial-framed snappy, LZ4 frame, zstd frame).
Rule 2: we read every framing a real client writes, including librdkafka's raw (unframed) snappy.
Rule 3: decompression is bounded: `decompress(codec, data, limit)` never holds more than about `limit`
bytes of output, and raises `DecompressedTooLarge` naming the bound once the output would pass it (a
1 KB "decompression bomb" must not become gigabytes in a broker or a consumer). `output_limit(n)` is the
one rule for how far a records section of `n` compressed bytes may expand.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from typing import Any, Callable

import cramjam
import lz4.frame
import zstandard

from sparklog.records import BytesLike

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

# Kafka's `compression.type` names to the attribute bits 0-2 of a batch.
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {codec_id: name for name, codec_id in CODECS.items()}

# Kafka's compression.gzip.level default is -1, i.e. zlib's default level 6.
GZIP_LEVEL = 6
# Kafka's compression.zstd.level default is 3 (zstd's own default).
ZSTD_LEVEL = 3

# How far a compressed records section may expand (Rule 3). Kafka streams records out of a batch and has no
# such bound; we materialize a batch's records, so the output is bounded by the input: MAX_EXPANSION times
# the compressed bytes (producers batch ~1 MB of records; JSON and text compress 5-20x), and never less than
# MIN_OUTPUT_LIMIT, so small, very repetitive batches (all zeros) still decode. A broker thereby holds at
# most MAX_EXPANSION x message.max.bytes per batch, a consumer MAX_EXPANSION x its fetch size.
MAX_EXPANSION = 64
MIN_OUTPUT_LIMIT = 16 * 1024 * 1024
# zstd's decoder cannot bound its own output, so it is fed a step of input at a time: an RLE block of 4
# input bytes expands to 128 KiB (2^15 per byte), so a step of (limit - total) >> 15 bytes, at least
# _ZSTD_INPUT_STEP (2 MiB of output), cannot more than double what is held.
_ZSTD_MAX_EXPANSION_BITS = 15
_ZSTD_INPUT_STEP = 64

# xerial snappy-java framing (SnappyOutputStream), which the Java and kafka-python producers write:
# magic "\x82SNAPPY\x00", int32 version 1, int32 min-compatible version 1, then blocks of
# int32 big-endian compressed length + one raw snappy block.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default block size, as the Java client uses it
_BLOCK_LENGTH = struct.Struct(">i")


# What the libraries raise on bad input: lz4 RuntimeError; gzip BadGzipFile (an OSError), EOFError
# when truncated or zlib.error; cramjam its own DecompressionError.
_DECODE_ERRORS = (
    ValueError, OSError, EOFError, RuntimeError, zlib.error, zstandard.ZstdError, cramjam.DecompressionError
)


class CompressionError(ValueError):
    """Compressed bytes that do not decode: truncated, corrupt or in a framing we do not know."""


class DecompressedTooLarge(CompressionError):
    """A records section that expands beyond its output limit (Rule 3): a decompression bomb, or a batch
    far more compressible than real data."""


class UnknownCodecError(ValueError):
    """A compression id outside 0-4 or an unknown `compression.type` name."""


def codec_id(compression: str | int) -> int:
    """The attribute bits for a `compression.type` name (or an id, checked)."""
    if isinstance(compression, str):
        try:
            return CODECS[compression.lower()]
        except KeyError:
            raise UnknownCodecError(f"unknown compression type {compression!r}; known: {sorted(CODECS)}") from None
    if compression not in CODEC_NAMES:
        raise UnknownCodecError(f"unknown compression id {compression!r}")
    return compression


def compress(codec: int, data: BytesLike) -> bytes:
    """Compress one records section with the given codec id (0 returns the bytes unchanged)."""
    try:
        compressor = _COMPRESSORS[codec]
    except KeyError:
        raise UnknownCodecError(f"unknown compression id {codec!r}") from None
    return compressor(data)


def output_limit(compressed_bytes: int) -> int:
    """The most bytes a records section of `compressed_bytes` may decompress to (Rule 3)."""
    return max(MIN_OUTPUT_LIMIT, MAX_EXPANSION * compressed_bytes)


def decompress(codec: int, data: BytesLike, limit: int | None = None) -> bytes:
    """Decompress one records section; corrupt input raises `CompressionError`, output beyond `limit`
    (default `output_limit(len(data))`) raises `DecompressedTooLarge` before it is held."""
    try:
        decoder = _DECOMPRESSORS[codec]
    except KeyError:
        raise UnknownCodecError(f"unknown compression id {codec!r}") from None
    bound = output_limit(len(data)) if limit is None else limit
    try:
        return decoder(data, bound)
    except CompressionError:
        raise
    except _DECODE_ERRORS as exc:
        raise CompressionError(f"{CODEC_NAMES[codec]} data does not decompress: {exc}") from exc


def _too_large(codec: int, limit: int) -> DecompressedTooLarge:
    return DecompressedTooLarge(f"{CODEC_NAMES[codec]} records section expands beyond {limit} bytes (the bound is "
                                f"{MAX_EXPANSION}x its compressed size, at least {MIN_OUTPUT_LIMIT})")


def _identity(data: BytesLike, limit: int | None = None) -> bytes:
    return bytes(data)


def _gzip_compress(data: BytesLike) -> bytes:
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def _snappy_compress(data: BytesLike) -> bytes:
    """xerial framing: header, then each 32 KiB chunk as a length-prefixed raw block."""
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: BytesLike, limit: int) -> bytes:
    """Both xerial framing (Java, kafka-python) and one raw block (librdkafka)."""
    view = memoryview(data)
    if len(view) >= len(XERIAL_HEADER) and view[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        return _xerial_decompress(view, limit)
    _check_raw_snappy(view, limit)
    return bytes(cramjam.snappy.decompress_raw(view))


def _check_raw_snappy(block: memoryview, limit: int) -> int:
    """A raw snappy block starts with its uncompressed length (a varint): check it before decoding."""
    length = shift = 0
    for position in range(min(len(block), 5)):
        length |= (block[position] & 0x7F) << shift
        shift += 7
        if not block[position] & 0x80:
            break
    if length > limit:
        raise _too_large(SNAPPY, limit)
    return length


def _xerial_decompress(view: memoryview, limit: int) -> bytes:
    parts = []
    position = len(XERIAL_HEADER)
    end = len(view)
    total = 0
    while position < end:
        if end - position < _BLOCK_LENGTH.size:
            raise CompressionError("xerial snappy stream ends inside a block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or position + length > end:
            raise CompressionError(f"xerial snappy block of {length} bytes overruns the stream")
        block = view[position : position + length]
        total += _check_raw_snappy(block, limit - total)
        parts.append(cramjam.snappy.decompress_raw(block))
        position += length
    return b"".join(parts)


def _gzip_decompress(data: BytesLike, limit: int) -> bytes:
    """Every gzip member (a stream may hold several, as gzip.decompress reads them), at most `limit` bytes."""
    return _frames(GZIP, lambda: zlib.decompressobj(wbits=16 + zlib.MAX_WBITS), bytes(data), limit, b"\x00")


def _frames(codec: int, new_decoder: Callable[[], Any], data: BytesLike, limit: int, padding: bytes = b"") -> bytes:
    """Decode frames (gzip members, LZ4 frames) back to back, at most `limit` bytes in all; `padding` bytes
    between frames are skipped (gzip.decompress skips zeros). A decoder takes (input, max_length)."""
    parts: list[bytes] = []
    total, rest = 0, data
    while rest:
        decoder = new_decoder()
        part = decoder.decompress(rest, limit - total + 1)
        total += len(part)
        if total > limit:
            raise _too_large(codec, limit)
        if not decoder.eof:
            raise CompressionError(f"{CODEC_NAMES[codec]} data is truncated")
        parts.append(part)
        rest = decoder.unused_data.lstrip(padding) if padding else decoder.unused_data
    return b"".join(parts)


def _lz4_compress(data: BytesLike) -> bytes:
    """An LZ4 frame with the Java client's flags: 64 KiB independent blocks, no content size."""
    compressed: bytes = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    return compressed


def _lz4_decompress(data: BytesLike, limit: int) -> bytes:
    """Every LZ4 frame of the section (a producer may write several back to back), at most `limit` bytes."""
    return _frames(LZ4, lz4.frame.LZ4FrameDecompressor, data, limit)


# zstandard contexts are not thread-safe and costly to create: one pair per thread.
_zstd_contexts = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_zstd_contexts, "compressor", None)
    if compressor is None:
        compressor = _zstd_contexts.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_zstd_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_contexts.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_compress(data: BytesLike) -> bytes:
    compressed: bytes = _zstd_compressor().compress(data)
    return compressed


def _zstd_decompress(data: BytesLike, limit: int) -> bytes:
    """Streaming, because Java and librdkafka write frames without the content size; fed a few input bytes
    at a time, since the decoder cannot bound its output itself (Rule 3)."""
    view = memoryview(data)
    parts, total, position = [], 0, 0
    decompressor = _zstd_decompressor().decompressobj()
    while position < len(view):
        if decompressor.eof:  # a producer may write several frames back to back; decode them all
            decompressor = _zstd_decompressor().decompressobj()
        step = max(_ZSTD_INPUT_STEP, (limit - total) >> _ZSTD_MAX_EXPANSION_BITS)  # at most limit - total more
        chunk = view[position:position + step]
        part = decompressor.decompress(chunk)
        position += len(chunk) - len(decompressor.unused_data)  # bytes after a frame's end start the next one
        total += len(part)
        if total > limit:
            raise _too_large(ZSTD, limit)
        parts.append(part)
    if not decompressor.eof:
        raise CompressionError("zstd frame is truncated")
    return b"".join(parts)


_COMPRESSORS = {
    NONE: _identity,
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}
_DECOMPRESSORS = {
    NONE: _identity,
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}
