"""The sparse per-segment indexes: OffsetIndex (offset -> file position) and TimeIndex (timestamp -> offset).

Both keep their entries in memory (two arrays) and append them to the file at flush time; the file is what
the next open loads. Neither file is checksummed: an index that fails its sanity check on open, or that
belongs to a segment the recovery scans, is rebuilt from the log.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

from sparklog.storage.errors import CorruptIndexError
from sparklog.storage.files import Files

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, file position: Kafka's 8-byte OffsetIndex entry
TIME_ENTRY = struct.Struct(">qi")  # max timestamp so far, relative offset: Kafka's 12-byte TimeIndex entry


class _SparseIndex:
    """Shared machinery: the in-memory entries, the file they are appended to, truncation.

    Rule: `len(_keys) <= len(_values)` at every instant, so a reader that bisects `_keys` without a lock
    (lookups, and the flusher counting entries) always finds the value of the entry it picked: appends
    grow `_values` first, truncation shrinks `_keys` first.
    """

    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int, files: Files, max_entries: int):
        self.path = path
        self.base_offset = base_offset
        self._files = files
        self._fd = files.open(path, create=True)
        self.max_entries = max_entries
        self._keys, self._values = self._new_arrays()
        self._file_entries = 0  # entries already in the file

    def _new_arrays(self) -> tuple[array[int], array[int]]:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    def load(self) -> None:
        """Read the file's entries; raise CorruptIndexError if its size or order is wrong."""
        size = self._files.size(self._fd)
        if size % self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of {self.ENTRY.size}")
        data = self._files.pread(self._fd, size, 0)
        self._keys, self._values = self._new_arrays()
        for key, value in self.ENTRY.iter_unpack(data):
            self._keys.append(key)
            self._values.append(value)
        self._file_entries = len(self._keys)
        self._check_order()

    def _check_order(self) -> None:
        keys, values = self._keys, self._values
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
                raise CorruptIndexError(f"{self.path}: entry {i} is out of order")

    def clear(self) -> None:
        """Forget every entry, in memory and in the file (before a rebuild)."""
        self.truncate_entries(0)

    def truncate_entries(self, count: int) -> None:
        del self._keys[count:]  # keys first: see the class rule
        del self._values[count:]
        if self._file_entries > count:
            self._files.truncate(self._fd, count * self.ENTRY.size)
            self._file_entries = count

    def flush(self) -> None:
        """Append the entries not yet in the file, then fsync it."""
        count = len(self._keys)
        start = self._file_entries
        if count > start:
            pack = self.ENTRY.pack
            data = b"".join(pack(self._keys[i], self._values[i]) for i in range(start, count))
            self._files.pwrite(self._fd, data, start * self.ENTRY.size)
            self._file_entries = count
        self._files.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self._files.close(self._fd)
            self._fd = -1

    def rename(self, path: str) -> None:
        self._files.rename(self.path, path)
        self.path = path


class OffsetIndex(_SparseIndex):
    """Sparse map from offset to the file position of the batch starting at that offset.

    File format: 8-byte entries, big-endian int32 offset relative to the segment's base offset, int32
    position in the .log file; both strictly increasing. An entry is added for a batch when more than
    index.interval.bytes were appended since the previous entry, so a lookup lands at most about that many
    bytes before the batch sought. Entries are appended in the writer's thread; lookups from any thread
    read a consistent prefix (array appends are atomic under the GIL).
    """

    ENTRY = OFFSET_ENTRY

    def _new_arrays(self) -> tuple[array[int], array[int]]:
        return array("i"), array("i")

    def append(self, offset: int, position: int) -> int:
        """Add the entry; returns the entries left (`room`), which the segment's roll check reads per entry."""
        relative = offset - self.base_offset
        keys = self._keys
        if keys and (relative <= keys[-1] or position <= self._values[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after the last one")
        self._values.append(position)  # values first: see _SparseIndex
        keys.append(relative)
        return self.max_entries - len(keys)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or before `offset`, as (offset, position); (base offset, 0) if none."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """The last entry whose position is at or before `position`; (base offset, 0) if none."""
        i = bisect_right(self._values, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return self.base_offset, 0
        return self.base_offset + self._keys[-1], self._values[-1]

    def check_against(self, log_size: int) -> None:
        """Every entry must point inside the log file (Kafka's sanityCheck)."""
        if self._values and self._values[-1] >= log_size:
            raise CorruptIndexError(f"{self.path}: position {self._values[-1]} is past the log's {log_size} bytes")
        if self._keys and self._keys[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative relative offset")

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries at or after `offset`."""
        self.truncate_entries(bisect_right(self._keys, offset - self.base_offset - 1))


class TimeIndex(_SparseIndex):
    """Sparse map from the largest timestamp seen so far to the offset of the batch that brought it.

    File format: 12-byte entries, big-endian int64 timestamp, int32 offset relative to the segment's base.
    Timestamps strictly increase; offsets never decrease. An entry is added beside each offset index entry
    when the segment's max timestamp grew, and again at flush, roll and close, so the last entry holds the
    segment's largest timestamp (what time-based retention reads). Entry (T, o) means every batch before o
    has max timestamp < T and batch o has T, so a search for T' >= T may start at o.
    """

    ENTRY = TIME_ENTRY

    def _new_arrays(self) -> tuple[array[int], array[int]]:
        return array("q"), array("i")

    def maybe_append(self, timestamp: int, offset: int) -> int:
        """Add the entry unless it is not past the last one; returns the entries left (`room`), as append does."""
        relative = offset - self.base_offset
        keys = self._keys
        if not keys or (timestamp > keys[-1] and relative >= self._values[-1]):
            self._values.append(relative)  # values first: see _SparseIndex
            keys.append(timestamp)
        return self.max_entries - len(keys)

    def lookup(self, timestamp: int) -> int:
        """Where a search for the first batch with max timestamp >= `timestamp` may start."""
        i = bisect_right(self._keys, timestamp) - 1
        return self.base_offset + (self._values[i] if i >= 0 else 0)

    def last_entry(self) -> tuple[int, int]:
        """(max timestamp, offset of the batch that has it), or (-1, base offset) when empty."""
        if not self._keys:
            return -1, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    @property
    def max_timestamp(self) -> int:
        return self._keys[-1] if self._keys else -1

    def check_against(self, next_offset: int) -> None:
        if self._values and (self._values[0] < 0 or self.base_offset + self._values[-1] >= next_offset):
            raise CorruptIndexError(f"{self.path}: offset past the end of the segment")

    def truncate_to_offset(self, offset: int) -> None:
        relative = offset - self.base_offset
        keep = len(self._values)
        while keep and self._values[keep - 1] >= relative:
            keep -= 1
        self.truncate_entries(keep)
