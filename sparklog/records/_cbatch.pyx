# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The RecordBatch v2 hot loops in C (Cython): a records section built, one decoded into columns, varints.

The compiled twin of six functions of `sparklog.records.batch` (see its docstring for the format), which
`sparklog.records.implementation` installs in their place:

    encode_varint(value)            -> bytes
    decode_varint(buffer, position) -> (value, position after it)
    encode_records(records, now_ms) -> ([section], count, base timestamp, max timestamp)
    decode_columns(buffer, batch)   -> RecordColumns
    build_batch(records, ...)       -> bytes: the header, the records and the CRC-32C in one buffer
    decode_records(buffer, batch, prefix, cls) -> [cls(*prefix, offset, timestamp, key, value, headers)]

and the per-section loops: the log cleaner's (records/scan.py and records/sweep.py are their callers and
authorities: `scan_section`, `join_kept`, and `put_batches` / `filter_batches`, one call per read buffer of
batches) and records/buffers.py's (`decode_buffers`: a section into Arrow's layout, for the Spark source),
and Kafka's murmur2 key hash for the producer's partitioner (records/keyhash.py is the authority: `murmur2`,
and `murmur2_partitions` over a column of keys), the broker's check of a client's batch (records/verify.py
is the authority: `plain_records_ok`, `section_records_ok`), and a leader's checks of a pipelined group's
record sets (records/append_check.py is the authority: `check_sets`). A lookup by time walks the record heads
of one batch with `seek_timestamp` (records/seek.py is the authority).

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
from cpython.buffer cimport PyBUF_READ, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact, PyLong_FromLongLong
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.stdint cimport (INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t,
                          int64_t, uint8_t, uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

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
    # compression ids 0 (none) to 4 (zstd): compression.CODEC_NAMES
    MAX_CODEC_ID = 4

# The pure-Python functions, the authority this module defers to (Rule 2), the result type, and the
# Python functions build_batch shares with batch.py: the codec lookup, compression, CRC-32C and the clock.
cdef object _py_encode_varint = None
cdef object _py_decode_varint = None
cdef object _py_encode_records = None
cdef object _py_decode_columns = None
cdef object _py_build_batch = None
cdef object _py_decode_records = None
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
    global _RecordColumns, _codec_id, _compress, _crc32c, _time_ns, _py_decode_records
    _py_encode_varint, _py_decode_varint = pure.encode_varint, pure.decode_varint
    _py_encode_records, _py_decode_columns, _py_build_batch = pure.encode_records, pure.decode_columns, pure.build_batch
    _RecordColumns, _codec_id, _compress, _crc32c, _time_ns = record_columns, codec_id, compress, crc32c, time_ns
    _py_decode_records = pure.decode_records


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
    if not (PyLong_CheckExact(compression) and within(compression, 0, MAX_CODEC_ID, &codec)):
        codec = _codec_id(compression)  # a name, or an id it checks (the sender passes ids: no call per batch)
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
            if digests[index] == 0:  # 0 marks a null key: offset_map.py Rule: key-digest stores 0 as 1
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


# -- a lookup by time inside one batch: the records' heads only (records/seek.py is the authority) ---------

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

# -- the log cleaner's two passes over a buffer of whole batches (records/sweep.py is their caller) ---------
# One call takes every batch of a read buffer it can, with the GIL released for all of them: it checks each
# batch as iter_batches does (magic, lengths, CRC-32C), scans its records (scan_loop) and, for the recopy,
# decides and copies what is kept. It stops at the first batch it does not take (a compressed data batch, or
# anything malformed), which the caller hands to the pure-Python path: that path decides, and raises.

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* CRC-32C (Castagnoli, reflected 0x82F63B78), as the crc32c package computes it: with the SSE4.2
       instruction where the CPU has it, over three independent streams at once (its latency is three times
       its throughput), joined by shifting a CRC over the zero bytes of the streams after it (the GF(2) matrix
       method); a byte table elsewhere. */
    #define SPARKLOG_CRC_POLY 0x82F63B78u
    #define SPARKLOG_CRC_LONG 4096
    #define SPARKLOG_CRC_SHORT 256
    static uint32_t sparklog_crc32c_table[256];
    static uint32_t sparklog_crc32c_long[4][256], sparklog_crc32c_short[4][256];
    static int sparklog_crc32c_hw = -1;
    static uint32_t sparklog_gf2_times(const uint32_t* mat, uint32_t vec) {
        uint32_t sum = 0;
        while (vec) { if (vec & 1) sum ^= *mat; vec >>= 1; mat++; }
        return sum;
    }
    static void sparklog_gf2_square(uint32_t* square, const uint32_t* mat) {
        for (int n = 0; n < 32; n++) square[n] = sparklog_gf2_times(mat, mat[n]);
    }
    /* The operator appending `len` zero bytes (a power of two) to a CRC register, as four byte tables. */
    static void sparklog_crc32c_zeros(uint32_t zeros[4][256], size_t len) {
        uint32_t odd[32], even[32], row = 1, *op;
        odd[0] = SPARKLOG_CRC_POLY;
        for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
        sparklog_gf2_square(even, odd);  /* two zero bits */
        sparklog_gf2_square(odd, even);  /* four */
        op = odd;
        for (;;) {  /* each squaring doubles the zeros: 8 bits, then 16, ... */
            sparklog_gf2_square(even, odd); op = even; len >>= 1; if (!len) break;
            sparklog_gf2_square(odd, even); op = odd; len >>= 1; if (!len) break;
        }
        for (uint32_t n = 0; n < 256; n++)
            for (int k = 0; k < 4; k++) zeros[k][n] = sparklog_gf2_times(op, n << (8 * k));
    }
    static inline uint32_t sparklog_crc32c_shift(uint32_t zeros[4][256], uint32_t crc) {
        return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
    }
    static void sparklog_crc32c_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ SPARKLOG_CRC_POLY : c >> 1;
            sparklog_crc32c_table[n] = c;
        }
        sparklog_crc32c_zeros(sparklog_crc32c_long, SPARKLOG_CRC_LONG);
        sparklog_crc32c_zeros(sparklog_crc32c_short, SPARKLOG_CRC_SHORT);
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        sparklog_crc32c_hw = __builtin_cpu_supports("sse4.2") != 0;
    #else
        sparklog_crc32c_hw = 0;
    #endif
    }
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __attribute__((target("sse4.2")))
    static uint64_t sparklog_crc32c_streams(uint64_t c0, const uint8_t** at, size_t* left, size_t block,
                                            uint32_t zeros[4][256]) {
        const uint8_t* p = *at;
        while (*left >= 3 * block) {
            uint64_t c1 = 0, c2 = 0, v;
            const uint8_t* end = p + block;
            do {
                memcpy(&v, p, 8); c0 = __builtin_ia32_crc32di(c0, v);
                memcpy(&v, p + block, 8); c1 = __builtin_ia32_crc32di(c1, v);
                memcpy(&v, p + 2 * block, 8); c2 = __builtin_ia32_crc32di(c2, v);
                p += 8;
            } while (p < end);
            c0 = sparklog_crc32c_shift(zeros, (uint32_t)c0) ^ c1;
            c0 = sparklog_crc32c_shift(zeros, (uint32_t)c0) ^ c2;
            p += 2 * block;
            *left -= 3 * block;
        }
        *at = p;
        return c0;
    }
    __attribute__((target("sse4.2")))
    static uint32_t sparklog_crc32c_sse42(uint32_t crc, const uint8_t* p, size_t n) {
        uint64_t c = sparklog_crc32c_streams(crc, &p, &n, SPARKLOG_CRC_LONG, sparklog_crc32c_long), v;
        c = sparklog_crc32c_streams(c, &p, &n, SPARKLOG_CRC_SHORT, sparklog_crc32c_short);
        while (n >= 8) { memcpy(&v, p, 8); c = __builtin_ia32_crc32di(c, v); p += 8; n -= 8; }
        while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        return (uint32_t)c;
    }
    #endif
    static uint32_t sparklog_crc32c(const uint8_t* p, size_t n) {
        uint32_t c = 0xFFFFFFFFu;
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (sparklog_crc32c_hw == 1) return sparklog_crc32c_sse42(c, p, n) ^ 0xFFFFFFFFu;
    #endif
        while (n--) c = sparklog_crc32c_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
        return c ^ 0xFFFFFFFFu;
    }
    """
    void sparklog_crc32c_init() nogil
    uint32_t sparklog_crc32c(const uint8_t* data, size_t size) nogil
    void __builtin_prefetch(const void* address) nogil

sparklog_crc32c_init()

cdef enum:
    COMPRESSION_BITS = 0x07
    DELETE_HORIZON_MASK = 0x40  # batch.DELETE_HORIZON_MASK (KIP-534)
    # v2 header offsets (batch.HEADER) of the fields the cleaner reads or rewrites
    LENGTH_OFFSET = 8
    LEADER_EPOCH_OFFSET = 12
    MAGIC_OFFSET = 16
    LAST_OFFSET_DELTA_OFFSET = 23
    BASE_TIMESTAMP_OFFSET = 27
    MAX_TIMESTAMP_OFFSET = 35
    PRODUCER_ID_OFFSET = 43
    PRODUCER_EPOCH_OFFSET = 51
    BASE_SEQUENCE_OFFSET = 53
    RECORD_COUNT_OFFSET = 57
    BATCH_OVERHEAD = HEADER_SIZE - LOG_OVERHEAD
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


cdef inline uint64_t get_be(const uint8_t* p, int size) noexcept nogil:
    cdef uint64_t value = 0
    cdef int index
    for index in range(size):
        value = (value << 8) | p[index]
    return value


cdef inline int64_t get_i64(const uint8_t* p) noexcept nogil:
    return <int64_t>get_be(p, 8)


cdef inline int32_t get_i32(const uint8_t* p) noexcept nogil:
    return <int32_t><uint32_t>get_be(p, 4)


cdef inline int16_t get_i16(const uint8_t* p) noexcept nogil:
    return <int16_t><uint16_t>get_be(p, 2)


cdef Py_ssize_t whole_batch(const uint8_t* data, Py_ssize_t position, Py_ssize_t end) noexcept nogil:
    """The size of the batch at `position` if it is whole and passes iter_batches' checks (magic, lengths,
    CRC-32C), else -1."""
    cdef const uint8_t* head = data + position
    cdef int64_t size
    if end - position < HEADER_SIZE or head[MAGIC_OFFSET] != MAGIC:
        return -1
    size = <int64_t>get_i32(head + LENGTH_OFFSET) + LOG_OVERHEAD
    if size < HEADER_SIZE or size > end - position or get_i32(head + LAST_OFFSET_DELTA_OFFSET) < 0 \
            or get_i32(head + RECORD_COUNT_OFFSET) < 0:
        return -1
    if sparklog_crc32c(head + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET) != <uint32_t>get_be(head + CRC_OFFSET, 4):
        return -1
    return size


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
    """cleaner.Cleaner._decide (Rules 3, 3a) for one batch's records into s.keep: how many are kept, or -1
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
    """The recopy (cleaner.py Rule: keep-latest-per-key and Rule: recopy-in-groups) of every batch from `position` on
    that it takes: each data batch below `end_offset` keeps the records the offset map keeps, less the tombstones of a batch whose delete
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


# -- records/buffers.py ColumnSink: many batches decoded one after another into the same Arrow buffers ---------

cdef inline Py_ssize_t sink_nullable(const uint8_t* data, Py_ssize_t position, Py_ssize_t end, Py_ssize_t row,
                                     uint8_t* into, int32_t* ends, uint8_t* valid) noexcept nogil:
    """copy_nullable with one validity byte per row (1: present) instead of a bit: rows need not start at a
    multiple of 8, and nothing needs zeroing first."""
    cdef int64_t size
    cdef Py_ssize_t start = read_varint(data, position, end, &size)
    if start < 0 or size > end - start:
        return -1
    if size < 0:
        ends[row + 1] = ends[row]
        valid[row] = 0
        return start
    memcpy(into + ends[row], data + start, size)
    ends[row + 1] = ends[row] + <int32_t>size
    valid[row] = 1
    return start + size


cdef Py_ssize_t sink_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts,
                          bint create_time, int64_t append_ts, Py_ssize_t count, int64_t start, int64_t stop,
                          Py_ssize_t row, int64_t* offsets, int64_t* timestamps, int32_t* key_ends,
                          uint8_t* key_data, uint8_t* key_valid, int32_t* value_ends, uint8_t* value_data,
                          uint8_t* value_valid, Py_ssize_t* first, bint* has_headers) noexcept nogil:
    """The records of offsets `[start, stop)` written from sink row `row` on, every record parsed and checked
    (buffers_loop's checks): how many were written, or -1 when malformed or past what C takes."""
    cdef Py_ssize_t index, position = 0, record_end = 0, headers_start, written = 0
    cdef int64_t offset = 0, timestamp = 0
    cdef bint null
    for index in range(count):
        position = read_record_head(data, position, end, base_offset, base_ts, create_time, append_ts,
                                    &offset, &timestamp, &record_end)
        if position < 0:
            return -1
        if start <= offset < stop:
            if written == 0:
                first[0] = index
            offsets[row + written], timestamps[row + written] = offset, timestamp
            position = sink_nullable(data, position, record_end, row + written, key_data, key_ends, key_valid)
            if position >= 0:
                position = sink_nullable(data, position, record_end, row + written, value_data, value_ends,
                                         value_valid)
            written += 1
        else:
            position = skip_nullable(data, position, record_end, &null)
            if position >= 0:
                position = skip_nullable(data, position, record_end, &null)
        if position < 0:
            return -1
        headers_start = position
        position = skip_headers(data, position, record_end)
        if position != record_end:
            return -1
        if record_end - headers_start > 1 and start <= offset < stop:
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
    if count <= 0 or count > end // MIN_RECORD_BYTES or end > INT32_MAX:
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


# -- the consumer's records: one tuple per record, built here instead of transposed from columns in Python -----

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    object PyType_GenericAlloc(PyTypeObject* cls, Py_ssize_t items)
    bint PyType_IsSubtype(PyTypeObject* a, PyTypeObject* b)


cdef inline bint is_tuple_type(object cls):
    """`cls` is tuple or a subclass allocated as tuples are (a NamedTuple): PyType_GenericAlloc fits it."""
    return isinstance(cls, type) and PyType_IsSubtype(<PyTypeObject*>cls, <PyTypeObject*>tuple)


cdef object records_section(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts,
                            Py_ssize_t count, object log_append_time, tuple prefix, object cls):
    """`count` records filling `data[:end]` exactly as `cls` tuples `prefix + (offset, timestamp, key, value,
    headers)`, or None to defer to Python. decode_section's loop, with a row per record instead of columns."""
    cdef Py_ssize_t position = 0, record_end, index, field
    cdef Py_ssize_t width = PyTuple_GET_SIZE(prefix)
    cdef int64_t length, delta, offset, timestamp = 0
    cdef bint create_time = log_append_time is None
    if count < 0 or count > end // MIN_RECORD_BYTES:
        return None
    rows = PyList_New(count)
    for index in range(count):  # the slots not yet filled are NULL, which a list being freed skips
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
        row = PyType_GenericAlloc(<PyTypeObject*>cls, width + 5)
        for field in range(width):
            set_field(row, field, <object>PyTuple_GET_ITEM(prefix, field))
        set_field(row, width, PyLong_FromLongLong(offset))
        set_field(row, width + 1, PyLong_FromLongLong(timestamp) if create_time else log_append_time)
        set_field(row, width + 2, key)
        set_field(row, width + 3, value)
        set_field(row, width + 4, headers)
        set_item(rows, index, row)
    if position != end:
        return None
    return rows


cdef inline void set_field(object row, Py_ssize_t index, object item) noexcept:
    Py_INCREF(item)
    PyTuple_SET_ITEM(row, index, item)


def decode_records(buffer, batch, prefix, cls):
    """Decode `batch.record_count` records filling `buffer` exactly into a list of `cls` tuples
    `prefix + (offset, timestamp, key, value, headers)` (`batch._decode_records`)."""
    rows = None
    if PyBytes_CheckExact(buffer) and PyTuple_CheckExact(prefix) and is_tuple_type(cls):
        log_append_time = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
        rows = records_section(<const uint8_t*>PyBytes_AS_STRING(buffer), PyBytes_GET_SIZE(buffer),
                               batch.base_offset, batch.base_timestamp, batch.record_count, log_append_time,
                               prefix, cls)
    return _py_decode_records(buffer, batch, prefix, cls) if rows is None else rows


cdef inline int64_t row_offset(object row, Py_ssize_t at):
    return PyLong_AsLongLong(<object>PyTuple_GET_ITEM(row, at))


cdef Py_ssize_t first_from(list rows, int64_t start, Py_ssize_t at):
    """bisect_left over the rows' offsets (field `at`), as batch.tuples_in_range cuts a batch."""
    cdef Py_ssize_t low = 0, high = PyList_GET_SIZE(rows), middle
    while low < high:
        middle = (low + high) // 2
        if row_offset(<object>PyList_GET_ITEM(rows, middle), at) < start:
            low = middle + 1
        else:
            high = middle
    return low


cdef enum:
    # decode_chunk returns after this many records: a few batches' worth, kept in the CPU caches while the
    # application iterates over them (a whole 1 MiB chunk decoded at once is slower to iterate).
    CHUNK_RECORDS = 256


def decode_chunk(const uint8_t[::1] chunk, Py_ssize_t position, int64_t start, prefix, cls, bint check_crc):
    """(records, position): the records, from offset `start` on, of the whole, uncompressed data batches at
    `chunk[position:]` (until CHUNK_RECORDS are decoded) as `cls` tuples `prefix + (offset, timestamp, key, value, headers)` (what
    `RecordBatch.tuples` and `tuples_in_range` give), and where it stopped: at the end, or at the first batch
    it does not take (partial, malformed, a bad CRC-32C, compressed, a control batch), which the caller
    (`batch.chunk_tuples`) then reads the general way. The pure codec's twin takes no batch."""
    cdef Py_ssize_t end = chunk.shape[0], size, first, at
    cdef const uint8_t* head
    cdef int attributes
    cdef int64_t base_offset, next_offset
    records = []
    if not (PyTuple_CheckExact(prefix) and is_tuple_type(cls)) or position < 0:
        return records, position
    at = PyTuple_GET_SIZE(prefix)
    while end - position >= HEADER_SIZE:
        head = &chunk[position]
        if head[MAGIC_OFFSET] != MAGIC:
            break
        size = <Py_ssize_t>get_i32(head + LENGTH_OFFSET) + LOG_OVERHEAD
        if (size < HEADER_SIZE or size > end - position or get_i32(head + LAST_OFFSET_DELTA_OFFSET) < 0
                or get_i32(head + RECORD_COUNT_OFFSET) < 0):
            break
        attributes = get_i16(head + ATTRIBUTES_OFFSET)
        if attributes & (COMPRESSION_BITS | CONTROL_MASK):
            break
        if check_crc and sparklog_crc32c(head + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET) \
                != <uint32_t>get_be(head + CRC_OFFSET, 4):
            break
        base_offset = get_i64(head)
        if not checked_add(base_offset, <int64_t>get_i32(head + LAST_OFFSET_DELTA_OFFSET) + 1, &next_offset):
            break  # past int64: Python's ints decide
        if next_offset > start:  # else the batch lies wholly before start
            rows = records_section(head + HEADER_SIZE, size - HEADER_SIZE, base_offset,
                                   get_i64(head + BASE_TIMESTAMP_OFFSET), get_i32(head + RECORD_COUNT_OFFSET),
                                   get_i64(head + MAX_TIMESTAMP_OFFSET) if attributes & TIMESTAMP_TYPE_MASK else None,
                                   prefix, cls)
            if rows is None:
                break
            first = 0
            if PyList_GET_SIZE(rows) and row_offset(<object>PyList_GET_ITEM(rows, 0), at) < start:
                first = first_from(rows, start, at)
            records.extend(rows[first:] if first else rows)
        position += size
        if PyList_GET_SIZE(records) >= CHUNK_RECORDS:
            break
    return records, position


# -- murmur2: the producer's keyed partition (records/keyhash.py is the authority) -------------------------

cdef object _py_murmur2 = None
cdef object _py_partitions_for_keys = None


def bind_keyhash(murmur2, partitions_for_keys):
    """Hand over keyhash.py's pure-Python functions, which take every input the fast path does not."""
    global _py_murmur2, _py_partitions_for_keys
    _py_murmur2, _py_partitions_for_keys = murmur2, partitions_for_keys


cdef enum:
    MURMUR2_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed
    MURMUR2_M = 0x5BD1E995
    MURMUR2_R = 24
    MAX_PARTITIONS = 0x7FFFFFFF  # Java's int


cdef inline uint32_t murmur2_of(const uint8_t* data, Py_ssize_t length) noexcept nogil:
    """Kafka's Utils.murmur2 over `length` bytes, as an unsigned 32-bit value."""
    cdef uint32_t h = (<uint32_t>MURMUR2_SEED) ^ <uint32_t>length, k
    cdef Py_ssize_t index, words = length >> 2, base = length & ~(<Py_ssize_t>3)
    cdef const uint8_t* word
    for index in range(words):
        word = data + 4 * index
        k = word[0] | (<uint32_t>word[1] << 8) | (<uint32_t>word[2] << 16) | (<uint32_t>word[3] << 24)
        k *= MURMUR2_M
        k ^= k >> MURMUR2_R
        k *= MURMUR2_M
        h = (h * MURMUR2_M) ^ k
    if length & 3 == 3:
        h ^= <uint32_t>data[base + 2] << 16
    if length & 3 >= 2:
        h ^= <uint32_t>data[base + 1] << 8
    if length & 3 >= 1:
        h ^= data[base]
        h *= MURMUR2_M
    h ^= h >> 13
    h *= MURMUR2_M
    h ^= h >> 15
    return h


def murmur2(key):
    """Kafka's murmur2 of `key` as a signed 32-bit int (`keyhash._murmur2`)."""
    if not PyBytes_CheckExact(key):
        return _py_murmur2(key)
    return <int32_t>murmur2_of(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))


