"""The loops the broker benchmarks share (paper.py, scale.py, clients.py): produce, consume and serve, each
counting only what was acknowledged or received, each bounded by a deadline; and the clusters they run on
(`create_single_partition_topic`, `one_broker_cluster`).

Rule 1: a produced message counts once its delivery report arrives without error (confluent-kafka's
callback, err None); reports with an error are counted as `failed`, and messages with no report by the
deadline as `unacknowledged`. Throughput is acknowledged messages over the time to the last report.
Rule 2: every loop ends by its deadline, whatever the broker does; a consumer asked for n messages reports
how many it got, so a short read shows as a short count, never as a rate of what was not read.
Rule 3: the baselines of the Fetch path serve the same segment files from a server process of their own
to a reader in this process, as the broker serves its client: a bare `os.sendfile` stream, and a bare
request/response server (a small request; a small head, then one sendfile of the next chunk), which does for
a Fetch what the broker does with no work per request, as its reader does what the raw Fetch loop does with
no work per reply. Three things make that a floor, and each was missing once:
  - the same accounting: each pair's CPU together, server and reader (`Served.pair`), from /proc as the
    broker's is, because on loopback the kernel bills TCP work to whichever end it runs in (a sender and
    receiver in one process, as until issue 21, or the server's CPU alone, let the broker "win" by 1.5-2x);
  - the same placement (`pinned`): the server's threads on one CPU, the reader on the other, for the broker
    as for the bare servers; left to the scheduler, the bare pair's cost moved 2x (0.57 CPU-s/GB on one CPU,
    1.01 on two, 0.69 unpinned; 30 November 2026);
  - the same socket and reply (sparklog/broker/network/server.py `_tune`, reply_writer.py): TCP_NODELAY,
    non-blocking, a head of REPLY_HEAD_BYTES written first, then a sendfile of what the socket takes and a
    poll for the rest. A blocking socket with Nagle's algorithm cost 3x more per byte (0.56 against 0.17
    CPU-s/GiB), and a reply without a head 1.4x more (its reader woken by the records themselves).
So the broker's pair over the bare request/response pair is >= 1 but for noise, the excess being the
broker's own work per byte served and its client's per-reply check; a ratio under FLOOR_NOISE is a Rule 4
row (`below_floor`): the floor, not the broker, is what is wrong.
Rule 4: a row that did less than it was asked (FAILED: a send not acknowledged; SHORT: fewer messages or
bytes read than asked, a reply with an error code, a fetch of another size than the figures divide by) is
reported through `shortfall`, which prints it in the row and remembers it; `run(main)`, every benchmark's
entry point, lists them at the end and exits 1. A figure computed over what did not happen is not a figure.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

TICK = os.sysconf("SC_CLK_TCK")
GB = 1e9
SIZE = struct.Struct(">i")
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_BASE_AND_LENGTH = struct.Struct(">qi")  # a v2 batch's baseOffset and batchLength
# a Fetch v11 partition after its index: error_code, high_watermark, last_stable_offset, log_start_offset,
# aborted_transactions count (-1: null), preferred_read_replica, records length
_PARTITION_TAIL = struct.Struct(">hqqqiii")
POLL_EVERY = 10_000  # produce() calls between polls for delivery reports
SOCKET_TIMEOUT_S = 30.0
REQUEST_BYTES = 64  # request_loop's request: about a one-partition Fetch v11 frame
REPLY_HEAD_BYTES = 72  # request_loop's reply head, written before its sendfile as the broker writes a Fetch reply's
TOPIC_OPEN_S = 1.0  # after creating topics: the broker learns of them from ZooKeeper and opens their logs


# A one-broker cluster's internal topics at one replica, so transactions can run on it (transactions.py,
# spark_sink_eos.py)
ONE_BROKER_TRANSACTIONS = {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                           "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "1"}


def payload(size: int, seed: int = 2011) -> bytes:
    """The peers' fixed printable payload (../shared/peers bench_common.payload), so rows compare."""
    rnd = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return bytes(rnd.choice(alphabet) for _ in range(size))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK


