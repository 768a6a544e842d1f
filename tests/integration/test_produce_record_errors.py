"""KIP-467 per-record errors in Produce against a real broker: a batch with records a compacted topic refuses
(null keys) is answered INVALID_RECORD with `record_errors` naming exactly those records, over the raw protocol
and through confluent-kafka: librdkafka fails the named records with INVALID_RECORD and the rest of their
batch with _INVALID_DIFFERENT_RECORD (its test 0011's expectation); in batches of one record, the others are
written.

librdkafka gives every record of a batch with exactly one record error the partition's error (INVALID_RECORD:
its on_acknowledgement interceptors force `err` unless record_errors count more than one), so the first test
sends its MESSAGES in one batch whatever the machine's load: linger.ms longer than the test, flush() sending it
(a 200 ms linger cut the batch at message 90 when the producing loop stalled, and 90-99 all failed
INVALID_RECORD); a pause inside the loop proves it."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch
from support.cluster import started_cluster, wait_until
from support.wire import request

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
INVALID_RECORD = 87
MESSAGES = 100


@pytest.fixture(scope="module")
def one(request, zookeeper, tmp_path_factory):
    return started_cluster(request, f"{zookeeper.connect_string}/record-errors-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("record-errors"), 1, 6000, **{"log.flush.interval.ms": "20"})


def compacted_topic(cluster) -> str:
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "delete,compact"})])[topic].result(
        timeout=TIMEOUT_S)
    return topic


def raw_produce(broker, topic: str, records, version: int):
    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=build_batch(records))])])
    return request(broker.host, broker.port, ApiKey.PRODUCE, version, body).responses[0].partition_responses[0]


def test_raw_produce_v8_names_the_null_key_records_and_writes_nothing(one):
    topic = compacted_topic(one)
    broker = one.brokers[1]
    records = [(None if i in (1, 3) else b"k%d" % i, b"v%d" % i, None, None) for i in range(5)]
    part = wait_until(lambda: (p := raw_produce(broker, topic, records, 8)).error_code == INVALID_RECORD and p,
                      "the topic to be served", TIMEOUT_S)
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, "Compacted topic cannot accept message without key (cleanup.policy=compact)"),
        (3, "Compacted topic cannot accept message without key (cleanup.policy=compact)")]
    assert part.error_message.startswith("One or more records have been rejected due to 2 record errors")
    good = raw_produce(broker, topic, [(b"k", b"v", None, None)], 8)
    assert (good.error_code, good.base_offset, good.record_errors) == (0, 0, [])  # nothing of the bad batch


ONE_BATCH = {"linger.ms": 60_000, "batch.num.messages": MESSAGES}  # flush() sends it: one batch, however slow


def confluent_outcomes(cluster, topic: str, pause_at: int | None = None, **conf) -> dict[int, int]:
    """Produce MESSAGES, every tenth without a key, in one produce call each (pausing 0.5 s before message
    `pause_at`, as a loaded machine may); {message index: error code}."""
    outcomes: dict[int, int] = {}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **ONE_BATCH, **conf})
    for i in range(MESSAGES):
        if i == pause_at:
            time.sleep(0.5)
        def report(err, _msg, i=i):
            outcomes[i] = 0 if err is None else err.code()
        producer.produce(topic, value=b"v%d" % i, key=None if i % 10 == 0 else b"k%d" % i, partition=0,
                         on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    return outcomes


def test_confluent_fails_the_named_records_alone_and_the_rest_of_their_batch_as_different_records(one):
    topic = compacted_topic(one)
    wait_until(lambda: raw_produce(one.brokers[1], topic, [(b"k", b"v", None, None)], 8).error_code == 0,
               "the topic to be served", TIMEOUT_S)
    outcomes = confluent_outcomes(one, topic, pause_at=MESSAGES - 10)  # the stall that cut the batch at 90
    assert {i for i, code in outcomes.items() if code == INVALID_RECORD} == set(range(0, MESSAGES, 10))
    assert {code for i, code in outcomes.items() if i % 10} == {KafkaError._INVALID_DIFFERENT_RECORD}


def test_confluent_in_batches_of_one_record_writes_every_record_with_a_key(one):
    topic = compacted_topic(one)
    wait_until(lambda: raw_produce(one.brokers[1], topic, [(b"k", b"v", None, None)], 8).error_code == 0,
               "the topic to be served", TIMEOUT_S)
    outcomes = confluent_outcomes(one, topic, **{"batch.size": 1})
    assert {i for i, code in outcomes.items() if code == INVALID_RECORD} == set(range(0, MESSAGES, 10))
    assert {code for i, code in outcomes.items() if i % 10} == {0}
