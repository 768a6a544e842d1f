"""ListOffsets v0's legacy pick (storage/legacy_offsets.py) against its Rules, for any segment times."""

from __future__ import annotations

from hypothesis import given, strategies as st

from sparklog.storage.legacy_offsets import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, offsets_before,
                                             visible_to_consumer)


@st.composite
def points(draw):
    """(offset, time) points as segment_points makes them: offsets rising, times any."""
    offsets = sorted(draw(st.sets(st.integers(0, 10_000), min_size=1, max_size=8)))
    return [(offset, draw(st.integers(0, 1000))) for offset in offsets]


@given(points(), st.integers(-2, 1100), st.integers(0, 10))
def test_the_pick_is_the_last_points_at_or_before_the_time_largest_first(pts, timestamp, max_num):
    got = offsets_before(pts, timestamp, max_num)
    if timestamp == LATEST_TIMESTAMP:
        start = len(pts) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        at_or_before = [i for i, (_, t) in enumerate(pts) if t <= timestamp]
        start = at_or_before[-1] if at_or_before else -1
    assert got == [offset for offset, _ in reversed(pts[:start + 1])][:max_num]


@given(st.lists(st.integers(0, 100), unique=True).map(lambda xs: sorted(xs, reverse=True)), st.integers(0, 100))
def test_a_consumer_sees_nothing_above_the_high_watermark(offsets, hw):
    got = visible_to_consumer(offsets, hw)
    assert all(offset <= hw for offset in got)
    assert got == ([hw] if any(o > hw for o in offsets) else []) + [o for o in offsets if o <= hw]