@contextmanager
def pinned(server_pid: int) -> Iterator[None]:
    """Rule 3's placement: every thread of `server_pid` on one CPU, the calling thread (the reader) on
    another, both restored after; on a one-CPU machine nothing moves."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield
        return
    server_cpu, reader_cpu = cpus[0], cpus[1]

    def server_threads() -> list[int]:
        try:
            return [int(tid) for tid in os.listdir(f"/proc/{server_pid}/task")]
        except FileNotFoundError:
            return []

    def place(cpu_set: set[int]) -> None:
        for tid in server_threads():
            try:
                os.sched_setaffinity(tid, cpu_set)
            except (ProcessLookupError, OSError):
                pass  # a thread that ended meanwhile

    mine = os.sched_getaffinity(0)
    place({server_cpu})
    os.sched_setaffinity(0, {reader_cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        place(set(cpus))


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants so far, the reaped ones included
    (a parent's cutime/cstime): what a Spark session (its JVM and the Python workers it forks) spent, which
    on a shared machine is steadier than wall time."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:  # exited meanwhile
                continue
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(parents.get(current, ()))
        try:
            with open(f"/proc/{current}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / TICK  # utime, stime, cutime, cstime
    return total


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


_SHORTFALLS: list[str] = []


FLOOR_NOISE = 0.9  # a pair under this share of the bare request/response pair's cost: the floor is broken


def below_floor(ratio: float, what: str) -> str:
    """Rule 3's check: `what` costing under FLOOR_NOISE of the bare request/response pair means the baseline
    is no floor (a row of Rule 4, so the script exits 1), not that the broker beat the kernel."""
    if ratio >= FLOOR_NOISE:
        return ""
    return shortfall(f"; BELOW THE FLOOR: {what} cost {ratio:.2f}x the bare request/response pair's, which "
                     f"does less: the baseline is not measuring what the broker does")


def shortfall(text: str) -> str:
    """Remember a FAILED or SHORT row (Rule 4) and return `text`, to print in the row."""
    _SHORTFALLS.append(text)
    return text


def run(main: Callable[[], int | None]) -> int:
    """A benchmark's entry point (Rule 4): `main()`'s status, or 1 when any row was FAILED or SHORT, each
    listed once more at the end."""
    status = main() or 0
    for text in _SHORTFALLS:
        print(f"FAILED OR SHORT: {text.strip('; ')}", file=sys.stderr)
    if _SHORTFALLS:
        print(f"{len(_SHORTFALLS)} row(s) FAILED or SHORT: the figures above are not to be used", file=sys.stderr)
        return 1
    return status


@dataclass
class Produced:
    acked: int
    failed: int
    unacknowledged: int
    seconds: float  # from the first produce() to the last delivery report
    first_error: str | None = None
    sent_until_ms: int = 0  # wall clock (ms) just after the last produce() call

    def note(self) -> str:
        if not (self.failed or self.unacknowledged):
            return ""
        return shortfall(f"; FAILED {self.failed}, unacknowledged {self.unacknowledged} "
                         f"(first error: {self.first_error})")


def confluent_produce(config: dict, topic: str, n: int, value: bytes, *, partition: int | None = None,
                      cap_s: float | None = None, deadline_s: float = 600.0) -> Produced:
    """Produce up to `n` messages (stopping at `cap_s` if given); Rule 1 counts them."""
    from confluent_kafka import Producer

    counts = {"acked": 0, "failed": 0}
    first_error: list[str] = []
    last_report = [0.0]

    def on_delivery(err, _msg) -> None:
        if err is None:
            counts["acked"] += 1
        else:
            counts["failed"] += 1
            if not first_error:
                first_error.append(str(err))
        last_report[0] = time.perf_counter()

    producer = Producer({**config, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=10)
    started = time.perf_counter()
    stop_sending = started + (cap_s if cap_s else deadline_s)
    deadline = started + deadline_s
    sent = _send(producer, topic, n, value, partition, stop_sending)
    sent_until_ms = time.time_ns() // 1_000_000
    while producer.flush(0.5) and time.perf_counter() < deadline:
        pass
    remaining = len(producer)
    acked, failed = counts["acked"], counts["failed"]
    unacknowledged = sent - acked - failed
    if remaining:
        producer.purge()
        producer.flush(1)
    return Produced(acked, failed, unacknowledged, (last_report[0] or time.perf_counter()) - started,
                    first_error[0] if first_error else None, sent_until_ms)


def sparklog_produce(producer, topic: str, n: int, value: bytes, *, partitions: int = 1,
                     deadline_s: float = 600.0) -> Produced:
    """Send `n` copies of `value` with sparklog's `producer` (record i to partition i % `partitions`), flush
    by the deadline, and count by Rule 1 from the futures `send` returned: `seconds` is from the first
    send to the end of the flush (the futures are kept, and read only after the clock stops)."""
    send, futures = producer.send, []
    keep = futures.append
    started = time.perf_counter()
    for i in range(n):
        keep(send(topic, value, partition=i % partitions))
    try:
        producer.flush(max(0.0, started + deadline_s - time.perf_counter()))
    except TimeoutError:
        pass  # counted below as unacknowledged
    seconds = time.perf_counter() - started
    acked = sum(1 for future in futures if future.succeeded())
    failures = [future for future in futures if future.failed()]
    first = repr(failures[0].exception(0)) if failures else None
    return Produced(acked, len(failures), n - acked - len(failures), seconds, first)


def _send(producer, topic: str, n: int, value: bytes, partition: int | None, stop_at: float) -> int:
    """Hand up to `n` messages to librdkafka until `stop_at`; returns how many it took. A full local queue
    (BufferError) is backpressure: wait for delivery reports and try the same message again, until `stop_at`
    (before, one retry: at batch 1 with n over the queue's 1,000,000 the second BufferError ended the run)."""
    produce, poll = producer.produce, producer.poll
    args = {} if partition is None else {"partition": partition}
    sent = 0
    while sent < n and time.perf_counter() < stop_at:
        for _ in range(min(POLL_EVERY, n - sent)):
            while True:
                try:
                    produce(topic, value, **args)
                    break
                except BufferError:
                    if time.perf_counter() >= stop_at:
                        return sent
                    poll(0.01)
            sent += 1
        poll(0)
    return sent


@dataclass
class Consumed:
    got: int
    errors: int
    seconds: float


def confluent_consume(config: dict, topic: str, n: int, *, start: int = 0, partition: int = 0,
                      deadline_s: float = 300.0) -> Consumed:
    """Read `n` messages from `start` with confluent-kafka's consumer, or what arrived by the deadline."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"group.id": "bench", "enable.auto.commit": False, "enable.partition.eof": False,
                         **config})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        got = errors = 0
        started = time.perf_counter()
        deadline = started + deadline_s
        while got < n and time.perf_counter() < deadline:
            for m in consumer.consume(min(10_000, n - got), 1.0):
                if m.error() is None:
                    got += 1
                else:
                    errors += 1
        return Consumed(got, errors, time.perf_counter() - started)
    finally:
        consumer.close()


def kcat_consume(bootstrap: str, topic: str, n: int, settings: dict, deadline_s: float = 300.0) -> Consumed:
    """kcat (librdkafka's C consumer, no Python per message) reading `n` messages; its output discarded."""
    import subprocess

    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", str(n), "-e", "-q",
           "-f", "%o\n"]
    for key, value in settings.items():
        cmd += ["-X", f"{key}={value}"]
    started = time.perf_counter()
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=deadline_s)
        got = out.stdout.count(b"\n")
        if out.returncode:
            print(f"kcat failed ({out.returncode}): {out.stderr.decode(errors='replace').strip()[:300]}")
    except subprocess.TimeoutExpired as exc:
        got = (exc.stdout or b"").count(b"\n")
    return Consumed(got, 0, time.perf_counter() - started)


