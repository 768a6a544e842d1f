# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The log cleaner's two passes over a buffer of whole batches in C (Cython); records/sweep.py is their
caller (`put_batches`, `filter_batches`, `whole_prefix`).

One call takes every batch of a read buffer it can, with the GIL released for all of them: it checks each
batch as iter_batches does (magic, lengths, CRC-32C), scans its records (scan_loop) and, for the recopy,
decides and copies what is kept. It stops at the first batch it does not take (a compressed data batch, or
anything malformed), which the caller hands to the pure-Python path: that path decides, and raises.

"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *

cdef extern from *:
    void __builtin_prefetch(const void* address) nogil

sparklog_crc32c_init()

cdef enum:
    ENTRY_FIELDS = 5  # an output batch: position, base offset, next offset, max timestamp, size
    # the counters filter_batches adds to, in this order (sweep.COUNTERS)
    READ = 0
    RECORDS = 1
    REMOVED = 2
    TOMBSTONES = 3
    CHANGED = 4
    HORIZON = 5  # not a sum: the earliest delete horizon of a batch that keeps a tombstone (0: none)
    STEP_SHIFT = 32  # offset_map._STEP_SHIFT
    # How many records ahead the offset map's first slot is prefetched: a probe of a map larger than the
    # caches waits on memory, so the next ones are fetched meanwhile.
    PREFETCH_AHEAD = 8


cdef struct Scratch:
    int64_t* digests
    int64_t* offsets
    int64_t* timestamps
    int64_t* ends
    uint8_t* flags
    uint8_t* keep
    Py_ssize_t capacity


cdef bint scan_batch(const uint8_t* head, Py_ssize_t size, Scratch* s) noexcept nogil:
    """scan_loop over the records of the uncompressed batch at `head`, into `s` (grown as needed)."""
    cdef Py_ssize_t count = get_i32(head + RECORD_COUNT_OFFSET), need
    cdef int16_t attributes = get_i16(head + ATTRIBUTES_OFFSET)
    cdef int64_t base_offset = get_i64(head), base_ts = get_i64(head + BASE_TIMESTAMP_OFFSET)
    if count <= 0 or count > (size - HEADER_SIZE) // MIN_RECORD_BYTES:
        return False
    if count > s.capacity:
        need = max(count, 2 * s.capacity)
        s.digests = <int64_t*>realloc(s.digests, need * 8)
        s.offsets = <int64_t*>realloc(s.offsets, need * 8)
        s.timestamps = <int64_t*>realloc(s.timestamps, need * 8)
        s.ends = <int64_t*>realloc(s.ends, need * 8)
        s.flags = <uint8_t*>realloc(s.flags, need)
        s.keep = <uint8_t*>realloc(s.keep, need)
        if (s.digests == NULL or s.offsets == NULL or s.timestamps == NULL or s.ends == NULL or s.flags == NULL
                or s.keep == NULL):
            return False  # the caller's pure-Python path raises MemoryError, or copes
        s.capacity = need
    return scan_loop(head + HEADER_SIZE, size - HEADER_SIZE, base_offset, base_ts,
                     not (attributes & TIMESTAMP_TYPE_MASK), get_i64(head + MAX_TIMESTAMP_OFFSET), count,
                     s.digests, s.offsets, s.timestamps, s.flags, s.ends)


cdef void free_scratch(Scratch* s) noexcept nogil:
    free(s.digests)
    free(s.offsets)
    free(s.timestamps)
    free(s.ends)
    free(s.flags)
    free(s.keep)


cdef inline bint is_data(const uint8_t* head) noexcept nogil:
    """A batch with records that is not a control batch: what the cleaner scans."""
    return get_i32(head + RECORD_COUNT_OFFSET) > 0 and not (get_i16(head + ATTRIBUTES_OFFSET) & CONTROL_MASK)


cdef inline void prefetch(const Scratch* s, Py_ssize_t index, Py_ssize_t count, const int64_t* digests,
                          const int64_t* stored, int64_t mask) noexcept nogil:
    """Start fetching the first slot of record `index` + PREFETCH_AHEAD."""
    cdef int64_t slot
    if index + PREFETCH_AHEAD < count:
        slot = s.digests[index + PREFETCH_AHEAD] & mask
        __builtin_prefetch(digests + slot)
        __builtin_prefetch(stored + slot)


