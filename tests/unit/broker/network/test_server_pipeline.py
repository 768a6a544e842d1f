"""Pipelining over loopback sockets, with the real dispatcher and replication handlers (no ZooKeeper): a
request parked in the purgatory does not stop the requests behind it from taking effect, replies leave in
request order, and what a connection holds in flight is bounded (count and bytes)."""

from __future__ import annotations

import socket
import time

import pytest

from sparklog.broker.handlers import NONE
from sparklog.protocol import (ApiKey, FetchPartition, FetchRequest, FetchTopic, MetadataRequest,
                               PartitionProduceData, ProduceRequest, TopicProduceData)
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch

from unit.broker.handlers.test_handlers_replication import EPOCH, OTHER, logs, state  # noqa: F401 - fixtures
from unit.broker.network.test_server import Served, recv_frame, wait_until

PARKED_TIMEOUT_MS = 8000  # far longer than any wait below: a parked produce is answered by replication


def produce_frame(correlation_id, topic, acks, value=b"v"):
    body = ProduceRequest(acks=acks, timeout_ms=PARKED_TIMEOUT_MS, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=build_batch([(None, value, None, None)]))])])
    return encode_request(ApiKey.PRODUCE, 8, correlation_id, "t", body)


def follower_fetch(sock, offset, correlation_id=99):
    """What a follower's fetcher sends: its log end offset, which moves the leader's high watermark."""
    body = FetchRequest(replica_id=OTHER, max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic="three", partitions=[
        FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=EPOCH)])])
    sock.sendall(encode_request(ApiKey.FETCH, 11, correlation_id, "t", body))
    return decode_response(ApiKey.FETCH, 11, recv_frame(sock))[1].responses[0].partitions[0]


def received(sock, timeout):
    sock.settimeout(timeout)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except socket.timeout:
        return False
    finally:
        sock.settimeout(10)


def produce_codes(sock, count):
    out = []
    for _ in range(count):
        correlation_id, body = decode_response(ApiKey.PRODUCE, 8, recv_frame(sock))
        out.append((correlation_id, body.responses[0].partition_responses[0].error_code))
    return out


@pytest.fixture
def served(state):  # noqa: F811
    s = Served(state).start()
    yield s
    s.stop()


@pytest.fixture
def three_in_flight(state):  # noqa: F811
    s = Served(state, max_in_flight=3).start()
    yield s
    s.stop()


def test_a_parked_acks_all_produce_does_not_stop_later_requests(served, logs):  # noqa: F811
    """acks=all to a partition with a follower parks; an acks=1 produce and a Metadata sent behind it take
    effect at once, but their replies wait for the parked one's (request order)."""
    with served.connect() as client, served.connect() as follower:
        client.sendall(produce_frame(1, "three", -1) + produce_frame(2, "one", 1) +
                       encode_request(ApiKey.METADATA, 8, 3, "t", MetadataRequest(topics=None)))
        wait_until(lambda: logs.get("one", 0).log_end_offset == 1, timeout=3)  # read ahead and appended
        assert not received(client, 0.2)  # nothing may overtake the parked produce
        assert follower_fetch(follower, 1).high_watermark == 1  # the follower has it: the HW moves
        assert produce_codes(client, 2) == [(1, NONE), (2, NONE)]
        assert decode_response(ApiKey.METADATA, 8, recv_frame(client))[0] == 3


def test_replies_leave_in_request_order_whatever_order_they_complete_in(served, logs):  # noqa: F811
    with served.connect() as client, served.connect() as follower:
        for round_ in range(4):
            first = 10 * round_
            client.sendall(produce_frame(first, "three", -1) + produce_frame(first + 1, "one", 1)
                           + produce_frame(first + 2, "three", -1))
            wait_until(lambda: logs.get("three", 0).log_end_offset == 2 * round_ + 2, timeout=3)
            follower_fetch(follower, 2 * round_ + 2)
            assert produce_codes(client, 3) == [(first, NONE), (first + 1, NONE), (first + 2, NONE)]


