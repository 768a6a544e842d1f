# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The broker's per-read Produce work in C (Cython): the compiled twin of `sparklog.protocol.produce_run`.

    scan_produce_run(view, start, limit, max_frame_bytes) -> ([SinglePartitionProduce], position after them)
    encode_produce_replies(requests, base_offsets, log_append_time_ms, log_start_offset) -> bytes

Rule 1: the output is the pure-Python twin's (produce_run.py), value for value and byte for byte: the same
        frames taken, the same fields decoded (`produce.decode_single_partition` is the authority), the same
        reply bytes (`produce.encode_single_partition_response`). The property tests in
        tests/unit/protocol/test_produce_run.py hold both twins to that.
Rule 2: sans-IO and bounded: it reads only `view`, within its length (every read checked against the frame's
        end before it happens; an unsigned varint at most 5 bytes, as types.read_uvarint); it allocates the
        result lists, one namedtuple per frame taken and one memoryview slice per frame and per record set
        (views of `view`, no copy), and for the replies exactly their size.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL
    object PyType_GenericAlloc(object type, Py_ssize_t nitems)  # tuple_subtype_new's allocation

cdef enum:
    PRODUCE = 0
    MIN_VERSION = 3
    FIRST_FLEXIBLE_VERSION = 9  # compact strings and arrays, tag counts (KIP-482)
    MAX_VERSION = 11
    REQUEST_PREFIX = 10  # api_key, api_version, correlation_id, client_id length
    RESPONSE_PREFIX = 14  # size, correlation_id, responses count, topic name length
    FLEXIBLE_RESPONSE_PREFIX = 10  # size, correlation_id, header tags, responses' compact count; the name follows
    FLEXIBLE_RESPONSE_TAIL = 40  # produce._FLEXIBLE_RESPONSE_TAIL
    NO_TAGS = 3  # after the records of a flexible request: the partition's, the topic's and the body's tag counts

cdef object _cls = None  # produce.SinglePartitionProduce, set by bind()
cdef object _topic = None  # the last topic decoded: a pipelined run names the same topic, decoded once


def bind(cls):
    """Install the namedtuple the scan builds (produce.SinglePartitionProduce: imported there, not here)."""
    global _cls
    _cls = cls


cdef inline int32_t _i32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int16_t _i16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | <uint16_t>p[1])