cdef inline Py_ssize_t probe(const int64_t* table, int64_t digest, int64_t mask) noexcept nogil:
    """The slot holding `digest`, or the empty one where it would go (offset_map.py Rule: double-hashing)."""
    cdef int64_t slot = digest & mask, step = ((digest >> STEP_SHIFT) & mask) | 1
    while table[slot] != digest and table[slot] != 0:
        slot = (slot + step) & mask
    return slot


def put_batches(const uint8_t[::1] chunk, Py_ssize_t position, int64_t[::1] digests, int64_t[::1] stored,
                int64_t size, int64_t limit, int64_t first_dirty):
    """The offset map's put of every key of the batches from `position` on that it takes (uncompressed data
    batches; control and empty ones and those below `first_dirty` are passed over): (the position of the
    first batch not taken, or the end; the map's new size; True when that batch is where the map filled)."""
    cdef Py_ssize_t end = chunk.shape[0], batch_size, index, slot, count
    cdef int64_t mask = digests.shape[0] - 1, digest
    cdef const uint8_t* head
    cdef Scratch s
    cdef bint full = False
    memset(&s, 0, sizeof(s))
    with nogil:
        while position < end and not full:
            batch_size = whole_batch(&chunk[0], position, end)
            if batch_size < 0:
                break
            head = &chunk[position]
            if is_data(head) and get_i64(head) + get_i32(head + LAST_OFFSET_DELTA_OFFSET) + 1 > first_dirty:
                if get_i16(head + ATTRIBUTES_OFFSET) & COMPRESSION_BITS or not scan_batch(head, batch_size, &s):
                    break
                count = get_i32(head + RECORD_COUNT_OFFSET)
                for index in range(min(count, PREFETCH_AHEAD)):
                    prefetch(&s, index - PREFETCH_AHEAD, count, &digests[0], &stored[0], mask)
                for index in range(count):
                    prefetch(&s, index, count, &digests[0], &stored[0], mask)
                    digest = s.digests[index]
                    if digest == 0:
                        continue
                    slot = probe(&digests[0], digest, mask)
                    if digests[slot] == 0:
                        if size >= limit:
                            full = True
                            break
                        digests[slot] = digest
                        size += 1
                    stored[slot] = s.offsets[index]
                if full:
                    break
            position += batch_size
        free_scratch(&s)
    return position, size, full


cdef inline int64_t next_offset_of(const uint8_t* head) noexcept nogil:
    return get_i64(head) + get_i32(head + LAST_OFFSET_DELTA_OFFSET) + 1


cdef bint can_extend(const uint8_t* run, const uint8_t* empty) noexcept nogil:
    """retain.can_extend: may the empty header `empty` be coalesced into the empty header `run` before it?"""
    cdef int64_t run_base = get_i64(run), producer = get_i64(run + PRODUCER_ID_OFFSET)
    cdef int16_t run_attributes = get_i16(run + ATTRIBUTES_OFFSET), attributes = get_i16(empty + ATTRIBUTES_OFFSET)
    if get_i64(empty) != next_offset_of(run) or (run_attributes | attributes) & CONTROL_MASK:
        return False
    if (producer != get_i64(empty + PRODUCER_ID_OFFSET)
            or get_i16(run + PRODUCER_EPOCH_OFFSET) != get_i16(empty + PRODUCER_EPOCH_OFFSET)
            or (run_attributes & TRANSACTIONAL_MASK) != (attributes & TRANSACTIONAL_MASK)
            or get_i32(run + LEADER_EPOCH_OFFSET) != get_i32(empty + LEADER_EPOCH_OFFSET)):
        return False
    if producer != -1 and <int64_t>get_i32(empty + BASE_SEQUENCE_OFFSET) != (
            <int64_t>get_i32(run + BASE_SEQUENCE_OFFSET) + get_i32(run + LAST_OFFSET_DELTA_OFFSET) + 1):
        return False
    return next_offset_of(empty) - run_base <= INT32_MAX


cdef void extend_empty(uint8_t* run, const uint8_t* empty) noexcept nogil:
    """retain.extend_empty: `run` made to span `empty`'s offsets too."""
    put(run + LAST_OFFSET_DELTA_OFFSET, <uint64_t>(next_offset_of(empty) - 1 - get_i64(run)), 4)
    put(run + MAX_TIMESTAMP_OFFSET, <uint64_t>max(get_i64(run + MAX_TIMESTAMP_OFFSET),
                                                  get_i64(empty + MAX_TIMESTAMP_OFFSET)), 8)
    put(run + CRC_OFFSET, sparklog_crc32c(run + ATTRIBUTES_OFFSET, HEADER_SIZE - ATTRIBUTES_OFFSET), 4)


