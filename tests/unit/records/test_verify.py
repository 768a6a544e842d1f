"""records/verify.py: every batch a producer builds passes; a batch with a right CRC and records that do not
parse is refused with its reason; the compiled twin and the pure-Python one give the same answer."""

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sparklog.records import batch as batch_module
from sparklog.records.batch import ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, build_batch, compute_crc
from sparklog.records.compression import compress
from sparklog.records.verify import records_error
from support.codecs import NAMES, switched

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TS = 1_700_000_000_000
_LENGTH = struct.Struct(">i")
_DELTA = struct.Struct(">i")
_COUNT = struct.Struct(">i")
_CRC = struct.Struct(">I")

varint = batch_module.PYTHON_CODEC.encode_varint

keys = st.none() | st.binary(max_size=20)
headers = st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=10)), max_size=3)
records_strategy = st.lists(st.tuples(keys, keys, headers), min_size=1, max_size=12)


def encode_record(index, key, value, hdrs, offset_delta=None, length_change=0, header_key_null=False):
    """One record, written here field by field (not by the codec under test), with an optional defect."""
    body = bytearray(b"\x00") + varint(index) + varint(index if offset_delta is None else offset_delta)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    body += varint(len(hdrs))
    for number, (hkey, hvalue) in enumerate(hdrs):
        raw = hkey.encode()
        body += varint(-1) if header_key_null and number == 0 else varint(len(raw)) + raw
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body) + length_change) + bytes(body)


def reframe(section, count, codec="none", last_offset_delta=None, good_crc=True):
    """A v2 batch around `section` (compressed with `codec`) saying `count` records, with a right CRC."""
    head = bytearray(build_batch([(None, b"x", (), TS)], compression="none")[:HEADER_SIZE])
    head[ATTRIBUTES_OFFSET + 1] = CODEC_IDS[codec]
    payload = compress(CODEC_IDS[codec], bytes(section)) if codec != "none" else bytes(section)
    whole = head + payload
    _LENGTH.pack_into(whole, 8, len(whole) - LOG_OVERHEAD)
    _DELTA.pack_into(whole, ATTRIBUTES_OFFSET + 2, count - 1 if last_offset_delta is None else last_offset_delta)
    _COUNT.pack_into(whole, HEADER_SIZE - 4, count)
    _CRC.pack_into(whole, 17, compute_crc(whole) ^ (0 if good_crc else 1))
    return bytes(whole)


@pytest.fixture(params=NAMES)
def twin(request):
    with switched(request.param) as active:
        yield active


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_every_batch_a_producer_builds_passes(twin, records, codec):
    built = build_batch([(k, v, tuple(h), TS + i) for i, (k, v, h) in enumerate(records)], compression=codec)
    assert records_error(built) is None
    assert records_error(memoryview(bytearray(built))) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_the_reference_encoding_passes_so_the_mutations_below_test_one_defect_each(twin, records, codec):
    section = b"".join(encode_record(i, *r) for i, r in enumerate(records))
    assert records_error(reframe(section, len(records), codec)) is None


MUTATIONS = ["length", "offset_delta", "count", "last_offset_delta", "truncated", "trailing", "null_header_key",
             "long_varint", "zero_count"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=records_strategy, codec=st.sampled_from(CODECS), mutation=st.sampled_from(MUTATIONS),
       data=st.data())