def kcat_produce(bootstrap: str, topic: str, n: int, value: bytes, settings: dict, work: str,
                 deadline_s: float = 600.0) -> Produced:
    """kcat -P (librdkafka in C: no Python per message) producing `n` copies of `value` (no newline in it)
    to partition 0 of a topic that was empty; Rule 1 counts them: kcat waits for every delivery report
    before it exits and prints each failure, and what counts as acknowledged is the partition's high
    watermark once it stops moving (at most what was sent, less the failures), read with ListOffsets."""
    import subprocess

    if b"\n" in value:
        raise ValueError("kcat -P splits its input at newlines")
    path = os.path.join(work, "kcat-input")
    with open(path, "wb") as f:
        line = value + b"\n"
        for start in range(0, n, 10_000):
            f.write(line * min(10_000, n - start))
    cmd = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0"]
    for key, setting in settings.items():
        cmd += ["-X", f"{key}={setting}"]
    started = time.perf_counter()
    with open(path, "rb") as stdin:
        try:
            out = subprocess.run(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 timeout=deadline_s)
            errors = out.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired as exc:
            errors = f"kcat still running after {deadline_s} s; " + (exc.stderr or b"").decode(errors="replace")
    seconds = time.perf_counter() - started
    os.unlink(path)
    failed = sum(1 for text in errors.splitlines() if "Delivery failed" in text or "failed to deliver" in text.lower())
    host, port = bootstrap.rsplit(":", 1)
    watermark, deadline = -1, time.perf_counter() + 10.0
    while time.perf_counter() < deadline:  # the HW follows the flush (one replica: records visible once flushed)
        now = list_offsets_by_time(host, int(port), topic, [-1])[1][0]
        if now == watermark and now >= n - failed:
            break
        watermark = now
        time.sleep(0.2)
    acked = max(0, min(watermark, n - failed))
    first = next((text for text in errors.splitlines() if text.strip()), None)
    return Produced(acked, failed, n - acked - failed, seconds, first)


