"""Flat cost at scale (the paper: performance is linear in data size): the same measures on a 1 GB log and on
an N GB log of one partition, in one run, each as a ratio to its 1 GB figure (goal: within 10%).

    .venv/bin/python benchmarks/scale.py [--gb 10] [--size 1000] [--lookups 300] [--repeats 3] [--segment-bytes N]

An embedded ZooKeeper and one `sparklog broker` subprocess (default settings: 1 GiB segments, flush.ms 50)
with its log dir under the system temp dir; the free space there is checked first (the log and 10% more).
confluent-kafka produces `--size`-byte records (acks=1, batches of up to 10,000 records) one GB at a time,
counting only acknowledged messages (measure.py Rule 1). Rows:

    disk write  start / end  the baseline: a plain sequential write of 1 GB into the log's filesystem (1 MiB
                             writes, fsync every 50 ms as the broker's flush.ms), just before GB 1 and just
                             after GB N; what the disk and the page cache give any writer at that fill level
    disk sys    start / end  ... and that write's own system CPU-seconds: what the kernel charges any writer
                             for a GB at that moment (page cache pages, writeback)
    produce GB 1 / GB N      msg/s of the first and of the last GB produced, the broker's CPU-seconds per GB
                             (user + system, then each: system time includes the kernel's page reclaim when
                             the broker's own allocations have to free pages), the machine's page reclaim
                             meanwhile (/proc/vmstat: pages scanned and stolen by kswapd and directly, and
                             refaults), and the rate as a fraction of the disk write beside it (every GB
                             between is printed on its own line, so a trend shows)
    tail read GB 1 / GB N    a consumer reading the GB just produced (its pages are still in the page cache,
                             as a consumer keeping up with producers reads them): median of --repeats reads
    cold read GB 1           a consumer reading the first GB from offset 0 with none of the log in the page
                             cache: measured when the log is 1 GB long, and again from the start of the N GB
                             log; median of --repeats reads, the cache dropped before each
    lookup GB 1 / GB N       ListOffsets by timestamp (the time index, then a header scan), timestamps drawn
                             inside the first GB and inside the last GB: median and p99 µs per lookup; each
                             answer is checked to fall in that GB (wrong answers are printed)

Memory: on this VM (Firecracker) a page the guest takes from its free memory costs more system time the
first time it is written than a page freed a moment before (measured once by hand: a plain 1 GB write into
just-freed pages took 0.57 system CPU-s, into free memory 1.6-1.8 s, at half the rate). So the start
baseline's file is removed only after GB 1 is produced: GB 1 then takes fresh pages as every later GB does,
instead of the baseline's freed ones, which made GB 1 cheaper than the GBs after it.

Page cache: drop_caches needs root, so before each cold read every file of the partition is fsynced and
then dropped with `os.posix_fadvise(POSIX_FADV_DONTNEED)` (clean pages only, hence the fsync first); the
fraction of the first GB still resident after the drop is printed (`mincore` through mmap), so a cold read
that was not cold shows. The lookups run warm: the indexes are in the broker's memory, and the batch
that answers is read (64 KiB at a time, up to the answer) from the page cache as the produce and reads left
it.
The consumer is confluent-kafka's (fetch.queue.backoff.ms 0, paper.py's settings) with the broker's CPU
seconds per GB read beside its rate. Every loop has a deadline. Load averages are printed before and after.
One run is a handful of seconds per measure on a shared machine: a single read swings by 20-40% between two
runs, hence the repeats; the broker's CPU-seconds per GB are the steadier figure of its own cost.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import (GB, TICK, confluent_consume, drop_page_cache, confluent_produce, cpu_seconds, create_single_partition_topic, list_offsets_by_time,  # noqa: E402
                     load, payload, shortfall)
from measure import run as run_benchmark  # noqa: E402
from paper import CONSUMER_SETTINGS, DEFAULT_FETCH_BYTES  # noqa: E402

TOPIC = "scale"
FREE_SPACE_MARGIN = 1.1  # the log and 10% more must fit
PRODUCE_DEADLINE_S = 900.0  # one GB
READ_DEADLINE_S = 600.0
LOOKUP_DEADLINE_S = 60.0
GOAL = 0.10  # within 10% of the 1 GB figure
LOOKUP_SPAN = 0.9  # lookup timestamps are drawn in this first part of a GB's send time
DISK_CHUNK = 1 << 20  # the disk baseline's write size
DISK_FSYNC_S = 0.05  # ... and its fsync period: the broker's default flush.ms


@dataclass
class GigaByte:
    """One GB as produced: its offsets [start, end) and its producer's clock (CreateTime) from before the
    first record to after the last one was handed to the producer."""
    index: int
    start: int
    end: int
    first_ms: int
    last_ms: int
    rate: float  # acknowledged msg/s
    cpu: float  # the broker's CPU-seconds for this GB
    note: str
    user: float = float("nan")  # ... of which user time
    system: float = float("nan")  # ... and system time (the kernel on the broker's behalf)
    memory: str = ""  # the machine's page reclaim while this GB was produced (vm_delta)


def produce_gb(broker, index: int, start: int, size: int, value: bytes) -> GigaByte:
    n = int(GB // size)
    first_ms = time.time_ns() // 1_000_000
    user0, system0 = cpu_split(broker.pid)
    vm0, threads0 = vm_counters(), thread_times(broker.pid)
    done = confluent_produce({
        "bootstrap.servers": broker.address, "acks": "1", "linger.ms": 5, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000,
        "enable.idempotence": False, "compression.type": "none"}, TOPIC, n, value, partition=0,
        deadline_s=PRODUCE_DEADLINE_S)
    user1, system1 = cpu_split(broker.pid)
    memory = vm_delta(vm0, vm_counters()) + "; " + threads_delta(threads0, thread_times(broker.pid))
    gbs = done.acked * size / GB if done.acked else float("nan")
    return GigaByte(index, start, start + done.acked, first_ms, done.sent_until_ms, done.acked / done.seconds,
                    (user1 - user0 + system1 - system0) / gbs,
                    done.note() + ("" if done.acked == n else shortfall(f"; SHORT {done.acked:,} of {n:,}")),
                    (user1 - user0) / gbs, (system1 - system0) / gbs, memory)


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far (/proc/<pid>/stat utime and stime: measure.cpu_seconds
    is their sum)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) / TICK, int(parts[12]) / TICK


def thread_times(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """Per thread of the process: (name, user ticks, system ticks, minor page faults)."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, _, rest = f.read().rpartition(")")
        except OSError:  # ended meanwhile
            continue
        parts = rest.split()
        found[int(tid)] = (head.partition("(")[2], int(parts[11]), int(parts[12]), int(parts[7]))
    return found


