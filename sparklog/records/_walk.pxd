# cython: language_level=3
"""The C-level helpers the record kernels share (records/implementation.py lists the kernels): the v2
constants, varints, big-endian fields, CRC-32C, a batch's header checks, and the record walk.

Rule 1: the record walk is written once, here: `walk_fields` reads a record's length, head, key and value,
        `walk_record` checks its headers too. Every loop over a records section calls them (the columns, the
        consumer's tuples, the cleaner's scan, the Arrow buffers, the produce check); only records/seek.py's
        twin reads heads alone, from a chunk that may cut a record.
Rule 2: a helper answers -1 (or False) for anything malformed or past what C takes (a 10-byte varint, a sum
        leaving int64); the kernel then defers to the pure-Python twin, which decides (implementation.py Rule 2).
Every function here is inline: each kernel compiles its own copy, and no call crosses a module.
"""

from cpython.long cimport PyLong_CheckExact
from libc.stdint cimport INT64_MAX, INT64_MIN, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1
    Py_ssize_t _Py_HashBytes(const void* data, Py_ssize_t size) nogil  # hash(bytes) without the object

cdef extern from "_crc32c.h":
    void sparklog_crc32c_init() nogil
    uint32_t sparklog_crc32c(const uint8_t* data, size_t size) nogil

cdef enum:
    # The shortest valid record: length, attributes, timestampDelta, offsetDelta, key, value, headersCount.
    MIN_RECORD_BYTES = 7
    # A header takes at least a key length and a value length.
    MIN_HEADER_BYTES = 2
    # A varint the fast path decodes: 9 groups of 7 bits hold any zig-zagged int63; a 10th goes to Python.
    FAST_VARINT_BYTES = 9
    MAX_VARINT_BYTES = 10
    NULL_LENGTH = -1
    COMPRESSION_BITS = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_MASK = 0x10
    CONTROL_MASK = 0x20
    DELETE_HORIZON_MASK = 0x40  # batch.DELETE_HORIZON_MASK (KIP-534)
    MAGIC = 2
    # compression ids 0 (none) to 4 (zstd): compression.CODEC_NAMES
    MAX_CODEC_ID = 4
    # The v2 header (batch.HEADER): its size, and where each field sits.
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12
    LENGTH_OFFSET = 8
    LEADER_EPOCH_OFFSET = 12
    MAGIC_OFFSET = 16
    CRC_OFFSET = 17
    ATTRIBUTES_OFFSET = 21  # where the range the CRC-32C covers starts
    LAST_OFFSET_DELTA_OFFSET = 23
    BASE_TIMESTAMP_OFFSET = 27
    MAX_TIMESTAMP_OFFSET = 35
    PRODUCER_ID_OFFSET = 43
    PRODUCER_EPOCH_OFFSET = 51
    BASE_SEQUENCE_OFFSET = 53
    RECORD_COUNT_OFFSET = 57
    BATCH_OVERHEAD = HEADER_SIZE - LOG_OVERHEAD
    NULL_KEY = 1  # scan.NULL_KEY
    NULL_VALUE = 2  # scan.NULL_VALUE


# -- varints and checked arithmetic ---------------------------------------------------------------------------

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



# -- big-endian header fields, and a batch's header checks ------------------------------------------------------

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


cdef inline uint8_t* put(uint8_t* out, uint64_t value, int size) noexcept nogil:
    """`size` bytes of `value`, big-endian."""
    cdef int index
    for index in range(size):
        out[index] = <uint8_t>(value >> (8 * (size - 1 - index)))
    return out + size


cdef inline bint crc_ok(const uint8_t* head, Py_ssize_t size) noexcept nogil:
    """The CRC-32C of the batch of `size` bytes at `head` matches its header's."""
    return sparklog_crc32c(head + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET) == <uint32_t>get_be(head + CRC_OFFSET, 4)


cdef inline Py_ssize_t batch_size(const uint8_t* data, Py_ssize_t position, Py_ssize_t end) noexcept nogil:
    """The size of the batch at `position` if it is whole and its magic, lengths and counts are as
    iter_batches checks them (not its CRC-32C), else -1."""
    cdef const uint8_t* head = data + position
    cdef int64_t size
    if end - position < HEADER_SIZE or head[MAGIC_OFFSET] != MAGIC:
        return -1
    size = <int64_t>get_i32(head + LENGTH_OFFSET) + LOG_OVERHEAD
    if size < HEADER_SIZE or size > end - position or get_i32(head + LAST_OFFSET_DELTA_OFFSET) < 0 \
            or get_i32(head + RECORD_COUNT_OFFSET) < 0:
        return -1
    return size


