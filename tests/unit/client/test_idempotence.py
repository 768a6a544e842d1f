"""The sparklog producer's idempotence (client/idempotence.py) against the scripted broker: a producer id
before any batch, per-partition sequences kept across retries, the configuration rules of Kafka >= 3.2."""

from __future__ import annotations

import logging

import pytest

from sparklog.client import Producer
from sparklog.client.idempotence import IdempotenceConfigError, configure
from sparklog.client.config import PRODUCER_DEFAULTS, resolve
from sparklog.protocol import ApiKey
from sparklog.records.batch import iter_batches
from support.client_fake_broker import FakeBroker

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
    for request in broker.produce_requests():  # one batch per partition per request, as Kafka's producer
        assert all(len(list(iter_batches(bytes(p.records)))) == 1 for p in request.body.topic_data[0].partition_data)


def test_a_retry_resends_the_same_sequence(broker):
    broker.produce_errors = [NOT_LEADER_OR_FOLLOWER]
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10}) as producer:
        assert producer.send("t", b"a", partition=0).get(5).offset == 0
        assert producer.send("t", b"b", partition=0).get(5).offset == 1
    assert sent_batches(broker, 0) == [(1000, 0, 0, 1), (1000, 0, 0, 1), (1000, 0, 1, 1)]


def test_out_of_order_behind_an_unacknowledged_batch_is_retried_and_not_otherwise(broker):
    answers = iter([NOT_LEADER_OR_FOLLOWER, OUT_OF_ORDER_SEQUENCE_NUMBER])
    broker.hold = True
    with Producer(broker.bootstrap, **{"retry.backoff.ms": 10, "batch.num.messages": 1}) as producer:
        first, second = producer.send("t", b"a", partition=0), producer.send("t", b"b", partition=0)
        broker.produce_errors = [next(answers), next(answers)]  # the first fails, the second is out of order
        broker.release()
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
