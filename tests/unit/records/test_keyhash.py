"""keyhash: the compiled murmur2 and its pure-Python twin both equal kafka-python's, key for key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from sparklog.records import _ckeyhash, implementation, keyhash

MURMUR2 = {implementation.CYTHON: _ckeyhash.murmur2, implementation.PYTHON: keyhash.PYTHON_MURMUR2}
PARTITIONS = {implementation.CYTHON: _ckeyhash.murmur2_partitions, implementation.PYTHON: keyhash.PYTHON_PARTITIONS}
keys = st.binary(max_size=80)
_ckeyhash.bind_keyhash(keyhash.PYTHON_MURMUR2, keyhash.PYTHON_PARTITIONS)  # as keyhash does, also when it runs Python


def test_the_compiled_twin_is_active_unless_disabled():
    expected = implementation.PYTHON if implementation.extensions_disabled() else implementation.CYTHON
    assert keyhash.IMPLEMENTATION == expected
    assert (keyhash.murmur2 is _ckeyhash.murmur2) == (expected == implementation.CYTHON)


@pytest.mark.parametrize("name", sorted(MURMUR2))
@settings(max_examples=500, deadline=None)
@given(key=keys)
def test_murmur2_equals_kafka_python(name, key):
    h = MURMUR2[name](key)
    assert -(2**31) <= h < 2**31
    assert h & 0xFFFFFFFF == kafka_python_murmur2(key)


@pytest.mark.parametrize("name", sorted(PARTITIONS))
@settings(max_examples=300, deadline=None)
@given(column=st.lists(st.none() | keys, max_size=30), partitions=st.integers(min_value=1, max_value=2**31 - 1))
def test_partitions_for_keys_equals_kafka_python_per_key(name, column, partitions):
    expected = [None if k is None else (kafka_python_murmur2(k) & 0x7FFFFFFF) % partitions for k in column]
    assert PARTITIONS[name](column, partitions) == expected


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_other_buffers_defer_to_python_with_the_same_result(kind):
    assert _ckeyhash.murmur2(kind(b"user-42")) == keyhash.PYTHON_MURMUR2(b"user-42")
    assert _ckeyhash.murmur2_partitions([kind(b"user-42"), b"x"], 9) == keyhash.PYTHON_PARTITIONS([b"user-42", b"x"], 9)


@pytest.mark.parametrize("bad", [0, -3, 2**31, 2**70])
def test_partition_counts_outside_java_ints_get_pythons_answer_or_error(bad):
    def outcome(fn):
        try:
            return "returned", fn([b"k"], bad)
        except Exception as exc:  # noqa: BLE001 - the same error type and message is the assertion
            return "raised", type(exc), str(exc)

    assert outcome(_ckeyhash.murmur2_partitions) == outcome(keyhash.PYTHON_PARTITIONS)


def test_a_str_key_fails_alike():
    with pytest.raises(TypeError):
        keyhash.PYTHON_MURMUR2("user-42")
    with pytest.raises(TypeError):
        _ckeyhash.murmur2("user-42")


def test_bytes_keys_never_leave_the_fast_path():
    """The agreement above would hold trivially if the compiled twin deferred everything to Python."""
    def deferred(*args):
        raise AssertionError(f"deferred to Python: {args!r:.80}")

    _ckeyhash.bind_keyhash(deferred, deferred)
    try:
        hashes = [_ckeyhash.murmur2(bytes(range(n))) for n in range(12)]
        partitions = _ckeyhash.murmur2_partitions([None, b"", b"abc", b"a-little-bit-long-string"], 12)
    finally:
        _ckeyhash.bind_keyhash(keyhash.PYTHON_MURMUR2, keyhash.PYTHON_PARTITIONS)
    assert hashes == [keyhash.PYTHON_MURMUR2(bytes(range(n))) for n in range(12)]
    assert partitions == keyhash.PYTHON_PARTITIONS([None, b"", b"abc", b"a-little-bit-long-string"], 12)
