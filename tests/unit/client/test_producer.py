"""The producer against a scripted broker: batching into one request per broker, retries, errors, limits."""

from __future__ import annotations

import time

import pytest

from sparklog.client import Producer
from sparklog.client.accumulator import BufferExhausted
from sparklog.client.errors import ClientClosed, UnknownPartition, UnknownTopic
from sparklog.protocol import ApiKey
from sparklog.protocol.errors import for_code
from sparklog.records.batch import iter_batches
from support.client_fake_broker import FakeBroker


@pytest.fixture
def broker():
    with FakeBroker({"t": 4}) as b:
        yield b


def make(broker, **settings):
    settings.setdefault("retry.backoff.ms", 10)
    return Producer(broker.bootstrap, **settings)


def test_records_arrive_with_keys_headers_timestamps_and_offsets(broker):
    with make(broker) as producer:
        a = producer.send("t", b"v1", key=b"k", headers=[("h", b"x")], partition=2, timestamp=123)
        b = producer.send("t", "text", partition=2, headers={"n": None})
        producer.flush(5)
    assert (a.get(0).offset, b.get(0).offset, a.get(0).partition, a.get(0).timestamp) == (0, 1, 2, 123)
    first, second = broker.records("t", 2)
    assert (first.key, first.value, first.headers, first.timestamp) == (b"k", b"v1", (("h", b"x"),), 123)
    assert (second.key, second.value, second.headers) == (None, b"text", (("n", None),))


def test_ready_batches_of_many_partitions_travel_in_one_request_per_broker(broker):
    broker.hold = True
    # several batches per partition in one request: the non-idempotent producer's way (test_idempotence.py
    # covers the idempotent one, one batch per partition per request as in Kafka)
    with make(broker, **{"batch.num.messages": 5, "max.in.flight.requests.per.connection": 1,
                         "enable.idempotence": False}) as producer:
        futures = [producer.send("t", b"%d" % i, partition=i % 4) for i in range(80)]
        deadline = time.monotonic() + 5
        while not broker.held and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the rest accumulates behind the one request in flight
        broker.release()
        producer.flush(5)
    assert [f.get(0).offset for f in futures if f.get(0).partition == 0] == list(range(20))
    requests = broker.produce_requests()
    assert len(requests) < 16  # not one request per batch
    widest = max(requests, key=lambda r: len(r.body.topic_data[0].partition_data))
    parts = widest.body.topic_data[0].partition_data
    assert len(parts) == 4
    assert max(len(list(iter_batches(bytes(p.records)))) for p in parts) > 1  # several batches per partition


# NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: leadership moved
@pytest.mark.parametrize("code", [6, 5, 74, 75])
def test_a_retriable_error_refreshes_metadata_and_retries(broker, code):
    broker.produce_errors = [code, code]
    with make(broker) as producer:
        producer.partitions_for("t")
        before = sum(1 for r in broker.requests if r.api_key == ApiKey.METADATA)
        future = producer.send("t", b"v", partition=1)
        assert future.get(5).offset == 0
        assert producer.metrics()["retried_batches"] == 2
    assert sum(1 for r in broker.requests if r.api_key == ApiKey.METADATA) > before
    assert [r.value for r in broker.records("t", 1)] == [b"v"]


def test_a_non_retriable_error_fails_the_records(broker):
    broker.produce_errors = [10]  # MESSAGE_TOO_LARGE
    with make(broker) as producer:
        future = producer.send("t", b"v", partition=0)
        with pytest.raises(for_code(10)):
            future.get(5)


def test_send_blocks_when_buffer_memory_is_full_then_raises(broker):
    broker.hold = True
    with make(broker, **{"buffer.memory": 4000, "max.block.ms": 200, "batch.num.messages": 1,
                         "request.timeout.ms": 60_000}) as producer:
        start = time.monotonic()
        with pytest.raises(BufferExhausted):
            for _ in range(100):
                producer.send("t", b"x" * 200, partition=0)
        assert time.monotonic() - start >= 0.2
        broker.release()
        producer.flush(5)


def test_delivery_timeout_fails_records_the_broker_never_acknowledges(broker):
    broker.hold = True
    with make(broker, **{"request.timeout.ms": 200, "delivery.timeout.ms": 600}) as producer:
        future = producer.send("t", b"v", partition=0)
        with pytest.raises(TimeoutError):
            future.get(5)


@pytest.mark.timeout(60)  # without the expiry, flush() at close waits forever
@pytest.mark.parametrize("idempotence", [False, True])
def test_records_for_a_leader_that_cannot_be_reached_fail_at_the_delivery_timeout(idempotence):
    """A partition whose leader is known but not connectable still has its records failed at
    delivery.timeout.ms, by either sender path (the plain one skips a partition that waits)."""
    with FakeBroker({"t": 1}) as broker:
        with make(broker, **{"delivery.timeout.ms": 800, "request.timeout.ms": 200, "reconnect.backoff.ms": 50,
                             "enable.idempotence": idempotence, "acks": -1 if idempotence else 1}) as producer:
            producer.send("t", b"first", partition=0).get(5)
            producer._client.is_ready = lambda node_id: False  # as a leader that refuses connections is
            future = producer.send("t", b"v", partition=0)
            with pytest.raises(TimeoutError, match="not acknowledged within delivery.timeout.ms"):
                future.get(5)


def test_unknown_topics_raise_after_max_block(broker):
    with make(broker, **{"max.block.ms": 300}) as producer:
        with pytest.raises(UnknownTopic):
            producer.send("missing", b"v")


def test_a_partition_the_topic_lacks_fails_its_records_once_metadata_says_so(broker):
    """send() before the topic's metadata arrived queues the record; when it arrives without the partition
    the records fail at once, instead of waiting for a leader until delivery.timeout.ms (two minutes)."""
    with make(broker, **{"delivery.timeout.ms": 60_000}) as producer:
        future = producer.send("t", b"v", partition=9)
        started = time.monotonic()
        with pytest.raises(UnknownPartition, match="topic 't' has 4 partitions, not partition 9"):
            future.get(10)
        assert time.monotonic() - started < 5
        with pytest.raises(ValueError, match="has 4 partitions, not partition 9"):  # known now: refused in send()
            producer.send("t", b"v", partition=9)
        assert producer.send("t", b"v", partition=3).get(10).offset == 0  # the producer still works


def test_close_fails_what_could_not_be_sent():
    producer = Producer("127.0.0.1:1", **{"max.block.ms": 200})
    future = producer.send("t", b"v", partition=0)
    producer.close(timeout=0.3)
    with pytest.raises(ClientClosed):
        future.get(1)
    with pytest.raises(ClientClosed):
        producer.send("t", b"v", partition=0)


def test_bad_values_are_refused_in_send(broker):
    with make(broker) as producer:
        with pytest.raises(TypeError):
            producer.send("t", 42, partition=0)
        with pytest.raises(ValueError):
            Producer(broker.bootstrap, **{"compression.type": "brotli"})