cdef inline void _put32(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>(u >> 24)
    p[1] = <uint8_t>(u >> 16)
    p[2] = <uint8_t>(u >> 8)
    p[3] = <uint8_t>u


cdef inline void _put64(uint8_t* p, int64_t v) noexcept nogil:
    _put32(p, <int64_t>(<uint64_t>v >> 32))
    _put32(p + 4, v)


cdef inline Py_ssize_t _uvarint(const uint8_t* b, Py_ssize_t pos, Py_ssize_t end, uint64_t* value) noexcept nogil:
    """The unsigned varint at b[pos:end] into `value`: the position after it, or -1 when it is cut short or longer
    than 5 bytes (types.read_uvarint raises then)."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if pos >= end:
            return -1
        byte = b[pos]
        pos += 1
        v |= <uint64_t>(byte & 0x7F) << shift
        if byte < 0x80:
            value[0] = v
            return pos
        shift += 7
        if shift > 28:
            return -1


cdef inline Py_ssize_t _uvarint_size(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint8_t* _put_uvarint(uint8_t* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        p += 1
    p[0] = <uint8_t>v
    return p + 1


cdef bint _utf8(const uint8_t* p, Py_ssize_t n):
    """Whether the strict UTF-8 decoder takes these bytes (ASCII without a call)."""
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            break
    else:
        return True
    try:
        PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return False
    return True


cdef object _decode(object view, const uint8_t* b, Py_ssize_t f, Py_ssize_t end):
    """produce.decode_single_partition of the frame body b[f:end], with positions in `view`; None if not."""
    cdef Py_ssize_t pos, n
    cdef int16_t version, acks
    cdef int32_t correlation_id, timeout_ms, topics, partitions, index, size
    if end - f < REQUEST_PREFIX or _i16(b + f) != PRODUCE:
        return None
    version = _i16(b + f + 2)
    if version < MIN_VERSION or version > MAX_VERSION:
        return None
    correlation_id = _i32(b + f + 4)
    n = _i16(b + f + 8)  # client_id
    pos = f + REQUEST_PREFIX
    if version >= FIRST_FLEXIBLE_VERSION:
        return _decode_flexible(view, b, f, end, version, correlation_id, n)
    if n > 0:
        if pos + n > end or not _utf8(b + pos, n):
            return None
        pos += n
    if pos + 2 > end:
        return None
    n = _i16(b + pos)  # transactional_id
    pos += 2
    if n > 0:
        if pos + n > end or not _utf8(b + pos, n):
            return None
        pos += n
    if pos + 12 > end:
        return None
    acks = _i16(b + pos)
    timeout_ms = _i32(b + pos + 2)
    topics = _i32(b + pos + 6)
    n = _i16(b + pos + 10)
    pos += 12
    if topics != 1 or n < 0 or pos + n > end:
        return None
    topic = _topic_of(b + pos, n)
    if topic is None:
        return None
    pos += n
    if pos + 12 > end:
        return None
    partitions = _i32(b + pos)
    index = _i32(b + pos + 4)
    size = _i32(b + pos + 8)
    pos += 12
    if partitions != 1 or size < 0 or pos + size > end:
        return None
    return _request((version, correlation_id, acks, timeout_ms, topic, index, view[pos:pos + size], view[f:end]))


cdef object _decode_flexible(object view, const uint8_t* b, Py_ssize_t f, Py_ssize_t end, int16_t version,
                            int32_t correlation_id, Py_ssize_t n):
    """_decode of v9+, from the client_id's length `n` on (produce._decode_flexible)."""
    cdef Py_ssize_t pos = f + REQUEST_PREFIX
    cdef uint64_t length
    cdef int16_t acks
    cdef int32_t timeout_ms, index
    if n > 0:
        if n > end - pos or not _utf8(b + pos, n):
            return None
        pos += n
    if pos >= end or b[pos] != 0:  # the header's tagged fields
        return None
    pos = _uvarint(b, pos + 1, end, &length)  # transactional_id: 0 null
    if pos < 0 or (length > 0 and length - 1 > <uint64_t>(end - pos)):
        return None
    if length > 1:
        if not _utf8(b + pos, <Py_ssize_t>length - 1):
            return None
        pos += <Py_ssize_t>length - 1
    if end - pos < 7:
        return None
    acks = _i16(b + pos)
    timeout_ms = _i32(b + pos + 2)
    if b[pos + 6] != 2:  # one topic
        return None
    pos = _uvarint(b, pos + 7, end, &length)  # the name: 0 null, refused by the general path
    if pos < 0 or length < 1 or length - 1 > <uint64_t>(end - pos):
        return None
    topic = _topic_of(b + pos, <Py_ssize_t>length - 1)
    if topic is None:
        return None
    pos += <Py_ssize_t>length - 1
    if end - pos < 5 or b[pos] != 2:  # one partition
        return None
    index = _i32(b + pos + 1)
    pos = _uvarint(b, pos + 5, end, &length)  # the records: 0 null
    if pos < 0 or length < 1 or length - 1 + NO_TAGS > <uint64_t>(end - pos):
        return None
    n = <Py_ssize_t>length - 1
    if b[pos + n] != 0 or b[pos + n + 1] != 0 or b[pos + n + 2] != 0:
        return None
    return _request((version, correlation_id, acks, timeout_ms, topic, index, view[pos:pos + n], view[f:end]))


cdef object _topic_of(const uint8_t* p, Py_ssize_t n):
    """The topic name's str (the last one again when the bytes are its UTF-8), or None if not UTF-8."""
    global _topic
    cdef Py_ssize_t size
    cdef const char* last
    if _topic is not None:
        last = PyUnicode_AsUTF8AndSize(_topic, &size)
        if size == n and memcmp(last, p, n) == 0:
            return _topic
    try:
        topic = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return None
    _topic = topic
    return topic


cdef object _request(tuple fields):
    """SinglePartitionProduce(*fields), allocated as tuple.__new__ allocates a subclass's instance."""
    cdef Py_ssize_t k
    request = PyType_GenericAlloc(_cls, 8)
    for k in range(8):
        value = <object>PyTuple_GET_ITEM(fields, k)
        Py_INCREF(value)
        PyTuple_SET_ITEM(request, k, value)
    return request


cdef inline object _field(object request, Py_ssize_t k):
    """request[k]: straight from the tuple when it is one (SinglePartitionProduce is)."""
    if PyTuple_Check(request) and k < PyTuple_GET_SIZE(request):
        return <object>PyTuple_GET_ITEM(request, k)
    return request[k]


def scan_produce_run(view, Py_ssize_t start, Py_ssize_t limit, Py_ssize_t max_frame_bytes):
    """The one-partition Produce requests framed one behind the other in `view` from `start` (see the twin)."""
    cdef Py_buffer buffer
    cdef const uint8_t* b
    cdef Py_ssize_t pos = start, end, taken = 0
    cdef int32_t size
    requests = []
    PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
    try:
        b = <const uint8_t*>buffer.buf
        end = buffer.len
        while taken < limit and pos >= 0 and end - pos >= 4:
            size = _i32(b + pos)
            if size < 0 or size > max_frame_bytes or end - pos - 4 < size:
                break
            request = _decode(view, b, pos + 4, pos + 4 + size)
            if request is None:
                break
            requests.append(request)
            taken += 1
            pos += 4 + size
    finally:
        PyBuffer_Release(&buffer)
    return requests, pos


cdef Py_ssize_t _reply_size(int version, Py_ssize_t name_size) noexcept:
    """The bytes of one reply, size prefix included."""
    if version >= FIRST_FLEXIBLE_VERSION:
        return FLEXIBLE_RESPONSE_PREFIX + _uvarint_size(name_size + 1) + name_size + FLEXIBLE_RESPONSE_TAIL
    return RESPONSE_PREFIX + name_size + _tail_size(version)


cdef Py_ssize_t _tail_size(int version) noexcept:
    """Bytes after the topic name: partition count, index, error_code, base_offset, log_append_time_ms,
    (v5+) log_start_offset, (v8) record_errors count and error_message, throttle_time_ms."""
    if version < 5:
        return 4 + 4 + 2 + 8 + 8 + 4
    if version < 8:
        return 4 + 4 + 2 + 8 + 8 + 8 + 4
    return 4 + 4 + 2 + 8 + 8 + 8 + 4 + 2 + 4


def encode_produce_replies(list requests, list base_offsets, int64_t log_append_time_ms, int64_t log_start_offset):
    """The replies of successful appends, one after the other in one buffer (see the twin)."""
    cdef Py_ssize_t count = PyList_GET_SIZE(requests), i, total = 0, name_size, tail
    cdef const char* name
    cdef uint8_t* p
    cdef int version
    if PyList_GET_SIZE(base_offsets) != count:
        raise ValueError("one base offset per request")
    for i in range(count):
        request = <object>PyList_GET_ITEM(requests, i)
        PyUnicode_AsUTF8AndSize(_field(request, 4), &name_size)
        version = _field(request, 0)
        if version < MIN_VERSION or version > MAX_VERSION:
            raise ValueError(f"Produce v{version} is not served")
        total += _reply_size(version, name_size)
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(count):
        request = <object>PyList_GET_ITEM(requests, i)
        name = PyUnicode_AsUTF8AndSize(_field(request, 4), &name_size)
        version = _field(request, 0)
        if version >= FIRST_FLEXIBLE_VERSION:
            p = _put_flexible_reply(p, name, name_size, _field(request, 1), _field(request, 5),
                                    PyLong_AsLongLong(<object>PyList_GET_ITEM(base_offsets, i)), log_append_time_ms,
                                    log_start_offset)
            continue
        tail = _tail_size(version)
        _put32(p, RESPONSE_PREFIX - 4 + name_size + tail)
        _put32(p + 4, <int32_t>_field(request, 1))
        _put32(p + 8, 1)
        p[12] = <uint8_t>(name_size >> 8)
        p[13] = <uint8_t>name_size
        memcpy(p + RESPONSE_PREFIX, name, name_size)
        p += RESPONSE_PREFIX + name_size
        _put32(p, 1)
        _put32(p + 4, <int32_t>_field(request, 5))
        p[8] = 0
        p[9] = 0
        _put64(p + 10, PyLong_AsLongLong(<object>PyList_GET_ITEM(base_offsets, i)))
        _put64(p + 18, log_append_time_ms)
        p += 26
        if version >= 5:
            _put64(p, log_start_offset)
            p += 8
        if version == 8:
            _put32(p, 0)
            p[4] = 0xFF
            p[5] = 0xFF
            p += 6
        _put32(p, 0)
        p += 4
    return out


cdef uint8_t* _put_flexible_reply(uint8_t* p, const char* name, Py_ssize_t name_size, int32_t correlation_id,
                                  int32_t index, int64_t base_offset, int64_t log_append_time_ms,
                                  int64_t log_start_offset) noexcept:
    """One v9+ reply at p (produce._flexible_response's bytes): the position after it."""
    _put32(p, _reply_size(FIRST_FLEXIBLE_VERSION, name_size) - 4)
    _put32(p + 4, correlation_id)
    p[8] = 0  # header tags
    p[9] = 2  # one topic
    p = _put_uvarint(p + FLEXIBLE_RESPONSE_PREFIX, name_size + 1)
    memcpy(p, name, name_size)
    p += name_size
    p[0] = 2  # one partition
    _put32(p + 1, index)
    p[5] = 0  # error_code
    p[6] = 0
    _put64(p + 7, base_offset)
    _put64(p + 15, log_append_time_ms)
    _put64(p + 23, log_start_offset)
    p[31] = 1  # no record errors
    p[32] = 0  # error_message null
    p[33] = 0  # the partition's tags
    p[34] = 0  # the topic's tags
    _put32(p + 35, 0)  # throttle_time_ms
    p[39] = 0  # the body's tags
    return p + FLEXIBLE_RESPONSE_TAIL