def threads_delta(before: dict, after: dict, top: int = 3) -> str:
    """The `top` threads by CPU between two thread_times(): where the broker's system time goes (the event
    loop's socket reads and file writes, or the flusher's fsyncs), and the whole process's minor faults."""
    rows = []
    for tid, (name, user, system, faults) in after.items():
        _, user0, system0, faults0 = before.get(tid, (name, 0, 0, 0))
        rows.append((user - user0 + system - system0, tid, name, (user - user0) / TICK, (system - system0) / TICK,
                     faults - faults0))
    rows.sort(reverse=True)
    shown = ", ".join(f"{tid} {name} usr {u:.2f} sys {s:.2f}" for _, tid, name, u, s, _ in rows[:top])
    return f"threads (CPU-s): {shown}; minor faults {sum(r[5] for r in rows):,}"


VM_COUNTERS = ("pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "allocstall_normal",
               "allocstall_movable", "workingset_refault_file")


def vm_counters() -> dict[str, int]:
    """The machine's page-reclaim counters (/proc/vmstat) and its free and cached memory (/proc/meminfo,
    kB): whole-machine figures, so other processes' reclaim shows too."""
    found: dict[str, int] = {}
    with open("/proc/vmstat") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name in VM_COUNTERS:
                found[name] = int(value)
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("MemFree", "Cached"):
                found[name] = int(value.split()[0])
    return found


