"""Where a lookup by time starts among a log's segments: a bisection, not a walk over every segment.

TimeBounds holds, for one tuple of segments (the log's list, which is replaced, never changed in place), the
running maximum of its closed segments' largest timestamps: entry i is the largest timestamp of segments
0..i. Timestamps need not grow from segment to segment, but the running maximum does, so the first segment
that may hold a record at or after T is found by bisecting it.

Rule: bounds-only-verified: built only for a tuple whose segments are all verified: an unverified segment's largest
timestamp
        comes from an index file that a first-use verification may rebuild (upwards too).
Rule: bounds-upper: every entry is an upper bound of what the segments it covers hold while the tuple is the log's: a
        closed, verified segment's largest timestamp only falls (a truncation or a fence cuts it; a roll, a
        deletion or a cleaning replaces the tuple). So every segment before `first_candidate(T)` has only
        timestamps below T, and the caller looks from there on, checking each segment as before.
Rule: bounds-skip-active: the last segment, which appends change, is not covered: `first_candidate` returns its index
when no
        closed segment may answer.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any


class TimeBounds:
    """Rule: bounds-only-verified, Rule: bounds-upper and Rule: bounds-skip-active for `segments`; readers in any
    thread may build one (the log keeps the latest)."""

    __slots__ = ("segments", "_running_max")

    def __init__(self, segments: tuple[Any, ...]) -> None:
        self.segments = segments
        running, bounds = -1, array("q")
        for segment in segments[:-1]:
            running = max(running, segment.max_timestamp)
            bounds.append(running)
        self._running_max = bounds

    def first_candidate(self, timestamp: int) -> int:
        """The index of the first segment that may hold a record with a timestamp >= `timestamp`."""
        return bisect_left(self._running_max, timestamp)
