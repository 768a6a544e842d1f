"""Log compaction: cleaning rate beside a plain copy of the same files, offset-map memory per entry, and
produce throughput while the cleaner runs beside without it, all measured in the same run.

    .venv/bin/python benchmarks/compaction.py [--size-mb 64] [--dir /some/dir] [--throttle-mb 0] [--rounds 8]
                                              [--window-s 2]

The log (issue 10's shape): values of 200 bytes, keys written 10 times each (10 versions, shuffled within
each round), 50 records a batch, uncompressed, 64 MiB segments; `--size-mb 1024` is the issue's 1 GiB, which
at ~220 bytes a record holds ~490 k distinct keys (a million keys x 10 versions of 200-byte values would be
~2 GiB: `--size-mb 2100`). Its segments are closed and flushed before anything is timed.

1. Copy: read each segment file and write it to a new file (1 MiB at a time), then fsync: the baseline.
   Clean: one `Cleaner.clean` of the whole dirty log (build the offset map, recopy, swap). Reported in MB/s
   of log bytes read; goal >= 30% of the copy rate.
2. Memory: bytes of the offset map per entry it can hold (two int64 arrays at load factor 0.9), beside a
   Python dict of the same keys -> offsets measured with tracemalloc; goal <= 32 bytes an entry.
3. Produce: appends of 50-record batches to a new log, alone and while the cleaner thread cleans a fresh
   copy of the dirty log: `--rounds` pairs of `--window-s` windows, alternating which of the pair comes
   first (ABBA), the cleaner paused mid-clean between its windows (GatedFiles: its reads and writes wait),
   so both are measured alike and under the same load; the median of the per-pair ratios is reported,
   with every ratio, and the cleaner's read rate in its windows; goal >= 80%. Both are in this one
   process, so they share the interpreter lock and the cores, as a broker's request threads and its
   cleaner do (the CleanerManager's own thread, at its lowered priority); `--throttle-mb` sets
   log.cleaner.io.max.bytes.per.second (0: unthrottled, Kafka's default) for this part. On cores busy with
   other work a single window moves by tens of percent from one to the next (two windows alone differ as
   much): that is why the pairs are many, short and interleaved; compare runs with the load average.
4. Default map: every clean with the default 128 MiB offset map (log.cleaner.dedupe.buffer.size), as a
   broker's cleaner thread does, whatever the log's size. Small logs: `--small-logs` logs (50: like the 50
   __consumer_offsets partitions) of one closed ~4 KiB segment (49 records of 40 keys, 9 superseded),
   cleaned one after the other by one Cleaner; wall and CPU time (of this thread, which runs the cleans) per
   clean, against reading the same files (the baseline). Large log: the part 1 log cleaned again (a fresh
   copy) with the default map, against part 1's copy rate. Each with the offset map (lazily zeroed pages,
   given back at `clear`: offset_map.py Rule: map-pages-touched) and with EagerOffsetMap, the map before that rule (a
   bytes-backed array zeroed at every clean), in the same run.

`--parts 4` runs part 4 alone (it needs part 1's log for its large-log half, built in any case).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from array import array

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparklog.records.batch import build_batch  # noqa: E402
from sparklog.storage import CleanerConfig, CleanerManager, Flusher, PartitionLog, cleaner_manager  # noqa: E402
from sparklog.storage.cleaner import Cleaner  # noqa: E402
from sparklog.storage.config import LONG_MAX  # noqa: E402
from sparklog.storage.files import OS_FILES, Files  # noqa: E402
from sparklog.storage.offset_map import OffsetMap  # noqa: E402

MIB = 1024 * 1024
VALUE_BYTES = 200
VERSIONS = 10
RECORDS_PER_BATCH = 50
SEGMENT_BYTES = 64 * MIB
ROUNDS = 8  # part 3: pairs of windows, produce alone and while cleaning
SMALL_LOGS = 50  # part 4: offsets.topic.num.partitions, Kafka's 50
SMALL_KEYS, SMALL_RECORDS, SMALL_BATCH = 40, 49, 7  # part 4: 49 records, 9 of them superseded, 7 a batch
SMALL_VALUE = b"x" * 60
WINDOW_S = 2.0
RECORD_BYTES = VALUE_BYTES + 20  # value, key and record framing, batch headers shared
SETTINGS = {"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES, "flush.ms": LONG_MAX,
            "file.delete.delay.ms": 0, "min.cleanable.dirty.ratio": 0.0}


def build_log(directory: str, size_mb: int, flusher: Flusher) -> int:
    """The dirty log; returns its number of distinct keys."""
    keys = max(1, size_mb * MIB // (RECORD_BYTES * VERSIONS))
    value = b"v" * VALUE_BYTES
    log = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    rng = random.Random(1)
    now = int(time.time() * 1000)
    for _ in range(VERSIONS):
        order = list(range(keys))
        rng.shuffle(order)
        for i in range(0, keys, RECORDS_PER_BATCH):
            log.append(build_batch([(b"key-%09d" % k, value, None, now) for k in order[i:i + RECORDS_PER_BATCH]]))
    log.roll()
    log.close()
    return keys


def copy_files(source: str, target: str) -> tuple[int, float]:
    os.makedirs(target)
    started, copied = time.perf_counter(), 0
    for name in sorted(os.listdir(source)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(source, name), "rb") as src, open(os.path.join(target, name), "wb") as dst:
            while chunk := src.read(MIB):
                dst.write(chunk)
                copied += len(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    return copied, time.perf_counter() - started


def clean_rate(directory: str, flusher: Flusher, keys: int) -> tuple[float, object]:
    log = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    try:
        offset_map = OffsetMap(map_bytes(keys))
        started = time.perf_counter()
        result = Cleaner(offset_map, OS_FILES).clean(log)
        return time.perf_counter() - started, result
    finally:
        log.close()


def map_bytes(keys: int) -> int:
    """The smallest offset map (a power of two of 16-byte slots) that holds `keys` at load factor 0.9."""
    return 16 << max(10, int(keys / 0.9)).bit_length()


def dict_bytes_per_entry(keys: int) -> float:
    sample = min(keys, 200_000)
    names = [b"key-%09d" % k for k in range(sample)]
    tracemalloc.start()
    table = {name: k * 7 for k, name in enumerate(names)}
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del table
    return size / sample


def produce_rate(directory: str, flusher: Flusher, batch: bytes, seconds: float) -> float:
    """Records per second appended in 50-record batches to a new log for `seconds` (each append returned:
    acknowledged); the log is deleted afterwards."""
    log = PartitionLog.open(directory, {"flush.ms": LONG_MAX}, flusher=flusher)
    try:
        appended, started = 0, time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            log.append(batch)
            appended += RECORDS_PER_BATCH
        return appended / (time.perf_counter() - started)
    finally:
        log.delete()


class GatedFiles(Files):
    """The cleaner's file layer in part 3: each read and write waits while `gate` is clear, so between the
    windows that measure produce while it cleans, the cleaner thread sleeps mid-clean, off the CPU, and
    resumes where it was; counts the bytes it read."""

    def __init__(self):
        self.gate = threading.Event()
        self.bytes_read = 0

    def pread(self, fd: int, length: int, position: int) -> bytes:
        self.gate.wait()
        data = super().pread(fd, length, position)
        self.bytes_read += len(data)
        return data

    def pwrite(self, fd: int, data, position: int) -> None:
        self.gate.wait()
        super().pwrite(fd, data, position)


def dirty_copy(source: str, target: str) -> str:
    """A copy of the dirty log to clean: its closed segments' .log files hard-linked (the cleaner never
    writes into a source segment: it writes new files and swaps them in), every other file copied."""
    os.makedirs(target)
    logs = sorted(n for n in os.listdir(source) if n.endswith(".log"))
    for name in os.listdir(source):
        if name.endswith(".log") and name != logs[-1]:
            os.link(os.path.join(source, name), os.path.join(target, name))
        else:
            shutil.copy2(os.path.join(source, name), os.path.join(target, name))
    return target


def produce_while_cleaning(root: str, dirty: str, flusher: Flusher, keys: int, throttle: float, rounds: int,
                           window_s: float) -> tuple[list[float], list[float], float, int]:
    """Part 3: `rounds` pairs of windows, produce alone and produce while the cleaner runs, in alternating
    order (ABBA), with the cleaner paused mid-clean (GatedFiles) in the alone windows. Returns the rates
    alone and during, the cleaner's MB/s read over the during windows, and how many cleans completed (after
    each, a fresh dirty copy is added, so the cleaner has work in every window)."""
    files = GatedFiles()
    copies = [PartitionLog.open(dirty_copy(dirty, os.path.join(root, "spare-0", "table-0")), SETTINGS,
                                flusher=flusher)]
    manager = CleanerManager(lambda: list(copies), CleanerConfig(dedupe_buffer_size=map_bytes(keys),
                                                                 io_max_bytes_per_second=throttle, backoff_ms=10),
                             files=files)
    batch = build_batch([(b"p-%d" % i, b"v" * VALUE_BYTES, None, None) for i in range(RECORDS_PER_BATCH)])
    alone, during, cleaner_read, cleaner_s, done = [], [], 0, 0.0, 0
    manager.start()  # the broker's cleaner thread, at its own priority (cleaner_manager.py Rule: cleaner-io-throttled)
    try:
        for r in range(rounds):
            for cleaning in ((False, True) if r % 2 == 0 else (True, False)):
                produce_dir = os.path.join(root, f"produce-{r}-{int(cleaning)}")
                if not cleaning:
                    alone.append(produce_rate(produce_dir, flusher, batch, window_s))
                    continue
                read, started = files.bytes_read, time.perf_counter()
                files.gate.set()
                during.append(produce_rate(produce_dir, flusher, batch, window_s))
                files.gate.clear()
                cleaner_s += time.perf_counter() - started
                cleaner_read += files.bytes_read - read
            if manager.statistics().runs > done:  # that copy is clean: the next windows clean a fresh one
                done = manager.statistics().runs
                copies.append(PartitionLog.open(dirty_copy(dirty, os.path.join(root, f"spare-{done}", "table-0")),
                                                SETTINGS, flusher=flusher))
    finally:
        files.gate.set()  # a paused cleaner thread must see close()
        manager.close()
        for log in copies:
            log.close()
    return alone, during, cleaner_read / MIB / cleaner_s, done


class EagerOffsetMap(OffsetMap):
    """Part 4's comparison: the offset map before offset_map.py Rule: map-pages-touched, its tables arrays built from
    zeroed bytes (each written twice), the digest table built anew at every `clear`."""

    def _map_tables(self) -> None:
        self._digests, self._offsets = array("q", bytes(8 * self.slots)), array("q", bytes(8 * self.slots))

    def clear(self) -> None:
        self._digests = array("q", bytes(8 * self.slots))
        self.size = 0


def build_small_logs(root: str, flusher: Flusher) -> list[str]:
    """Part 4's small logs, each one closed, flushed segment of SMALL_RECORDS records."""
    keys = [b"key-%03d" % (k % SMALL_KEYS) for k in range(SMALL_RECORDS)]
    now, directories = int(time.time() * 1000), []
    for n in range(SMALL_LOGS):
        directory = os.path.join(root, f"small-{n}")
        log = PartitionLog.open(directory, SETTINGS, flusher=flusher)
        for i in range(0, SMALL_RECORDS, SMALL_BATCH):
            log.append(build_batch([(k, SMALL_VALUE, None, now) for k in keys[i:i + SMALL_BATCH]]))
        log.roll()
        log.flush()
        log.close()
        directories.append(directory)
    return directories


