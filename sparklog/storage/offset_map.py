"""OffsetMap: key -> last offset of the dirty section, in a fixed amount of memory (Kafka's SkimpyOffsetMap).

The cleaner fills it with every key of the dirty section, in offset order, then keeps a record only if its
offset is at least the map's offset for its key.

Rule: map-memory-reserved-once: memory is reserved once, `log.cleaner.dedupe.buffer.size` / threads bytes: two flat
int64 tables (a key digest and an offset per slot, 16 bytes a slot); nothing grows while cleaning. With the
load factor of 0.9 (Kafka's log.cleaner.io.buffer.load.factor) that is under 18 bytes an entry, against
Kafka's 24 (a 16-byte MD5 and an 8-byte offset) and a Python dict's ~100 for the same key -> offset.
Rule: map-pages-touched: a clean costs the pages its keys touch, not the map's size: each table is private anonymous
memory (mmap), whose pages are zero and take no RAM until written, in 4 KiB pages (no transparent huge
page, which would zero 2 MiB for one key). `clear` gives the written pages back to the kernel (madvise
MADV_DONTNEED: the next touch of each faults in a zero page), so the tables keep their address (`tables`
stays valid) and an idle cleaner holds only the pages its last clean wrote. Where that is not known to
zero the pages (MADV_DONTNEED is advisory outside Linux), `clear` maps new tables instead. (A fresh
bytes-backed array at every clean wrote 128 MiB: 0.2-0.4 s of CPU to clean a 4 KiB segment.)
Rule: key-digest: a key is stored as a 64-bit digest (the interpreter's hash of the bytes, stable within the process
that fills and reads the map, which is all a clean needs); 0 marks an empty slot, so a digest of 0 is
stored as 1. Two keys with the same digest would count as one key (as two keys with the same MD5 do in
Kafka): with 64 bits and a million keys the chance is about 3e-8.
Rule: double-hashing: open addressing with double hashing over a power-of-two number of slots (the largest that fits the
memory); `put` of a new key into a map at its load limit returns False and stores nothing: the caller ends
the cleanable range there (Kafka cleans up to where the map filled).
"""

from __future__ import annotations

import mmap
import sys
from typing import cast

import numpy as np

DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size: Kafka's 128 MiB
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor: Kafka's 0.9
SLOT_BYTES = 16  # an int64 digest and an int64 offset
_EMPTY = 0
_STEP_SHIFT = 32  # the probe step comes from the digest's high half, the slot from its low bits
VECTOR_MIN_KEYS = 256  # from this many keys a call probes with numpy, all keys at once, round by round
# Rule: map-pages-touched: only Linux promises zero pages after MADV_DONTNEED on private anonymous memory
DROP_PAGES = sys.platform.startswith("linux") and hasattr(mmap, "MADV_DONTNEED")


def digests_of(keys: list[bytes | None]) -> np.ndarray:
    """Each key's digest (Rule: key-digest), 0 for a null key: what records/scan.py computes without the keys."""
    if None in keys:
        return np.array([0 if key is None else hash(key) or 1 for key in keys], dtype=np.int64)
    digests = np.array(list(map(hash, keys)), dtype=np.int64)  # the common case, with hash() called from C
    digests[digests == _EMPTY] = 1
    return digests


def _zero_pages(length: int) -> mmap.mmap:
    """`length` bytes of private anonymous memory: zero, in RAM only once written (Rule: map-pages-touched). Private,
    for a shared mapping keeps its pages in the kernel's shared memory through MADV_DONTNEED."""
    area = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        area.madvise(mmap.MADV_NOHUGEPAGE)
    return area


