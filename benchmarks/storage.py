"""Storage throughput: PartitionLog.append and read() beside plain sequential file I/O of the same bytes.

    .venv/bin/python benchmarks/storage.py --size-mb 1024 [--rounds 3] [--dir /some/dir]

Appends pre-encoded batches (50 records of 200-byte values, as `bytes`, so the log copies each once)
through PartitionLog.append; the baseline os.write()s the same batch bytes to one file. Both follow the same
fsync policy: none until the end, then one (os.fsync for the baseline, flush() for the log, with flush.ms
set to never so the background Flusher does not fsync meanwhile). Then reads the whole log through read()
slices (read_bytes, 1 MiB each) beside os.read() of the baseline file in 1 MiB chunks; both hit the page
cache. The machine may be shared, so the rounds alternate baseline and log (and which goes first), and the
report gives each round, the median of each side and the ratio of the medians, with the load average.
Goals: append >= 70% and read >= 80% of the plain figures.

The scrub cost: one unthrottled PartitionLog.scrub() pass (read, CRC-32C and offset chain of every batch;
what the background scrubber does at log.scrubber.bytes.per.second) over the same bytes, beside the plain
read of them and beside CRC-32C alone over batches already in memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from crc32c import crc32c  # noqa: E402

from sparklog.storage import PartitionLog  # noqa: E402
from sparklog.storage.config import LONG_MAX  # noqa: E402
from sparklog.records.batch import build_batch  # noqa: E402

MIB = 1024 * 1024
RECORDS_PER_BATCH = 50
VALUE_BYTES = 200
READ_BYTES = MIB
LOG_CONFIG = {"flush.ms": LONG_MAX}  # fsync only at the end, like the baseline; other settings default


def make_batches(count: int = 16) -> list[bytes]:
    batches = []
    for b in range(count):
        records = [(b"key-%d" % i, os.urandom(VALUE_BYTES), None, 1_700_000_000_000 + i)
                   for i in range(RECORDS_PER_BATCH)]
        batches.append(build_batch(records))
    return batches


def plain_write(path: str, batches: list[bytes], total: int) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written, i = 0, 0
    while written < total:
        batch = batches[i % len(batches)]
        os.write(fd, batch)
        written += len(batch)
        i += 1
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - start


def log_append(directory: str, batches: list[bytes], total: int) -> tuple[float, PartitionLog]:
    log = PartitionLog.open(directory, LOG_CONFIG)
    start = time.perf_counter()
    written, i = 0, 0
    append = log.append
    while written < total:
        batch = batches[i % len(batches)]
        append(batch)
        written += len(batch)
        i += 1
    log.flush()
    return time.perf_counter() - start, log


def plain_read(path: str) -> tuple[float, int]:
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    got = 0
    while chunk := os.read(fd, READ_BYTES):
        got += len(chunk)
    os.close(fd)
    return time.perf_counter() - start, got


def log_read(log: PartitionLog) -> tuple[float, int]:
    start = time.perf_counter()
    got = 0
    for piece in log.iter_slices(0, READ_BYTES):
        got += len(piece.read_bytes())
    return time.perf_counter() - start, got


def log_scrub(log: PartitionLog) -> tuple[float, int]:
    log.roll()  # every byte in a closed, flushed segment: what a scrub pass covers
    log.flush()
    start = time.perf_counter()
    got = log.scrub()
    return time.perf_counter() - start, got


def crc_alone(batches: list[bytes], total: int) -> float:
    """Seconds for CRC-32C over `total` bytes of batches already in memory (16 MiB buffers)."""
    block = b"".join(batches)
    block *= max(1, 16 * MIB // len(block))
    start = time.perf_counter()
    for _ in range(max(1, total // len(block))):
        crc32c(block)
    return (time.perf_counter() - start) * total / (max(1, total // len(block)) * len(block))


def one_round(root: str, batches: list[bytes], total: int, log_first: bool) -> dict[str, float]:
    """Seconds for each of the four runs; the files are removed afterwards."""
    plain_path, log_dir = os.path.join(root, "plain.bin"), os.path.join(root, "bench-0")
    times: dict[str, float] = {}
    if log_first:
        times["append"], log = log_append(log_dir, batches, total)
        times["write"] = plain_write(plain_path, batches, total)
        times["log_read"], log_bytes = log_read(log)
        times["read"], plain_bytes = plain_read(plain_path)
    else:
        times["write"] = plain_write(plain_path, batches, total)
        times["append"], log = log_append(log_dir, batches, total)
        times["read"], plain_bytes = plain_read(plain_path)
        times["log_read"], log_bytes = log_read(log)
    assert abs(log_bytes - plain_bytes) < len(batches[0]), (log_bytes, plain_bytes)
    times["scrub"], scrubbed = log_scrub(log)
    assert scrubbed == log_bytes, (scrubbed, log_bytes)
    times["crc"] = crc_alone(batches, total)
    times["bytes"] = log_bytes
    times["segments"] = len(log.segments)
    log.close()
    shutil.rmtree(log_dir)
    os.unlink(plain_path)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    args = parser.parse_args(argv)
    total = args.size_mb * MIB
    root = tempfile.mkdtemp(prefix="sparklog-bench-", dir=args.dir or os.getcwd())
    try:
        batches = make_batches()
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        rounds = []
        for r in range(args.rounds):
            t = one_round(root, batches, total, log_first=bool(r % 2))
            mb = t["bytes"] / MIB
            print(f"round {r + 1}: write {mb / t['write']:7.1f}  append {mb / t['append']:7.1f}  "
                  f"read {mb / t['read']:7.1f}  log read {mb / t['log_read']:7.1f}  "
                  f"scrub {mb / t['scrub']:7.1f}  crc {mb / t['crc']:7.1f} MB/s"
                  f"{'  (log first)' if r % 2 else ''}")
            rounds.append(t)
        mb = rounds[0]["bytes"] / MIB
        med = {k: statistics.median(t[k] for t in rounds)
               for k in ("write", "append", "read", "log_read", "scrub", "crc")}
        print(f"data: {mb:.0f} MiB in batches of {RECORDS_PER_BATCH} x {VALUE_BYTES}-byte records "
              f"({len(batches[0])} bytes each), {rounds[0]['segments']} segment(s); medians of {len(rounds)} rounds")
        print(f"plain write + fsync : {mb / med['write']:8.1f} MB/s")
        print(f"log append  + flush : {mb / med['append']:8.1f} MB/s   "
              f"ratio {med['write'] / med['append']:.2f} (goal >= 0.70)")
        print(f"plain read          : {mb / med['read']:8.1f} MB/s")
        print(f"log read (slices)   : {mb / med['log_read']:8.1f} MB/s   "
              f"ratio {med['read'] / med['log_read']:.2f} (goal >= 0.80)")
        print(f"scrub pass          : {mb / med['scrub']:8.1f} MB/s   ratio {med['read'] / med['scrub']:.2f} "
              f"of the plain read")
        print(f"CRC-32C alone       : {mb / med['crc']:8.1f} MB/s   (in memory)")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
