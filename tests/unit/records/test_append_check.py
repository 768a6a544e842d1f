"""append_check.check_sets: the compiled twin equals the pure-Python one on whole, damaged, cut and foreign
record sets, and the pure one's verdicts are validate_batch's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sparklog.records import _cbatch, append_check, batch, implementation
from sparklog.records.append_check import CORRUPT, REFUSED_ATTRIBUTES, REFUSED_SIZE, check_sets, py_check_sets
from sparklog.records.batch import CorruptRecordError, build_batch, validate_batch

TWINS = {implementation.CYTHON: _cbatch.check_sets, implementation.PYTHON: py_check_sets}


@st.composite
def record_sets(draw):
    """A batch as a client sends it, then perhaps damaged: a byte changed, cut, grown, or not a batch."""
    records = [(draw(st.none() | st.binary(max_size=8)), draw(st.binary(max_size=60)), None, None)
               for _ in range(draw(st.integers(1, 4)))]
    data = bytearray(build_batch(records, producer_id=draw(st.sampled_from([-1, 7])), producer_epoch=0,
                                 base_sequence=0))
    damage = draw(st.sampled_from(["none", "byte", "cut", "grow", "control", "transactional", "foreign", "none-set"]))
    if damage == "byte":
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif damage == "cut":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "grow":
        data += draw(st.binary(min_size=1, max_size=70))
    elif damage == "control":
        data[22] |= 0x20
    elif damage == "transactional":
        data[22] |= 0x10
    elif damage == "foreign":
        data = bytearray(draw(st.binary(max_size=120)))
    elif damage == "none-set":
        return None
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(data)


@settings(max_examples=400, deadline=None)
@given(sets=st.lists(record_sets(), max_size=6), max_bytes=st.sampled_from([0, 100, 1 << 20]))
def test_the_twins_agree_and_the_verdicts_are_validate_batchs(sets, max_bytes):
    expected = py_check_sets(sets, max_bytes)
    assert TWINS[implementation.CYTHON](sets, max_bytes) == expected
    for records, verdict in zip(sets, expected):
        if verdict is None:
            assert records is None or len(records) < batch.HEADER_SIZE or batch.peek_size(records, 0) != len(records)
        elif verdict == CORRUPT:
            with pytest.raises(CorruptRecordError):
                validate_batch(records)
        elif verdict == REFUSED_SIZE:
            assert len(records) > max_bytes
        elif verdict != REFUSED_ATTRIBUTES:
            validate_batch(records)
            assert verdict == append_check.APPEND_FIELDS.unpack_from(records) and len(records) <= max_bytes


def test_check_sets_runs_the_compiled_twin_unless_extensions_are_disabled(monkeypatch):
    monkeypatch.setattr(_cbatch, "check_sets", lambda sets, max_bytes: ["compiled"])
    sets = [build_batch([(None, b"v", None, None)])]
    compiled = not implementation.extensions_disabled()
    assert batch.CODEC.name == (implementation.CYTHON if compiled else implementation.PYTHON)
    assert check_sets(sets, 1000) == (["compiled"] if compiled else py_check_sets(sets, 1000))
