# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Records sections into Arrow's columnar layout in C (Cython); records/buffers.py is the pure-Python
authority and the caller: `decode_buffers` (one batch's own buffers) and `decode_into` (a ColumnSink's
buffers, many batches one after another).
"""

import array as _array

from libc.string cimport memcpy
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *



cdef inline bint arrow_section(Py_ssize_t count, Py_ssize_t end) noexcept:
    """`count` records can fill a section of `end` bytes, and its keys and values fit Arrow's int32 ends."""
    return 0 < count <= end // MIN_RECORD_BYTES and end <= INT32_MAX


cdef inline void copy_field(const uint8_t* data, Py_ssize_t start, Py_ssize_t size, Py_ssize_t index,
                            uint8_t* into, int32_t* ends, uint8_t* validity, Py_ssize_t* nulls) noexcept nogil:
    """Append a field as `walk_fields` found it to `into` at `ends[index]`, setting `ends[index + 1]` and
    its validity bit (clear for a null one: -1, and any other negative length, as in Python)."""
    if size < 0:
        ends[index + 1] = ends[index]
        nulls[0] += 1
        return
    memcpy(into + ends[index], data + start, size)
    ends[index + 1] = ends[index] + <int32_t>size
    validity[index >> 3] |= <uint8_t>(1 << (index & 7))


cdef bint buffers_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts, bint create_time,
                       int64_t append_ts, Py_ssize_t count, int64_t* offsets, int64_t* timestamps,
                       int32_t* key_ends, uint8_t* key_data, uint8_t* key_validity, Py_ssize_t* key_nulls,
                       int32_t* value_ends, uint8_t* value_data, uint8_t* value_validity, Py_ssize_t* value_nulls,
                       bint* has_headers) noexcept nogil:
    cdef Py_ssize_t index, position = 0
    cdef Record r
    key_ends[0] = value_ends[0] = 0
    for index in range(count):
        position = walk_record(data, position, end, base_offset, base_ts, create_time, append_ts, &r)
        if position < 0:
            return False
        offsets[index], timestamps[index] = r.offset, r.timestamp
        copy_field(data, r.key, r.key_size, index, key_data, key_ends, key_validity, key_nulls)
        copy_field(data, r.value, r.value_size, index, value_data, value_ends, value_validity, value_nulls)
        if r.end - r.headers > 1:  # more than a headersCount of 0
            has_headers[0] = True
    return position == end


cdef bint fill_buffers(const uint8_t[::1] section, int64_t base_offset, int64_t base_ts, bint create_time,
                       int64_t append_ts, Py_ssize_t count, int64_t[::1] offsets, int64_t[::1] timestamps,
                       int32_t[::1] key_ends, uint8_t[::1] key_data, uint8_t[::1] key_validity, Py_ssize_t* key_nulls,
                       int32_t[::1] value_ends, uint8_t[::1] value_data, uint8_t[::1] value_validity,
                       Py_ssize_t* value_nulls, bint* has_headers):
    """`buffers_loop` over typed views that are released on return, so the bytearrays may shrink after."""
    cdef bint ok
    with nogil:
        ok = buffers_loop(&section[0], section.shape[0], base_offset, base_ts, create_time, append_ts, count,
                          &offsets[0], &timestamps[0], &key_ends[0], &key_data[0], &key_validity[0], key_nulls,
                          &value_ends[0], &value_data[0], &value_validity[0], value_nulls, has_headers)
    return ok