cdef struct Sink:
    # where filter_batches writes: the output bytes, one entry per output batch, the pending empty run
    uint8_t* out
    Py_ssize_t used
    int64_t* entries
    Py_ssize_t count
    uint8_t* run
    bint has_run


cdef void emit(Sink* sink, const uint8_t* head, Py_ssize_t size) noexcept nogil:
    """Append the batch at `head` (already rewritten if it is) and its entry."""
    cdef int64_t* entry = sink.entries + ENTRY_FIELDS * sink.count
    if head != sink.out + sink.used:
        memcpy(sink.out + sink.used, head, size)
    entry[0], entry[1], entry[2] = sink.used, get_i64(head), next_offset_of(head)
    entry[3], entry[4] = get_i64(head + MAX_TIMESTAMP_OFFSET), size
    sink.used += size
    sink.count += 1


cdef void flush_run(Sink* sink) noexcept nogil:
    if sink.has_run:
        sink.has_run = False
        emit(sink, sink.run, HEADER_SIZE)


cdef bint add_empty(Sink* sink, const uint8_t* header) noexcept nogil:
    """An empty header joins the run (True: it extended it) or starts one (cleaner._Group.add)."""
    if sink.has_run and can_extend(sink.run, header):
        extend_empty(sink.run, header)
        return True
    flush_run(sink)
    memcpy(sink.run, header, HEADER_SIZE)
    sink.has_run = True
    return False


cdef Py_ssize_t decide(const Scratch* s, const uint8_t* head, const int64_t* digests, const int64_t* stored,
                       int64_t mask, int64_t end_offset, int64_t now, Py_ssize_t* latest_count,
                       bint* keeps_tombstone) noexcept nogil:
    """cleaner.Cleaner._decide (Rule: keep-latest-per-key, Rule: tombstone-delete-horizon) for one batch's records into s.keep: how many are kept, or -1
    when a tombstone is kept in a batch without a delete horizon (writing one is the pure-Python path's);
    `keeps_tombstone`: whether a tombstone below `end_offset` is kept."""
    cdef Py_ssize_t index, kept = 0, count = get_i32(head + RECORD_COUNT_OFFSET), slot
    cdef bint marked = get_i16(head + ATTRIBUTES_OFFSET) & DELETE_HORIZON_MASK
    cdef bint expired = marked and now > get_i64(head + BASE_TIMESTAMP_OFFSET)
    cdef bint latest, keep, tombstone
    latest_count[0] = 0
    keeps_tombstone[0] = False
    for index in range(min(count, PREFETCH_AHEAD)):
        prefetch(s, index - PREFETCH_AHEAD, count, digests, stored, mask)
    for index in range(count):
        prefetch(s, index, count, digests, stored, mask)
        if s.offsets[index] >= end_offset:
            latest = keep = True
        else:
            latest = False
            if s.digests[index] != 0:
                slot = probe(digests, s.digests[index], mask)
                latest = (stored[slot] if digests[slot] != 0 else -1) <= s.offsets[index]
            tombstone = s.flags[index] & NULL_VALUE
            keep = latest and (not tombstone or not expired)
            if keep and tombstone:
                if not marked:
                    return -1
                keeps_tombstone[0] = True
        s.keep[index] = keep
        kept += keep
        latest_count[0] += latest
    return kept


cdef void rebuild(Sink* sink, const uint8_t* head, const Scratch* s, Py_ssize_t count, Py_ssize_t kept) noexcept nogil:
    """retain._rebuild of an uncompressed batch: its header around the kept records (at least one), emitted."""
    cdef uint8_t* out = sink.out + sink.used
    cdef Py_ssize_t index, start = 0, size = HEADER_SIZE
    for index in range(count):
        if s.keep[index]:
            memcpy(out + size, head + HEADER_SIZE + start, s.ends[index] - start)
            size += s.ends[index] - start
        start = s.ends[index]
    memcpy(out, head, HEADER_SIZE)
    put(out + LENGTH_OFFSET, size - LOG_OVERHEAD, 4)
    put(out + RECORD_COUNT_OFFSET, kept, 4)
    put(out + CRC_OFFSET, sparklog_crc32c(out + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET), 4)
    emit(sink, out, size)


