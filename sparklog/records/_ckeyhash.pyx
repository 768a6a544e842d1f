# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Kafka's murmur2 key hash in C (Cython): the producer's keyed partition. records/keyhash.py is the
authority: `murmur2`, and `murmur2_partitions` over a column of keys; `bind_keyhash` hands over its
pure-Python functions, which take every input the fast path does not.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from sparklog.records._walk cimport *

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


cdef inline void set_item(list items, Py_ssize_t index, object item) noexcept:
    Py_INCREF(item)
    PyList_SET_ITEM(items, index, item)


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
