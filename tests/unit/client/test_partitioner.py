"""The partitioner: Kafka's murmur2 bit for bit, agreement with librdkafka, and sticky keyless batches."""

from __future__ import annotations

import ctypes
import glob
import os
import random

import confluent_kafka
import pytest
from hypothesis import given, settings, strategies as st

from sparklog.client.partitioner import DefaultPartitioner, murmur2, partition_for_key, to_positive

# Kafka's UtilsTest.testMurmur2 vectors.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _librdkafka():
    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    (path,) = glob.glob(os.path.join(libs, "librdkafka*.so*"))
    lib = ctypes.CDLL(path)
    fn = lib.rd_kafka_msg_partitioner_murmur2_random
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_void_p,
                   ctypes.c_void_p]
    return fn


LIBRDKAFKA_MURMUR2_RANDOM = _librdkafka()


@pytest.mark.parametrize("key,expected", sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_java_vectors(key, expected):
    assert murmur2(key) == expected


@settings(max_examples=2000, deadline=None)
@given(key=st.binary(max_size=64), partitions=st.integers(min_value=1, max_value=5000))
def test_keyed_partition_agrees_with_librdkafka_murmur2_random(key, partitions):
    # The keyed branch of librdkafka's partitioner never touches the topic handle, so NULL is fine.
    expected = LIBRDKAFKA_MURMUR2_RANDOM(None, key, len(key), partitions, None, None)
    assert partition_for_key(key, partitions) == expected
    assert DefaultPartitioner().partition("t", key, partitions) == expected


@given(key=st.binary(max_size=40))
def test_murmur2_is_a_signed_32_bit_int_and_to_positive_clears_the_sign(key):
    h = murmur2(key)
    assert -(2**31) <= h < 2**31
    assert 0 <= to_positive(h) < 2**31
    assert to_positive(h) == h & 0x7FFFFFFF


@given(key=st.binary(max_size=40), partitions=st.integers(min_value=1, max_value=1000))
def test_same_key_same_partition_whatever_else_was_sent(key, partitions):
    p = DefaultPartitioner(random.Random(1))
    first = p.partition("t", key, partitions)
    p.partition("t", None, partitions)
    p.batch_closed("t", first)
    assert p.partition("t", key, partitions) == first


def test_keyless_records_stick_to_one_partition_until_its_batch_closes():
    p = DefaultPartitioner(random.Random(7))
    chosen = {p.partition("t", None, 12) for _ in range(100)}
    assert len(chosen) == 1
    seen = set(chosen)
    for _ in range(200):
        current = p.partition("t", None, 12)
        p.batch_closed("t", current)
        seen.add(current)
    assert len(seen) == 12  # random over all partitions across batches


def test_keyless_partition_is_per_topic_and_adapts_to_fewer_partitions():
    p = DefaultPartitioner(random.Random(3))
    a = p.partition("a", None, 1000)
    assert p.partition("b", None, 1) == 0
    assert p.partition("a", None, 1000) == a
    assert p.partition("a", None, 1) == 0  # the sticky choice no longer exists


def test_batch_closed_for_another_partition_keeps_the_sticky_choice():
    p = DefaultPartitioner(random.Random(5))
    sticky = p.partition("t", None, 10)
    p.batch_closed("t", (sticky + 1) % 10)
    assert p.partition("t", None, 10) == sticky
