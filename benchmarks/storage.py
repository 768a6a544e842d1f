"""Storage throughput: PartitionLog.append and read() beside plain sequential file I/O of the same bytes.

    .venv/bin/python benchmarks/storage.py --size-mb 1024 [--dir /some/dir]

Appends pre-encoded batches (50 records of 200-byte values) through PartitionLog.append with the default
config (flush.ms=50: the shared Flusher fsyncs in the background), then a final flush(); the baseline
os.write()s the same batch bytes to one file and fsyncs at the end. Then reads the whole log through read()
slices (read_bytes, 1 MiB each) beside os.read() of the baseline file in 1 MiB chunks. Both reads hit the
page cache; the goals are append >= 70% and read >= 80% of the plain figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparklog.storage import PartitionLog  # noqa: E402
from sparklog.storage.records import build_batch  # noqa: E402

MIB = 1024 * 1024
RECORDS_PER_BATCH = 50
VALUE_BYTES = 200
READ_BYTES = MIB


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
    log = PartitionLog.open(directory)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    args = parser.parse_args(argv)
    total = args.size_mb * MIB
    root = tempfile.mkdtemp(prefix="sparklog-bench-", dir=args.dir or os.getcwd())
    try:
        batches = make_batches()
        plain_path = os.path.join(root, "plain.bin")
        write_s = plain_write(plain_path, batches, total)
        append_s, log = log_append(os.path.join(root, "bench-0"), batches, total)
        read_plain_s, plain_bytes = plain_read(plain_path)
        read_log_s, log_bytes = log_read(log)
        log.close()
        size_mb = log.size_bytes / MIB
        print(f"data: {size_mb:.0f} MiB in batches of {RECORDS_PER_BATCH} x {VALUE_BYTES}-byte records "
              f"({len(batches[0])} bytes each), {len(log.segments)} segment(s)")
        print(f"plain write + fsync : {plain_bytes / MIB / write_s:8.1f} MB/s")
        print(f"log append  + flush : {log_bytes / MIB / append_s:8.1f} MB/s   "
              f"ratio {write_s / append_s:.2f} (goal >= 0.70)")
        print(f"plain read          : {plain_bytes / MIB / read_plain_s:8.1f} MB/s")
        print(f"log read (slices)   : {log_bytes / MIB / read_log_s:8.1f} MB/s   "
              f"ratio {read_plain_s / read_log_s:.2f} (goal >= 0.80)")
        assert log_bytes == plain_bytes or abs(log_bytes - plain_bytes) < len(batches[0]), (log_bytes, plain_bytes)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
