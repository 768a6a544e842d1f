# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A lookup by time inside one batch in C (Cython): the records' heads only, from a chunk that may cut a
record (records/seek.py is the authority and the caller: `seek_timestamp`).
"""

from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *


cdef enum:
    # A record's head as seek_timestamp reads it: length, attributes, timestampDelta, offsetDelta, at most.
    MAX_RECORD_HEAD = MAX_VARINT_BYTES + 1 + MAX_VARINT_BYTES + MAX_VARINT_BYTES
    SEEK_FOUND = 1  # seek.FOUND, seek.MORE, seek.END
    SEEK_MORE = 0
    SEEK_END = -1
    SEEK_DEFER = 2  # to the pure-Python walk, which decides


cdef int seek_loop(const uint8_t* data, Py_ssize_t end, Py_ssize_t* position, Py_ssize_t* walked,
                   Py_ssize_t remaining, int64_t base_offset, int64_t base_ts, bint create_time, int64_t append_ts,
                   int64_t target, bint final, int64_t* offset, int64_t* timestamp) noexcept nogil:
    cdef Py_ssize_t start, body, after
    cdef int64_t length, timestamp_delta, offset_delta
    cdef int whole_head_missing = SEEK_DEFER if final else SEEK_MORE
    while walked[0] < remaining:
        start = position[0]
        if start >= end:
            return whole_head_missing
        body = read_varint(data, start, end, &length)
        after = read_varint(data, body + 1, end, &timestamp_delta) if 0 <= body < end else -1
        after = read_varint(data, after, end, &offset_delta) if after >= 0 else -1
        if after < 0:  # cut by the chunk's end, or malformed (or a 10-byte varint) when the head fitted
            return SEEK_DEFER if end - start >= MAX_RECORD_HEAD else whole_head_missing
        if length < 0 or length > INT32_MAX or after > body + length or (final and body + length > end):
            return SEEK_DEFER
        if not create_time:
            timestamp[0] = append_ts
        elif not checked_add(base_ts, timestamp_delta, timestamp):
            return SEEK_DEFER
        if not checked_add(base_offset, offset_delta, offset):
            return SEEK_DEFER
        if timestamp[0] >= target:
            return SEEK_FOUND
        position[0] = body + length
        walked[0] += 1
    return SEEK_END


def seek_timestamp(const uint8_t[::1] chunk, Py_ssize_t position, int64_t base_offset, int64_t base_ts,
                   object log_append_time, int64_t target, Py_ssize_t remaining, bint final):
    """seek.seek_timestamp's walk: (status, position, walked, offset, timestamp), or None to defer to Python."""
    cdef Py_ssize_t end = chunk.shape[0], walked = 0
    cdef bint create_time = log_append_time is None
    cdef int64_t append_ts = 0 if create_time else log_append_time
    cdef int64_t offset = -1, timestamp = -1
    cdef int status
    if position < 0:
        return None
    if end == 0:
        status = SEEK_END if remaining <= 0 else (SEEK_DEFER if final else SEEK_MORE)
    else:
        with nogil:
            status = seek_loop(&chunk[0], end, &position, &walked, remaining, base_offset, base_ts, create_time,
                               append_ts, target, final, &offset, &timestamp)
    if status == SEEK_DEFER:
        return None
    if status != SEEK_FOUND:
        offset = timestamp = -1
    return status, position, walked, offset, timestamp
