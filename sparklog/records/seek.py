"""The first record of a batch at or after a timestamp, found by walking only the records' heads, a chunk of
the records section at a time: what a lookup by time (ListOffsets) needs of the batch that answers it.

Rule 1: `seek_timestamp(chunk, position, ...)` walks the records starting at `position` of `chunk` (a piece of
        a batch's uncompressed records section that starts on a record boundary) and decodes of each only its
        length, timestampDelta and offsetDelta; it stops at the first record, in offset order, whose timestamp
        is >= the target (FOUND), after `remaining` records (END), or at the first record whose head is not
        whole in `chunk` (MORE: the caller reads on from `Seek.position`, which may lie past the chunk's end
        when the walk skipped a record body that the chunk does not hold).
Rule 2: with `final` (the chunk runs to the section's end) a record that runs past the chunk is malformed;
        malformed bytes raise CorruptRecordError, as batch.py's decoder does. Keys, values and headers are
        neither decoded nor checked, nor is the CRC: the log verified the batch when it stored it.
Rule 3: the compiled twin (`_cseek.seek_timestamp`) runs when the compiled codec is the active one, and
        defers every input it does not take (malformed, or a 10-byte varint) to the pure-Python walk here.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

from sparklog.records import batch as _batch
from sparklog.records import implementation as _implementation
from sparklog.records.batch import CorruptRecordError

FOUND = 1
MORE = 0
END = -1


class Seek(NamedTuple):
    """Where a walk stopped (Rule 1)."""

    status: int  # FOUND, MORE or END
    position: int  # FOUND: the answer's start; MORE, END: where the next record starts
    walked: int  # records passed over before `position`
    offset: int  # FOUND: the answer's offset and timestamp; otherwise -1
    timestamp: int


def seek_timestamp(chunk: bytes, position: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
                   target: int, remaining: int, final: bool) -> Seek:
    """Rule 1. `log_append_time`: the batch's max timestamp, which every record takes, for a LogAppendTime
    batch; None for CreateTime."""
    compiled = _compiled()
    if compiled is not None:
        found = compiled.seek_timestamp(chunk, position, base_offset, base_timestamp, log_append_time, target,
                                        remaining, final)
        if found is not None:
            return Seek._make(found)
    return _seek_python(chunk, position, base_offset, base_timestamp, log_append_time, target, remaining, final)


def _seek_python(chunk: bytes, position: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
                 target: int, remaining: int, final: bool) -> Seek:
    varint = _batch.PYTHON_CODEC.decode_varint
    end = len(chunk)
    walked = 0
    while walked < remaining:
        start = position
        try:
            length, body = varint(chunk, start)
            timestamp_delta, after = varint(chunk, body + 1)  # after the attributes byte
            offset_delta, after = varint(chunk, after)
        except IndexError:
            if final:
                raise CorruptRecordError(f"record {walked} from byte {start} runs past the batch's end") from None
            return Seek(MORE, start, walked, -1, -1)
        position = body + length
        if length < 0 or after > position or (final and position > end):
            raise CorruptRecordError(f"record {walked} from byte {start} has a bad length {length}")
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        if timestamp >= target:
            return Seek(FOUND, start, walked, base_offset + offset_delta, timestamp)
        walked += 1
    return Seek(END, position, walked, -1, -1)


_KERNEL = _implementation.RecordKernel("sparklog.records._cseek", "seek", ("seek_timestamp",))


def _compiled() -> ModuleType | None:
    return _KERNEL.active
