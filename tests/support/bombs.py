"""Decompression bombs, written by hand: small compressed records sections that expand to gigabytes."""

from __future__ import annotations

import struct

from crc32c import crc32c

from sparklog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, build_batch
from sparklog.records.compression import ZSTD

ZSTD_MAGIC = 0xFD2FB528
ZSTD_MAX_BLOCK = 128 * 1024  # zstd's Block_Maximum_Size


def zstd_rle_bomb(expanded: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes of input for every 128 KiB of output."""
    frame = bytearray(struct.pack("<I", ZSTD_MAGIC))
    frame += bytes([0x00, 0x38])  # no content size, no checksum; a window of 2^(10+7) = 128 KiB
    count = expanded // ZSTD_MAX_BLOCK
    for index in range(count):
        last = 1 if index == count - 1 else 0
        frame += ((ZSTD_MAX_BLOCK << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"  # Block_Type 1: RLE
    return bytes(frame)


def bomb_batch(expanded: int = 4 << 30, timestamp: int = 0) -> bytes:
    """A valid one-record zstd RecordBatch (CRC and length right) whose records section is a zstd bomb."""
    head = bytearray(build_batch([(None, b"v", None, timestamp)], compression="zstd")[:HEADER_SIZE])
    section = zstd_rle_bomb(expanded)
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(section))
    struct.pack_into(">h", head, ATTRIBUTES_OFFSET, ZSTD)
    struct.pack_into(">I", head, CRC_OFFSET, crc32c(section, crc32c(head[ATTRIBUTES_OFFSET:])))
    return bytes(head) + section
