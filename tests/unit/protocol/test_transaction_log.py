"""`__transaction_state` records: Kafka's key/value bytes written out by hand, round trips (hypothesis), and
every malformed input refused with ValueError (transaction_log Rule 2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.protocol import transaction_log as tl

KEY = b"\x00\x00" b"\x00\x02tx"
ENTRY = tl.TxnLogEntry(producer_id=1000, producer_epoch=2, timeout_ms=60000, status=1,
                       partitions=(("t", 0), ("t", 2)), last_update_ms=7, start_ms=5)
VALUE = (b"\x00\x00" b"\x00\x00\x00\x00\x00\x00\x03\xe8" b"\x00\x02" b"\x00\x00\xea\x60" b"\x01"  # v0 pid epoch tmo st
         b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x02"  # t: [0, 2]
         b"\x00\x00\x00\x00\x00\x00\x00\x07" b"\x00\x00\x00\x00\x00\x00\x00\x05")  # last update, start


def test_key_and_value_match_kafkas_bytes():
    assert tl.encode_key("tx") == KEY
    assert tl.decode_key(KEY) == "tx"
    assert tl.encode_value(ENTRY) == VALUE
    assert tl.decode_value(VALUE) == ENTRY


def test_a_v1_value_with_tagged_fields_decodes():
    """Kafka 3.x writes v1 (flexible): compact strings/arrays and tags, PreviousProducerId as tag 0."""
    v1 = (b"\x00\x01" b"\x00\x00\x00\x00\x00\x00\x03\xe8" b"\x00\x02" b"\x00\x00\xea\x60" b"\x01"
          b"\x02" b"\x02t" b"\x03\x00\x00\x00\x00\x00\x00\x00\x02" b"\x00"
          b"\x00\x00\x00\x00\x00\x00\x00\x07" b"\x00\x00\x00\x00\x00\x00\x00\x05"
          b"\x01" b"\x00\x08" b"\xff\xff\xff\xff\xff\xff\xff\xff")  # one tag: 0, 8 bytes
    assert tl.decode_value(v1) == ENTRY


@pytest.mark.parametrize("data", [VALUE[:cut] for cut in range(len(VALUE))] + [VALUE + b"\x00",
                                                                                b"\x00\x02" + VALUE[2:]])
def test_a_value_cut_long_or_of_another_version_is_refused(data):
    with pytest.raises(ValueError):
        tl.decode_value(data)


@pytest.mark.parametrize("data", [KEY[:cut] for cut in range(len(KEY))] + [KEY + b"\x00", b"\x00\x01" + KEY[2:]])
def test_a_key_cut_long_or_of_another_version_is_refused(data):
    with pytest.raises(ValueError):
        tl.decode_key(data)


@given(st.builds(tl.TxnLogEntry, st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(0, 2**31 - 1),
                 st.integers(0, 7),
                 st.lists(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 99)), unique=True).map(
                     lambda ps: tuple(sorted(ps))),
                 st.integers(-1, 2**62), st.integers(-1, 2**62)))
def test_values_round_trip(entry):
    assert tl.decode_value(tl.encode_value(entry)) == entry
