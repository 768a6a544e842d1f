# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A leader's checks of a group's record sets in C (Cython); records/append_check.py is the twin, the
authority and the caller: `check_sets`, `check_leader_set`, `stamp_leader_set`.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int8_t
from libc.stdint cimport INT32_MAX, INT32_MIN, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *

sparklog_crc32c_init()

cdef enum:
    CHECK_HEADER = 61  # batch.HEADER_SIZE
    CHECK_CRC_FROM = 21  # batch.ATTRIBUTES_OFFSET: the CRC covers [21, end)


def check_sets(list record_sets, Py_ssize_t max_message_bytes):
    """append_check.check_sets (Rule 1): the header fields of each whole one-batch set, else None or a code."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t size, i, count = PyList_GET_SIZE(record_sets)
    cdef int32_t length, delta, records
    cdef int8_t magic, high, low
    cdef uint32_t crc
    out = PyList_New(count)
    for i in range(count):
        records = 0
        item = <object>PyList_GET_ITEM(record_sets, i)
        result = None
        if item is not None:
            PyObject_GetBuffer(item, &view, PyBUF_SIMPLE)
            try:
                p = <const uint8_t*>view.buf
                size = view.len
                if size >= CHECK_HEADER:
                    length = <int32_t><int64_t>get_be(p + 8, 4)
                    magic = <int8_t>p[16]
                    crc = <uint32_t><int64_t>get_be(p + 17, 4)
                    high = <int8_t>p[21]
                    low = <int8_t>p[22]
                    delta = <int32_t><int64_t>get_be(p + 23, 4)
                    records = <int32_t><int64_t>get_be(p + 57, 4)
                    if <Py_ssize_t>length + 12 != size:
                        result = None
                    elif low & 0x30:  # batch.CONTROL_MASK | batch.TRANSACTIONAL_MASK
                        result = 1  # REFUSED_ATTRIBUTES
                    elif size > max_message_bytes:
                        result = 2  # REFUSED_SIZE
                    elif (magic != 2 or delta < 0 or records < 0 or (low & 0x07) > 4
                          or sparklog_crc32c(p + CHECK_CRC_FROM, size - CHECK_CRC_FROM) != crc):
                        result = 3  # CORRUPT
                    else:
                        result = (length, magic, crc, high, low, delta, <int64_t>get_be(p + 35, 8), <int64_t>get_be(p + 43, 8),
                                  <int16_t><int64_t>get_be(p + 51, 2), <int32_t><int64_t>get_be(p + 53, 4), records)
            finally:
                PyBuffer_Release(&view)
        Py_INCREF(result)
        PyList_SET_ITEM(out, i, result)
    return out


cdef object _py_records_error = None  # verify.records_error, imported at the first compressed batch


def check_leader_set(records, Py_ssize_t max_message_bytes):
    """append_check.check_leader_set (Rule 3): a record set's batches (an idempotent producer's, a compressed
    one's too) in one walk, or None for anything else (the caller's general append decides)."""
    global _py_records_error
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t position = 0, size, total
    cdef int64_t length, producer_id
    cdef int32_t delta, count, sequence
    cdef uint8_t low
    cdef int64_t offsets = 0, messages = 0, idempotent = 0
    if records is None:
        return None
    PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
    try:
        total = view.len
        if total < CHECK_HEADER:
            return None
        entries = []
        while position < total:
            p = <const uint8_t*>view.buf + position
            if total - position < CHECK_HEADER:
                return None
            length = <int32_t><int64_t>get_be(p + 8, 4)
            size = <Py_ssize_t>length + 12
            low = p[22]
            delta = <int32_t><int64_t>get_be(p + 23, 4)
            count = <int32_t><int64_t>get_be(p + 57, 4)
            producer_id = <int64_t>get_be(p + 43, 8)
            sequence = <int32_t><int64_t>get_be(p + 53, 4)
            if (size < CHECK_HEADER or size > total - position or size > max_message_bytes or p[16] != 2
                    or low & 0x38  # control, transactional or LogAppendTime: the general path's
                    or (low & 0x07) > 4  # no codec at all (batch.MAX_CODEC): the general path refuses it
                    or (producer_id >= 0 and sequence < 0)  # refused by the general path, with its message
                    or count <= 0 or delta != count - 1
                    or sparklog_crc32c(p + CHECK_CRC_FROM, size - CHECK_CRC_FROM) != <uint32_t><int64_t>get_be(p + 17, 4)):
                return None
            if low & 0x07:  # compressed: verify.py decompresses and checks the records (one C walk of them)
                if _py_records_error is None:
                    from sparklog.records.verify import records_error as _py_records_error
                if _py_records_error(memoryview(records)[position:position + size]) is not None:
                    return None
            elif not records_fill(p + CHECK_HEADER, size - CHECK_HEADER, count):
                return None
            entries.append((position, size, <int64_t>delta + 1, <int64_t>get_be(p + 35, 8), producer_id,
                            <int16_t><int64_t>get_be(p + 51, 2), sequence))
            offsets += <int64_t>delta + 1
            messages += count
            if producer_id >= 0:
                idempotent += 1
            position += size
        return entries, offsets, messages, idempotent
    finally:
        PyBuffer_Release(&view)


def stamp_leader_set(data, int64_t first_offset, int32_t leader_epoch, int64_t since, int64_t interval,
                     int64_t max_timestamp, int64_t offset_of_max):
    """append_check.stamp_leader_set (Rule 4): offsets and the leader's epoch (unless KEEP_EPOCH, INT32_MIN)
    stamped into a checked set's batches, and where a segment's indexes take entries, in one walk."""
    cdef Py_buffer view
    cdef uint8_t* p
    cdef Py_ssize_t position = 0, size, total
    cdef int64_t offset = first_offset, timestamp
    cdef int i
    PyObject_GetBuffer(data, &view, PyBUF_WRITABLE)
    try:
        total = view.len
        points = []
        while position + CHECK_HEADER <= total:
            p = <uint8_t*>view.buf + position
            size = <Py_ssize_t><int32_t><int64_t>get_be(p + 8, 4) + 12
            if size < CHECK_HEADER or size > total - position:
                raise ValueError(f"not a checked record set: batch length at byte {position}")
            for i in range(8):
                p[i] = <uint8_t>(<uint64_t>offset >> (56 - 8 * i))
            if leader_epoch != INT32_MIN:  # append_check.KEEP_EPOCH: the batch keeps its own
                for i in range(4):
                    p[12 + i] = <uint8_t>(<uint32_t>leader_epoch >> (24 - 8 * i))
            timestamp = <int64_t>get_be(p + 35, 8)
            if timestamp > max_timestamp:
                max_timestamp = timestamp
                offset_of_max = offset
            if since > interval:
                points.append((offset, position, max_timestamp, offset_of_max))
                since = 0
            since += size
            offset += <int64_t><int32_t><int64_t>get_be(p + 23, 4) + 1
            position += size
        if position != total:
            raise ValueError(f"not a checked record set: {total - position} trailing bytes")
        return offset, since, max_timestamp, offset_of_max, points
    finally:
        PyBuffer_Release(&view)
