"""FencedRanges: the offset ranges a partition log lost to bit rot, and the file that remembers them.

A batch found damaged inside flushed data (a bad CRC, or a header that breaks the offset chain) is not a
torn tail: the log keeps every valid batch before and after it and fences the offsets in between. A fenced
range is a gap in the log, which fetches skip as consumers skip the offset gaps of compacted topics.

Rule: fence-saved-first: a range is saved before the file changes that it explains (the split and cut of a segment), so
a crash in between never leaves a gap that the next open would take for a torn tail.
Rule: fences-sorted-disjoint: the ranges are sorted, disjoint and non-empty; retention drops what lies below the log
start, truncation what lies at or above the new log end (`clip`).
Rule: fences-refetched: the ranges are what a damaged replica must re-fetch from its leader
(`PartitionLog.fenced_ranges`).

File format (`fenced-offsets` in the partition directory; tmp, fsync, rename, fsync dir as Kafka's
checkpoint files): a version line, a count line, then one "start end" line per range ([start, end)).
An unreadable file is reported and ignored: the loader still fences any gap below the recovery point.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from sparklog.storage.files import Files

logger = logging.getLogger(__name__)

FENCE_FILE = "fenced-offsets"
FENCE_FILE_VERSION = 0


class FencedRanges:
    """The fenced ranges of one log. Not thread-safe: the log changes them under its flush lock."""

    def __init__(self, files: Files, directory: str, on_change: Callable[[tuple[tuple[int, int], ...]], None] | None = None):
        self._files = files
        self._path = os.path.join(directory, FENCE_FILE)
        self._ranges: tuple[tuple[int, int], ...] = ()
        self._on_change = on_change  # called with the new ranges after each save

    @classmethod
    def load(cls, files: Files, directory: str, on_change: Callable[[tuple[tuple[int, int], ...]], None] | None = None) -> "FencedRanges":
        fences = cls(files, directory, on_change)
        data = files.read_file(fences._path)
        if data is not None:
            try:
                fences._ranges = _parse(data)
            except (ValueError, UnicodeDecodeError):
                logger.error("%s: unreadable; fenced ranges are re-derived from the gaps below the recovery point",
                             fences._path)
        return fences

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        return self._ranges

    @property
    def offsets(self) -> int:
        """How many offsets are fenced."""
        return sum(end - start for start, end in self._ranges)

    def covers(self, start: int, end: int) -> bool:
        """Is every offset of [start, end) fenced?"""
        for low, high in self._ranges:
            if low <= start < high:
                start = high
            if start >= end:
                return True
        return start >= end

    def add(self, start: int, end: int) -> None:
        """Fence [start, end) and save the file (Rule: fence-saved-first)."""
        if start >= end or self.covers(start, end):
            return
        merged = sorted(self._ranges + ((start, end),))
        out = [merged[0]]
        for low, high in merged[1:]:
            if low <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], high))
            else:
                out.append((low, high))
        self._save(tuple(out))

    def clip(self, low: int, high: int) -> None:
        """Keep only the fenced offsets in [low, high) (Rule: fences-sorted-disjoint); saves the file when that changes
        anything."""
        kept = tuple((max(a, low), min(b, high)) for a, b in self._ranges if max(a, low) < min(b, high))
        if kept != self._ranges:
            self._save(kept)

    def _save(self, ranges: tuple[tuple[int, int], ...]) -> None:
        lines = [str(FENCE_FILE_VERSION), str(len(ranges))] + [f"{a} {b}" for a, b in ranges]
        self._files.write_atomically(self._path, ("\n".join(lines) + "\n").encode("ascii"))
        self._ranges = ranges
        if self._on_change is not None:
            self._on_change(ranges)


def _parse(data: bytes) -> tuple[tuple[int, int], ...]:
    version, count, *lines = data.decode("ascii").splitlines()
    if int(version) != FENCE_FILE_VERSION or int(count) != len(lines):
        raise ValueError("bad header")
    ranges = tuple((int(a), int(b)) for a, b in (line.split(" ") for line in lines))
    if any(a >= b for a, b in ranges) or any(ranges[i][1] > ranges[i + 1][0] for i in range(len(ranges) - 1)):
        raise ValueError("ranges out of order")
    return ranges