def filter_batches(const uint8_t[::1] chunk, Py_ssize_t position, const int64_t[::1] digests,
                   const int64_t[::1] stored, int64_t end_offset, int64_t now, uint8_t[::1] out,
                   int64_t[::1] entries, uint8_t[::1] run, bint has_run, int64_t[::1] counters):
    """The recopy (cleaner.py Rule: keep-latest-per-key and Rule: recopy-in-groups) of every batch from `position` on that it takes: each data batch
    below `end_offset` keeps the records the offset map keeps, less the tombstones of a batch whose delete
    horizon is before `now` (rebuilt as retain.py does); the others are copied whole, and empty headers are
    coalesced into `run` (retain.py Rule 3). A batch that keeps a tombstone and has no delete horizon yet
    is not taken.

    `out` must hold the bytes from `position` on plus one header, `entries` ENTRY_FIELDS int64 for each batch
    that many bytes can hold plus one, `run` one header (`has_run`: it holds one). `counters` (READ ..
    CHANGED) are added to; HORIZON is lowered to the delete horizon of each batch that keeps a tombstone. Returns (the position of the first batch not taken, or the end; bytes written to
    `out`; entries written; whether `run` holds a header)."""
    cdef Py_ssize_t end = chunk.shape[0], batch_size, count, kept, latest_count
    cdef int64_t mask = digests.shape[0] - 1, horizon
    cdef bint keeps_tombstone
    cdef const uint8_t* head
    cdef uint8_t empty[HEADER_SIZE]
    cdef Scratch s
    cdef Sink sink
    memset(&s, 0, sizeof(s))
    sink.out, sink.used, sink.entries, sink.count, sink.run, sink.has_run = &out[0], 0, &entries[0], 0, &run[0], has_run
    with nogil:
        while position < end:
            batch_size = whole_batch(&chunk[0], position, end)
            if batch_size < 0:
                break
            head = &chunk[position]
            count = get_i32(head + RECORD_COUNT_OFFSET)
            if is_data(head) and get_i64(head) < end_offset:
                if get_i16(head + ATTRIBUTES_OFFSET) & COMPRESSION_BITS or not scan_batch(head, batch_size, &s):
                    break
                kept = decide(&s, head, &digests[0], &stored[0], mask, end_offset, now, &latest_count,
                              &keeps_tombstone)
                if kept < 0:
                    break
                if keeps_tombstone:
                    horizon = get_i64(head + BASE_TIMESTAMP_OFFSET)
                    if counters[HORIZON] == 0 or horizon < counters[HORIZON]:
                        counters[HORIZON] = horizon
                counters[RECORDS] += count
                counters[REMOVED] += count - kept
                counters[TOMBSTONES] += latest_count - kept
                if kept < count:
                    counters[CHANGED] = 1
                    if kept:
                        flush_run(&sink)
                        rebuild(&sink, head, &s, count, kept)
                    else:
                        memcpy(empty, head, HEADER_SIZE)
                        put(empty + LENGTH_OFFSET, BATCH_OVERHEAD, 4)
                        put(empty + RECORD_COUNT_OFFSET, 0, 4)
                        put(empty + CRC_OFFSET, sparklog_crc32c(empty + ATTRIBUTES_OFFSET,
                                                                HEADER_SIZE - ATTRIBUTES_OFFSET), 4)
                        add_empty(&sink, empty)
                    counters[READ] += batch_size
                    position += batch_size
                    continue
            if count == 0 and not (get_i16(head + ATTRIBUTES_OFFSET) & CONTROL_MASK):
                if batch_size != HEADER_SIZE:
                    break  # an empty batch with bytes after its header: the pure-Python path copes
                if add_empty(&sink, head):
                    counters[CHANGED] = 1
            else:
                flush_run(&sink)
                emit(&sink, head, batch_size)
            counters[READ] += batch_size
            position += batch_size
        free_scratch(&s)
    return position, sink.used, sink.count, sink.has_run


def whole_prefix(const uint8_t[::1] chunk):
    """How many bytes of `chunk` are whole batches by their lengths; all of it at a length too small to be a
    batch (cleaner._whole_batches, whose loop this is)."""
    cdef Py_ssize_t end = chunk.shape[0], position = 0
    cdef int64_t size
    with nogil:
        while end - position >= HEADER_SIZE:
            size = <int64_t>get_i32(&chunk[position] + LENGTH_OFFSET) + LOG_OVERHEAD
            if size < HEADER_SIZE:
                position = end
                break
            if size > end - position:
                break
            position += size
    return position
