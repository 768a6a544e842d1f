"""Recovery: find where the valid prefix of a segment file ends, and where valid batches resume after damage.

Like Redpanda's log_replayer, `replay()` only reads: it walks the batches from a start position, checking
each (the length fits in the file, magic 2, each base offset is the previous batch's next offset and the
first is the segment's base, CRC-32C; partitionLeaderEpoch is outside the CRC, so a flip there goes unseen),
and returns `ValidPrefix(next_offset, truncate_at, stop)`. baseOffset and batchLength lie outside the CRC
too: the offset chain and the bounds are what catch damage there.

`find_next_batch()` gets past bit rot: the first whole batch after a position whose CRC holds and whose
offsets lie in a given range (a false match needs a magic byte, a fitting length and offsets in range,
and then a 1-in-2**32 CRC). The caller decides what a stop means: past the recovery point a torn tail
(truncate, as Kafka's LogLoader), below it bit rot (fence, keep what follows); that logic lives in the log.
"""

from __future__ import annotations

import enum
from typing import Callable, NamedTuple

from sparklog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    BatchHeader,
    compute_crc,
    parse_header,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1  # no offset bound: Kafka's Long.MAX_VALUE
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with no records section
_MAGIC_BYTE = bytes([MAGIC])
READ_CHUNK_BYTES = 1024 * 1024  # recovery reads the file in 1 MiB windows

ReadAt = Callable[[int, int], bytes]  # (position, length) -> bytes, shorter only at the end of the file


class RecoveryStop(enum.Enum):
    """Why the replay stopped; everything but END_OF_LOG means bytes after `truncate_at` are invalid."""

    END_OF_LOG = "end of log"  # every byte belongs to a valid batch
    SHORT_HEADER = "fewer bytes left than a batch header"  # a torn tail
    SHORT_BATCH = "batch length runs past the end of the file"  # a torn tail, or garbage with a big length
    BAD_LENGTH = "batch length smaller than a header"  # e.g. zeros from a crash that grew the inode only
    BAD_MAGIC = "magic is not 2"
    BAD_OFFSET = "base offset is not the previous batch's next offset (or the segment's base)"
    BAD_CRC = "CRC-32C mismatch"


class ValidPrefix(NamedTuple):
    next_offset: int  # the offset after the last valid batch (the segment's base offset if there is none)
    truncate_at: int  # file position just after the last valid batch
    stop: RecoveryStop
    batches: int  # valid batches seen by this replay

    @property
    def clean(self) -> bool:
        return self.stop is RecoveryStop.END_OF_LOG


class _Window:
    """Reads the file in large windows so that replaying costs one pread per MiB, not two per batch."""

    def __init__(self, read_at: ReadAt):
        self._read_at = read_at
        self._start = 0
        self._data = memoryview(b"")

    def get(self, position: int, length: int) -> memoryview:
        offset = position - self._start
        if offset < 0 or offset + length > len(self._data):
            self._start = position
            self._data = memoryview(self._read_at(position, max(length, READ_CHUNK_BYTES)))
            offset = 0
        return self._data[offset : offset + length]


def replay(
    read_at: ReadAt,
    file_size: int,
    base_offset: int,
    start_position: int = 0,
    start_offset: int | None = None,
    on_batch: Callable[[BatchHeader, int], None] | None = None,
) -> ValidPrefix:
    """Walk the valid batches of one segment from `start_position`; call `on_batch(header, position)` for each.

    `start_offset` is the base offset the first batch must have (default: the segment's base).
    """
    window = _Window(read_at)
    position = start_position
    next_offset = base_offset if start_offset is None else start_offset
    count = 0
    while True:
        header, stop = _check_header(window, position, file_size, base_offset, next_offset)
        if stop is None:
            assert header is not None  # _check_header gives a header whenever it names no stop
            stop = _check_crc(window, position, header)
        if stop is not None:
            return ValidPrefix(next_offset, position, stop, count)
        assert header is not None
        if on_batch is not None:
            on_batch(header, position)
        position += header.size
        next_offset = header.next_offset
        count += 1


