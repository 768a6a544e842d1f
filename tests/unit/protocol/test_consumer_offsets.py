"""The `__consumer_offsets` key and value codec: Kafka's byte layout, round trips, and malformed input refused
(decoded whole, cut at every byte, and with trailing bytes)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.protocol.consumer_offsets import (NOT_AN_OFFSET, CommitKey, CommitValue, decode_key, decode_value,
                                                encode_key, encode_value)

names = st.text(min_size=0, max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
keys = st.builds(CommitKey, names, names, int32)
values = st.builds(CommitValue, int64, names, int64, int32)


def kafka_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_the_key_and_value_are_kafkas_layout():
    """Key v1: group, topic (int16-length strings), partition int32; value v3: offset, leader epoch,
    metadata, commit timestamp; each opened by its int16 version."""
    key = encode_key(CommitKey("grp", "topic", 7))
    assert key == struct.pack(">h", 1) + kafka_string("grp") + kafka_string("topic") + struct.pack(">i", 7)
    value = encode_value(CommitValue(42, "meta", 1700000000000, 5))
    assert value == struct.pack(">hqi", 3, 42, 5) + kafka_string("meta") + struct.pack(">q", 1700000000000)


def test_older_value_versions_decode():
    v0 = struct.pack(">hq", 0, 9) + kafka_string("m") + struct.pack(">q", 100)
    v1 = struct.pack(">hq", 1, 9) + kafka_string("m") + struct.pack(">qq", 100, 200)  # with expire_timestamp
    assert decode_value(v0) == decode_value(v1) == CommitValue(9, "m", 100, -1)


def test_a_key_of_another_record_type_is_not_an_offset():
    group_metadata_key = struct.pack(">h", 2) + kafka_string("grp")
    assert decode_key(group_metadata_key) is NOT_AN_OFFSET


@given(keys)
def test_keys_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(values)
def test_values_round_trip(value):
    assert decode_value(encode_value(value)) == value


@given(keys, values)
def test_cut_or_padded_records_are_refused(key, value):
    for data, decode in ((encode_key(key), decode_key), (encode_value(value), decode_value)):
        for cut in range(len(data)):
            with pytest.raises(ValueError):
                decode(data[:cut])
        with pytest.raises(ValueError):
            decode(data + b"\x00")


def test_an_unknown_value_version_is_refused():
    with pytest.raises(ValueError, match="version 9"):
        decode_value(struct.pack(">hq", 9, 1))
