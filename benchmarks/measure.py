"""The loops the broker benchmarks share (paper.py, scale.py, clients.py): produce, consume and serve, each
counting only what was acknowledged or received, each bounded by a deadline; and the clusters they run on
(`create_single_partition_topic`, `one_broker_cluster`).

Rule 1: a produced message counts once its delivery report arrives without error (confluent-kafka's
callback, err None); reports with an error are counted as `failed`, and messages with no report by the
deadline as `unacknowledged`. Throughput is acknowledged messages over the time to the last report.
Rule 2: every loop ends by its deadline, whatever the broker does; a consumer asked for n messages reports
how many it got, so a short read shows as a short count, never as a rate of what was not read.
Rule 3: the baselines of the Fetch path run in the same process over the same segment files: a bare
`os.sendfile` loop to a socket (what the kernel costs to stream those bytes), a bare request/response
loop (one small request, then one sendfile of the next chunk: what the kernel costs to serve them as
Fetch responses, one at a time, with no work per request) and a raw Fetch loop (the broker with a client
that does nothing but count the records it receives).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

TICK = os.sysconf("SC_CLK_TCK")
GB = 1e9
SIZE = struct.Struct(">i")
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
_BASE_AND_LENGTH = struct.Struct(">qi")  # a v2 batch's baseOffset and batchLength
# a Fetch v11 partition after its index: error_code, high_watermark, last_stable_offset, log_start_offset,
# aborted_transactions count (-1: null), preferred_read_replica, records length
_PARTITION_TAIL = struct.Struct(">hqqqiii")
POLL_EVERY = 10_000  # produce() calls between polls for delivery reports
SOCKET_TIMEOUT_S = 30.0
REQUEST_BYTES = 64  # request_loop's request: about a one-partition Fetch v11 frame
TOPIC_OPEN_S = 1.0  # after creating topics: the broker learns of them from ZooKeeper and opens their logs


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
        return f"; FAILED {self.failed}, unacknowledged {self.unacknowledged} (first error: {self.first_error})"


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


def _send(producer, topic: str, n: int, value: bytes, partition: int | None, stop_at: float) -> int:
    produce = producer.produce
    args = {} if partition is None else {"partition": partition}
    sent = 0
    while sent < n and time.perf_counter() < stop_at:
        for _ in range(min(POLL_EVERY, n - sent)):
            try:
                produce(topic, value, **args)
            except BufferError:
                producer.poll(0.01)
                produce(topic, value, **args)
        sent += min(POLL_EVERY, n - sent)
        producer.poll(0)
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
    records_at = 4 + 4 + 4 + 2 + 4 + 4 + 2 + len(topic.encode()) + 4 + 4  # ... partition_index; error_code next
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


def sendfile_loop(files: list[Path], chunk: int, deadline_s: float = 300.0, passes: int = 1
                  ) -> tuple[float, int, float]:
    """Send the files whole `passes` times, `chunk` bytes per os.sendfile call, to a socket read and
    discarded by this thread: (sender's CPU seconds, bytes sent, wall seconds). The bare cost of serving
    those bytes."""
    listener = socket.create_server(("127.0.0.1", 0))
    total = passes * sum(f.stat().st_size for f in files)
    result: dict = {}

    def send() -> None:
        conn, _ = listener.accept()
        cpu0 = time.thread_time()
        sent = 0
        with conn:
            for path in files * passes:
                with open(path, "rb") as f:
                    size, pos = os.fstat(f.fileno()).st_size, 0
                    while pos < size:
                        pos += os.sendfile(conn.fileno(), f.fileno(), pos, min(chunk, size - pos))
            sent = total
        result["cpu"], result["sent"] = time.thread_time() - cpu0, sent

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    started = time.perf_counter()
    with socket.create_connection(listener.getsockname(), timeout=SOCKET_TIMEOUT_S) as sock:
        buf = bytearray(1 << 20)
        received, deadline = 0, started + deadline_s
        while received < total and time.perf_counter() < deadline:
            n = sock.recv_into(buf)
            if not n:
                break
            received += n
    wall = time.perf_counter() - started
    sender.join(SOCKET_TIMEOUT_S)
    listener.close()
    return result.get("cpu", float("nan")), received, wall


def request_loop(files: list[Path], chunk: int, deadline_s: float = 300.0, passes: int = 1
                 ) -> tuple[float, int, float]:
    """The bare request/response server: for each small request read from the socket, one blocking
    os.sendfile of the next `chunk` bytes of the files (the whole rest of a file when it is shorter), to a
    client thread that sends the request and reads the reply whole before asking again, as the raw fetch
    loop does: (server's CPU seconds, bytes sent, wall seconds). A Fetch server with no per-request work;
    on loopback it pays more per byte than `sendfile_loop`, whose sender finds the receiver's window open
    mid-stream and whose receiver's ACKs push part of the data in the receiver's time (Rule 3)."""
    listener = socket.create_server(("127.0.0.1", 0))
    pieces = [(path, start, min(chunk, path.stat().st_size - start))
              for path in files for start in range(0, path.stat().st_size, chunk)] * passes
    result: dict = {}

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(SOCKET_TIMEOUT_S)
        handles = {path: open(path, "rb") for path in files}
        cpu0, sent = time.thread_time(), 0
        try:
            with conn:
                for path, start, length in pieces:
                    if not conn.recv(REQUEST_BYTES):
                        break
                    done = 0
                    while done < length:
                        done += os.sendfile(conn.fileno(), handles[path].fileno(), start + done, length - done)
                    sent += done
        finally:
            for handle in handles.values():
                handle.close()
            result["cpu"], result["sent"] = time.thread_time() - cpu0, sent

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    started = time.perf_counter()
    received, deadline = 0, started + deadline_s
    with socket.create_connection(listener.getsockname(), timeout=SOCKET_TIMEOUT_S) as sock:
        view = memoryview(bytearray(chunk))
        for _, _, length in pieces:
            if time.perf_counter() > deadline:
                break
            sock.sendall(bytes(REQUEST_BYTES))
            received += _recv_into(sock, view, length)
    wall = time.perf_counter() - started
    server.join(SOCKET_TIMEOUT_S)
    listener.close()
    return result.get("cpu", float("nan")), received, wall


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
