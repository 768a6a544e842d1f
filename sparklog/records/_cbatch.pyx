# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The RecordBatch v2 hot loops in C (Cython): a records section built, one decoded into columns, varints.

The compiled twin of five functions of `sparklog.records.batch` (see its docstring for the format), which
`sparklog.records.implementation` installs in their place:

    encode_varint(value)            -> bytes
    decode_varint(buffer, position) -> (value, position after it)
    encode_records(records, now_ms) -> ([section], count, base timestamp, max timestamp)
    decode_columns(buffer, batch)   -> RecordColumns
    build_batch(records, ...)       -> bytes: the header, the records and the CRC-32C in one buffer

and of the per-section loops of records/scan.py (`scan_section`, `join_kept`: the log cleaner) and
records/buffers.py (`decode_buffers`: a section into Arrow's layout, for the Spark source).

Rule 1: the output is the pure-Python function's, byte for byte and value for value, and so are its errors.
Rule 2: the fast path takes only what fits C: exact `bytes`, ints within int64, `str` header keys, lists
        and tuples, header fields within their int16/int32/int64. Anything else, and every malformed input,
        goes whole to the pure-Python function (`bind()` hands them over), which decides: its error messages
        have one author, and a value past int64 (a 10-byte varint, an overflowing sum) comes out as the same
        Python int.
Rule 3: memory is bounded by the input: lists are sized by a record count only after checking the section
        can hold that many records, and the output buffer grows with what is written.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.buffer cimport PyBUF_READ
from cpython.long cimport PyLong_CheckExact, PyLong_FromLongLong
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.stdint cimport INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

import array as _array

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

cdef enum:
    # The shortest valid record: length, attributes, timestampDelta, offsetDelta, key, value, headersCount.
    MIN_RECORD_BYTES = 7
    # A header takes at least a key length and a value length.
    MIN_HEADER_BYTES = 2
    # A varint the fast path decodes: 9 groups of 7 bits hold any zig-zagged int63; a 10th goes to Python.
    FAST_VARINT_BYTES = 9
    MAX_VARINT_BYTES = 10
    NULL_LENGTH = -1
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_MASK = 0x10
    CONTROL_MASK = 0x20
    MAGIC = 2
    # The v2 header (batch.HEADER): its size, where the CRC-32C sits and where the range it covers starts.
    HEADER_SIZE = 61
    CRC_OFFSET = 17
    ATTRIBUTES_OFFSET = 21
    LOG_OVERHEAD = 12
    # The output buffer's first size; it doubles as needed.
    INITIAL_CAPACITY = 4096

# The pure-Python functions, the authority this module defers to (Rule 2), the result type, and the
# Python functions build_batch shares with batch.py: the codec lookup, compression, CRC-32C and the clock.
cdef object _py_encode_varint = None
cdef object _py_decode_varint = None
cdef object _py_encode_records = None
cdef object _py_decode_columns = None
cdef object _py_build_batch = None
cdef object _RecordColumns = None
cdef object _codec_id = None
cdef object _compress = None
cdef object _crc32c = None
cdef object _time_ns = None
cdef tuple _EMPTY = ()


def bind(pure, record_columns, codec_id, compress, crc32c, time_ns):
    """Hand over the pure-Python codec (`implementation.Codec`) every input the fast path does not take goes
    to, and what build_batch shares with it."""
    global _py_encode_varint, _py_decode_varint, _py_encode_records, _py_decode_columns, _py_build_batch
    global _RecordColumns, _codec_id, _compress, _crc32c, _time_ns
    _py_encode_varint, _py_decode_varint = pure.encode_varint, pure.decode_varint
    _py_encode_records, _py_decode_columns, _py_build_batch = pure.encode_records, pure.decode_columns, pure.build_batch
    _RecordColumns, _codec_id, _compress, _crc32c, _time_ns = record_columns, codec_id, compress, crc32c, time_ns


# -- varints ------------------------------------------------------------------------------------------------


cdef inline Py_ssize_t read_varint(const uint8_t* data, Py_ssize_t position, Py_ssize_t end,
                                   int64_t* out) noexcept nogil:
    """The zig-zag varint at `position`: the position after it, or -1 when it runs past `end` or is longer
    than FAST_VARINT_BYTES (the caller then defers to Python)."""
    cdef uint64_t result = 0
    cdef uint8_t byte
    cdef int shift = 0
    while position < end and shift < 7 * FAST_VARINT_BYTES:
        byte = data[position]
        position += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = <int64_t>((result >> 1) ^ (-(result & 1)))
            return position
        shift += 7
    return -1


cdef inline int varint_size(int64_t value) noexcept nogil:
    cdef uint64_t zigzag = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


cdef inline uint8_t* write_varint(uint8_t* out, int64_t value) noexcept nogil:
    cdef uint64_t zigzag = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while zigzag >= 0x80:
        out[0] = <uint8_t>((zigzag & 0x7F) | 0x80)
        out += 1
        zigzag >>= 7
    out[0] = <uint8_t>zigzag
    return out + 1


cdef inline bint checked_add(int64_t a, int64_t b, int64_t* out) noexcept nogil:
    """a + b into `out`; False when the sum leaves int64 (Python would make a bigger int)."""
    if (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b):
        return False
    out[0] = a + b
    return True


cdef inline bint checked_sub(int64_t a, int64_t b, int64_t* out) noexcept nogil:
    """a - b into `out`; False when the difference leaves int64."""
    if (b < 0 and a > INT64_MAX + b) or (b > 0 and a < INT64_MIN + b):
        return False
    out[0] = a - b
    return True


cdef inline bint as_int64(object value, int64_t* out):
    """An exact int within int64 into `out`; False for anything else."""
    cdef int overflow = 0
    if not PyLong_CheckExact(value):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


def encode_varint(value):
    """Zig-zag varint/varlong of any int64 (`batch.encode_varint`)."""
    cdef int64_t number = 0
    cdef uint8_t out[MAX_VARINT_BYTES]
    if not as_int64(value, &number):
        return _py_encode_varint(value)
    return PyBytes_FromStringAndSize(<char*>out, write_varint(out, number) - out)


def decode_varint(buffer, position):
    """Zig-zag varint/varlong at `position`: (value, position after it) (`batch.decode_varint`)."""
    cdef int64_t start = 0, value = 0
    cdef Py_ssize_t after
    if PyBytes_CheckExact(buffer) and as_int64(position, &start) and 0 <= start:
        after = read_varint(<const uint8_t*>PyBytes_AS_STRING(buffer), <Py_ssize_t>start,
                            PyBytes_GET_SIZE(buffer), &value)
        if after >= 0:
            return value, after
    return _py_decode_varint(buffer, position)


# -- building a records section -----------------------------------------------------------------------------


cdef struct Output:
    uint8_t* data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int reserve(Output* out, Py_ssize_t more) except -1:
    cdef Py_ssize_t capacity = out.capacity
    cdef uint8_t* grown
    if out.size + more <= capacity:
        return 0
    while capacity < out.size + more:
        capacity *= 2
    grown = <uint8_t*>realloc(out.data, capacity)
    if grown == NULL:
        raise MemoryError()
    out.data, out.capacity = grown, capacity
    return 0


cdef inline Py_ssize_t nullable_size(object field) noexcept:
    """Bytes of a nullable length-prefixed field (an exact bytes or None); -1 if neither."""
    cdef Py_ssize_t size
    if field is None:
        return 1
    if not PyBytes_CheckExact(field):
        return -1
    size = PyBytes_GET_SIZE(field)
    return varint_size(size) + size


cdef inline uint8_t* write_nullable(uint8_t* out, object field) noexcept:
    cdef Py_ssize_t size
    if field is None:
        return write_varint(out, NULL_LENGTH)
    size = PyBytes_GET_SIZE(field)
    out = write_varint(out, size)
    memcpy(out, PyBytes_AS_STRING(field), size)
    return out + size


cdef Py_ssize_t headers_size(object headers) except -2:
    """Bytes of headersCount and the headers, or -1 if they are not a list/tuple of (str, bytes | None)."""
    cdef Py_ssize_t count, index, size, key_size, value_size
    cdef object header
    if headers is None:
        return 1
    if not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
        return -1
    count = len(headers)
    size = varint_size(count)
    for index in range(count):
        header = headers[index]
        if not PyTuple_CheckExact(header) or PyTuple_GET_SIZE(header) != 2:
            return -1
        key = <object>PyTuple_GET_ITEM(header, 0)
        if not PyUnicode_CheckExact(key):
            return -1
        try:
            PyUnicode_AsUTF8AndSize(key, &key_size)
        except UnicodeEncodeError:  # a lone surrogate: Python raises it, with its own message
            return -1
        value_size = nullable_size(<object>PyTuple_GET_ITEM(header, 1))
        if value_size < 0:
            return -1
        size += varint_size(key_size) + key_size + value_size
    return size


cdef uint8_t* write_headers(uint8_t* out, object headers) except NULL:
    """Write what `headers_size` accepted."""
    cdef Py_ssize_t count, index, key_size
    cdef const char* key
    if headers is None:
        return write_varint(out, 0)
    count = len(headers)
    out = write_varint(out, count)
    for index in range(count):
        header = headers[index]
        key = PyUnicode_AsUTF8AndSize(<object>PyTuple_GET_ITEM(header, 0), &key_size)
        out = write_varint(out, key_size)
        memcpy(out, key, key_size)
        out = write_nullable(out + key_size, <object>PyTuple_GET_ITEM(header, 1))
    return out


cdef object build_section(list records, int64_t now_ms, Output* out):
    """The records section into `out`: (count, base, max timestamp), or None to defer to Python."""
    cdef Py_ssize_t count = PyList_GET_SIZE(records), index, key_size, value_size, header_size, size
    cdef int64_t timestamp = 0, base_ts = 0, max_ts = 0, delta = 0
    cdef uint8_t* position
    for index in range(count):
        record = <object>PyList_GET_ITEM(records, index)
        if PyTuple_CheckExact(record):
            if PyTuple_GET_SIZE(record) != 4:
                return None
            key = <object>PyTuple_GET_ITEM(record, 0)
            value = <object>PyTuple_GET_ITEM(record, 1)
            headers = <object>PyTuple_GET_ITEM(record, 2)
            stamp = <object>PyTuple_GET_ITEM(record, 3)
        else:
            key, value, headers, stamp = record.key, record.value, record.headers, record.timestamp
        if stamp is None:
            timestamp = now_ms
        elif not as_int64(stamp, &timestamp):
            return None
        if index == 0:
            base_ts = max_ts = timestamp
        elif timestamp > max_ts:
            max_ts = timestamp
        if not checked_sub(timestamp, base_ts, &delta):  # Python raises: not a varlong
            return None
        key_size = nullable_size(key)
        value_size = nullable_size(value)
        if key_size < 0 or value_size < 0:
            return None
        if not headers:
            headers = None
        header_size = headers_size(headers)
        if header_size < 0:
            return None
        size = 1 + varint_size(delta) + varint_size(index) + key_size + value_size + header_size
        reserve(out, varint_size(size) + size)
        position = write_varint(out.data + out.size, size)
        position[0] = 0  # record attributes, unused
        position = write_varint(position + 1, delta)
        position = write_varint(position, index)
        position = write_nullable(position, key)
        position = write_nullable(position, value)
        position = write_headers(position, headers)
        out.size = position - out.data
    return count, base_ts, max_ts


cdef int open_output(Output* out, Py_ssize_t headroom) except -1:
    out.data = <uint8_t*>malloc(INITIAL_CAPACITY)
    if out.data == NULL:
        raise MemoryError()
    out.size, out.capacity = headroom, INITIAL_CAPACITY
    return 0


def encode_records(records, now_ms):
    """The records section as one part: ([section], count, base timestamp, max timestamp)
    (`batch._encode_records`)."""
    cdef Output out
    cdef int64_t now
    records = list(records)  # private: a record's properties, run in the loop, cannot change it under us
    if not records or not as_int64(now_ms, &now):
        return _py_encode_records(records, now_ms)
    open_output(&out, 0)
    try:
        built = build_section(records, now, &out)
        if built is None:
            return _py_encode_records(records, now_ms)
        count, base_ts, max_ts = built
        return [PyBytes_FromStringAndSize(<char*>out.data, out.size)], count, base_ts, max_ts
    finally:
        free(out.data)


cdef inline uint8_t* put(uint8_t* out, uint64_t value, int size) noexcept nogil:
    """`size` bytes of `value`, big-endian."""
    cdef int index
    for index in range(size):
        out[index] = <uint8_t>(value >> (8 * (size - 1 - index)))
    return out + size


cdef inline bint within(object value, int64_t low, int64_t high, int64_t* out):
    return as_int64(value, out) and low <= out[0] <= high


def build_batch(records, compression="none", base_offset=0, timestamp_type=0, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, partition_leader_epoch=-1, is_transactional=False, is_control=False):
    """One v2 batch holding `records` (`batch.build_batch`, whose signature this one repeats)."""
    cdef Output out
    cdef int64_t codec, offset, pid, epoch, sequence, leader_epoch, stamp_type, count, base_ts, max_ts
    cdef int attributes
    cdef uint8_t* head
    cdef bytes compressed
    codec = _codec_id(compression)
    records = list(records)  # private: a record's properties, run in the loop, cannot change it under us
    if not (records and within(timestamp_type, 0, 1, &stamp_type) and within(base_offset, INT64_MIN, INT64_MAX, &offset)
            and within(producer_id, INT64_MIN, INT64_MAX, &pid) and within(producer_epoch, INT16_MIN, INT16_MAX, &epoch)
            and within(base_sequence, INT32_MIN, INT32_MAX, &sequence)
            and within(partition_leader_epoch, INT32_MIN, INT32_MAX, &leader_epoch)
            and len(records) <= INT32_MAX):
        return _py_build_batch(records, compression, base_offset, timestamp_type, producer_id, producer_epoch,
                               base_sequence, partition_leader_epoch, is_transactional, is_control)
    open_output(&out, HEADER_SIZE)
    try:
        built = build_section(records, _time_ns() // 1_000_000, &out)
        if built is None:
            return _py_build_batch(records, compression, base_offset, timestamp_type, producer_id, producer_epoch,
                                   base_sequence, partition_leader_epoch, is_transactional, is_control)
        count, base_ts, max_ts = built
        if codec:
            compressed = bytes(_compress(codec, PyMemoryView_FromMemory(<char*>out.data + HEADER_SIZE,
                                                                        out.size - HEADER_SIZE, PyBUF_READ)))
            out.size = HEADER_SIZE
            reserve(&out, len(compressed))
            memcpy(out.data + HEADER_SIZE, <const char*>compressed, len(compressed))
            out.size += len(compressed)
        attributes = codec | (TIMESTAMP_TYPE_MASK if stamp_type else 0)
        attributes |= (TRANSACTIONAL_MASK if is_transactional else 0) | (CONTROL_MASK if is_control else 0)
        head = put(out.data, offset, 8)
        head = put(head, out.size - LOG_OVERHEAD, 4)
        head = put(head, leader_epoch, 4)
        head = put(head, MAGIC, 1) + 4  # the CRC goes there once the rest is written
        head = put(head, attributes, 2)
        head = put(head, count - 1, 4)
        head = put(head, base_ts, 8)
        head = put(head, max_ts, 8)
        head = put(head, pid, 8)
        head = put(head, epoch, 2)
        head = put(head, sequence, 4)
        put(head, count, 4)
        crc = _crc32c(PyMemoryView_FromMemory(<char*>out.data + ATTRIBUTES_OFFSET, out.size - ATTRIBUTES_OFFSET,
                                              PyBUF_READ))
        put(out.data + CRC_OFFSET, crc, 4)
        return PyBytes_FromStringAndSize(<char*>out.data, out.size)
    finally:
        free(out.data)


# -- decoding a records section into columns ----------------------------------------------------------------


cdef inline object read_nullable(const uint8_t* data, Py_ssize_t* position, Py_ssize_t end):
    """The nullable length-prefixed field at `position[0]` (a new bytes or None), moving `position[0]`
    past it; -1 there when it does not fit before `end`."""
    cdef int64_t size
    cdef Py_ssize_t start = read_varint(data, position[0], end, &size)
    if start < 0 or size > end - start:
        position[0] = -1
        return None
    if size < 0:  # -1 is null, and so, as in Python, is any other negative length
        position[0] = start
        return None
    position[0] = start + size
    return PyBytes_FromStringAndSize(<const char*>data + start, size)


cdef inline void set_item(list items, Py_ssize_t index, object item) noexcept:
    Py_INCREF(item)
    PyList_SET_ITEM(items, index, item)


cdef object read_headers(const uint8_t* data, Py_ssize_t* position, Py_ssize_t end):
    """headersCount and the headers at `position[0]` as a tuple of (str, bytes | None), moving
    `position[0]` past them; -1 there when they are malformed or do not fit before `end`."""
    cdef int64_t count, key_size
    cdef Py_ssize_t index, start = read_varint(data, position[0], end, &count)
    if start < 0 or count < 0 or count > (end - start) // MIN_HEADER_BYTES:
        position[0] = -1
        return None
    position[0] = start
    if count == 0:
        return _EMPTY
    headers = PyTuple_New(count)
    for index in range(count):
        start = read_varint(data, position[0], end, &key_size)
        if start < 0 or key_size < 0 or key_size > end - start:
            position[0] = -1
            return None
        # Java decodes header keys leniently (invalid UTF-8 becomes U+FFFD); so does batch.py.
        key = PyUnicode_DecodeUTF8(<const char*>data + start, key_size, "replace")
        position[0] = start + key_size
        value = read_nullable(data, position, end)
        if position[0] < 0:
            return None
        header = (key, value)
        Py_INCREF(header)
        PyTuple_SET_ITEM(headers, index, header)
    return headers


cdef object decode_section(bytes buffer, int64_t base_offset, int64_t base_ts, Py_ssize_t count,
                           object log_append_time):
    """The five columns of `count` records filling `buffer` exactly, or None to defer to Python.

    `log_append_time` is None for CreateTime, else the batch's maxTimestamp, which every record gets."""
    cdef const uint8_t* data = <const uint8_t*>PyBytes_AS_STRING(buffer)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(buffer), position = 0, record_end, index
    cdef int64_t length, delta, offset, timestamp = 0
    cdef bint create_time = log_append_time is None
    if count < 0 or count > end // MIN_RECORD_BYTES:
        return None
    offsets, timestamps, keys, values, header_column = (
        PyList_New(count), PyList_New(count), PyList_New(count), PyList_New(count), PyList_New(count)
    )
    for index in range(count):
        position = read_varint(data, position, end, &length)
        if position < 0 or length < 0 or length > end - position:
            return None
        record_end = position + length
        position = read_varint(data, position + 1, record_end, &delta)  # after the attributes byte
        if position < 0 or (create_time and not checked_add(base_ts, delta, &timestamp)):
            return None
        position = read_varint(data, position, record_end, &delta)
        if position < 0 or not checked_add(base_offset, delta, &offset):
            return None
        key = read_nullable(data, &position, record_end)
        if position < 0:
            return None
        value = read_nullable(data, &position, record_end)
        if position < 0:
            return None
        headers = read_headers(data, &position, record_end)
        if position != record_end:
            return None
        set_item(offsets, index, PyLong_FromLongLong(offset))
        set_item(timestamps, index, PyLong_FromLongLong(timestamp) if create_time else log_append_time)
        set_item(keys, index, key)
        set_item(values, index, value)
        set_item(header_column, index, headers)
    if position != end:
        return None
    return _RecordColumns(offsets, timestamps, keys, values, header_column)


def decode_columns(buffer, batch):
    """Decode `batch.record_count` records filling `buffer` exactly into five lists
    (`batch._decode_columns`)."""
    columns = None
    if PyBytes_CheckExact(buffer):
        log_append_time = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
        columns = decode_section(buffer, batch.base_offset, batch.base_timestamp, batch.record_count,
                                 log_append_time)
    return _py_decode_columns(buffer, batch) if columns is None else columns


# -- the log cleaner's per-batch work: one pass over a section, then the kept records copied out --------------
# (sparklog/records/scan.py is the pure-Python authority; the byte loops below run without the GIL, so
# appends and fetches keep running while a cleaner thread scans and copies.)

cdef extern from "Python.h":
    Py_ssize_t _Py_HashBytes(const void* data, Py_ssize_t size) nogil  # hash(bytes) without the object

cdef enum:
    NULL_KEY = 1  # scan.NULL_KEY
    NULL_VALUE = 2  # scan.NULL_VALUE


cdef inline Py_ssize_t skip_nullable(const uint8_t* data, Py_ssize_t position, Py_ssize_t end,
                                     bint* null) noexcept nogil:
    """The position after the nullable field at `position` (-1: it does not fit before `end`)."""
    cdef int64_t size
    cdef Py_ssize_t start = read_varint(data, position, end, &size)
    if start < 0 or size > end - start:
        return -1
    null[0] = size < 0
    return start if size < 0 else start + size


cdef inline Py_ssize_t skip_headers(const uint8_t* data, Py_ssize_t position, Py_ssize_t end) noexcept nogil:
    cdef int64_t count, key_size
    cdef Py_ssize_t index
    cdef bint null
    position = read_varint(data, position, end, &count)
    if position < 0 or count < 0 or count > (end - position) // MIN_HEADER_BYTES:
        return -1
    for index in range(count):
        position = read_varint(data, position, end, &key_size)
        if position < 0 or key_size < 0 or key_size > end - position:
            return -1
        position = skip_nullable(data, position + key_size, end, &null)
        if position < 0:
            return -1
    return position


cdef inline Py_ssize_t read_record_head(const uint8_t* data, Py_ssize_t position, Py_ssize_t end,
                                       int64_t base_offset, int64_t base_ts, bint create_time, int64_t append_ts,
                                       int64_t* offset, int64_t* timestamp, Py_ssize_t* record_end) noexcept nogil:
    """A record's length, timestamp and offset from `position`: where its key starts (and `record_end[0]`
    where the record ends), or -1 when malformed or past what C takes."""
    cdef int64_t length, delta
    position = read_varint(data, position, end, &length)
    if position < 0 or length < 0 or length > end - position:
        return -1
    record_end[0] = position + length
    position = read_varint(data, position + 1, record_end[0], &delta)  # after the attributes byte
    if position < 0:
        return -1
    if not create_time:
        timestamp[0] = append_ts
    elif not checked_add(base_ts, delta, timestamp):
        return -1
    position = read_varint(data, position, record_end[0], &delta)
    if position < 0 or not checked_add(base_offset, delta, offset):
        return -1
    return position


cdef bint scan_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts, bint create_time,
                    int64_t append_ts, Py_ssize_t count, int64_t* digests, int64_t* offsets, int64_t* timestamps,
                    uint8_t* flags, int64_t* ends) noexcept nogil:
    cdef Py_ssize_t index, position = 0, record_end = 0, key_start
    cdef int64_t length
    cdef bint null
    for index in range(count):
        position = read_record_head(data, position, end, base_offset, base_ts, create_time, append_ts,
                                    &offsets[index], &timestamps[index], &record_end)
        if position < 0:
            return False
        key_start = position
        position = skip_nullable(data, position, record_end, &null)
        if position < 0:
            return False
        flags[index] = NULL_KEY if null else 0
        if null:
            digests[index] = 0
        else:
            key_start = read_varint(data, key_start, record_end, &length)
            digests[index] = _Py_HashBytes(data + key_start, position - key_start)
            if digests[index] == 0:  # 0 marks a null key: offset_map.py Rule 2 stores 0 as 1
                digests[index] = 1
        position = skip_nullable(data, position, record_end, &null)
        if position < 0:
            return False
        if null:
            flags[index] |= NULL_VALUE
        position = skip_headers(data, position, record_end)
        if position != record_end:
            return False
        ends[index] = record_end
    return position == end


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
    """The bytes of the records whose `keep` is set, in order (scan.join_kept)."""
    cdef Py_ssize_t index, start = 0, total = 0, count = ends.shape[0]
    for index in range(count):
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


# -- a records section into Arrow's columnar layout (records/buffers.py is the pure-Python authority) ----------


cdef inline Py_ssize_t copy_nullable(const uint8_t* data, Py_ssize_t position, Py_ssize_t end, Py_ssize_t index,
                                     uint8_t* into, int32_t* ends, uint8_t* validity, Py_ssize_t* nulls) noexcept nogil:
    """Append the nullable field at `position` to `into` at `ends[index]`, setting `ends[index + 1]` and
    the validity bit: the position after the field, or -1 when it does not fit before `end`."""
    cdef int64_t size
    cdef Py_ssize_t start = read_varint(data, position, end, &size)
    if start < 0 or size > end - start:
        return -1
    if size < 0:  # null: an empty slot with its bit clear (-1, and any other negative length, as in Python)
        ends[index + 1] = ends[index]
        nulls[0] += 1
        return start
    memcpy(into + ends[index], data + start, size)
    ends[index + 1] = ends[index] + <int32_t>size
    validity[index >> 3] |= <uint8_t>(1 << (index & 7))
    return start + size


cdef bint buffers_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts, bint create_time,
                       int64_t append_ts, Py_ssize_t count, int64_t* offsets, int64_t* timestamps,
                       int32_t* key_ends, uint8_t* key_data, uint8_t* key_validity, Py_ssize_t* key_nulls,
                       int32_t* value_ends, uint8_t* value_data, uint8_t* value_validity, Py_ssize_t* value_nulls,
                       bint* has_headers) noexcept nogil:
    cdef Py_ssize_t index, position = 0, record_end = 0, headers_start
    key_ends[0] = value_ends[0] = 0
    for index in range(count):
        position = read_record_head(data, position, end, base_offset, base_ts, create_time, append_ts,
                                    &offsets[index], &timestamps[index], &record_end)
        if position < 0:
            return False
        position = copy_nullable(data, position, record_end, index, key_data, key_ends, key_validity, key_nulls)
        if position < 0:
            return False
        position = copy_nullable(data, position, record_end, index, value_data, value_ends, value_validity,
                                 value_nulls)
        if position < 0:
            return False
        headers_start = position
        position = skip_headers(data, position, record_end)
        if position != record_end:
            return False
        if record_end - headers_start > 1:  # more than a headersCount of 0
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
    if count <= 0 or count > end // MIN_RECORD_BYTES or end > INT32_MAX:
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