def read_files(directories: list[str]) -> tuple[int, float, float]:
    """Part 4's baseline: every .log file of `directories` read whole; (bytes, wall s, CPU s)."""
    wall, cpu, read = time.perf_counter(), time.thread_time(), 0
    for directory in directories:
        for name in sorted(os.listdir(directory)):
            if name.endswith(".log"):
                with open(os.path.join(directory, name), "rb") as f:
                    read += len(f.read())
    return read, time.perf_counter() - wall, time.thread_time() - cpu


def clean_all(directories: list[str], flusher: Flusher, offset_map: OffsetMap) -> tuple[float, float, int, list]:
    """Part 4: each log cleaned in turn by one Cleaner holding `offset_map` (allocated before the clock
    starts, as a cleaner thread's is at its first clean); (wall s, CPU s, page faults, results), the CPU
    and the faults of this thread, which runs the cleans."""
    logs = [PartitionLog.open(d, SETTINGS, flusher=flusher) for d in directories]
    try:
        cleaner = Cleaner(offset_map, OS_FILES)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        wall, cpu = time.perf_counter(), time.thread_time()
        results = [cleaner.clean(log) for log in logs]
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        return wall, cpu, resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults, results
    finally:
        for log in logs:
            log.close()


def default_map_part(root: str, spare: str, flusher: Flusher, copy_rate: float) -> None:
    """Part 4: small logs and the large one, each cleaned with the default map and with EagerOffsetMap."""
    small = build_small_logs(os.path.join(root, "small"), flusher)
    read, read_s, read_cpu = read_files(small)
    print(f"4. default map ({OffsetMap().memory_bytes // MIB} MiB); {SMALL_LOGS} small logs of one segment, "
          f"{read / SMALL_LOGS / 1024:.1f} KiB each: read whole in {read_s * 1000:.1f} ms wall, "
          f"{read_cpu * 1000:.1f} ms CPU (the baseline)")
    per_clean = {}
    for name, new_map in (("lazy", OffsetMap), ("eager", EagerOffsetMap)):
        copies = [dirty_copy(d, os.path.join(root, f"small-{name}", os.path.basename(d))) for d in small]
        wall, cpu, faults, results = clean_all(copies, flusher, new_map())
        removed = sum(r.records_removed for r in results)
        per_clean[name] = (wall, cpu)
        print(f"   {name:5} map: {wall / SMALL_LOGS * 1000:7.2f} ms wall, {cpu / SMALL_LOGS * 1000:7.2f} ms CPU, "
              f"{faults / SMALL_LOGS:6.0f} page faults a clean ({removed} of {sum(r.records_read for r in results)} "
              f"records removed); clean / read: {wall / read_s:.0f}x wall, {cpu / max(read_cpu, 1e-9):.0f}x CPU")
    (lazy_wall, lazy_cpu), (eager_wall, eager_cpu) = per_clean["lazy"], per_clean["eager"]
    print(f"   eager / lazy: {eager_wall / lazy_wall:.1f}x wall, {eager_cpu / lazy_cpu:.1f}x CPU")
    for name, new_map in (("lazy", OffsetMap), ("eager", EagerOffsetMap)):
        directory = dirty_copy(spare, os.path.join(root, f"large-{name}", "table-0"))
        wall, cpu, faults, (result,) = clean_all([directory], flusher, new_map())
        rate = result.bytes_read / MIB / wall
        print(f"   large log, {name:5} map: {rate:8.1f} MB/s ({result.bytes_read / MIB:.0f} MiB in {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU, {faults} page faults); clean / copy = {rate / copy_rate:.2f}")


