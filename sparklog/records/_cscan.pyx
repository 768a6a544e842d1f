# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The log cleaner's per-batch work in C (Cython): one pass over a records section, then the kept records
copied out. records/scan.py is the pure-Python authority and its caller; the byte loops run without the GIL,
so appends and fetches keep running while a cleaner thread scans and copies. The pass is `_walk.pxd`'s
`scan_loop`, which records/sweep.py's kernel (`_csweep`) runs per batch too.
"""

import array as _array

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *

def scan_section(const uint8_t[::1] section, int64_t base_offset, int64_t base_ts, object log_append_time,
                 Py_ssize_t count):
    """(digests, offsets, timestamps, flags, ends) of the `count` records filling `section` exactly, as
    arrays (scan.scan_section), or None to defer to Python (malformed, or past what C takes)."""
    cdef Py_ssize_t end = section.shape[0]
    cdef bint create_time = log_append_time is None
    cdef int64_t append_ts = 0 if create_time else log_append_time
    cdef bint ok
    if count <= 0 or count > end // MIN_RECORD_BYTES:
        return None
    digests, offsets, timestamps, ends = (_array.array("q", bytes(8 * count)) for _ in range(4))
    flags = _array.array("B", bytes(count))
    cdef int64_t[::1] d = digests, o = offsets, t = timestamps, e = ends
    cdef uint8_t[::1] f = flags
    with nogil:
        ok = scan_loop(&section[0], end, base_offset, base_ts, create_time, append_ts, count, &d[0], &o[0], &t[0],
                       &f[0], &e[0])
    return (digests, offsets, timestamps, flags, ends) if ok else None


def join_kept(const uint8_t[::1] section, const int64_t[::1] ends, const uint8_t[::1] keep):
    """The bytes of the records whose `keep` is set, in order (scan.join_kept); scan.py Rule 3's refusals."""
    cdef Py_ssize_t index, start = 0, total = 0, count = ends.shape[0], size = section.shape[0]
    if keep.shape[0] != count:
        raise ValueError(f"join_kept: {keep.shape[0]} keep bytes for {count} records")
    for index in range(count):
        if not start <= ends[index] <= size:
            raise ValueError(f"join_kept: a record ends at {ends[index]}, outside {start}..{size}")
        if keep[index]:
            total += ends[index] - start
        start = ends[index]
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* into = <uint8_t*>PyBytes_AS_STRING(out)
    with nogil:
        start = 0
        for index in range(count):
            if keep[index]:
                memcpy(into, &section[start], ends[index] - start)
                into += ends[index] - start
            start = ends[index]
    return out
