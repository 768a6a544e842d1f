"""The aborted-transaction index of one partition log: Kafka's `.txnindex` files, one per segment.

What Fetch under read_committed answers with: for a range of offsets, the aborted transactions whose data
may lie in it, as (producer id, first offset), so that a consumer drops those producers' records from the
first offset until it meets their abort marker.

File format (Kafka's AbortedTxn, verbatim): `<segment base>.txnindex` beside the segment, a sequence of
34-byte entries, big-endian, none checksummed:

    version           int16   ENTRY_VERSION (0)
    producerId        int64
    firstOffset       int64   the transaction's first offset in this partition
    lastOffset        int64   the offset of its abort marker
    lastStableOffset  int64   the first offset of any other transaction open when it was aborted (else
                              lastOffset + 1): Kafka's hint for where a search may stop

Rule: index-file-of-marker (which file): an entry goes to the file of the segment that holds its abort marker
(`lastOffset`); entries are in marker order within a file and across files. Data precedes its marker, so the
aborted transactions a fetch from offset F must hear of are all in the files of F's segment and later ones.
Rule: index-follows-segments (follows the segments, `set_segments`): when segments go (retention, truncation)
or merge (the cleaner's swap) or split (a fence moves a tail), each entry follows its marker to the live
segment holding it, or is dropped when its marker is below the first segment; the files are rewritten tmp ->
fsync -> rename, and files of segments that no longer exist are deleted.
Rule: index-durable (durability): an entry is appended and fsynced when its marker is appended (aborts are
rare: one fsync per abort marker per partition), so a flushed marker's entry is on disk too.
Rule: index-recovery (recovery, `load`): every `.txnindex` file is read; a torn last entry (a crash mid-write)
is ignored, and an entry whose version is not 0 or whose offsets are not ordered makes the rest of that file
unreadable: `load` answers the base of the earliest such file, below which the log must replay the producer
state (`truncate_from` then drops what the replay rebuilds). The index is thus always what a replay of the log
from a producer-state snapshot builds (tested by property against a replay from the log start).

Not thread-safe: the log calls it under its append lock.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from typing import Iterable, NamedTuple

from sparklog.storage.files import Files
from sparklog.storage.segment import parse_offset_file_name, segment_file_name

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"  # Kafka's LogFileUtils.TXN_INDEX_FILE_SUFFIX
ENTRY_VERSION = 0  # Kafka's AbortedTxn.CURRENT_VERSION

_ENTRY = struct.Struct(
    ">"
    "h"  # version
    "q"  # producerId
    "q"  # firstOffset
    "q"  # lastOffset
    "q"  # lastStableOffset
)
ENTRY_SIZE = _ENTRY.size  # 34, as Kafka's AbortedTxn.TOTAL_SIZE


class AbortedTxn(NamedTuple):
    """One aborted transaction (module docstring)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_file_name(base_offset: int) -> str:
    return segment_file_name(base_offset, TXN_INDEX_SUFFIX)


def parse_txn_index_file_name(name: str) -> int | None:
    return parse_offset_file_name(name, TXN_INDEX_SUFFIX)


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(ENTRY_VERSION, *entry) for entry in entries)


def decode_entries(data: bytes) -> tuple[list[AbortedTxn], str | None]:
    """The entries of a file's bytes and why it stops early (None: it does not). A torn last entry is not a
    reason: a crash can leave one (Rule: index-recovery)."""
    entries: list[AbortedTxn] = []
    for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, position)
        entry = AbortedTxn(*fields)
        if version != ENTRY_VERSION:
            return entries, f"entry {len(entries)} has version {version}"
        if not entry.first_offset <= entry.last_offset or (entries and entry.last_offset <= entries[-1].last_offset):
            return entries, f"entry {len(entries)} has offsets out of order"
        entries.append(entry)
    return entries, None