class OffsetMap:
    """A fixed-size map from key digests to offsets; not thread-safe (one per cleaner thread)."""

    def __init__(self, memory_bytes: int = DEFAULT_DEDUPE_BUFFER_SIZE, load_factor: float = DEFAULT_LOAD_FACTOR):
        if memory_bytes < SLOT_BYTES:
            raise ValueError(f"an offset map needs at least {SLOT_BYTES} bytes, not {memory_bytes}")
        if not 0 < load_factor <= 1:
            raise ValueError(f"the load factor must be in (0, 1], not {load_factor}")
        self.slots = 1 << (memory_bytes // SLOT_BYTES).bit_length() - 1  # a power of two: see _probe
        self._mask = self.slots - 1
        self.max_entries = max(1, min(self.slots - 1, int(self.slots * load_factor)))
        self._map_tables()
        self.size = 0

    def _map_tables(self) -> None:
        """Rule: map-pages-touched: two tables of zero pages, none of them in RAM yet."""
        self._areas = (_zero_pages(8 * self.slots), _zero_pages(8 * self.slots))
        self._digests, self._offsets = (memoryview(area).cast("q") for area in self._areas)

    @property
    def memory_bytes(self) -> int:
        return self._digests.itemsize * len(self._digests) + self._offsets.itemsize * len(self._offsets)

    def clear(self) -> None:
        """Empty the map and give back the pages the last clean wrote (Rule: map-pages-touched): O(pages touched)."""
        if DROP_PAGES:
            for area in self._areas:
                area.madvise(mmap.MADV_DONTNEED)
        else:  # the old tables are unmapped when the last view of them goes
            self._map_tables()
        self.size = 0

    @property
    def tables(self) -> tuple[memoryview, memoryview]:
        """The digest and offset of every slot (int64 views, format "q"), for records/sweep.py, which probes
        them as `_probe_all` does (valid until the next `clear`: after it only where DROP_PAGES)."""
        return self._digests, self._offsets

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def put(self, key: bytes, offset: int) -> bool:
        """Map `key` to `offset`; False (nothing stored) when `key` is new and the map is at its limit."""
        return self.put_all([key], [offset]) == 1

    def put_all(self, keys: list[bytes | None], offsets: list[int]) -> int:
        """`put` each (key, offset) in order, null keys skipped; returns how many were taken before the map
        filled (len(keys) when all were)."""
        return self.put_digests(digests_of(keys), np.asarray(offsets, dtype=np.int64))

    def put_digests(self, digests: np.ndarray, offsets: np.ndarray) -> int:
        """put_all of keys given as digests (`digests_of`, or records/scan.py's, 0 for a null key)."""
        if len(digests) >= VECTOR_MIN_KEYS and self.size + len(digests) <= self.max_entries:  # cannot fill
            present = np.flatnonzero(digests)
            self._put_vector(digests[present], offsets[present])
            return len(digests)
        return cast(int, self._probe_all(digests.tolist(), offsets.tolist()))

    def get(self, key: bytes) -> int:
        """The offset stored for `key`, or -1."""
        return self.get_all([key])[0]

    def get_all(self, keys: list[bytes | None]) -> list[int]:
        """`get` of each key (-1 for a null key or one not stored), in one loop."""
        if len(keys) >= VECTOR_MIN_KEYS:
            return cast("list[int]", self.get_array(keys).tolist())
        return cast("list[int]", self._probe_all(digests_of(keys).tolist(), None))

    def get_array(self, keys: list[bytes | None]) -> np.ndarray:
        """get_all as an int64 array, probing with numpy whatever the number of keys."""
        return self.get_digests(digests_of(keys))

    def get_digests(self, digests: np.ndarray) -> np.ndarray:
        """get_array of keys given as digests (0: a null key, -1 for it)."""
        out = np.full(len(digests), -1, dtype=np.int64)
        present = np.flatnonzero(digests)
        out[present] = self._get_vector(digests[present])
        return out

    # -- the same probing, vectorized (what a clean uses: keys come a read buffer at a time) -----------------

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        return np.frombuffer(self._digests, dtype=np.int64), np.frombuffer(self._offsets, dtype=np.int64)

    def _get_vector(self, digests: np.ndarray) -> np.ndarray:
        table, stored = self._tables()
        out = np.full(len(digests), -1, dtype=np.int64)
        slots, steps = digests & self._mask, ((digests >> _STEP_SHIFT) & self._mask) | 1
        pending = np.arange(len(digests))
        while pending.size:
            found = table[slots[pending]]
            hit = found == digests[pending]
            out[pending[hit]] = stored[slots[pending[hit]]]
            pending = pending[~hit & (found != _EMPTY)]
            slots[pending] = (slots[pending] + steps[pending]) & self._mask
        return out

    def _put_vector(self, digests: np.ndarray, values: np.ndarray) -> None:
        """put_digests when the map cannot fill (no null key): the last offset of each digest, then rounds of
        probing in which a new digest takes an empty slot unless another new digest of the round takes it
        first."""
        reversed_unique, last = np.unique(digests[::-1], return_index=True)  # the last occurrence of each
        digests, values = reversed_unique, values[::-1][last]
        table, stored = self._tables()
        mask = self._mask
        slots, steps = digests & mask, ((digests >> _STEP_SHIFT) & mask) | 1
        pending = np.arange(len(digests))
        while pending.size:
            at = slots[pending]
            found = table[at]
            hit = found == digests[pending]
            stored[at[hit]] = values[pending[hit]]
            empty = np.flatnonzero(found == _EMPTY)
            _, first = np.unique(at[empty], return_index=True)  # one new digest per empty slot this round
            won = pending[empty[first]]
            table[slots[won]] = digests[won]
            stored[slots[won]] = values[won]
            self.size += len(won)
            done = hit.copy()
            done[empty[first]] = True
            lost = ~done & (found == _EMPTY)  # lost an empty slot to another: look at it again
            moving = ~done & ~lost
            slots[pending[moving]] = (slots[pending[moving]] + steps[pending[moving]]) & mask
            pending = pending[~done]

    def _probe_all(self, digests_in: list[int], offsets: list[int] | None) -> list[int] | int:
        """put_all (with `offsets`) or get_all (without): one loop per record of the dirty section, inlined.

        Double hashing (Rule: double-hashing's probing): the slot is the digest's low bits, the step its high bits made
        odd, so every slot of the power-of-two table is reached and no primary clusters form (at a 0.9 load a
        lookup probes ~2.6 slots on average, where linear probing would probe ~50 for a new key)."""
        digests, stored, mask = self._digests, self._offsets, self._mask
        size, limit = self.size, self.max_entries
        found_offsets: list[int] = []
        answer = found_offsets.append
        for i, digest in enumerate(digests_in):
            if digest == _EMPTY:  # a null key
                if offsets is None:
                    answer(-1)
                continue
            slot = digest & mask
            step = (digest >> _STEP_SHIFT) & mask | 1
            found = digests[slot]
            while found != digest and found != _EMPTY:
                slot = (slot + step) & mask
                found = digests[slot]
            if offsets is None:
                answer(stored[slot] if found else -1)
                continue
            if found == _EMPTY:
                if size >= limit:
                    self.size = size
                    return i
                digests[slot] = digest
                size += 1
            stored[slot] = offsets[i]
        self.size = size
        return found_offsets if offsets is None else len(digests_in)

    def __len__(self) -> int:
        return self.size