def vm_delta(before: dict[str, int], after: dict[str, int]) -> str:
    """Pages the kernel scanned and reclaimed (kswapd, and direct: in the allocating process, counted as its
    system time) between two vm_counters(), and the free and cached memory at the end."""
    def d(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)
    stalls = d("allocstall_normal") + d("allocstall_movable")
    return (f"reclaim: kswapd scanned {d('pgscan_kswapd'):,} stole {d('pgsteal_kswapd'):,} pages, direct scanned "
            f"{d('pgscan_direct'):,} stole {d('pgsteal_direct'):,} ({stalls:,} stalls), refaults "
            f"{d('workingset_refault_file'):,}; free {after.get('MemFree', 0) / 1e6:.1f} GB, cached "
            f"{after.get('Cached', 0) / 1e6:.1f} GB")


@dataclass
class DiskWrite:
    """The plain write's rate and its own CPU-seconds per GB (getrusage of the writing thread), and its file,
    which the caller removes when it is done (see `run`: not before the GB it is the baseline of)."""
    mb_s: float
    user: float
    system: float
    path: Path


def disk_write(directory: Path, value: bytes, name: str) -> DiskWrite:
    """A plain sequential write of 1 GB into `directory`, fsynced every DISK_FSYNC_S as the broker's flusher
    does: what the disk and the kernel's page cache give any writer at that fill level."""
    chunk = (value * (DISK_CHUNK // len(value) + 1))[:DISK_CHUNK]
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        started = last_sync = time.perf_counter()
        written = 0
        while written < GB:
            written += os.write(fd, chunk)
            now = time.perf_counter()
            if now - last_sync >= DISK_FSYNC_S:
                os.fsync(fd)
                last_sync = now
        os.fsync(fd)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        os.close(fd)
    return DiskWrite(written / seconds / 1e6, (after.ru_utime - usage.ru_utime) / (written / GB),
                     (after.ru_stime - usage.ru_stime) / (written / GB), path)


def disk_rows(table: "Table", label: str, disk: DiskWrite, note: str) -> None:
    table.row("disk write", label, disk.mb_s, "MB/s", note, baseline=True)
    table.row("disk sys", label, disk.system, "CPU-s/GB", f"its system time (user {disk.user:.2f})", baseline=True)


def partition_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in (log_dir / f"{TOPIC}-0").iterdir() if p.is_file())


def resident_fraction(path: Path) -> float:
    """Fraction of a file's pages in the page cache: mincore(2) over a read-only mapping made with libc's
    mmap (Python's mmap object does not give its address)."""
    import ctypes

    size = path.stat().st_size
    if not size:
        return 0.0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return float("nan")
        try:
            if libc.mincore(address, size, vec):
                return float("nan")
        finally:
            libc.munmap(address, size)
    return sum(b & 1 for b in vec) / pages


def read_gb(broker, gb: GigaByte, size: int, repeats: int, before_each=None) -> tuple[float, float, str]:
    """(msg/s, broker CPU-s per GB, note) of a consumer reading exactly the GB's messages: the median
    (by rate) of `repeats` reads, each preceded by `before_each` if given."""
    runs = []
    for _ in range(repeats):
        if before_each is not None:
            before_each()
        runs.append(_read_once(broker, gb, size))
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


def _read_once(broker, gb: GigaByte, size: int) -> tuple[float, float, str]:
    cpu0 = cpu_seconds(broker.pid)
    done = confluent_consume({"bootstrap.servers": broker.address, "max.partition.fetch.bytes": DEFAULT_FETCH_BYTES,
                              **CONSUMER_SETTINGS}, TOPIC, gb.end - gb.start, start=gb.start,
                             deadline_s=READ_DEADLINE_S)
    cpu = cpu_seconds(broker.pid) - cpu0
    short = "" if done.got == gb.end - gb.start and not done.errors else shortfall(
        f"SHORT {done.got:,} ({done.errors} errors)")
    return done.got / done.seconds, cpu / (done.got * size / GB if done.got else 1), short


def lookups(broker, gb: GigaByte, k: int) -> tuple[float, float, str]:
    """(median µs, p99 µs, note) of ListOffsets by timestamps drawn inside the GB: in the first 90% of its
    send time, so that a later record of the same GB answers each (any answer outside the GB is wrong)."""
    host, port = broker.address.rsplit(":", 1)
    rnd = random.Random(gb.index)
    stamps = [rnd.randint(gb.first_ms, gb.first_ms + int(LOOKUP_SPAN * (gb.last_ms - gb.first_ms)))
              for _ in range(k)]
    times, offsets = list_offsets_by_time(host, int(port), TOPIC, stamps, LOOKUP_DEADLINE_S)
    wrong = sum(1 for o in offsets if not gb.start <= o < gb.end)
    times_us = sorted(t * 1e6 for t in times)
    p99 = times_us[min(len(times_us) - 1, int(len(times_us) * 0.99))]
    short = "" if len(offsets) == k else f"; SHORT: {len(offsets)} of {k} lookups by the deadline"
    note = (f"{wrong} of {len(offsets)} answers outside the GB" if wrong else "") + short
    return statistics.median(times_us), p99, shortfall(note) if note else ""


class Table:
    """Rows with a value, printed beside the 1 GB row of the same measure as a ratio."""

    def __init__(self) -> None:
        self.base: dict[str, float] = {}

    def row(self, measure: str, label: str, value: float, unit: str, note: str = "", lower_is_better=False,
            baseline=False) -> None:
        """`baseline`: a row that measures the machine, not the broker: no verdict."""
        base = self.base.setdefault(measure, value)
        ratio = value / base if base else float("nan")
        off = (ratio - 1) if lower_is_better else (1 - ratio)
        verdict = "" if base is value or baseline else ("  ok" if off <= GOAL else "  MISSES the 10% goal")
        shown = f"{value:>14,.1f}" if value >= 10 else f"{value:>14.2f}"
        print(f"{measure:<12} {label:<9} {shown} {unit:<10} {ratio:>6.2f}x of 1 GB{verdict}"
              + (f"  {note}" if note else ""), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=int, default=10, help="GB (10^9 bytes of records) in the long log")
    parser.add_argument("--size", type=int, default=1000, help="record value bytes")
    parser.add_argument("--lookups", type=int, default=300, help="ListOffsets lookups per end")
    parser.add_argument("--repeats", type=int, default=3, help="reads per read measure (the median is shown)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the broker's log dir goes")
    parser.add_argument("--segment-bytes", type=int, default=None,
                        help="the topic's segment.bytes (default: the broker's, 1 GiB); smaller gives many segments")
    args = parser.parse_args()
    if args.gb < 2:
        parser.error("--gb must be at least 2 (the 1 GB figures are the baseline)")
    free = shutil.disk_usage(args.dir).free
    if free < args.gb * GB * FREE_SPACE_MARGIN:
        parser.error(f"{args.dir} has {free / GB:.1f} GB free; --gb {args.gb} needs {args.gb * FREE_SPACE_MARGIN:.1f}")

    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import BrokerProcess

    print(f"load average {load()}; {args.gb} GB of {args.size}-byte records, {free / GB:.0f} GB free in {args.dir}; "
          f"segment.bytes {args.segment_bytes or 'the broker default'}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="sparklog-scale-", dir=args.dir))
    zk = EmbeddedZooKeeper()
    zk.start()
    try:
        log_dir = work / "logs"
        broker = BrokerProcess(1, f"{zk.connect_string}/scale", log_dir)
        broker.start()
        try:
            create_topic(broker.zk_connect, args.segment_bytes)
            run(broker, log_dir, args)
        finally:
            broker.stop()
    finally:
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average {load()}")
    return 0


def create_topic(zk_connect: str, segment_bytes: int | None) -> None:
    if segment_bytes is None:
        create_single_partition_topic(zk_connect, TOPIC)
        return
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    client = connect(zk_connect)
    try:
        topics.create_topic(client, TOPIC, 1, 1, {"segment.bytes": segment_bytes})
    finally:
        close(client)
    time.sleep(0.5)  # the broker opens the log (as create_single_partition_topic waits)


def run(broker, log_dir: Path, args) -> None:
    value = payload(args.size)
    table = Table()
    disk_start = disk_write(log_dir, value, "disk-baseline-start.bin")
    disk_rows(table, "start", disk_start, "a plain 1 GB write, fsync every 50 ms")
    first = produce_gb(broker, 1, 0, args.size, value)
    disk_start.path.unlink()  # only now: GB 1 would reuse its freed pages (see the module docstring)
    produce_row(table, first, args.size, disk_start.mb_s)
    rate, cpu, note = read_gb(broker, first, args.size, args.repeats)
    table.row("tail read", "GB 1", rate, "msg/s", f"{cpu:.2f} broker CPU-s/GB {note}")
    median, p99, note = lookups(broker, first, args.lookups)
    table.row("lookup", "GB 1", median, "µs median", f"p99 {p99:,.0f} µs {note}", lower_is_better=True)
    cold_read(broker, log_dir, first, args, table, "GB 1")
    last = first
    for index in range(2, args.gb + 1):
        last = produce_gb(broker, index, last.end, args.size, value)
        if index < args.gb:
            print(f"  produce GB {index}: {last.rate:,.0f} msg/s, {last.cpu:.2f} broker CPU-s/GB (user "
                  f"{last.user:.2f}, system {last.system:.2f}){last.note}\n    {last.memory}", flush=True)
    disk_end = disk_write(log_dir, value, "disk-baseline-end.bin")
    disk_end.path.unlink()
    disk_rows(table, "end", disk_end, f"after GB {args.gb}")
    produce_row(table, last, args.size, disk_end.mb_s)
    rate, cpu, note = read_gb(broker, last, args.size, args.repeats)
    table.row("tail read", f"GB {args.gb}", rate, "msg/s", f"{cpu:.2f} broker CPU-s/GB {note}")
    for gb, label in ((first, "GB 1 of N"), (last, f"GB {args.gb}")):
        median, p99, note = lookups(broker, gb, args.lookups)
        table.row("lookup", label, median, "µs median", f"p99 {p99:,.0f} µs {note}", lower_is_better=True)
    cold_read(broker, log_dir, first, args, table, f"GB 1 of {args.gb}")


def produce_row(table: Table, gb: GigaByte, size: int, disk_mb_s: float) -> None:
    """Three rows: the rate, the broker's CPU-seconds per GB, and the rate over the disk write beside it."""
    label = f"GB {gb.index}"
    table.row("produce", label, gb.rate, "msg/s", gb.note)
    table.row("produce cpu", label, gb.cpu, "CPU-s/GB", "the broker's, user + system", lower_is_better=True)
    table.row("produce usr", label, gb.user, "CPU-s/GB", "the broker's user time", lower_is_better=True)
    table.row("produce sys", label, gb.system, "CPU-s/GB", f"the broker's system time; {gb.memory}",
              lower_is_better=True)
    table.row("produce/disk", label, gb.rate * size / 1e6 / disk_mb_s, "of disk", "MB/s over the disk write's")


def cold_read(broker, log_dir: Path, gb: GigaByte, args, table: Table, label: str) -> None:
    files = partition_files(log_dir)
    resident: list[float] = []

    def drop() -> None:
        drop_page_cache(files)
        resident.append(resident_fraction(min((p for p in files if p.suffix == ".log"), key=lambda p: p.name)))

    rate, cpu, note = read_gb(broker, gb, args.size, args.repeats, drop)
    table.row("cold read", label, rate, "msg/s", f"{cpu:.2f} broker CPU-s/GB; first segment "
              f"{max(resident):.0%} resident after each drop (at most) {note}")


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