def produce_part(root: str, spare: str, flusher: Flusher, keys: int, args) -> None:
    """Part 3: produce alone and while the cleaner thread cleans copies of the dirty log."""
    throttle = args.throttle_mb * MIB if args.throttle_mb > 0 else float("inf")
    if args.cleaner_nice is not None:
        cleaner_manager.CLEANER_NICE_INCREMENT = args.cleaner_nice  # read by each thread as it starts
    alone, during, cleaner_rate, cleans = produce_while_cleaning(root, spare, flusher, keys, throttle,
                                                                 args.rounds, args.window_s)
    ratios = sorted(d / a for a, d in zip(alone, during))
    print(f"3. produce alone {statistics.median(alone):10.0f} records/s; while cleaning "
          f"{statistics.median(during):10.0f} records/s (medians of {args.rounds} interleaved {args.window_s} s "
          f"windows each; cleaner throttle: {'none' if throttle == float('inf') else f'{args.throttle_mb} MB/s'}, "
          f"nice +{cleaner_manager.CLEANER_NICE_INCREMENT}; "
          f"the cleaner read {cleaner_rate:.1f} MB/s in its windows, {cleans} cleans completed)")
    print(f"   during / alone per round: {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"   during / alone = {statistics.median(ratios):.2f} median  (goal >= 0.80)")
    noise = sorted(b / a for a, b in zip(alone, alone[1:]))
    print(f"   the noise: each alone window / the one before, {' '.join(f'{r:.2f}' for r in noise)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--throttle-mb", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--window-s", type=float, default=WINDOW_S)
    parser.add_argument("--parts", default="1234", help="which parts to run (part 1's log is built always)")
    parser.add_argument("--cleaner-nice", type=int, default=None,
                        help="part 3: the cleaner thread's nice increment instead of CLEANER_NICE_INCREMENT")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="compaction-bench-", dir=args.dir)
    flusher = Flusher("bench-flusher")
    try:
        dirty = os.path.join(root, "table-0")
        started = time.perf_counter()
        keys = build_log(dirty, args.size_mb, flusher)
        size = sum(os.path.getsize(os.path.join(dirty, n)) for n in os.listdir(dirty) if n.endswith(".log"))
        print(f"log: {size / MIB:.0f} MiB, {keys} keys x {VERSIONS} versions, built in "
              f"{time.perf_counter() - started:.0f} s")
        spare = dirty_copy(dirty, os.path.join(root, "spare", "table-0"))  # for parts 3 and 4, before cleaning
        print(f"load average before: {os.getloadavg()[0]:.2f}")

        copied, copy_s = copy_files(dirty, os.path.join(root, "copy"))
        copy_rate = copied / MIB / copy_s
        print(f"1. copy  {copy_rate:8.1f} MB/s ({copied / MIB:.0f} MiB in {copy_s:.2f} s)")
        if "1" in args.parts:
            clean_s, result = clean_rate(dirty, flusher, keys)
            rate = result.bytes_read / MIB / clean_s
            print(f"   clean {rate:8.1f} MB/s ({result.bytes_read / MIB:.0f} MiB read, {result.bytes_written / MIB:.0f} "
                  f"MiB written, {result.records_removed} of {result.records_read} records removed, {clean_s:.2f} s)")
            print(f"   clean / copy = {rate / copy_rate:.2f}  (goal >= 0.30)")
        if "2" in args.parts:
            offset_map = OffsetMap(map_bytes(keys))
            per_entry = offset_map.memory_bytes / offset_map.max_entries
            print(f"2. offset map {per_entry:.1f} bytes/entry at capacity ({offset_map.memory_bytes / keys:.1f} per key "
                  f"of this log, the table being a power of two); Python dict {dict_bytes_per_entry(keys):.1f} "
                  f"bytes/entry (goal <= 32)")
        if "3" in args.parts:
            produce_part(root, spare, flusher, keys, args)
        if "4" in args.parts:
            default_map_part(root, spare, flusher, copy_rate)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        flusher.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
