"""Hostile clients and well-behaved ones against one live broker, with the broker's RSS and descriptors
sampled throughout (issue 14). Shared by tests/integration/test_broker_hostile.py (a short run) and
scripts/hostile_broker.py (the full one).

Hostile inputs, one connection each unless said otherwise (`KINDS`):
    random        random bytes
    absurd_size   a size prefix of 2 GiB, just over the limit, or negative, then a little
    truncated     a valid request cut short, then the connection half-closed
    flipped       a valid request with a few body bytes changed
    absurd_count  a valid header whose first array claims two billion elements
    partial_large the size prefix of the largest request the broker takes and 256 KiB of it, then a close
    huge_create   CreateTopics for 1,000,000 partitions, or for 5,000 topics of 1,000: must be answered
                  with an error within HUGE_CREATE_ANSWER_S
    parked_flood  PARKED_FLOOD_REQUESTS pipelined Fetches that each ask to wait a minute for a gigabyte,
                  then a half-close: the broker parks them (pipelining) and must drop them with the connection
And held open for the whole run: `idle` connections that never send a byte, and `slowloris` ones that
announce a request as large as the broker accepts and send one byte of it now and then.

Well-behaved clients: a confluent-kafka producer (acks=all) and consumer working at the same time; every
delivery error, consumer error and `error_cb` report counts as an error.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from support.wire import _recv_exactly as recv_exactly

SIZE = struct.Struct(">i")
KINDS = ("random", "absurd_size", "truncated", "flipped", "absurd_count", "partial_large", "huge_create",
         "parked_flood")
PARKED_FLOOD_REQUESTS = 300
PARTIAL_LARGE_BYTES = 256 * 1024
HUGE_CREATE_ANSWER_S = 10.0
SAMPLE_INTERVAL_S = 0.2
CONNECT_TIMEOUT_S = 5.0
SLOWLORIS_BYTE_INTERVAL_S = 1.0
HOSTILE_TOPIC = "hostile"


def valid_frames() -> list[bytes]:
    from sparklog.protocol import (ApiKey, ApiVersionsRequest, FetchPartition, FetchRequest, FetchTopic,
                                   MetadataRequest, MetadataRequestTopic, PartitionProduceData,
                                   ProduceRequest, TopicProduceData)
    from sparklog.protocol.registry import encode_request
    from sparklog.records.batch import build_batch

    return [
        encode_request(ApiKey.API_VERSIONS, 3, 1, "h", ApiVersionsRequest(client_software_name="x")),
        encode_request(ApiKey.METADATA, 8, 2, "h", MetadataRequest(topics=[MetadataRequestTopic(name=HOSTILE_TOPIC)])),
        encode_request(ApiKey.PRODUCE, 8, 3, "h", ProduceRequest(acks=1, timeout_ms=100, topic_data=[
            TopicProduceData(name=HOSTILE_TOPIC, partition_data=[PartitionProduceData(
                index=0, records=build_batch([(b"k", b"v", None, None)]))])])),
        encode_request(ApiKey.FETCH, 11, 4, "h", FetchRequest(max_wait_ms=10, min_bytes=1, topics=[
            FetchTopic(topic=HOSTILE_TOPIC, partitions=[FetchPartition(partition=0, fetch_offset=0,
                                                                       partition_max_bytes=1000)])])),
    ]


def huge_create_topics(rng: random.Random) -> bytes:
    from sparklog.protocol import ApiKey, CreatableTopic, CreateTopicsRequest
    from sparklog.protocol.registry import encode_request

    if rng.random() < 0.5:
        topics = [CreatableTopic(name=f"huge-{rng.randrange(10**9)}", num_partitions=1_000_000, replication_factor=1)]
    else:
        prefix = rng.randrange(10**9)
        topics = [CreatableTopic(name=f"many-{prefix}-{i}", num_partitions=1000, replication_factor=1)
                  for i in range(5000)]
    return encode_request(ApiKey.CREATE_TOPICS, 4, 9, "h", CreateTopicsRequest(topics=topics, timeout_ms=5000))


def parked_flood() -> bytes:
    from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
    from sparklog.protocol.registry import encode_request

    body = FetchRequest(max_wait_ms=60_000, min_bytes=1 << 30, topics=[FetchTopic(topic=HOSTILE_TOPIC, partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)])])
    return b"".join(encode_request(ApiKey.FETCH, 11, i, "h", body) for i in range(PARKED_FLOOD_REQUESTS))


def absurd_count() -> bytes:
    """A Metadata v8 header, then a topic array claiming 2**31 - 1 topics, and 20 bytes."""
    body = struct.pack(">hhih", 3, 8, 5, 1) + b"h" + struct.pack(">i", 2**31 - 1) + os.urandom(20)
    return SIZE.pack(len(body)) + body


def payload(kind: str, rng: random.Random, frames: list[bytes], max_request_bytes: int) -> bytes:
    if kind == "random":
        return os.urandom(rng.randrange(1, 300))
    if kind == "absurd_size":
        return SIZE.pack(rng.choice([2**31 - 1, 104857601, -1, -(2**31)])) + os.urandom(50)
    if kind == "truncated":
        frame = frames[rng.randrange(len(frames))]
        return frame[: rng.randrange(1, len(frame))]
    if kind == "flipped":
        frame = bytearray(frames[rng.randrange(len(frames))])
        for _ in range(rng.randrange(1, 6)):
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        return bytes(frame)
    if kind == "absurd_count":
        return absurd_count()
    if kind == "partial_large":
        return SIZE.pack(max_request_bytes) + os.urandom(min(PARTIAL_LARGE_BYTES, max_request_bytes - 1))
    if kind == "huge_create":
        return huge_create_topics(rng)
    if kind == "parked_flood":
        return parked_flood()
    raise ValueError(kind)


def check_huge_create_answer(sock: socket.socket) -> bool:
    """True if the broker answered the CreateTopics with an error for every topic, in time."""
    from sparklog.protocol import ApiKey
    from sparklog.protocol.registry import decode_response

    sock.settimeout(HUGE_CREATE_ANSWER_S)
    size = SIZE.unpack(recv_exactly(sock, 4))[0]
    _, body = decode_response(ApiKey.CREATE_TOPICS, 4, recv_exactly(sock, size))
    return all(t.error_code != 0 for t in body.topics)


@dataclass
class Samples:
    """The broker's RSS (bytes) and open descriptors, sampled from /proc."""

    pid: int
    rss: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def take(self) -> None:
        self.rss.append(rss_bytes(self.pid))
        self.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Attack:
    """`total` hostile inputs from `threads` threads, plus `idle` silent and `slowloris` trickling
    connections held open until `stop()`; `counts` per kind, `failures` lists what went wrong."""

    def __init__(self, host: str, port: int, *, total: int, idle: int, slowloris: int, threads: int = 3,
                 seed: int = 0, max_request_bytes: int = 104857600) -> None:
        self.host, self.port = host, port
        self.total, self.idle, self.slowloris, self.threads = total, idle, slowloris, threads
        self.seed = seed
        self.max_request_bytes = max_request_bytes
        self.counts: Counter = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []

    def start(self) -> "Attack":
        self._open_held()
        self._workers = [threading.Thread(target=self._attack, args=(i,), daemon=True) for i in range(self.threads)]
        self._workers.append(threading.Thread(target=self._trickle, daemon=True))
        for t in self._workers:
            t.start()
        return self

    @property
    def sent(self) -> int:
        return sum(self.counts.values())

    def wait(self, timeout: float) -> bool:
        """True once every hostile input has been sent (within `timeout`)."""
        deadline = time.monotonic() + timeout
        for t in self._workers[: self.threads]:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._workers[: self.threads])

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(30)
        with self._lock:
            for sock in self._held:
                sock.close()
            self._held.clear()

    def _open_held(self) -> None:
        for i in range(self.idle + self.slowloris):
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
            if i >= self.idle:  # announce the largest request the broker takes, send its first byte
                sock.sendall(SIZE.pack(self.max_request_bytes) + b"\x00")
            self._held.append(sock)

    def _trickle(self) -> None:
        while not self._stop.wait(SLOWLORIS_BYTE_INTERVAL_S):
            with self._lock:
                for sock in self._held[self.idle:]:
                    try:
                        sock.send(b"\x00")
                    except OSError:
                        pass

    def _attack(self, worker: int) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        frames = valid_frames()
        share = self.total // self.threads + (1 if worker < self.total % self.threads else 0)
        for _ in range(share):
            if self._stop.is_set():
                break
            kind = rng.choice(KINDS)
            try:
                self._send(kind, payload(kind, rng, frames, self.max_request_bytes))
            except Exception as exc:  # noqa: BLE001 - reported, not raised, so the run finishes
                self.failures.append(f"{kind}: {exc!r}")
            with self._lock:
                self.counts[kind] += 1

    def _send(self, kind: str, data: bytes) -> None:
        with socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S) as sock:
            try:
                sock.sendall(data)
                if kind == "huge_create":
                    if not check_huge_create_answer(sock):
                        self.failures.append("huge_create: a topic was created")
                    return
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass  # the broker closed a connection that sent garbage: what it should do
            except socket.timeout:
                if not is_long_poll(data):
                    raise


