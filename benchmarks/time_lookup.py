"""Where a lookup by time spends its time, in-process: PartitionLog.offset_for_timestamp on a short log and a
long one (and one of many small segments), warm and cold, split into its steps.

    .venv/bin/python benchmarks/time_lookup.py [--batches 64] [--long 10] [--lookups 300] [--dir DIR]

The logs hold batches of 1,000 records of 1,000 bytes (about 1 MB, what scale.py's producer sends), one
millisecond apart. The short log has `--batches` batches in one segment; the long log `--long` times as many
in `--long` segments of that size; the many-segment log the long log's batches at one batch per segment.
Lookups draw a timestamp inside the first and inside the last `--batches` batches. Rows:

    whole lookup            µs per offset_for_timestamp (median, p99), every answer checked against the
                            record that holds it (the first record at or after the target)
    steps (warm only)       the same lookups replayed step by step on the segment that answers: the index
                            search (time index, then offset index), the header scan from where it points to
                            the batch that holds the answer, and the walk inside that batch; beside it, the
                            way that batch was searched before (the whole batch read, its CRC-32C checked,
                            every record decoded by records.scan), as a same-run baseline
    cold                    as "whole lookup", with every file of the log fsynced and dropped from the page
                            cache (POSIX_FADV_DONTNEED) before each lookup, so each pays the disk

Each figure is also printed as a ratio to the short log's figure measured in the same run; the load average
is printed before and after. Every loop has a bound (the lookup count).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measure import drop_page_cache  # noqa: E402
from sparklog.records.batch import build_batch, iter_batches  # noqa: E402
from sparklog.records.scan import scan  # noqa: E402
from sparklog.storage import PartitionLog  # noqa: E402
from sparklog.storage.config import LONG_MAX  # noqa: E402

RECORDS = 1000
VALUE = b"v" * 1000
BASE_TS = 1_700_000_000_000


def batch_bytes(index: int) -> bytes:
    first = BASE_TS + index * RECORDS
    return build_batch([(None, VALUE, None, first + i) for i in range(RECORDS)])


def build_log(directory: str, batches: int, per_segment: int) -> PartitionLog:
    one = len(batch_bytes(0))
    config = {"flush.ms": LONG_MAX, "segment.bytes": one * per_segment + one // 2}
    log = PartitionLog.open(directory, config)
    for index in range(batches):
        log.append(batch_bytes(index))
    log.flush()
    return log


def targets(first_batch: int, batches: int, k: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    low = BASE_TS + first_batch * RECORDS
    return [rnd.randrange(low, low + batches * RECORDS) for _ in range(k)]


def whole(log: PartitionLog, stamps: list[int], cold: bool) -> list[float]:
    """µs per lookup; each answer must be the record with that timestamp (one per ms, offsets from 0)."""
    times = []
    for ts in stamps:
        if cold:
            drop_page_cache(path for segment in log.segments
                            for path in (segment.path, segment.index.path, segment.time_index.path))
        started = time.perf_counter()
        found = log.offset_for_timestamp(ts)
        times.append((time.perf_counter() - started) * 1e6)
        assert found is not None and found.offset == ts - BASE_TS and found.timestamp == ts, (ts, found)
    return times


def steps(log: PartitionLog, stamps: list[int]) -> dict[str, list[float]]:
    """µs of each step of LogSegment.find_timestamp, replayed on the segment that answers, and of the way
    the batch was searched before (read whole, CRC-checked, every record scanned) as a same-run baseline."""
    out: dict[str, list[float]] = {"index search": [], "header scan": [], "batch walk": [],
                                   "batch whole (before)": []}
    for ts in stamps:
        segment = next(s for s in log.segments if s.max_timestamp >= ts)
        t0 = time.perf_counter()
        expected, position = segment.index.lookup(segment.time_index.lookup(ts))
        t1 = time.perf_counter()
        while True:
            header = segment.checked_header(position, expected, segment.size)
            if header.max_timestamp >= ts:
                break
            position, expected = position + header.size, header.next_offset
        t2 = time.perf_counter()
        found = segment._first_record_at_or_after(header, position, ts)
        t3 = time.perf_counter()
        before = whole_batch(segment, position, header.size, ts)
        t4 = time.perf_counter()
        assert found is not None and found.offset == ts - BASE_TS and before == (found.timestamp, found.offset)
        for key, value in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            out[key].append(value * 1e6)
    return out


def whole_batch(segment, position: int, size: int, ts: int) -> tuple[int, int] | None:
    """The previous LogSegment._first_record_at_or_after: the whole batch read, its CRC checked, every
    record's offset and timestamp decoded (records.scan)."""
    for batch in iter_batches(os.pread(segment.fd, size, position)):
        found = scan(batch)
        for record_timestamp, offset in zip(found.timestamps, found.offsets):
            if record_timestamp >= ts:
                return record_timestamp, offset
    return None


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Rows:
    def __init__(self) -> None:
        self.base: dict[str, float] = {}

    def row(self, measure: str, label: str, times: list[float]) -> None:
        median, p99 = summary(times)
        base = self.base.setdefault(measure, median)
        print(f"{measure:<22} {label:<26} {median:>10,.1f} µs median  p99 {p99:>10,.1f}  "
              f"{median / base:>5.2f}x of short", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=64, help="batches (about 1 MB each) in the short log")
    parser.add_argument("--long", type=int, default=10, help="the long log is this many times the short one")
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--cold-lookups", type=int, default=50)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    root = tempfile.mkdtemp(prefix="sparklog-lookup-", dir=args.dir)
    rows = Rows()
    n, total = args.batches, args.batches * args.long
    logs = []
    try:
        logs = [("short", build_log(os.path.join(root, "short-0"), n, n)),
                ("long", build_log(os.path.join(root, "long-0"), total, n)),
                ("many", build_log(os.path.join(root, "many-0"), total, 1))]
        for name, log in logs:
            ends = [("start", 0)] + ([("end", total - n)] if name != "short" else [])
            for end, first in ends:
                label = f"{name} ({len(log.segments)} seg), {end}"
                stamps = targets(first, n, args.lookups, first)
                whole(log, stamps[:20], False)  # warm the pages and the interpreter
                rows.row("whole lookup warm", label, whole(log, stamps, False))
                for step, times in steps(log, stamps).items():
                    rows.row(step, label, times)
                rows.row("whole lookup cold", label, whole(log, stamps[:args.cold_lookups], True))
    finally:
        for _, log in logs:
            log.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