def test_a_mutation_of_the_records_their_lengths_or_counts_is_refused(twin, records, codec, mutation, data):
    at = data.draw(st.integers(0, len(records) - 1))
    count, last, parts = len(records), None, []
    for i, (key, value, hdrs) in enumerate(records):
        defect = {}
        if i == at and mutation == "length":
            defect["length_change"] = data.draw(st.integers(-3, 3).filter(bool))
        if i == at and mutation == "offset_delta":
            defect["offset_delta"] = data.draw(st.integers(-5, 50).filter(lambda d: d != i))
        if i == at and mutation == "null_header_key":
            assume(hdrs)
            defect["header_key_null"] = True
        parts.append(encode_record(i, key, value, hdrs, **defect))
    section = b"".join(parts)
    if mutation == "count":
        count = data.draw(st.integers(1, 40).filter(lambda c: c != len(records)))
    elif mutation == "last_offset_delta":
        last = data.draw(st.integers(-1, 40).filter(lambda d: d != len(records) - 1))
    elif mutation == "truncated":
        section = section[:data.draw(st.integers(0, len(section) - 1))]
    elif mutation == "trailing":
        section += data.draw(st.binary(min_size=1, max_size=8))
    elif mutation == "long_varint":
        section = section[:sum(map(len, parts[:at]))] + b"\xff" * 11 + section[sum(map(len, parts[:at + 1])):]
    elif mutation == "zero_count":
        count, last = 0, -1
    reason = records_error(reframe(section, count, codec, last))
    assert reason is not None, mutation


def test_a_section_that_does_not_decompress_is_refused(twin):
    good = encode_record(0, None, b"value", [])
    for codec in CODECS[1:]:
        head = bytearray(reframe(good, 1, codec))
        garbage = bytes(range(7, 7 + len(head) - HEADER_SIZE))
        reason = records_error(reframe_raw(head, garbage))
        assert reason is not None and "does not decompress" in reason, (codec, reason)


def reframe_raw(head, payload):
    """`head`'s header around `payload` as it is (not compressed here), re-signed."""
    whole = bytearray(head[:HEADER_SIZE]) + payload
    _LENGTH.pack_into(whole, 8, len(whole) - LOG_OVERHEAD)
    _CRC.pack_into(whole, 17, compute_crc(whole))
    return bytes(whole)


def test_the_reasons_say_what_is_wrong(twin):
    good = encode_record(0, b"k", b"v", [("h", b"1")])
    assert "ends inside a record" in records_error(reframe(good, 2))  # a count the records do not reach
    assert "invalid record count 0" in records_error(reframe(good, 0, last_offset_delta=-1))
    assert "lastOffsetDelta" in records_error(reframe(good, 1, last_offset_delta=3))
    assert "offsetDelta 7" in records_error(reframe(encode_record(0, b"k", b"v", [], offset_delta=7), 1))
    assert "null header key" in records_error(reframe(encode_record(0, b"k", b"v", [("h", None)],
                                                                    header_key_null=True), 1))
    assert "do not parse" in records_error(reframe(good + b"\x00", 1))


def test_a_batch_with_a_wrong_crc_or_framing_is_left_to_the_batch_check(twin):
    """Rule 2: corrupt (validate_batch's CORRUPT_MESSAGE), not malformed."""
    garbage = b"\xff" * 30
    assert records_error(reframe(garbage, 3, good_crc=False)) is None
    assert records_error(reframe(garbage, 3)) is not None
    assert records_error(reframe(garbage, 3)[:-1]) is None  # batchLength does not match the bytes
    assert records_error(b"") is None
    assert records_error(b"\x00" * 70) is None  # magic 0


@settings(max_examples=300, deadline=None)
@given(section=st.binary(max_size=64), count=st.integers(-2, 12), codec=st.sampled_from(CODECS),
       last=st.none() | st.integers(-2, 12))
def test_both_twins_give_the_same_answer_for_any_bytes(section, count, codec, last):
    candidate = reframe(section, count, codec, last)
    answers = []
    for name in NAMES:
        with switched(name):
            answers.append(records_error(candidate))
    assert answers[0] == answers[1]


@settings(max_examples=100, deadline=None)
@given(records=records_strategy, flip=st.data())
def test_both_twins_agree_on_a_valid_section_with_any_byte_changed(records, flip):
    section = bytearray(b"".join(encode_record(i, *r) for i, r in enumerate(records)))
    at = flip.draw(st.integers(0, len(section) - 1))
    section[at] = flip.draw(st.integers(0, 255))
    candidate = reframe(section, len(records))
    answers = []
    for name in NAMES:
        with switched(name):
            answers.append(records_error(candidate))
    assert answers[0] == answers[1]