def _check_header(window: _Window, position: int, file_size: int, base_offset: int,
                  min_offset: int) -> tuple[BatchHeader | None, RecoveryStop | None]:
    remaining = file_size - position
    if remaining == 0:
        return None, RecoveryStop.END_OF_LOG
    if remaining < HEADER_SIZE:
        return None, RecoveryStop.SHORT_HEADER
    view = window.get(position, HEADER_SIZE)
    if len(view) < HEADER_SIZE:  # the file was cut short while we read it
        return None, RecoveryStop.SHORT_HEADER
    header = parse_header(view)
    if header.batch_length < MIN_BATCH_LENGTH:
        return header, RecoveryStop.BAD_LENGTH
    if header.size > remaining:
        return header, RecoveryStop.SHORT_BATCH
    if header.magic != MAGIC:
        return header, RecoveryStop.BAD_MAGIC
    if (
        header.base_offset != min_offset  # sparklog never compacts: offsets are contiguous
        or header.last_offset_delta < 0
        or header.last_offset - base_offset > INT32_MAX
    ):
        return header, RecoveryStop.BAD_OFFSET
    return header, None


def _check_crc(window: _Window, position: int, header: BatchHeader) -> RecoveryStop | None:
    batch = window.get(position, header.size)
    if len(batch) < header.size:  # the file was cut short while we read it
        return RecoveryStop.SHORT_BATCH
    if compute_crc(batch) != header.crc:
        return RecoveryStop.BAD_CRC
    return None


class Resync(NamedTuple):
    """Where valid batches resume after damage."""

    position: int  # file position of the batch
    header: BatchHeader


def find_next_batch(read_at: ReadAt, file_size: int, position: int, min_offset: int,
                    max_offset: int = INT64_MAX, may_end_at: Callable[[int], bool] = lambda next_offset: True,
                    ) -> Resync | None:
    """The first batch starting after `position` that is whole, passes its CRC-32C, whose offsets lie in
    [min_offset, max_offset) and whose base offset is confirmed; None if there is none.

    baseOffset lies outside the CRC, so damage that ends inside it leaves a batch that passes its CRC at a
    wrong offset: a candidate counts only if the next batch starts at its next offset (and passes its CRC),
    or it ends the file and `may_end_at(its next offset)` says the file may end there (the next segment's
    base, say). Candidates are the positions whose magic byte is 2, found with bytes.find over 1 MiB
    windows, so a zeroed region costs one pass in C and random bytes one header parse per 256 bytes.
    """
    window_start = position + 1
    while window_start + HEADER_SIZE <= file_size:
        window = read_at(window_start + MAGIC_OFFSET, READ_CHUNK_BYTES)
        if not window:
            return None
        i = window.find(_MAGIC_BYTE)
        while i >= 0:
            found = _candidate(read_at, file_size, window_start + i, min_offset, max_offset)
            if found is not None and _confirmed(read_at, file_size, found, may_end_at):
                return found
            i = window.find(_MAGIC_BYTE, i + 1)
        window_start += len(window)
    return None


def _confirmed(read_at: ReadAt, file_size: int, found: Resync, may_end_at: Callable[[int], bool]) -> bool:
    after, next_offset = found.position + found.header.size, found.header.next_offset
    if after == file_size:
        return may_end_at(next_offset)
    following = _candidate(read_at, file_size, after, next_offset, INT64_MAX)
    return following is not None and following.header.base_offset == next_offset


def _candidate(read_at: ReadAt, file_size: int, position: int, min_offset: int, max_offset: int) -> Resync | None:
    if position + HEADER_SIZE > file_size:
        return None
    data = read_at(position, HEADER_SIZE)
    if len(data) < HEADER_SIZE:
        return None
    header = parse_header(data)
    if (
        header.batch_length < MIN_BATCH_LENGTH
        or header.size > file_size - position
        or header.last_offset_delta < 0
        or not min_offset <= header.base_offset <= header.last_offset < max_offset
    ):
        return None
    if compute_crc(read_at(position, header.size)) != header.crc:
        return None
    return Resync(position, header)
