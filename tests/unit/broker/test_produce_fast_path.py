"""The dispatcher's Produce fast path (dispatch.py Rule 4, handlers.handle_single_partition_produce) answers
every request byte for byte as the general path (decode_request -> handle_produce -> encode_response) answers
the same request on an identical broker, and leaves the log in the same state.

Real partition logs in temp dirs and a hand-made metadata snapshot, as in test_handlers.py."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.dispatch import Dispatcher
from sparklog.broker.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import ApiKey, ApiVersionsRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.registry import ALL_VERSIONS, decode_request, encode_request, encode_response
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

from unit.broker.test_handlers import FakePartitions

ME, OTHER = 1, 2
MAX_MESSAGE_BYTES = 600  # small, so that some drawn batches are refused (MESSAGE_TOO_LARGE)


def broker(log_dir: str, overrides: dict | None = None) -> Dispatcher:
    logs = LogManager([log_dir], {"flush.visibility": "appended", "max.message.bytes": str(MAX_MESSAGE_BYTES)})
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": log_dir, "zookeeper.connect": "unused:1",
                                           "auto.create.topics.enable": "false"})
    leading = {("t", 0): logs.get_or_create("t", 0, overrides), ("t", 1): logs.get_or_create("t", 1)}
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,)), 1: PartitionMeta(1, ME, 0, (ME,), (ME,)),
                                   2: PartitionMeta(2, OTHER, 0, (OTHER,), (OTHER,))})}
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093)}
    return Dispatcher(handlers.BrokerState(config=config, broker_id=ME, cluster_id="c" * 22, zk=None, logs=logs,
                                           partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading))))


def general_reply(dispatcher: Dispatcher, frame: memoryview) -> bytes | None:
    request = decode_request(frame)
    body = handlers.handle_produce(request, dispatcher.state)
    return None if body is None else b"".join(bytes(c) for c in encode_response(request.header, body))


RECORDS = st.one_of(
    st.lists(st.binary(max_size=40), min_size=1, max_size=5).map(
        lambda values: build_batch([(None, v, None, None) for v in values])),
    st.lists(st.binary(max_size=200), min_size=3, max_size=4).map(  # over max.message.bytes
        lambda values: build_batch([(None, v * 3, None, None) for v in values])),
    st.binary(max_size=80),  # garbage: CORRUPT_MESSAGE, INVALID_RECORD or a torn header
)
REQUESTS = st.tuples(st.integers(*ALL_VERSIONS[ApiKey.PRODUCE]), st.sampled_from([1, 1, 1, 0, -1, 2]),
                     st.sampled_from(["t", "t", "t", "unknown"]), st.sampled_from([0, 0, 1, 2, 7]), RECORDS)


@settings(max_examples=25, deadline=None)
@given(st.lists(REQUESTS, min_size=1, max_size=8))
def test_the_fast_path_answers_as_the_general_path(requests):
    with tempfile.TemporaryDirectory() as fast_dir, tempfile.TemporaryDirectory() as general_dir:
        fast, general = broker(fast_dir), broker(general_dir)
        try:
            session = fast.new_session()
            fast.handle_frame(memoryview(encode_request(ApiKey.API_VERSIONS, 3, 0, "c", ApiVersionsRequest(
                client_software_name="test", client_software_version="1")))[4:], session)
            for correlation_id, (version, acks, topic, partition, records) in enumerate(requests, 1):
                body = ProduceRequest(acks=acks, timeout_ms=0, topic_data=[TopicProduceData(
                    name=topic, partition_data=[PartitionProduceData(index=partition, records=records)])])
                frame = encode_request(ApiKey.PRODUCE, version, correlation_id, "c", body)
                reply = fast.handle_frame(memoryview(frame)[4:], session)
                expected = general_reply(general, memoryview(frame)[4:])
                assert (None if reply is None else b"".join(bytes(c) for c in reply)) == expected
            for key in (("t", 0), ("t", 1)):
                a, b = fast.state.partitions.snapshot.leading[key], general.state.partitions.snapshot.leading[key]
                assert (a.log_end_offset, a.log_start_offset) == (b.log_end_offset, b.log_start_offset)
            served = fast.statistics().versions_by_client["test 1"]["Produce"]
            assert set(served) == {version for version, *_ in requests}
        finally:
            fast.state.logs.close()
            general.state.logs.close()


def test_the_fast_path_answers_with_the_log_append_time_it_stamped(tmp_path):
    """A LogAppendTime topic: the clock differs between two brokers, so here the answer is checked against the
    log itself (the time stamped into the batch) rather than against the general path."""
    from sparklog.protocol.registry import decode_response
    from sparklog.records.batch import parse_header

    dispatcher = broker(str(tmp_path), {"message.timestamp.type": "LogAppendTime"})
    try:
        plog = dispatcher.state.logs.get_or_create("t", 0)
        session = dispatcher.new_session()
        dispatcher.handle_frame(memoryview(encode_request(ApiKey.API_VERSIONS, 3, 0, "c", ApiVersionsRequest(
            client_software_name="test", client_software_version="1")))[4:], session)
        body = ProduceRequest(acks=1, timeout_ms=0, topic_data=[TopicProduceData(name="t", partition_data=[
            PartitionProduceData(index=0, records=build_batch([(None, b"v", None, None)]))])])
        reply = dispatcher.handle_frame(memoryview(encode_request(ApiKey.PRODUCE, 8, 5, "c", body))[4:], session)
        _, response = decode_response(ApiKey.PRODUCE, 8, memoryview(b"".join(bytes(c) for c in reply))[4:])
        answered = response.responses[0].partition_responses[0]
        stamped = parse_header(plog.read(0, 1 << 20).read_bytes())
        assert (answered.error_code, answered.base_offset) == (0, 0)
        assert answered.log_append_time_ms == stamped.max_timestamp > 0
    finally:
        dispatcher.state.logs.close()
