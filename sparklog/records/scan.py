"""What the log cleaner needs of each record of a batch, in one pass over its records section, and the kept
records copied out of that same section: decompress once, scan once, copy once (records/retain.py rebuilds
the batch around the copy).

Rule 1: `scan(batch)` gives, per record, the key's digest (the interpreter's hash of the key bytes, which is
        `hash(key)`; 1 for a key that hashes to 0; 0 for a null key), its offset, its timestamp, its flags
        (NULL_KEY, NULL_VALUE) and where it ends in the section, as arrays, with no Python object per record.
Rule 2: the compiled twin (`_cscan.scan_section`, `_cscan.join_kept`) runs when the compiled codec is the
        active one (`batch.CODEC`), with its byte loops outside the interpreter lock; it gives the same arrays
        and bytes, and defers every input it does not take to the pure-Python functions here, which decide
        (malformed bytes raise CorruptRecordError from `batch`'s decoder, as `columns()` does).
Rule 3: `join_kept(section, ends, keep)` takes one keep byte per record and ends that rise within the section
        (a scan's); both twins refuse anything else with the same one-line ValueError before copying a byte:
        the compiled loop has no bounds checks of its own.
"""

from __future__ import annotations

from array import array
from types import ModuleType
from typing import NamedTuple

from sparklog.records import batch as _batch
from sparklog.records import implementation as _implementation
from sparklog.records.batch import COMPRESSION_MASK, HEADER_SIZE, RecordBatch

NULL_KEY = 1
NULL_VALUE = 2


class RecordScan(NamedTuple):
    """One batch's records as parallel arrays (Rule 1), and the uncompressed section they were read from."""

    section: bytes
    digests: array[int]  # "q"
    offsets: array[int]  # "q"
    timestamps: array[int]  # "q"
    flags: array[int]  # "B": NULL_KEY | NULL_VALUE
    ends: array[int]  # "q": where each record (its length prefix included) ends in `section`


def scan(batch: RecordBatch) -> RecordScan:
    """Rule 1 for a batch with at least one record."""
    codec = batch.attributes & COMPRESSION_MASK
    section = batch._decompress(codec, batch.raw[HEADER_SIZE:]) if codec else batch.raw[HEADER_SIZE:].tobytes()
    log_append_time = batch.max_timestamp if batch.timestamp_type else None
    columns = None
    compiled = _compiled()
    if compiled is not None:
        columns = compiled.scan_section(section, batch.base_offset, batch.base_timestamp, log_append_time,
                                        batch.record_count)
    return RecordScan(section, *(columns or _scan_python(section, batch)))


def join_kept(section: bytes, ends: array[int], keep: bytes) -> bytes:
    """The bytes of the records whose `keep` byte is not 0 (Rule 3)."""
    compiled = _compiled()
    if compiled is not None:
        kept: bytes = compiled.join_kept(section, ends, keep)
        return kept
    _check_kept(len(section), ends, keep)
    starts = [0, *ends[:-1]]
    return b"".join(section[s:e] for s, e, k in zip(starts, ends, keep) if k)


def _check_kept(size: int, ends: array[int], keep: bytes) -> None:
    """Rule 3's refusals, worded as the compiled twin words them."""
    if len(keep) != len(ends):
        raise ValueError(f"join_kept: {len(keep)} keep bytes for {len(ends)} records")
    start = 0
    for end in ends:
        if not start <= end <= size:
            raise ValueError(f"join_kept: a record ends at {end}, outside {start}..{size}")
        start = end


_KERNEL = _implementation.RecordKernel("sparklog.records._cscan", "cleaner scan", ("scan_section", "join_kept"))


def _compiled() -> ModuleType | None:
    return _KERNEL.active


def _scan_python(section: bytes, batch: RecordBatch) -> tuple[array[int], ...]:
    columns = _batch.PYTHON_CODEC.decode_columns(section, batch)
    digests = array("q", [0 if key is None else (hash(key) or 1) for key in columns.keys])
    flags = array("B", [(key is None) * NULL_KEY | (value is None) * NULL_VALUE
                        for key, value in zip(columns.keys, columns.values)])
    ends, position, varint = array("q"), 0, _batch.PYTHON_CODEC.decode_varint
    for _ in range(batch.record_count):
        length, body = varint(section, position)
        position = body + length
        ends.append(position)
    return digests, array("q", columns.offsets), array("q", columns.timestamps), flags, ends