def raw_fetch(host: str, port: int, topic: str, n: int, max_bytes: int, deadline_s: float = 300.0,
              passes: int = 1) -> tuple[Consumed, int]:
    """Fetch v11 in a loop on one socket, reading offsets [0, n) `passes` times and counting records from
    the batch headers only (no decoding): (what was read, response bytes received). The broker, with a
    client that costs next to nothing."""
    got = received = 0
    started = time.perf_counter()
    deadline = started + deadline_s
    with socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S) as sock:
        for _ in range(passes):
            count, size = _fetch_pass(sock, topic, n, max_bytes, deadline)
            got, received = got + count, received + size
    return Consumed(got, 0, time.perf_counter() - started), received


def _fetch_pass(sock: socket.socket, topic: str, n: int, max_bytes: int, deadline: float) -> tuple[int, int]:
    """One pass over offsets [0, n). The request is encoded once and patched (correlation id, fetch offset);
    each reply is read into one buffer and its records found at their fixed place in a one-partition v11
    reply, so the client's work per response is the header walk alone (a client that takes long between
    requests makes the broker answer each one cold: fetch_cost.py --client-pause-us). A reply of another
    shape (an error, aborted transactions) goes through the general decoder."""
    template = _fetch_template(topic, max_bytes)
    request, corr_at, offset_at = bytearray(template.frame), template.correlation_at, template.offset_at
    records_at = _partition_error_at(topic)  # the partition's fields from its error_code on
    buf = bytearray(2 * max_bytes + (1 << 16))
    view = memoryview(buf)
    got = received = offset = 0
    for correlation_id in range(1 << 30):
        if offset >= n or time.perf_counter() > deadline:
            break
        _I32.pack_into(request, corr_at, correlation_id)
        _I64.pack_into(request, offset_at, offset)
        sock.sendall(request)
        size = _recv_into(sock, view, 4) and SIZE.unpack_from(buf, 0)[0]
        if size + 4 > len(buf):
            buf = bytearray(size + 4)
            view = memoryview(buf)
        _recv_into(sock, view[4:], size)
        received += size + 4
        records = _one_partition_records(view, size + 4, records_at, correlation_id)
        if records is None:  # not the one-partition shape: the general decoder finds the records
            from sparklog.protocol import ApiKey
            from sparklog.protocol.registry import decode_response

            _, response = decode_response(ApiKey.FETCH, 11, view[4:size + 4])
            records = memoryview(response.responses[0].partitions[0].records or b"")
        count, offset = _count_records(records, offset)
        got += count
    return got, received


