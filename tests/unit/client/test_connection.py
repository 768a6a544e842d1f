"""Connections: pipelining up to the in-flight limit, correlation-id checks, failures of in-flight requests."""

from __future__ import annotations

import time

import pytest

from sparklog.client.connection import IOThread, NetworkClient
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
