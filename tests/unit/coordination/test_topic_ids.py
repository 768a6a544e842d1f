"""Topic ids: Kafka's string form round-trips, random ids avoid the reserved ones, bad strings are refused."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination import topic_ids


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_the_string_form_is_kafkas_22_character_url_safe_base64_and_round_trips(value):
    text = topic_ids.to_string(uuid.UUID(int=value))
    assert len(text) == 22 and "=" not in text
    assert base64.urlsafe_b64decode(text + "==") == uuid.UUID(int=value).bytes
    assert topic_ids.to_uuid(text) == uuid.UUID(int=value)


def test_random_ids_are_distinct_and_never_reserved():
    drawn = {topic_ids.new_topic_id() for _ in range(2000)}
    assert len(drawn) == 2000
    assert all(not t.startswith("-") for t in drawn)
    assert not drawn & {topic_ids.to_string(topic_ids.ZERO), topic_ids.to_string(topic_ids.METADATA_TOPIC_ID)}


def test_the_czxid_id_puts_the_czxid_in_the_low_eight_bytes():
    assert topic_ids.to_uuid(topic_ids.from_czxid(0x1_0000_0011)).bytes[-8:] == (0x1_0000_0011).to_bytes(8, "big")


@pytest.mark.parametrize("bad", ["", "short", "A" * 23, "!" * 22, "AAAAAAAAAAAAAAAAAAAAA_"])
def test_a_string_that_is_not_an_id_is_refused(bad):
    with pytest.raises(ValueError, match="topic id"):
        topic_ids.to_uuid(bad)