class _FetchTemplate(NamedTuple):
    frame: bytes
    correlation_at: int
    offset_at: int


def _fetch_template(topic: str, max_bytes: int) -> _FetchTemplate:
    """A Fetch v11 request of one partition, with where its correlation id and fetch offset are."""
    from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
    from sparklog.protocol.registry import encode_request

    def encode(offset: int) -> bytes:
        body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, topics=[FetchTopic(
            topic=topic, partitions=[FetchPartition(partition=0, fetch_offset=offset,
                                                    partition_max_bytes=max_bytes)])])
        return encode_request(ApiKey.FETCH, 11, 0, "raw-fetch", body)

    zero, ones = encode(0), encode(-1)
    offset_at = next(i for i in range(len(zero)) if zero[i] != ones[i])
    return _FetchTemplate(zero, 8, offset_at)  # size, api_key, api_version, then the correlation id


def _one_partition_records(view: memoryview, end: int, at: int, correlation_id: int) -> memoryview | None:
    """The records of a one-partition Fetch v11 reply without error or aborted transactions, else None."""
    if SIZE.unpack_from(view, 4)[0] != correlation_id:
        raise ConnectionError("a reply to another request")
    error, _, _, _, aborted, _, length = _PARTITION_TAIL.unpack_from(view, at)
    if error or aborted != -1 or at + _PARTITION_TAIL.size + max(length, 0) != end:
        return None
    return view[at + _PARTITION_TAIL.size:end]



def error_codes(message) -> Iterator[int]:
    """Every nonzero `error_code` in a decoded reply, its topics' and partitions' included (Rule 4: a reply
    with an error is not a request served)."""
    for name in getattr(type(message), "__slots__", ()):
        value = getattr(message, name)
        if name == "error_code" and value:
            yield value
        elif isinstance(value, list):
            for item in value:
                yield from error_codes(item)


def fetch_error(view: memoryview, topic: str) -> int:
    """The error code of a one-partition Fetch v11 reply `view` (size prefix included): its own, else its
    partition's; 0 when it has none. Read at their fixed places, as `_fetch_pass` reads the records."""
    (own,) = _I16.unpack_from(view, 4 + 4 + 4)  # size, correlation id, throttle_time_ms
    return own or _PARTITION_TAIL.unpack_from(view, _partition_error_at(topic))[0]


def _partition_error_at(topic: str) -> int:
    """Where a one-partition Fetch v11 reply's partition error_code is: size, correlation id, throttle, error,
    session id, topics count, the topic's name, partitions count, partition index."""
    return 4 + 4 + 4 + 2 + 4 + 4 + 2 + len(topic.encode()) + 4 + 4


