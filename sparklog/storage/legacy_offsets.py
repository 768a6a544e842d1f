"""ListOffsets v0's answer (Kafka's `legacyFetchOffsetsBefore` and `handleListOffsetRequestV0`): up to
max_num_offsets offsets at segment boundaries, chosen by the segments' last-modified times.

Rule 1 (the points): one (offset, time) per segment, oldest first: its base offset (raised to the log start)
and its .log file's last-modified time; then (log end, now) when the active segment holds bytes.
Rule 2 (the pick): latest (-1) starts at the last point, earliest (-2) at the first, another timestamp at the
last point whose time is <= it (none such: no offsets). From there at most max_num_offsets points going back,
largest offset first.
Rule 3 (a consumer sees no uncommitted offset): for a consumer (not a replica), offsets above the high
watermark are dropped and the high watermark put first in their place.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparklog.storage.log import PartitionLog

LATEST_TIMESTAMP = -1  # ListOffsetsRequest.LATEST_TIMESTAMP
EARLIEST_TIMESTAMP = -2  # ListOffsetsRequest.EARLIEST_TIMESTAMP


def segment_points(plog: PartitionLog, now_ms: int | None = None) -> list[tuple[int, int]]:
    """Rule 1 over a PartitionLog: [(offset, last-modified ms)], oldest first."""
    segments, start = plog.segments, plog.log_start_offset
    points = [(max(segment.base_offset, start), segment.last_modified_ms) for segment in segments]
    if segments[-1].size > 0:
        points.append((plog.log_end_offset, int(time.time() * 1000) if now_ms is None else now_ms))
    return points


def offsets_before(points: list[tuple[int, int]], timestamp: int, max_num_offsets: int) -> list[int]:
    """Rule 2: the offsets answered for `timestamp`, largest first."""
    if timestamp == LATEST_TIMESTAMP:
        start = len(points) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num_offsets, start + 1))
    return sorted((points[start - j][0] for j in range(count)), reverse=True)


def visible_to_consumer(offsets: list[int], high_watermark: int) -> list[int]:
    """Rule 3."""
    if not any(offset > high_watermark for offset in offsets):
        return offsets
    return [high_watermark] + [offset for offset in offsets if offset <= high_watermark]
