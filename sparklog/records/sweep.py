"""The log cleaner's two passes over a read buffer of whole batches, each one compiled call for the whole
buffer (`_csweep.put_batches`, `_csweep.filter_batches`) with the interpreter lock released throughout:
the per-batch work of records/scan.py and records/retain.py without a Python call per batch.

Rule 1: a call takes the batches from a position on, in order, and stops at the first it does not take: a
        compressed batch with records (decompressing is Python's), an empty batch with bytes after its
        header, in the recopy a batch whose tombstone first gets a delete horizon (cleaner.py Rule:
        tombstone-delete-horizon), or anything malformed (magic, lengths, CRC-32C, records). The caller gives that batch to the
        pure-Python path (scan.py, retain.py), which decides and raises, then calls again after it.
Rule 2: what a call does equals that path's result byte for byte: the same keys put in the same order (and
        the map filling at the same record), the same records kept, the same rebuilt headers and CRCs, the
        same coalesced empty headers (retain.py Rule 3), the same counts. tests/unit/records/test_sweep.py
        compares them.
Rule 3: without the compiled codec (`batch.CODEC`; SPARKLOG_NO_EXTENSIONS) both functions return None and
        the cleaner runs the pure-Python path for every batch.
Rule 4: memory is bounded by the buffer: the output is at most its bytes plus one header.
"""

from __future__ import annotations

from array import array
from types import ModuleType
from typing import NamedTuple

from sparklog.records import implementation as _implementation
from sparklog.records.batch import HEADER_SIZE
from sparklog.records import BytesLike

ENTRY_FIELDS = 5  # an output batch: position, base offset, next offset, max timestamp, size
COUNTERS = ("read", "records", "removed", "tombstones", "changed", "horizon")  # _csweep's READ .. HORIZON


class Filtered(NamedTuple):
    """What one filter_batches call wrote."""

    position: int  # of the first batch not taken, or the buffer's end
    data: memoryview  # the output batches, end to end
    entries: list[tuple[int, ...]]  # per output batch: its ENTRY_FIELDS, its position in `data`
    run: bytes | None  # the empty header that the next empty batch may extend (retain.py Rule 3)
    counts: dict[str, int]  # COUNTERS: bytes read, records scanned, removed, tombstones removed, changed (0/1),
    # the earliest delete horizon of a batch that keeps a tombstone (0: none)


_KERNEL = _implementation.RecordKernel("sparklog.records._csweep", "cleaner sweep",
                                       ("put_batches", "filter_batches", "whole_prefix"))


def compiled() -> ModuleType | None:
    """The kernel when the compiled codec is the active one, else None (Rule 3). Called once per read
    buffer in the cleaner thread, with the interpreter lock held: no import statement on this path."""
    return _KERNEL.active


def whole_prefix(chunk: BytesLike) -> int | None:
    """How many bytes of `chunk` are whole batches by their lengths (all of it at a length too small to be
    one), walked without the interpreter lock; None without the compiled codec."""
    extension = compiled()
    if extension is None:
        return None
    whole: int = extension.whole_prefix(chunk)
    return whole


def put_batches(chunk: BytesLike, position: int, digests: memoryview, stored: memoryview, size: int, limit: int,
                first_dirty: int) -> tuple[int, int, bool] | None:
    """Put the keys of the batches from `position` on into the offset map's tables (`digests`, `stored`,
    holding `size` keys, at most `limit`): skips control and empty batches and those ending at or below
    `first_dirty`. Returns (the position of the first batch not taken, the map's size, whether that batch
    is where the map filled: its earlier records are in), or None without the compiled codec."""
    extension = compiled()
    if extension is None:
        return None
    put: tuple[int, int, bool] = extension.put_batches(chunk, position, digests, stored, size, limit, first_dirty)
    return put


class Buffers:
    """filter_batches' output space, reused from call to call (one per cleaner thread): fresh megabytes each
    call would cost more in page faults than the call itself."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.entries = array("q")

    def fit(self, left: int) -> None:
        """Room for the output of `left` bytes of batches (Rule 4)."""
        if len(self.out) < left + HEADER_SIZE:
            self.out = bytearray(left + HEADER_SIZE)
        rows = ENTRY_FIELDS * (left // HEADER_SIZE + 1)
        if len(self.entries) < rows:
            self.entries = array("q", bytes(8 * rows))


def filter_batches(chunk: BytesLike, position: int, digests: memoryview, stored: memoryview, end: int, now: int,
                   run: bytes | None, buffers: Buffers) -> Filtered | None:
    """The recopy of the batches from `position` on (cleaner.py Rule: keep-latest-per-key, Rule: tombstone-delete-horizon): a data batch below `end`
    keeps each record whose key's map offset is not later, unless it is a tombstone in a batch whose delete
    horizon is before `now`; other batches are copied whole; emptied and empty batches coalesce into `run`
    (a 61-byte empty header, or None). A batch that keeps a tombstone but has no delete horizon yet is not
    taken (Rule 1): writing one re-encodes its records (retain.py Rule 5). Written into `buffers`: `data` is
    valid until the next call with them. None without the compiled codec."""
    extension = compiled()
    if extension is None:
        return None
    buffers.fit(len(chunk) - position)
    header = bytearray(run if run is not None else HEADER_SIZE)
    counters = array("q", bytes(8 * len(COUNTERS)))
    entries = buffers.entries
    position, used, count, has_run = extension.filter_batches(chunk, position, digests, stored, end, now,
                                                              buffers.out, entries, header, run is not None,
                                                              counters)
    rows = [tuple(entries[i:i + ENTRY_FIELDS]) for i in range(0, count * ENTRY_FIELDS, ENTRY_FIELDS)]
    return Filtered(position, memoryview(buffers.out)[:used], rows, bytes(header) if has_run else None,
                    dict(zip(COUNTERS, counters)))
