"""The sparklog producer's idempotence (client/idempotence.py) against the scripted broker: a producer id
before any batch, per-partition sequences kept across retries, the configuration rules of Kafka >= 3.2."""

from __future__ import annotations

import logging
import time

import pytest

from sparklog.client import Producer
from sparklog.client.idempotence import IdempotenceConfigError, configure
from sparklog.client.config import PRODUCER_DEFAULTS, resolve
from sparklog.protocol import ApiKey
from sparklog.records.batch import iter_batches
from support.client_fake_broker import FakeBroker
from support.zookeeper import wait_for

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def broker():
    with FakeBroker({"t": 2}) as b:
        yield b


def sent_batches(broker, partition: int) -> list:
    """(producer id, epoch, base sequence, records) of every batch the producer sent to `partition`."""
    out = []
    for request in broker.produce_requests():
        for part in request.body.topic_data[0].partition_data:
            if part.index == partition:
                out += [(b.producer_id, b.producer_epoch, b.base_sequence, b.record_count)
                        for b in iter_batches(bytes(part.records))]
    return out


def test_batches_carry_the_producer_id_and_consecutive_sequences_per_partition(broker):
    with Producer(broker.bootstrap, **{"batch.num.messages": 3, "retry.backoff.ms": 10}) as producer:
        for i in range(9):
            producer.send("t", b"%d" % i, partition=i % 2)
        producer.flush(5)
    assert [r.api_key for r in broker.requests].count(ApiKey.INIT_PRODUCER_ID) == 1
    assert all(r.body.acks == -1 for r in broker.produce_requests())  # idempotence implies acks=all
    assert sent_batches(broker, 0) == [(1000, 0, 0, 3), (1000, 0, 3, 2)]
    assert sent_batches(broker, 1) == [(1000, 0, 0, 3), (1000, 0, 3, 1)]


def test_a_retry_resends_the_same_sequence(broker):
    broker.produce_errors = [NOT_LEADER_OR_FOLLOWER]
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10}) as producer:
        assert producer.send("t", b"a", partition=0).get(5).offset == 0
        assert producer.send("t", b"b", partition=0).get(5).offset == 1
    assert sent_batches(broker, 0) == [(1000, 0, 0, 1), (1000, 0, 0, 1), (1000, 0, 1, 1)]


def test_a_retried_batch_travels_alone_for_its_partition(broker):
    broker.hold = True
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10, "batch.num.messages": 2,
                                       "max.in.flight.requests.per.connection": 1}) as producer:
        futures = [producer.send("t", b"%d" % i, partition=0) for i in range(8)]
        wait_for(lambda: broker.held, 5)
        time.sleep(0.2)  # the other batches queue behind the one request in flight
        broker.produce_errors = [NOT_LEADER_OR_FOLLOWER]
        broker.release()
        assert [f.get(5).offset for f in futures] == list(range(8))
    per_request = [[(b.base_sequence, b.record_count) for b in iter_batches(bytes(p.records))]
                   for r in broker.produce_requests() for p in r.body.topic_data[0].partition_data]
    # the first request carried the four batches (together: none was sent before); each then went alone
    assert per_request == [[(0, 2), (2, 2), (4, 2), (6, 2)], [(0, 2)], [(2, 2)], [(4, 2)], [(6, 2)]]


def held_produces(broker) -> int:
    return sum(1 for _, request in broker.held if request.api_key == ApiKey.PRODUCE)


def test_out_of_order_behind_an_unacknowledged_batch_is_retried_and_not_otherwise(broker):
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10, "linger.ms": 0}) as producer:
        assert producer.send("t", b"warm-up", partition=1).get(5).offset == 0  # the producer id is in place
        broker.hold = True
        first = producer.send("t", b"a", partition=0)
        wait_for(lambda: held_produces(broker) == 1, 5)
        second = producer.send("t", b"b", partition=0)  # a second request, behind the first
        wait_for(lambda: held_produces(broker) == 2, 5)
        broker.produce_errors = [NOT_LEADER_OR_FOLLOWER, OUT_OF_ORDER_SEQUENCE_NUMBER]
        broker.release()  # the first fails; the second is out of order behind it
        assert (first.get(5).offset, second.get(5).offset) == (0, 1)  # both retried, in order
        broker.produce_errors = [OUT_OF_ORDER_SEQUENCE_NUMBER]  # nothing earlier is pending: the broker lost state
        with pytest.raises(Exception, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
            producer.send("t", b"c", partition=0).get(5)
        assert producer.send("t", b"d", partition=0).get(5).offset == 2
    assert sent_batches(broker, 0)[-1] == (1001, 0, 0, 1)  # a new producer id: its sequences restart at 0


def test_enable_idempotence_false_keeps_the_old_producer(broker):
    with Producer(broker.bootstrap, **{"enable.idempotence": False}) as producer:
        producer.send("t", b"a", partition=0).get(5)
    assert ApiKey.INIT_PRODUCER_ID not in [r.api_key for r in broker.requests]
    assert sent_batches(broker, 0) == [(-1, -1, -1, 1)]
    assert broker.produce_requests()[0].body.acks == -1  # Kafka >= 3.0's default, with or without idempotence


def settings(**given):
    given = {k.replace("_", "."): v for k, v in given.items()}
    config = resolve(PRODUCER_DEFAULTS, given)
    return configure(config, given), config


def test_configuration_follows_kafka():
    assert settings() == (True, settings()[1]) and settings()[1]["acks"] == -1
    with pytest.raises(IdempotenceConfigError, match="acks=1"):
        settings(enable_idempotence=True, acks=1)
    with pytest.raises(IdempotenceConfigError, match="max.in.flight"):
        settings(enable_idempotence="true", max_in_flight_requests_per_connection=6)


def test_a_conflicting_setting_without_enable_idempotence_turns_it_off_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        idempotent, config = settings(acks="1")
    assert not idempotent and config["acks"] == 1 and not config["enable.idempotence"]
    assert "idempotence disabled by acks=1" in caplog.text
    assert settings(retries=0)[0] is False


def test_at_most_five_batches_of_a_partition_are_unacknowledged(broker):
    """The broker recognises a duplicate among a producer's last five batches only: a sixth in flight could
    not be deduplicated if its answer were lost."""
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10, "batch.num.messages": 1}) as producer:
        producer.send("t", b"warm-up", partition=1).get(5)
        broker.hold = True
        futures = [producer.send("t", b"%d" % i, partition=0) for i in range(12)]
        wait_for(lambda: held_produces(broker) >= 1, 5)
        time.sleep(0.3)  # what else the producer would send now
        held = [p for _, r in broker.held if r.api_key == ApiKey.PRODUCE for p in r.body.topic_data[0].partition_data]
        assert sum(len(list(iter_batches(bytes(p.records)))) for p in held) == 5
        broker.release()
        assert [f.get(5).offset for f in futures] == list(range(12))
