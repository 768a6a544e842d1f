"""The request decoder on hostile input: random bytes, and valid frames with bits flipped, truncated or
extended. It decodes or raises a RemoteProtocolError (UnsupportedVersion included) -- never anything else.
The response decoder likewise raises only MalformedResponse."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.protocol import (ALL_VERSIONS, REQUESTS, RESPONSES, MalformedResponse, RemoteProtocolError,
                               RequestHeader, decode_request, decode_response, encode_request, encode_response)
from unit.protocol.strategies import struct_of

CASES = [(key, v) for key, (lo, hi) in ALL_VERSIONS.items() for v in range(lo, hi + 1)]
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_refuse(frame) -> None:
    try:
        decode_request(frame)
    except RemoteProtocolError:
        pass


@st.composite
def valid_request(draw):
    key, version = draw(st.sampled_from(CASES))
    body = draw(struct_of(REQUESTS[key], version))
    return encode_request(key, version, 1, draw(st.none() | st.text(max_size=4)), body)[4:]


@st.composite
def mutated(draw, frames):
    frame = bytearray(draw(frames))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "set"]))
        if kind == "flip" and frame:
            i = draw(st.integers(0, len(frame) - 1))
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and frame:
            i = draw(st.integers(0, len(frame) - 1))
            frame[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del frame[draw(st.integers(0, len(frame))):]
        else:
            frame += draw(st.binary(min_size=1, max_size=8))
    return bytes(frame)


@SETTINGS
@given(frame=st.binary(max_size=64))
def test_random_bytes(frame):
    _decode_or_refuse(frame)


@SETTINGS
@given(header=st.sampled_from(CASES), tail=st.binary(max_size=64))
def test_random_bodies_behind_valid_headers(header, tail):
    key, version = header
    _decode_or_refuse(int(key).to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01" + tail)


@SETTINGS
@given(frame=mutated(valid_request()))
def test_mutated_valid_requests(frame):
    _decode_or_refuse(frame)
    _decode_or_refuse(memoryview(frame))


@st.composite
def valid_response(draw):
    key, version = draw(st.sampled_from(CASES))
    body = draw(struct_of(RESPONSES[key], version))
    frame = b"".join(bytes(c) for c in encode_response(RequestHeader(key, version, 1), body))[4:]
    return key, version, frame


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=valid_response(), data=st.data())
def test_mutated_valid_responses(case, data):
    key, version, frame = case
    frame = data.draw(mutated(st.just(frame)))
    try:
        decode_response(key, version, frame)
    except MalformedResponse:
        pass


@st.composite
def legacy_message_set(draw):
    """A Produce v0-v2 record set: messages of magic 0 or 1, plain or in one compressed wrapper."""
    from sparklog.records import legacy

    items = draw(st.lists(st.tuples(st.none() | st.binary(max_size=16), st.none() | st.binary(max_size=16),
                                    st.integers(-1, 2**41)), min_size=1, max_size=4))
    return legacy.encode(items, draw(st.sampled_from([0, 1])), draw(st.sampled_from(legacy.LEGACY_CODECS)))


@SETTINGS
@given(blob=mutated(legacy_message_set()) | st.binary(max_size=64))
def test_mutated_legacy_message_sets(blob):
    """The legacy message set decoder (records/legacy.py, what Produce v0-v2 carries): decodes or refuses in one
    line (CorruptMessageSet) -- never anything else."""
    from sparklog.records import legacy

    try:
        legacy.up_convert(blob)
    except legacy.CorruptMessageSet as exc:
        assert "\n" not in str(exc)
