"""Compression codecs of a RecordBatch v2 records section, framed as Kafka's own clients frame them.

Rule 1: we write what the Java client writes (gzip stream, xerial-framed snappy, LZ4 frame, zstd frame).
Rule 2: we read every framing a real client writes, including librdkafka's raw (unframed) snappy.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

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


def compress(codec: int, data) -> bytes:
    """Compress one records section with the given codec id (0 returns the bytes unchanged)."""
    try:
        compressor = _COMPRESSORS[codec]
    except KeyError:
        raise UnknownCodecError(f"unknown compression id {codec!r}") from None
    return compressor(data)


def decompress(codec: int, data) -> bytes:
    """Decompress one records section; corrupt input raises `CompressionError`."""
    try:
        decoder = _DECOMPRESSORS[codec]
    except KeyError:
        raise UnknownCodecError(f"unknown compression id {codec!r}") from None
    try:
        return decoder(data)
    except CompressionError:
        raise
    except _DECODE_ERRORS as exc:
        raise CompressionError(f"{CODEC_NAMES[codec]} data does not decompress: {exc}") from exc


def _identity(data) -> bytes:
    return bytes(data)


def _gzip_compress(data) -> bytes:
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def _snappy_compress(data) -> bytes:
    """xerial framing: header, then each 32 KiB chunk as a length-prefixed raw block."""
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    """Both xerial framing (Java, kafka-python) and one raw block (librdkafka)."""
    view = memoryview(data)
    if len(view) >= len(XERIAL_HEADER) and view[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        return _xerial_decompress(view)
    return bytes(cramjam.snappy.decompress_raw(view))


def _xerial_decompress(view: memoryview) -> bytes:
    parts = []
    position = len(XERIAL_HEADER)
    end = len(view)
    while position < end:
        if end - position < _BLOCK_LENGTH.size:
            raise CompressionError("xerial snappy stream ends inside a block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or position + length > end:
            raise CompressionError(f"xerial snappy block of {length} bytes overruns the stream")
        parts.append(cramjam.snappy.decompress_raw(view[position : position + length]))
        position += length
    return b"".join(parts)


def _lz4_compress(data) -> bytes:
    """An LZ4 frame with the Java client's flags: 64 KiB independent blocks, no content size."""
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data) -> bytes:
    return lz4.frame.decompress(data)


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


def _zstd_compress(data) -> bytes:
    return _zstd_compressor().compress(data)


def _zstd_decompress(data) -> bytes:
    """Streaming, because Java and librdkafka write frames without the content size."""
    decompressor = _zstd_decompressor().decompressobj()
    result = decompressor.decompress(data)
    if not decompressor.eof:
        raise CompressionError("zstd frame is truncated")
    if decompressor.unused_data:
        # A producer may write several frames back to back; decode them all.
        return result + _zstd_decompress(decompressor.unused_data)
    return result


_COMPRESSORS = {
    NONE: _identity,
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}
_DECOMPRESSORS = {
    NONE: _identity,
    GZIP: gzip.decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}