def drop_page_cache(files) -> None:
    """fsync, then POSIX_FADV_DONTNEED every file: a cold read without root (drop_caches needs it)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _recv_into(sock: socket.socket, view: memoryview, size: int) -> int:
    pos = 0
    while pos < size:
        got = sock.recv_into(view[pos:size])
        if not got:
            raise ConnectionError("the broker closed the connection")
        pos += got
    return size


def _recv_frame(sock: socket.socket) -> memoryview:
    (size,) = SIZE.unpack(_recv_exactly(sock, 4))
    return memoryview(_recv_exactly(sock, size))


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view, pos = memoryview(buf), 0
    while pos < size:
        n = sock.recv_into(view[pos:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        pos += n
    return buf


def _count_records(records: memoryview, offset: int) -> tuple[int, int]:
    """(records in the whole batches of a record set, the offset after the last one), from the v2 headers:
    baseOffset and batchLength, lastOffsetDelta, and the records count that ends the header."""
    from sparklog.records.batch import HEADER_SIZE, LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD

    count = pos = 0
    end = len(records)
    while end - pos >= HEADER_SIZE:
        base, length = _BASE_AND_LENGTH.unpack_from(records, pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            break  # a partial batch at the end of the response
        (delta,) = _I32.unpack_from(records, pos + LAST_OFFSET_DELTA_OFFSET)
        (records_in_batch,) = _I32.unpack_from(records, pos + HEADER_SIZE - 4)
        count += records_in_batch
        offset = base + delta + 1
        pos += size
    return count, offset


class Served(NamedTuple):
    """What a baseline server (Rule 3) did: its process's CPU seconds (user + system, /proc, as the broker's
    are read) from the first request to the last byte received, the bytes the reader received, wall seconds,
    and the reader's CPU seconds over the same interval (this process's: `pair` is the figure Rule 3 compares)."""
    cpu: float
    received: int
    wall: float
    reader_cpu: float = 0.0

    @property
    def pair(self) -> float:
        """Server and reader CPU seconds together (Rule 3)."""
        return self.cpu + self.reader_cpu


def sendfile_loop(files: list[Path], chunk: int, deadline_s: float = 300.0, passes: int = 1) -> Served:
    """The files streamed whole `passes` times, `chunk` bytes per os.sendfile call, by a server process of
    their own (Rule 3) to a socket this process reads and discards: the bare cost of streaming those bytes."""
    return _baseline("stream", files, chunk, deadline_s, passes)


def request_loop(files: list[Path], chunk: int, deadline_s: float = 300.0, passes: int = 1) -> Served:
    """The bare request/response server (Rule 3), a process of its own: for each small request read from the
    socket, a REPLY_HEAD_BYTES head and one os.sendfile of the next `chunk` bytes of the files (the whole
    rest of a file when it is shorter), to this process, which sends the request and reads the reply whole
    before asking again, as the raw fetch loop does. A Fetch server with no work per request: what the broker's CPU per byte is
    measured against."""
    return _baseline("requests", files, chunk, deadline_s, passes)


def _pieces(files: list[Path], chunk: int, passes: int) -> list[tuple[Path, int, int]]:
    """(file, start, length) of each `chunk` of the files, `passes` times over."""
    return [(path, start, min(chunk, path.stat().st_size - start))
            for path in files for start in range(0, path.stat().st_size, chunk)] * passes


def _baseline(mode: str, files: list[Path], chunk: int, deadline_s: float, passes: int) -> Served:
    """Start `serve_files` in a process of its own, read what it serves, and read its CPU from /proc."""
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import measure; "
            f"measure.serve_files({mode!r}, {chunk}, {passes}, {[str(f) for f in files]!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as sock, pinned(proc.pid):
            deadline = time.perf_counter() + deadline_s
            cpu0, own0, started = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            if mode == "stream":
                sock.sendall(b"g")  # the go: the server's clock starts with the reader's
                received = _read_stream(sock, passes * sum(f.stat().st_size for f in files), deadline)
            else:
                received = _read_replies(sock, _pieces(files, chunk, passes), chunk, deadline)
            cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - started
            own = time.process_time() - own0
        return Served(cpu, received, wall, own)
    finally:
        proc.stdin.close()
        try:
            proc.wait(SOCKET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read_stream(sock: socket.socket, total: int, deadline: float) -> int:
    buf, received = bytearray(1 << 20), 0
    while received < total and time.perf_counter() < deadline:
        n = sock.recv_into(buf)
        if not n:
            break
        received += n
    return received


def _read_replies(sock: socket.socket, pieces: list[tuple[Path, int, int]], chunk: int, deadline: float) -> int:
    """Each reply whole, its head and then its bytes, as the raw fetch loop reads a Fetch reply."""
    view, received = memoryview(bytearray(chunk + REPLY_HEAD_BYTES)), 0
    request = bytes(REQUEST_BYTES)
    for _, _, length in pieces:
        if time.perf_counter() > deadline:
            break
        sock.sendall(request)
        _recv_into(sock, view, REPLY_HEAD_BYTES)
        received += _recv_into(sock, view, length)
    return received


def serve_files(mode: str, chunk: int, passes: int, names: list[str]) -> None:
    """The baseline server's process (Rule 3): print the port, serve one connection ("stream": everything
    after a one-byte go; "requests": one chunk per REQUEST_BYTES request), then wait for stdin to close."""
    files = [Path(name) for name in names]
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(listener.getsockname()[1], flush=True)
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the broker's socket (Rule 3)
        conn.setblocking(False)
        handles = {path: open(path, "rb") for path in files}
        head = bytes(REPLY_HEAD_BYTES)
        try:
            with conn:
                for i, (path, start, length) in enumerate(_pieces(files, chunk, passes)):
                    if mode == "requests" or i == 0:
                        _recv_nonblocking(conn, REQUEST_BYTES if mode == "requests" else 1)
                    if mode == "requests":
                        _send_nonblocking(conn, head)
                    _sendfile(conn, handles[path], start, length)
        finally:
            for handle in handles.values():
                handle.close()
    sys.stdin.read()


def _recv_nonblocking(conn: socket.socket, size: int) -> None:
    """Read `size` bytes from the non-blocking `conn`, waiting in poll as the broker's event loop does."""
    while size:
        select.select([conn], [], [])
        try:
            got = conn.recv(size)
        except BlockingIOError:
            continue
        if not got:
            raise ConnectionError("the reader closed the connection")
        size -= len(got)