class TransactionIndex:
    """The `.txnindex` files of one log directory, kept in memory by segment base (module docstring)."""

    def __init__(self, directory: str, files: Files):
        self.directory = directory
        self._files = files
        self._bases: tuple[int, ...] = ()
        self._by_base: dict[int, list[AbortedTxn]] = {}

    # -- Rule: index-recovery: recovery ----------------------------------------------------------------------

    def load(self, bases: tuple[int, ...]) -> int | None:
        """Read every file of the directory, for the live segments `bases`; the base of the earliest damaged
        file (the log replays from a snapshot at or below it), or None."""
        self._bases, self._by_base, damaged = tuple(bases), {}, None
        found = {}
        for name in self._files.listdir(self.directory):
            base = parse_txn_index_file_name(name)
            if base is None:
                continue
            entries, problem = decode_entries(self._files.read_file(self._path(base)) or b"")
            if problem is not None:
                logger.warning("%s: %s is damaged (%s); rebuilding it", self.directory, name, problem)
                damaged = base if damaged is None else min(damaged, base)
                self._files.write_atomically(self._path(base), encode_entries(entries))
            found[base] = entries
        for base in sorted(found):
            self._by_base.setdefault(base, []).extend(found[base])
        self.set_segments(self._bases, on_disk=set(found))
        return damaged

    # -- Rule: index-file-of-marker: appending ---------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an abort marker just appended (the newest marker of the log): into its segment's
        file, fsynced (Rule: index-durable)."""
        base = self._base_holding(entry.last_offset)
        entries = self._by_base.setdefault(base, [])
        position = len(entries) * ENTRY_SIZE
        entries.append(entry)
        fd = self._files.open(self._path(base), create=True)
        try:
            self._files.truncate(fd, position)  # a torn entry a crash left (Rule: index-recovery) goes
            self._files.pwrite(fd, encode_entries([entry]), position)
            self._files.fsync(fd)
        finally:
            self._files.close(fd)
        if position == 0:
            self._files.fsync_dir(self.directory)

    def truncate_from(self, offset: int) -> None:
        """Drop the entries whose marker is at or past `offset` (a truncation, or a replay that rebuilds them)."""
        for base, entries in list(self._by_base.items()):
            kept = [entry for entry in entries if entry.last_offset < offset]
            if len(kept) != len(entries):
                self._rewrite(base, kept)

    # -- Rule: index-follows-segments: following the segments ------------------------------------------------

    def set_segments(self, bases: tuple[int, ...], on_disk: set[int] | None = None) -> None:
        """The live segments are now `bases`: every entry moves to the file of the segment holding its marker."""
        self._bases = tuple(bases)
        if not self._by_base and not on_disk:
            return
        placed: dict[int, list[AbortedTxn]] = {}
        for entries in self._by_base.values():
            for entry in entries:
                if bases and entry.last_offset >= bases[0]:
                    placed.setdefault(self._base_holding(entry.last_offset), []).append(entry)
        for entries in placed.values():
            entries.sort(key=lambda entry: entry.last_offset)
        stale = set(self._by_base) | (on_disk or set())
        for base in sorted(stale | set(placed)):
            if base in placed and (placed[base] != self._by_base.get(base) or (on_disk and base not in on_disk)):
                self._rewrite(base, placed[base])
            elif base not in placed:
                self._delete(base)
        self._by_base = placed

    # -- reading ---------------------------------------------------------------------------------

    def empty(self) -> bool:
        """No aborted transaction indexed in any live segment: collect() finds nothing anywhere."""
        return not any(self._by_base.values())

    def collect(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with data in [start, end): marker at or past `start`, first offset below
        `end` (Kafka's collectAbortedTxns), in marker order."""
        found: list[AbortedTxn] = []
        for base in sorted(self._by_base):
            next_base = self._next_base(base)
            if next_base is not None and next_base <= start:
                continue
            found.extend(e for e in self._by_base[base] if e.last_offset >= start and e.first_offset < end)
        return found

    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order."""
        return [entry for base in sorted(self._by_base) for entry in self._by_base[base]]

    def entries_by_base(self) -> dict[int, list[AbortedTxn]]:
        return {base: list(entries) for base, entries in self._by_base.items()}

    # -- files -----------------------------------------------------------------------------------

    def _base_holding(self, offset: int) -> int:
        return self._bases[max(0, bisect_right(self._bases, offset) - 1)]

    def _next_base(self, base: int) -> int | None:
        i = bisect_right(self._bases, base)
        return self._bases[i] if i < len(self._bases) else None

    def _rewrite(self, base: int, entries: list[AbortedTxn]) -> None:
        if not entries:
            self._by_base.pop(base, None)
            self._delete(base)
            return
        self._by_base[base] = entries
        self._files.write_atomically(self._path(base), encode_entries(entries))

    def _delete(self, base: int) -> None:
        try:
            self._files.unlink(self._path(base))
        except FileNotFoundError:
            pass

    def _path(self, base: int) -> str:
        return os.path.join(self.directory, txn_index_file_name(base))