def is_long_poll(frame: bytes) -> bool:
    """A valid Fetch that asks the broker to wait longer than we do: its silence is correct."""
    from sparklog.protocol import ApiKey, RemoteProtocolError, decode_request

    try:
        request = decode_request(frame[4:])
    except RemoteProtocolError:
        return False
    return request.header.api_key == ApiKey.FETCH and request.body.max_wait_ms > CONNECT_TIMEOUT_S * 1000


class WellBehaved:
    """A confluent-kafka producer (acks=all) and an assigned consumer of the same partition, at once."""

    def __init__(self, bootstrap: str, topic: str = "well-behaved") -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.errors: list[str] = []
        self.produced: list[bytes] = []
        self.consumed: list[bytes] = []
        self._stop_producing = threading.Event()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> "WellBehaved":
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(self.topic, 1, 1)])[self.topic].result(30)
        for t in self._threads:
            t.start()
        return self

    def finish(self, timeout: float = 60.0) -> None:
        """Stop producing, wait until everything produced is consumed (or `timeout`), stop."""
        self._stop_producing.set()
        self._threads[0].join(timeout)
        deadline = time.monotonic() + timeout
        while len(self.consumed) < len(self.produced) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop.set()
        self._threads[1].join(30)

    def _on_error(self, err) -> None:
        self.errors.append(f"error_cb: {err}")

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                             "error_cb": self._on_error})
        delivered: list[bytes] = []

        def on_delivery(err, msg):
            if err is not None:
                self.errors.append(f"delivery: {err}")
            else:
                delivered.append(msg.value())

        i = 0
        while not self._stop_producing.is_set():
            producer.produce(self.topic, value=b"good-%d" % i, partition=0, on_delivery=on_delivery)
            producer.poll(0.005)
            i += 1
        if producer.flush(30) != 0:
            self.errors.append("producer: messages left unflushed after 30 s")
        self.produced = delivered

    def _consume(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "well-behaved",
                             "enable.auto.commit": False, "error_cb": self._on_error})
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            while not self._stop.is_set():
                m = consumer.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    self.errors.append(f"consumer: {m.error()}")
                    continue
                self.consumed.append(m.value())
        finally:
            consumer.close()