def _send_nonblocking(conn: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[conn.send(view):]
        except BlockingIOError:
            select.select([], [conn], [])


def _sendfile(conn: socket.socket, handle, start: int, length: int) -> None:
    """What the broker's reply writer does with a record set: a sendfile of what the socket takes now, a poll
    for writability while there is more."""
    done = 0
    while done < length:
        try:
            done += os.sendfile(conn.fileno(), handle.fileno(), start + done, length - done)
        except BlockingIOError:
            select.select([], [conn], [])


def list_offsets_by_time(host: str, port: int, topic: str, timestamps: list[int], deadline_s: float = 60.0
                         ) -> tuple[list[float], list[int]]:
    """ListOffsets v5 by timestamp, one request at a time on one socket: (seconds per lookup, offsets
    answered, -1 where none), for as many timestamps as the deadline allows."""
    from sparklog.protocol import ApiKey, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from sparklog.protocol.registry import decode_response, encode_request

    times, offsets = [], []
    deadline = time.perf_counter() + deadline_s
    with socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S) as sock:
        for correlation_id, ts in enumerate(timestamps):
            if time.perf_counter() > deadline:
                break
            request = encode_request(ApiKey.LIST_OFFSETS, 5, correlation_id, "scale", ListOffsetsRequest(
                replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsPartition(partition_index=0, timestamp=ts)])]))
            started = time.perf_counter()
            sock.sendall(request)
            frame = _recv_frame(sock)
            times.append(time.perf_counter() - started)
            part = decode_response(ApiKey.LIST_OFFSETS, 5, frame)[1].topics[0].partitions[0]
            offsets.append(part.offset if part.error_code == 0 else -1)
    return times, offsets


def create_single_partition_topic(zk_connect: str, topic: str) -> None:
    """Create `topic` with one partition and one replica, and give its broker a moment to open the log."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    client = connect(zk_connect)
    try:
        topics.create_topic(client, topic, 1, 1)
    finally:
        close(client)
    time.sleep(0.5)


@contextmanager
def one_broker_cluster(topics: Iterable[str], partitions: int, chroot: str = "bench") -> Iterator[tuple]:
    """An embedded ZooKeeper and one broker, with `topics` created (`partitions` each, one replica): yields
    `(cluster, work directory)` (`cluster.bootstrap` is its address) and stops both whatever happens.
    Needs the repository's `tests` directory on `sys.path` (for `support.cluster`)."""
    from sparklog.coordination import topics as topic_admin
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import Cluster

    work = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    zookeeper = EmbeddedZooKeeper()
    zookeeper.start()
    try:
        zk_connect = f"{zookeeper.connect_string}/{chroot}"
        with Cluster(zk_connect, work / "brokers", brokers=1) as cluster:
            client = connect(zk_connect)
            try:
                for topic in topics:
                    topic_admin.create_topic(client, topic, partitions, 1)
            finally:
                close(client)
            time.sleep(TOPIC_OPEN_S)
            yield cluster, work
    finally:
        zookeeper.stop()