def test_in_flight_requests_per_connection_are_bounded(three_in_flight, logs):  # noqa: F811
    """With 3 in flight, the 4th request is not read until the first is answered; then all are, in order."""
    served, three = three_in_flight, logs.get("three", 0)
    with served.connect() as client, served.connect() as follower:
        client.sendall(b"".join(produce_frame(i, "three", -1) for i in range(6)))
        wait_until(lambda: three.log_end_offset == 3, timeout=3)
        time.sleep(0.2)
        assert three.log_end_offset == 3
        assert served.statistics().in_flight_requests == 3
        follower_fetch(follower, 3)
        answered = produce_codes(client, 3)
        wait_until(lambda: three.log_end_offset == 6, timeout=3)  # slots freed: the rest is read
        follower_fetch(follower, 6)
        answered += produce_codes(client, 3)
        assert answered == [(i, NONE) for i in range(6)]
    wait_until(lambda: served.statistics().in_flight_requests == 0)


def test_a_client_that_does_not_read_cannot_grow_the_brokers_buffers(served):
    """Thousands of pipelined Metadata requests, never read: the broker stops reading once its write
    buffer is over the high-water mark, so it buffers at most that plus the in-flight replies."""
    from sparklog.broker.network.server import WRITE_BUFFER_HIGH_WATER
    request = encode_request(ApiKey.METADATA, 8, 1, "t", MetadataRequest(topics=None))
    with served.connect() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        sent = 0
        data = request * 2000
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            try:
                sent += client.send(data)
            except BlockingIOError:
                time.sleep(0.05)
        (conn,) = served.server.connections
        buffered = conn.transport.get_write_buffer_size()
        assert buffered <= WRITE_BUFFER_HIGH_WATER + 3 * 64 * 1024
        assert served.statistics().bytes_received < sent  # reading stopped: the rest waits in the kernel
        assert served.statistics().bytes_received < 64 * 1024 * 1024


QUEUE_LIMIT = 64 * 1024


@pytest.fixture
def limited(state):  # noqa: F811
    s = Served(state, max_queued_bytes=QUEUE_LIMIT).start()
    yield s
    s.stop()


FLOOD_WAIT_MS = 60_000


def test_a_parked_flood_does_not_slow_other_connections(limited, logs):  # noqa: F811
    """One client parks 300 long-polling fetches (far more than queued.max.request.bytes would hold, were
    parked requests counted there); another's produce and metadata are answered at once all the same: long
    before the flood's minute-long waits end (FLOOD_WAIT_MS; the bound is half of it, generous on a loaded
    machine, and still no answer queued behind the flood meets it)."""
    body = FetchRequest(max_wait_ms=FLOOD_WAIT_MS, min_bytes=1 << 30, topics=[FetchTopic(topic="one", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)])])
    with limited.connect() as flood, limited.connect() as client:
        flood.sendall(b"".join(encode_request(ApiKey.FETCH, 11, i, "t", body) for i in range(300)))
        wait_until(lambda: limited.statistics().in_flight_requests == 300, timeout=5)
        started = time.monotonic()
        client.sendall(produce_frame(1, "one", 1) + encode_request(ApiKey.METADATA, 8, 2, "t", MetadataRequest(topics=None)))
        assert produce_codes(client, 1) == [(1, NONE)]
        assert decode_response(ApiKey.METADATA, 8, recv_frame(client))[0] == 2
        assert time.monotonic() - started < FLOOD_WAIT_MS / 2000  # not after the flood's waits


def test_a_closed_connection_leaves_no_parked_requests_behind(served, state):  # noqa: F811
    """20 long-polling fetches (30 s each), then the client hangs up: they leave the purgatory at once, so
    opening and closing connections cannot pile up parked requests."""
    body = FetchRequest(max_wait_ms=30_000, min_bytes=1, topics=[FetchTopic(topic="one", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)])])
    with served.connect() as client:
        client.sendall(b"".join(encode_request(ApiKey.FETCH, 11, i, "t", body) for i in range(20)))
        wait_until(lambda: state.waiters.waiting() == 20, timeout=3)
    wait_until(lambda: state.waiters.waiting() == 0, timeout=3)
    wait_until(lambda: served.statistics().tasks_running <= 2)  # the accept loop (and the idle reaper)