def murmur2_partitions(keys, num_partitions):
    """`toPositive(murmur2(key)) % num_partitions` per key, None for a None key (`keyhash._partitions_for_keys`)."""
    cdef int64_t count
    cdef Py_ssize_t index, size
    cdef list result
    if not (PyList_CheckExact(keys) and as_int64(num_partitions, &count) and 1 <= count <= MAX_PARTITIONS):
        return _py_partitions_for_keys(keys, num_partitions)
    size = PyList_GET_SIZE(keys)
    result = PyList_New(size)
    for index in range(size):
        key = <object>PyList_GET_ITEM(keys, index)
        if key is None:
            item = None
        elif PyBytes_CheckExact(key):
            item = PyLong_FromLongLong((murmur2_of(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
                                        & 0x7FFFFFFF) % count)
        else:
            item = _py_partitions_for_keys([key], num_partitions)[0]
        set_item(result, index, item)
    return result


# -- whether a client's batch's records parse (records/verify.py is the pure-Python authority) ----------------


cdef bint records_fill(const uint8_t* data, Py_ssize_t end, Py_ssize_t count) noexcept nogil:
    """The `count` records fill `data[:end]` exactly, each fills its length, no header key is null, and
    their offset deltas are 0..count-1 (verify.py Rule 1); False for anything else, or past what C takes."""
    cdef Py_ssize_t index, position = 0, record_end
    cdef int64_t length, delta
    cdef bint null
    for index in range(count):
        position = read_varint(data, position, end, &length)
        if position < 0 or length < 0 or length > end - position:
            return False
        record_end = position + length
        position = read_varint(data, position + 1, record_end, &delta)  # timestampDelta, after the attributes
        if position < 0:
            return False
        position = read_varint(data, position, record_end, &delta)  # offsetDelta
        if position < 0 or delta != index:
            return False
        position = skip_nullable(data, position, record_end, &null)  # the key
        if position < 0:
            return False
        position = skip_nullable(data, position, record_end, &null)  # the value
        if position < 0:
            return False
        position = skip_headers(data, position, record_end)
        if position != record_end:
            return False
    return position == end


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


# -- a leader's checks of a group's record sets (records/append_check.py is the twin and the authority) -----

cdef enum:
    CHECK_HEADER = 61  # batch.HEADER_SIZE
    CHECK_CRC_FROM = 21  # batch.ATTRIBUTES_OFFSET: the CRC covers [21, end)


cdef inline int64_t _be(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return <int64_t>v


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
                    length = <int32_t>_be(p + 8, 4)
                    magic = <int8_t>p[16]
                    crc = <uint32_t>_be(p + 17, 4)
                    high = <int8_t>p[21]
                    low = <int8_t>p[22]
                    delta = <int32_t>_be(p + 23, 4)
                    records = <int32_t>_be(p + 57, 4)
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
                        result = (length, magic, crc, high, low, delta, _be(p + 35, 8), _be(p + 43, 8),
                                  <int16_t>_be(p + 51, 2), <int32_t>_be(p + 53, 4), records)
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
            length = <int32_t>_be(p + 8, 4)
            size = <Py_ssize_t>length + 12
            low = p[22]
            delta = <int32_t>_be(p + 23, 4)
            count = <int32_t>_be(p + 57, 4)
            producer_id = _be(p + 43, 8)
            sequence = <int32_t>_be(p + 53, 4)
            if (size < CHECK_HEADER or size > total - position or size > max_message_bytes or p[16] != 2
                    or low & 0x38  # control, transactional or LogAppendTime: the general path's
                    or (low & 0x07) > 4  # no codec at all (batch.MAX_CODEC): the general path refuses it
                    or (producer_id >= 0 and sequence < 0)  # refused by the general path, with its message
                    or count <= 0 or delta != count - 1
                    or sparklog_crc32c(p + CHECK_CRC_FROM, size - CHECK_CRC_FROM) != <uint32_t>_be(p + 17, 4)):
                return None
            if low & 0x07:  # compressed: verify.py decompresses and checks the records (one C walk of them)
                if _py_records_error is None:
                    from sparklog.records.verify import records_error as _py_records_error
                if _py_records_error(memoryview(records)[position:position + size]) is not None:
                    return None
            elif not records_fill(p + CHECK_HEADER, size - CHECK_HEADER, count):
                return None
            entries.append((position, size, <int64_t>delta + 1, _be(p + 35, 8), producer_id,
                            <int16_t>_be(p + 51, 2), sequence))
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
    """append_check.stamp_leader_set (Rule 4): offsets and the leader's epoch stamped into a checked set's
    batches, and where a segment's indexes take entries, in one walk."""
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
            size = <Py_ssize_t><int32_t>_be(p + 8, 4) + 12
            if size < CHECK_HEADER or size > total - position:
                raise ValueError(f"not a checked record set: batch length at byte {position}")
            for i in range(8):
                p[i] = <uint8_t>(<uint64_t>offset >> (56 - 8 * i))
            for i in range(4):
                p[12 + i] = <uint8_t>(<uint32_t>leader_epoch >> (24 - 8 * i))
            timestamp = _be(p + 35, 8)
            if timestamp > max_timestamp:
                max_timestamp = timestamp
                offset_of_max = offset
            if since > interval:
                points.append((offset, position, max_timestamp, offset_of_max))
                since = 0
            since += size
            offset += <int64_t><int32_t>_be(p + 23, 4) + 1
            position += size
        if position != total:
            raise ValueError(f"not a checked record set: {total - position} trailing bytes")
        return offset, since, max_timestamp, offset_of_max, points
    finally:
        PyBuffer_Release(&view)
