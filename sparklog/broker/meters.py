"""The counters the request paths keep for the metrics endpoint (broker/metrics.py reads them at scrape time).

Rule 1 (per request, never per record): every update is one call per request, per partition of a request, or
per appended group; its cost is a dict lookup and a few integer additions (no lock, no allocation once a
topic or api has been seen). The Produce and Fetch fast paths (dispatch.py Rules 4-6) update them as the
general paths do.
Rule 2 (one writer): the event loop's thread writes; the scrape thread only reads, copying a dict before it
iterates it (`rows()`), so a scrape never blocks a request and a request never waits for a scrape.
Rule 3 (counters only go up): a topic's row outlives its leadership here, so `_total` series never fall
while the broker runs.
"""

from __future__ import annotations

import asyncio
import bisect
import time

# Columns of a topic's row.
BYTES_IN, MESSAGES_IN, BYTES_OUT, FAILED_PRODUCE, FAILED_FETCH = range(5)
TOPIC_COLUMNS = 5
# Upper bounds of the request latency histogram, in seconds (Prometheus' `le`; +Inf is the last count).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LOOP_LAG_INTERVAL_S = 0.5  # how often the event loop's lag is sampled


class TopicMeters:
    """Per topic: bytes and messages appended by producers, bytes read by consumers, failed partitions."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[str, list[int]] = {}

    def _row(self, topic: str) -> list[int]:
        row = self._rows.get(topic)
        if row is None:
            row = self._rows[topic] = [0] * TOPIC_COLUMNS
        return row

    def produced(self, topic: str, nbytes: int, messages: int) -> None:
        row = self._row(topic)
        row[BYTES_IN] += nbytes
        row[MESSAGES_IN] += messages

    def fetched(self, topic: str, nbytes: int) -> None:
        self._row(topic)[BYTES_OUT] += nbytes

    def failed_produce(self, topic: str) -> None:
        self._row(topic)[FAILED_PRODUCE] += 1

    def failed_fetch(self, topic: str) -> None:
        self._row(topic)[FAILED_FETCH] += 1

    def rows(self) -> dict[str, tuple[int, ...]]:
        """A copy, for the scrape thread (Rule 2)."""
        return {topic: tuple(row) for topic, row in list(self._rows.items())}


class RequestMeters:
    """Per api key: a latency histogram (time from a request's handling to its reply being ready, waits in
    the purgatory included); per (api key, error code): the error codes answered."""

    __slots__ = ("_latency", "_errors", "loop_lag_s")

    def __init__(self) -> None:
        self._latency: dict[int, list] = {}  # api key -> [bucket counts..., +Inf count, sum of seconds]
        self._errors: dict[tuple[int, int], int] = {}
        self.loop_lag_s = 0.0  # the last sample of the event loop's lag (`sample_loop_lag`)

    def observe(self, api_key: int, seconds: float, count: int = 1) -> None:
        """`count` requests answered in `seconds` each (a produce group: one measurement for all of it)."""
        row = self._latency.get(api_key)
        if row is None:
            row = self._latency[api_key] = [0] * (len(LATENCY_BUCKETS) + 1) + [0.0]
        row[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += count
        row[-1] += seconds * count

    def error(self, api_key: int, code: int) -> None:
        key = (api_key, code)
        self._errors[key] = self._errors.get(key, 0) + 1

    def latency(self) -> dict[int, tuple]:
        return {api: tuple(row) for api, row in list(self._latency.items())}

    def errors(self) -> dict[tuple[int, int], int]:
        return dict(list(self._errors.items()))

    async def sample_loop_lag(self) -> None:
        """Forever: sleep LOOP_LAG_INTERVAL_S and record how late the loop woke (its lag behind its timers)."""
        while True:
            started = time.monotonic()
            await asyncio.sleep(LOOP_LAG_INTERVAL_S)
            self.loop_lag_s = max(0.0, time.monotonic() - started - LOOP_LAG_INTERVAL_S)
