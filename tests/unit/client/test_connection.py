"""Connections: pipelining up to the in-flight limit, correlation-id checks, failures of in-flight requests."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from sparklog.client.backoff import ExponentialBackoff
from sparklog.client.connection import IOThread, NetworkClient, ResponseFuture
from sparklog.coordination.reachability import failure_reason
from sparklog.client.errors import KafkaConnectionError, RequestTimedOut, is_retriable
from sparklog.client.metadata import METADATA_VERSION
from sparklog.protocol import ApiKey, MetadataRequest, MetadataRequestTopic
from support.client_fake_broker import FakeBroker


@pytest.fixture
def broker():
    with FakeBroker({"t": 3}) as b:
        yield b


@pytest.fixture
def client(request, broker):
    c = NetworkClient([("127.0.0.1", broker.port)], "test", max_in_flight=5, request_timeout_ms=30_000)
    thread = IOThread("test-io", c, lambda: None)
    thread.start()
    request.addfinalizer(thread.stop)
    return c


def metadata(name="t"):
    return MetadataRequest(topics=[MetadataRequestTopic(name=name)])


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_requests_are_pipelined_up_to_the_in_flight_limit_and_answered_in_order(broker, client):
    broker.hold = True
    futures = [client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()) for _ in range(7)]
    wait_until(lambda: len(broker.held) == 5)
    time.sleep(0.1)
    assert len(broker.held) == 5  # the 6th and 7th wait for a free slot
    broker.release()
    broker.hold = False
    for future in futures:
        assert future.wait(5).topics[0].name == "t"
    ids = [r.header.correlation_id for r in broker.requests]
    assert ids == sorted(ids) and len(set(ids)) == 7


def test_a_response_with_the_wrong_correlation_id_fails_every_request_in_flight(broker, client):
    broker.hold = True
    futures = [client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()) for _ in range(3)]
    wait_until(lambda: len(broker.held) == 3)
    broker.swap_correlation = True
    broker.release()
    for future in futures:
        with pytest.raises(KafkaConnectionError, match="correlation id"):
            future.wait(5)
    broker.swap_correlation = False
    time.sleep(0.06)  # reconnect backoff
    assert client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5).topics[0].name == "t"


def test_a_connection_closed_by_the_broker_fails_in_flight_requests_as_retriable(broker, client):
    broker.close_after = 0
    future = client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata())
    with pytest.raises(KafkaConnectionError) as info:
        future.wait(5)
    assert is_retriable(info.value)


def test_no_answer_within_the_request_timeout_fails_the_request(broker, client):
    broker.hold = True
    future = client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata(), timeout=0.3)
    with pytest.raises(RequestTimedOut):
        future.wait(5)


def test_an_unreachable_broker_fails_fast_and_backs_off():
    c = NetworkClient([("127.0.0.1", 1)], "test")
    thread = IOThread("test-io", c, lambda: None)
    thread.start()
    try:
        with pytest.raises(KafkaConnectionError, match="connect"):
            c.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5)
        with pytest.raises(KafkaConnectionError):
            c.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5)
        with pytest.raises(KafkaConnectionError, match="unknown broker"):
            c.submit(42, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5)
    finally:
        thread.stop()


def test_a_request_failing_before_it_is_sent_lets_the_io_loop_step_again():
    """A request submitted without a wake-up (the consumer's fetch to a leader the client backs off from)
    fails inside poll(); its callback asks the step for more work (a metadata refresh), so poll must not
    then sleep until woken: the consumer stalled for good after its partition leader was killed."""
    c = NetworkClient([("127.0.0.1", 1)], "test")
    steps = []

    def step():
        steps.append(time.monotonic())
        if len(steps) == 1:  # as the fetcher does: a request, no wake-up; its failure wants another step
            c.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata(), wake=False,
                     callback=lambda future: steps.append("failed"))
        return None  # nothing else to do until woken

    thread = IOThread("test-io", c, step)
    thread.start()
    try:
        deadline = time.monotonic() + 2
        while len(steps) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "failed" in steps and len(steps) >= 3, "the loop slept after a request failed in poll()"
    finally:
        thread.stop()


def test_a_request_without_response_completes_when_written(broker, client):
    from sparklog.protocol import PartitionProduceData, ProduceRequest, TopicProduceData
    from sparklog.records.batch import build_batch

    request = ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=0, records=build_batch([(None, b"v", None, 1)]))])])
    future = client.submit(-1, ApiKey.PRODUCE, 8, request, expect_response=False)
    assert future.wait(5) is None
    wait_until(lambda: len(broker.records("t", 0)) == 1)
    # The connection still works for requests that have responses.
    assert client.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5).topics[0].name == "t"


@pytest.mark.parametrize("address, why", [(("127.0.0.1", 1), "connection refused"),
                                          (("no-such-host.invalid", 9092), "name not resolved")])
def test_an_unreachable_broker_is_named_with_why_and_warned_about(caplog, address, why):
    c = NetworkClient([address], "test")
    thread = IOThread("test-io", c, lambda: None)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger="sparklog.client.connection"):
            with pytest.raises(KafkaConnectionError, match=why):
                c.submit(-1, ApiKey.METADATA, METADATA_VERSION, metadata()).wait(5)
        where = f"bootstrap server {address[0]}:{address[1]}: {why}"
        assert c.unreachable().startswith(f"could not reach any broker: {where}") and not c.ever_connected
        [warning] = [r.getMessage() for r in caplog.records]
        assert warning.startswith(f"cannot reach {where}") and warning.endswith("; retrying")
    finally:
        thread.stop()


def test_reconnects_back_off_exponentially(monkeypatch):
    c = NetworkClient([("127.0.0.1", 1)], "test", reconnect_backoff=ExponentialBackoff(50, 1_000))
    waits = []
    for _ in range(5):
        before = time.monotonic()
        future = ResponseFuture()
        c._retry_at.clear()
        assert c._connection(-1, future) is None and future.error is not None
        waits.append(c._retry_at[-1] - before)
    assert waits == sorted(waits) and waits[0] < 0.1 and waits[-1] > 0.5  # 50 ms, doubling to 800 ms
    c.close()


def test_failure_reasons_name_the_failure():
    assert failure_reason(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert failure_reason(socket.timeout("timed out")) == "timed out"
    assert failure_reason(socket.gaierror(-2, "Name or service not known")).startswith("name not resolved")
    assert failure_reason(OSError(113, "No route to host")) == "no route to host"


def test_clients_that_give_up_say_which_broker_and_why():
    from sparklog.client.admin import AdminClient
    from sparklog.client.consumer import Consumer
    from sparklog.client.errors import NoBrokersAvailable

    started = time.monotonic()
    with AdminClient("127.0.0.1:1", request_timeout_ms=1_000) as admin:
        with pytest.raises(NoBrokersAvailable, match="127.0.0.1:1: connection refused"):
            admin.describe()
    with Consumer("127.0.0.1:1", request_timeout_ms=1_000) as consumer:
        with pytest.raises(NoBrokersAvailable, match="127.0.0.1:1: connection refused"):
            consumer.end_offsets([("t", 0)])
        with pytest.raises(NoBrokersAvailable, match="connection refused"):
            consumer.partitions_for_topic("t")
    assert time.monotonic() - started < 10  # each within its own timeout, not the defaults'


def test_wakeups_are_coalesced_into_one_byte_until_the_io_thread_drains_them():
    client = NetworkClient([("127.0.0.1", 9)], "test")
    try:
        for _ in range(3):
            client.wakeup()
        assert client._wake_r.recv(16, socket.MSG_PEEK) == b"\x00"  # one syscall's byte for three wake-ups
        client.poll(0)  # the I/O loop drains it
        with pytest.raises(BlockingIOError):
            client._wake_r.recv(16)
        client.wakeup()  # and the next wake-up sends a byte again
        assert client._wake_r.recv(16, socket.MSG_PEEK) == b"\x00"
    finally:
        client.close()


def test_no_wakeup_is_lost_a_sleeping_step_sees_every_change_made_before_waking_it():
    client = NetworkClient([("127.0.0.1", 9)], "test")
    wanted, seen = [0], [0]

    def step():
        seen[0] = wanted[0]
        return None  # sleep until woken

    thread = IOThread("test-io", client, step)
    thread.start()
    try:
        for value in range(1, 300):
            wanted[0] = value
            client.wakeup()
            wait_until(lambda: seen[0] == value, timeout=5.0)
    finally:
        thread.stop()
