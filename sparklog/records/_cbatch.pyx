# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The RecordBatch v2 codec's hot loops in C (Cython): a records section built, one decoded into columns or
into the consumer's tuples, varints.

The compiled twin of seven functions of `sparklog.records.batch` (see its docstring for the format), which
`sparklog.records.implementation` installs in their place:

    encode_varint(value)            -> bytes
    decode_varint(buffer, position) -> (value, position after it)
    encode_records(records, now_ms) -> ([section], count, base timestamp, max timestamp)
    decode_columns(buffer, batch)   -> RecordColumns
    build_batch(records, ...)       -> bytes: the header, the records and the CRC-32C in one buffer
    decode_records(buffer, batch, prefix, cls) -> [cls(*prefix, offset, timestamp, key, value, headers)]
    decode_chunk(chunk, position, start, prefix, cls, check_crc) -> (records, position)

The other record kernels sit beside the modules they mirror (`_cscan`, `_cseek`, `_csweep`, `_cbuffers`,
`_ckeyhash`, `_cverify`, `_cappend_check`); every one walks records with `_walk.pxd`'s walker.

Rule 1: the output is the pure-Python function's, byte for byte and value for value, and so are its errors.
Rule 2: the fast path takes only what fits C: exact `bytes`, ints within int64, `str` header keys, lists
        and tuples, header fields within their int16/int32/int64. Anything else, and every malformed input,
        goes whole to the pure-Python function (`bind()` hands them over), which decides: its error messages
        have one author, and a value past int64 (a 10-byte varint, an overflowing sum) comes out as the same
        Python int.
Rule 3: memory is bounded by the input: lists are sized by a record count only after checking the section
        can hold that many records, and the output buffer grows with what is written.
"""

from cpython.buffer cimport PyBUF_READ
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact, PyLong_FromLongLong
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.stdint cimport (INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t,
                          int64_t, uint8_t, uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from sparklog.records._walk cimport *

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL

cdef enum:
    # The output buffer's first size; it doubles as needed.
    INITIAL_CAPACITY = 4096

sparklog_crc32c_init()

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


cdef inline object field_bytes(const uint8_t* data, Py_ssize_t start, Py_ssize_t size):
    """A field as `walk_fields` found it, as a new bytes, or None for a null one."""
    return None if size < 0 else PyBytes_FromStringAndSize(<const char*>data + start, size)


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
    cdef Py_ssize_t end = PyBytes_GET_SIZE(buffer), position = 0, index
    cdef Record r
    cdef bint create_time = log_append_time is None
    if count < 0 or count > end // MIN_RECORD_BYTES:
        return None
    offsets, timestamps, keys, values, header_column = (
        PyList_New(count), PyList_New(count), PyList_New(count), PyList_New(count), PyList_New(count)
    )
    for index in range(count):
        position = walk_fields(data, position, end, base_offset, base_ts, create_time, 0, &r)
        if position < 0:
            return None
        headers = read_headers(data, &position, r.end)
        if position != r.end:
            return None
        set_item(offsets, index, PyLong_FromLongLong(r.offset))
        set_item(timestamps, index, PyLong_FromLongLong(r.timestamp) if create_time else log_append_time)
        set_item(keys, index, field_bytes(data, r.key, r.key_size))
        set_item(values, index, field_bytes(data, r.value, r.value_size))
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
    cdef Py_ssize_t position = 0, index, field
    cdef Py_ssize_t width = PyTuple_GET_SIZE(prefix)
    cdef Record r
    cdef bint create_time = log_append_time is None
    if count < 0 or count > end // MIN_RECORD_BYTES:
        return None
    rows = PyList_New(count)
    for index in range(count):  # the slots not yet filled are NULL, which a list being freed skips
        position = walk_fields(data, position, end, base_offset, base_ts, create_time, 0, &r)
        if position < 0:
            return None
        headers = read_headers(data, &position, r.end)
        if position != r.end:
            return None
        row = PyType_GenericAlloc(<PyTypeObject*>cls, width + 5)
        for field in range(width):
            set_field(row, field, <object>PyTuple_GET_ITEM(prefix, field))
        set_field(row, width, PyLong_FromLongLong(r.offset))
        set_field(row, width + 1, PyLong_FromLongLong(r.timestamp) if create_time else log_append_time)
        set_field(row, width + 2, field_bytes(data, r.key, r.key_size))
        set_field(row, width + 3, field_bytes(data, r.value, r.value_size))
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
        size = batch_size(&chunk[0], position, end)
        if size < 0:
            break
        head = &chunk[position]
        attributes = get_i16(head + ATTRIBUTES_OFFSET)
        if attributes & (COMPRESSION_BITS | CONTROL_MASK):
            break
        if check_crc and not crc_ok(head, size):
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