@dataclass
class Report:
    inputs: int
    counts: dict
    failures: list
    client_errors: list
    produced: int
    consumed_in_order: bool
    rss_before: int
    rss_peak: int
    rss_after: int
    fds_before: int
    fds_peak: int
    fds_after: int
    held_connections: int
    broker_statistics: dict | None

    @property
    def rss_growth(self) -> int:
        return self.rss_peak - self.rss_before

    def lines(self) -> list[str]:
        mb = 1024 * 1024
        stats = (self.broker_statistics or {}).get("server", {})
        return [
            f"hostile inputs sent: {self.inputs} {dict(sorted(self.counts.items()))}",
            f"held connections (idle + slowloris): {self.held_connections}",
            f"broker RSS: before {self.rss_before / mb:.1f} MiB, peak {self.rss_peak / mb:.1f} MiB, "
            f"after {self.rss_after / mb:.1f} MiB; growth {self.rss_growth / mb:.1f} MiB",
            f"broker descriptors: before {self.fds_before}, peak {self.fds_peak}, after {self.fds_after}",
            f"well-behaved: {self.produced} produced (acks=all) and consumed in order: {self.consumed_in_order}; "
            f"client errors: {len(self.client_errors)} {self.client_errors[:5]}",
            f"attack failures: {len(self.failures)} {self.failures[:5]}",
            f"broker handler_errors: {stats.get('handler_errors', 'n/a')}, protocol closes: "
            f"{stats.get('closed_protocol_errors', 'n/a')}, refused: {stats.get('connections_refused', 'n/a')}",
        ]


def run(broker, *, inputs: int, idle: int, slowloris: int, threads: int = 3, seed: int = 0,
        max_request_bytes: int = 104857600, timeout: float = 600.0) -> Report:
    """The whole measured run against `broker` (a launcher.BrokerProcess that is running)."""
    samples = Samples(broker.pid)
    clients = WellBehaved(broker.address).start()
    deadline = time.monotonic() + 30
    while not clients.consumed and time.monotonic() < deadline:  # warmed up: both clients are working
        time.sleep(0.1)
    samples.take()
    before_rss, before_fds = samples.rss[-1], samples.fds[-1]
    attack = Attack(broker.host, broker.port, total=inputs, idle=idle, slowloris=slowloris, threads=threads,
                    seed=seed, max_request_bytes=max_request_bytes)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(SAMPLE_INTERVAL_S):
            samples.take()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        attack.start()
        finished = attack.wait(timeout)
        if not finished:
            attack.failures.append(f"the attack did not finish within {timeout:.0f} s")
    finally:
        attack.stop()
        clients.finish()
        sampling.set()
        sampler.join(10)
    time.sleep(1.0)  # the broker sees the held connections close
    samples.take()
    try:
        statistics = broker.statistics()
    except (AttributeError, RuntimeError):  # a broker without the statistics line (before issue 14)
        statistics = None
    return Report(
        inputs=attack.sent, counts=dict(attack.counts), failures=attack.failures, client_errors=clients.errors,
        produced=len(clients.produced), consumed_in_order=clients.consumed[: len(clients.produced)] == clients.produced,
        rss_before=before_rss, rss_peak=max(samples.rss), rss_after=samples.rss[-1],
        fds_before=before_fds, fds_peak=max(samples.fds), fds_after=samples.fds[-1],
        held_connections=idle + slowloris, broker_statistics=statistics)