def decode_buffers(const uint8_t[::1] section, int64_t base_offset, int64_t base_ts, object log_append_time,
                   Py_ssize_t count):
    """The `count` records filling `section` exactly in Arrow's layout (buffers.decode_buffers' tuple, without
    the headers), or None to defer to Python (malformed, or past what C takes)."""
    cdef Py_ssize_t end = section.shape[0], key_nulls = 0, value_nulls = 0
    cdef bint create_time = log_append_time is None
    cdef int64_t append_ts = 0 if create_time else log_append_time
    cdef bint has_headers = False
    if not arrow_section(count, end):
        return None
    offsets, timestamps = _array.array("q", bytes(8 * count)), _array.array("q", bytes(8 * count))
    key_ends, value_ends = _array.array("i", bytes(4 * (count + 1))), _array.array("i", bytes(4 * (count + 1)))
    # Keys and values together fit in the section: each gets its size, then gives back what it did not use.
    key_data, value_data = bytearray(end), bytearray(end)
    key_validity, value_validity = bytearray((count + 7) // 8), bytearray((count + 7) // 8)
    if not fill_buffers(section, base_offset, base_ts, create_time, append_ts, count, offsets, timestamps,
                        key_ends, key_data, key_validity, &key_nulls, value_ends, value_data, value_validity,
                        &value_nulls, &has_headers):
        return None
    del key_data[key_ends[count]:]
    del value_data[value_ends[count]:]
    return (count, offsets, timestamps, key_ends, key_data, key_validity if key_nulls else None, key_nulls,
            value_ends, value_data, value_validity if value_nulls else None, value_nulls, has_headers)


# -- records/buffers.py ColumnSink: many batches decoded one after another into the same Arrow buffers ---------

cdef inline void sink_field(const uint8_t* data, Py_ssize_t start, Py_ssize_t size, Py_ssize_t row, uint8_t* into,
                            int32_t* ends, uint8_t* valid) noexcept nogil:
    """copy_field with one validity byte per row (1: present) instead of a bit: rows need not start at a
    multiple of 8, and nothing needs zeroing first."""
    if size < 0:
        ends[row + 1] = ends[row]
        valid[row] = 0
        return
    memcpy(into + ends[row], data + start, size)
    ends[row + 1] = ends[row] + <int32_t>size
    valid[row] = 1


cdef Py_ssize_t sink_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts,
                          bint create_time, int64_t append_ts, Py_ssize_t count, int64_t start, int64_t stop,
                          Py_ssize_t row, int64_t* offsets, int64_t* timestamps, int32_t* key_ends,
                          uint8_t* key_data, uint8_t* key_valid, int32_t* value_ends, uint8_t* value_data,
                          uint8_t* value_valid, Py_ssize_t* first, bint* has_headers) noexcept nogil:
    """The records of offsets `[start, stop)` written from sink row `row` on, every record parsed and checked
    (buffers_loop's checks): how many were written, or -1 when malformed or past what C takes."""
    cdef Py_ssize_t index, position = 0, written = 0, at
    cdef Record r
    for index in range(count):
        position = walk_record(data, position, end, base_offset, base_ts, create_time, append_ts, &r)
        if position < 0:
            return -1
        if start <= r.offset < stop:
            if written == 0:
                first[0] = index
            at = row + written
            offsets[at], timestamps[at] = r.offset, r.timestamp
            sink_field(data, r.key, r.key_size, at, key_data, key_ends, key_valid)
            sink_field(data, r.value, r.value_size, at, value_data, value_ends, value_valid)
            written += 1
            if r.end - r.headers > 1:
                has_headers[0] = True
    return written if position == end else -1


def decode_into(const uint8_t[::1] section, int64_t base_offset, int64_t base_ts, object log_append_time,
                Py_ssize_t count, int64_t start, int64_t stop, Py_ssize_t row, int64_t[::1] offsets,
                int64_t[::1] timestamps, int32_t[::1] key_ends, uint8_t[::1] key_data, uint8_t[::1] key_valid,
                int32_t[::1] value_ends, uint8_t[::1] value_data, uint8_t[::1] value_valid):
    """The records of offsets `[start, stop)` of the `count` records filling `section`, appended to a
    ColumnSink's buffers at `row` (records/buffers.py): `(first record written, rows written, any of them
    has headers)`, or None to defer to Python (malformed, or past what C takes), having written nothing the
    sink counts. The caller makes room first: `count` rows and `len(section)` bytes of keys and of values."""
    cdef Py_ssize_t end = section.shape[0], written = 0, first = 0
    cdef bint create_time = log_append_time is None
    cdef int64_t append_ts = 0 if create_time else log_append_time
    cdef bint has_headers = False
    if not arrow_section(count, end):
        return None
    if (row < 0 or row + count > offsets.shape[0] or row + count > timestamps.shape[0]
            or row + count > key_valid.shape[0] or row + count > value_valid.shape[0]
            or row + count >= key_ends.shape[0] or row + count >= value_ends.shape[0]
            or key_ends[row] + <int64_t>end > key_data.shape[0]
            or value_ends[row] + <int64_t>end > value_data.shape[0]):
        raise ValueError("decode_into: the sink has no room for this batch")
    with nogil:
        written = sink_loop(&section[0], end, base_offset, base_ts, create_time, append_ts, count, start, stop,
                            row, &offsets[0], &timestamps[0], &key_ends[0], &key_data[0], &key_valid[0],
                            &value_ends[0], &value_data[0], &value_valid[0], &first, &has_headers)
    if written < 0:
        return None
    return first, written, has_headers
