# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Whether a client's batch's records parse, in C (Cython): records/verify.py is the pure-Python authority
and the caller (`plain_records_ok`, `section_records_ok`); the walk is `_walk.pxd`'s `records_fill`.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *

def plain_records_ok(batch):
    """True when `batch` (any contiguous buffer) is one whole uncompressed v2 batch whose records pass
    verify.py Rule 1 (its CRC is not checked); False defers to verify.py, which decides (a compressed batch,
    or anything wrong). Called once per produced batch: the buffer is taken with PyObject_GetBuffer, a
    fraction of a typed memoryview's cost."""
    cdef Py_buffer view
    cdef const uint8_t* head
    cdef Py_ssize_t size
    cdef int32_t count
    cdef bint ok = False
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        size = view.len
        head = <const uint8_t*>view.buf
        if size >= HEADER_SIZE + MIN_RECORD_BYTES:
            count = get_i32(head + RECORD_COUNT_OFFSET)
            ok = (head[MAGIC_OFFSET] == MAGIC and <int64_t>get_i32(head + LENGTH_OFFSET) + LOG_OVERHEAD == size
                  and not head[ATTRIBUTES_OFFSET + 1] & COMPRESSION_BITS and count > 0
                  and get_i32(head + LAST_OFFSET_DELTA_OFFSET) == count - 1
                  and records_fill(head + HEADER_SIZE, size - HEADER_SIZE, count))
    finally:
        PyBuffer_Release(&view)
    return ok


def section_records_ok(const uint8_t[::1] section, Py_ssize_t count):
    """True when the decompressed `section` holds `count` records that pass verify.py Rule 1; False defers."""
    if count <= 0 or section.shape[0] < MIN_RECORD_BYTES:
        return False
    return records_fill(&section[0], section.shape[0], count)