cdef inline Py_ssize_t whole_batch(const uint8_t* data, Py_ssize_t position, Py_ssize_t end) noexcept nogil:
    """`batch_size`, and -1 too when the batch's CRC-32C is wrong."""
    cdef Py_ssize_t size = batch_size(data, position, end)
    return size if size >= 0 and crc_ok(data + position, size) else -1


# -- the record walk (Rule 1) -------------------------------------------------------------------------------------

cdef struct Record:
    int64_t offset
    int64_t timestamp
    Py_ssize_t key  # where the key's bytes start
    Py_ssize_t key_size  # -1: a null key (as in Python, any negative length is null)
    Py_ssize_t value
    Py_ssize_t value_size
    Py_ssize_t headers  # where headersCount starts
    Py_ssize_t end  # where the record ends


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


cdef inline Py_ssize_t walk_fields(const uint8_t* data, Py_ssize_t position, Py_ssize_t end, int64_t base_offset,
                                   int64_t base_ts, bint create_time, int64_t append_ts, Record* r) noexcept nogil:
    """The record at `position` up to its headers into `r`: its length (within `end`), offset, timestamp
    (`append_ts` under LogAppendTime), key and value; where its headers start, or -1 when malformed or past
    what C takes. (Locals until the end, so that the compiler keeps them in registers.)"""
    cdef int64_t length, delta, timestamp = append_ts, offset, key_size, value_size
    cdef Py_ssize_t record_end, key, value
    position = read_varint(data, position, end, &length)
    if position < 0 or length < 0 or length > end - position:
        return -1
    record_end = position + length
    position = read_varint(data, position + 1, record_end, &delta)  # timestampDelta, after the attributes byte
    if position < 0 or (create_time and not checked_add(base_ts, delta, &timestamp)):
        return -1
    position = read_varint(data, position, record_end, &delta)  # offsetDelta
    if position < 0 or not checked_add(base_offset, delta, &offset):
        return -1
    key = read_varint(data, position, record_end, &key_size)
    if key < 0 or key_size > record_end - key:
        return -1
    position = key if key_size < 0 else key + key_size
    value = read_varint(data, position, record_end, &value_size)
    if value < 0 or value_size > record_end - value:
        return -1
    position = value if value_size < 0 else value + value_size
    r.offset, r.timestamp, r.end, r.headers = offset, timestamp, record_end, position
    r.key, r.key_size = key, (-1 if key_size < 0 else key_size)
    r.value, r.value_size = value, (-1 if value_size < 0 else value_size)
    return position


cdef inline Py_ssize_t walk_record(const uint8_t* data, Py_ssize_t position, Py_ssize_t end, int64_t base_offset,
                                   int64_t base_ts, bint create_time, int64_t append_ts, Record* r) noexcept nogil:
    """`walk_fields`, then its headers checked: where the record ends (the headers fill it exactly), or -1."""
    position = walk_fields(data, position, end, base_offset, base_ts, create_time, append_ts, r)
    if position < 0 or skip_headers(data, position, r.end) != r.end:
        return -1
    return r.end


cdef inline bint records_fill(const uint8_t* data, Py_ssize_t end, Py_ssize_t count) noexcept nogil:
    """The `count` records fill `data[:end]` exactly, each fills its length, no header key is null, and
    their offset deltas are 0..count-1 (verify.py Rule 1); False for anything else, or past what C takes."""
    cdef Py_ssize_t index, position = 0
    cdef Record r
    for index in range(count):
        position = walk_record(data, position, end, 0, 0, False, 0, &r)
        if position < 0 or r.offset != index:
            return False
    return position == end


cdef inline bint scan_loop(const uint8_t* data, Py_ssize_t end, int64_t base_offset, int64_t base_ts,
                           bint create_time, int64_t append_ts, Py_ssize_t count, int64_t* digests, int64_t* offsets,
                           int64_t* timestamps, uint8_t* flags, int64_t* ends) noexcept nogil:
    """The log cleaner's pass over a section (records/scan.py Rule 1): each record's key digest, offset,
    timestamp, null flags and end; False when malformed or past what C takes."""
    cdef Py_ssize_t index, position = 0
    cdef Record r
    for index in range(count):
        position = walk_record(data, position, end, base_offset, base_ts, create_time, append_ts, &r)
        if position < 0:
            return False
        offsets[index], timestamps[index], ends[index] = r.offset, r.timestamp, r.end
        flags[index] = (NULL_KEY if r.key_size < 0 else 0) | (NULL_VALUE if r.value_size < 0 else 0)
        if r.key_size < 0:
            digests[index] = 0
        else:
            digests[index] = _Py_HashBytes(data + r.key, r.key_size)
            if digests[index] == 0:  # 0 marks a null key: offset_map.py Rule: key-digest stores 0 as 1
                digests[index] = 1
    return position == end
