"""The server and dispatcher over loopback sockets, in-process (no ZooKeeper): ordering, acks=0, sendfile,
hostile frames. The broker's event loop runs in a thread owned by the fixture."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time

import pytest

from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.network.server import BrokerServer
from sparklog.protocol import (
    ApiKey,
    ApiVersionsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    MetadataRequest,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch, iter_records

from unit.broker.handlers.test_handlers import logs, state  # noqa: F401 - fixtures

SIZE = struct.Struct(">i")


class Served:
    def __init__(self, state, **server_options):
        state.config = state.config.with_overrides({"socket.request.max.bytes": str(8 * 1024 * 1024)})
        self.server = BrokerServer(Dispatcher(state), **server_options)
        self.host, self.port = self.server.bind("127.0.0.1", 0)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error = None

    def _run(self):
        try:
            self.loop.run_until_complete(self.server.serve())
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self):
        self.server.listen()  # before the thread: connections made at once are not refused
        self.thread.start()
        return self

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(10)
        assert not self.thread.is_alive(), "the server did not stop"
        self.loop.close()
        assert self.error is None, self.error

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def statistics(self):
        return self.server.statistics()


@pytest.fixture
def served(state):  # noqa: F811
    s = Served(state).start()
    yield s
    s.stop()


def recv_exactly(sock, n) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def recv_frame(sock) -> bytes:
    (size,) = SIZE.unpack(recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def call(sock, api_key, version, body, correlation_id=1):
    sock.sendall(encode_request(api_key, version, correlation_id, "t", body))
    got, response = decode_response(api_key, version, recv_frame(sock))
    assert got == correlation_id
    return response


def is_closed(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True


def test_api_versions_served_and_fallback(served):
    with served.connect() as sock:
        for version in (0, 3, 4):
            response = call(sock, ApiKey.API_VERSIONS, version, ApiVersionsRequest(), correlation_id=version)
            assert response.error_code == 0
            served_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert served_versions[ApiKey.PRODUCE] == (0, 11) and served_versions[ApiKey.FETCH] == (4, 16)
            assert served_versions[ApiKey.JOIN_GROUP] == (0, 9)
        # an unserved ApiVersions version: a v0 body with error 35, not a closed connection
        frame = bytearray(encode_request(ApiKey.API_VERSIONS, 3, 42, "t", ApiVersionsRequest()))
        struct.pack_into(">h", frame, 6, 99)
        sock.sendall(frame)
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, recv_frame(sock))
        assert (correlation_id, body.error_code) == (42, 35)
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]
        assert call(sock, ApiKey.API_VERSIONS, 0, ApiVersionsRequest(), 43).error_code == 0


def produce_frame(correlation_id, acks, values):
    body = ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, v, None, None) for v in values]))])])
    return encode_request(ApiKey.PRODUCE, 8, correlation_id, "t", body)


def test_pipelined_requests_are_answered_in_order_and_acks0_gets_nothing(served):
    with served.connect() as sock:
        frames = []
        for i in range(60):
            if i % 3 == 0:
                frames.append(produce_frame(i, 0, [b"zero"]))  # no response
            elif i % 3 == 1:
                frames.append(produce_frame(i, 1, [b"one"]))
            else:
                frames.append(encode_request(ApiKey.METADATA, 8, i, "t", MetadataRequest(topics=None)))
        sock.sendall(b"".join(frames))
        seen = []
        for i in range(60):
            if i % 3 == 0:
                continue
            api, version = (ApiKey.PRODUCE, 8) if i % 3 == 1 else (ApiKey.METADATA, 8)
            correlation_id, body = decode_response(api, version, recv_frame(sock))
            seen.append(correlation_id)
        assert seen == [i for i in range(60) if i % 3]


def test_fetch_sends_large_record_sets_whole(served, state):  # noqa: F811
    plog = state.partitions.snapshot.leading[("t", 0)]
    payload = [os.urandom(1500) for _ in range(4000)]  # ~6 MB (max.message.bytes is 2000 here)
    for value in payload:
        plog.append(build_batch([(None, value, None, None)]))
    body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=64 * 1024 * 1024, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=64 * 1024 * 1024)])])
    with served.connect() as sock:
        got = []
        for correlation_id in range(3):
            response = call(sock, ApiKey.FETCH, 11, body, correlation_id)
            records = response.responses[0].partitions[0].records
            got = [r.value for r in iter_records(bytes(records))]
        assert got == payload
    stats = served.statistics()
    assert stats.bytes_sendfile >= 3 * 6_000_000
    assert stats.sendfile_slow_paths >= 1  # 6 MB does not fit the socket at once: the async path ran


@pytest.mark.parametrize("garbage", [
    SIZE.pack(2**31 - 1) + b"x" * 100,  # announces 2 GB: refused from the prefix
    SIZE.pack(-5),
    SIZE.pack(12) + os.urandom(12),  # random header: unknown api or malformed
    SIZE.pack(10) + struct.pack(">hhi", 3, 8, 1) + b"\x00\x09",  # client_id longer than the frame
    SIZE.pack(20) + struct.pack(">hhi", 0, 8, 1) + b"\xff\xff" + b"\x00" * 10,  # truncated produce body
], ids=["2GB-size", "negative-size", "random-header", "long-client-id", "truncated-produce"])  # named, not
# by their bytes: the random header would give each pytest-xdist worker a different test id
def test_hostile_frames_close_only_that_connection(served, garbage):
    with served.connect() as good, served.connect() as bad:
        bad.sendall(garbage)
        assert is_closed(bad)
        assert call(good, ApiKey.METADATA, 8, MetadataRequest(topics=None), 5).controller_id == 1
    with served.connect() as after:
        assert call(after, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0


def test_random_bytes_never_stop_the_server(served):
    rng = random.Random(1234)
    for _ in range(40):
        with served.connect() as sock:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))
            if rng.random() < 0.5:  # a plausible size prefix in front of random bytes
                data = SIZE.pack(len(data)) + data
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(65536)
            except OSError:
                pass
    with served.connect() as sock:
        assert call(sock, ApiKey.API_VERSIONS, 0, ApiVersionsRequest()).error_code == 0
    assert served.statistics().handler_errors == 0


def test_truncated_frame_then_disconnect(served):
    frame = encode_request(ApiKey.METADATA, 8, 1, "t", MetadataRequest(topics=None))
    with served.connect() as sock:
        sock.sendall(frame[: len(frame) // 2])
    with served.connect() as sock:
        assert call(sock, ApiKey.METADATA, 8, MetadataRequest(topics=None)).controller_id == 1


# -- resource limits (issue 14) ------------------------------------------------------------------------------


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def limited(state):  # noqa: F811
    s = Served(state, max_connections_per_ip=3, max_queued_bytes=QUEUE_LIMIT).start()
    yield s
    s.stop()


QUEUE_LIMIT = 1 << 20
PARTIAL = 900 * 1024  # of a frame that is larger still: two of these are over QUEUE_LIMIT


def padded_api_versions(correlation_id: int, size: int) -> tuple[bytes, bytes]:
    """A valid ApiVersions frame of `size` bytes (Kafka ignores bytes after the body): (prefix, rest)."""
    frame = encode_request(ApiKey.API_VERSIONS, 0, correlation_id, "t", ApiVersionsRequest())[4:]
    frame += bytes(size - len(frame))
    return SIZE.pack(size) + frame[:PARTIAL], frame[PARTIAL:]


def test_a_bound_server_refuses_connections_until_it_serves(state):  # noqa: F811
    """A broker binds before it has registered in ZooKeeper; until serve() it must not accept."""
    server = BrokerServer(Dispatcher(state))
    host, port = server.bind("127.0.0.1", 0)
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, port), timeout=2).close()
    finally:
        server._close_everything()


def test_connections_over_the_per_ip_limit_are_closed(limited):
    socks = [limited.connect() for _ in range(4)]
    try:
        assert is_closed(socks[3])
        for sock in socks[:3]:
            assert call(sock, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
        assert limited.statistics().connections_refused == 1
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: limited.statistics().connections_open == 0)
    with limited.connect() as sock:  # the slots are free again
        assert call(sock, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0


def test_partial_frames_are_bounded_by_queued_max_request_bytes(limited):
    """Two connections each send 900 KiB of a 1 MiB frame: the second waits (reading paused), a third
    sending whole small requests is not slowed, and the second goes on once the first completes."""
    first_head, first_rest = padded_api_versions(1, QUEUE_LIMIT - 16)
    second_head, second_rest = padded_api_versions(2, QUEUE_LIMIT - 16)
    with limited.connect() as first, limited.connect() as second, limited.connect() as small:
        first.sendall(first_head)
        wait_until(lambda: limited.statistics().queued_request_bytes >= PARTIAL)
        second.sendall(second_head)
        wait_until(lambda: limited.statistics().queue_paused == 1)
        assert limited.statistics().queued_request_bytes <= 2 * PARTIAL + 8
        for i in range(5):
            assert call(small, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(), 10 + i).error_code == 0
        first.sendall(first_rest)
        assert decode_response(ApiKey.API_VERSIONS, 0, recv_frame(first))[0] == 1
        second.sendall(second_rest)
        assert decode_response(ApiKey.API_VERSIONS, 0, recv_frame(second))[0] == 2
        # the reply goes out before the server recounts (same loop turn, another thread here): wait for it
        wait_until(lambda: limited.statistics().queued_request_bytes == 0)
        assert limited.statistics().queue_paused == 0


def test_a_partial_frame_whose_rest_comes_in_many_reads_completes_while_another_waits(limited):
    """A fresh-clone run hung here: with the second connection waiting over the limit, the first's rest
    arrived in more than one read; each read grew the total further, so the first waited too and nothing
    could complete (queued_bytes Rule 4)."""
    first_head, first_rest = padded_api_versions(1, QUEUE_LIMIT - 16)
    second_head, second_rest = padded_api_versions(2, QUEUE_LIMIT - 16)
    with limited.connect() as first, limited.connect() as second:
        first.sendall(first_head)
        wait_until(lambda: limited.statistics().queued_request_bytes >= PARTIAL)
        second.sendall(second_head)
        wait_until(lambda: limited.statistics().queue_paused == 1)
        for start in range(0, len(first_rest), 16384):  # one read each: the next is sent once this is read
            received = limited.statistics().bytes_received
            piece = first_rest[start:start + 16384]
            first.sendall(piece)
            deadline = time.monotonic() + 2
            while limited.statistics().bytes_received < received + len(piece) and time.monotonic() < deadline:
                time.sleep(0.005)
        assert decode_response(ApiKey.API_VERSIONS, 0, recv_frame(first))[0] == 1
        second.sendall(second_rest)
        assert decode_response(ApiKey.API_VERSIONS, 0, recv_frame(second))[0] == 2


def test_idle_connections_are_closed(state):  # noqa: F811
    s = Served(state, idle_timeout_s=0.3).start()
    try:
        with s.connect() as idle, s.connect() as busy:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # one connection keeps asking, the other says nothing
                assert call(busy, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
                time.sleep(0.05)
            assert is_closed(idle)
            assert call(busy, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
        assert s.statistics().idle_closed == 1
    finally:
        s.stop()
