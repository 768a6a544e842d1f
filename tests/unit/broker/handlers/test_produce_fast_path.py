"""The dispatcher's Produce fast path (dispatch.py Rule 4, handlers.handle_single_partition_produce) answers
every request byte for byte as the general path (decode_request -> handle_produce -> encode_response) answers
the same request on an identical broker, and leaves the log in the same state.

Real partition logs in temp dirs and a hand-made metadata snapshot, as in test_handlers.py."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.broker.handlers import produce as produce_handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import ApiKey, ApiVersionsRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.produce import FAST_PATH_VERSIONS
from sparklog.protocol.registry import decode_request, encode_request, encode_response
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

from unit.broker.handlers.test_handlers import FakePartitions

ME, OTHER = 1, 2
MAX_MESSAGE_BYTES = 600  # small, so that some drawn batches are refused (MESSAGE_TOO_LARGE)


T_ID = "AAECAwQFBgcICQoLDA0ODw"  # topic t's id (Fetch v13+ asks by id)


def broker(log_dir: str, overrides: dict | None = None) -> Dispatcher:
    logs = LogManager([log_dir], {"flush.visibility": "appended", "max.message.bytes": str(MAX_MESSAGE_BYTES)})
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": log_dir, "zookeeper.connect": "unused:1",
                                           "auto.create.topics.enable": "false"})
    leading = {("t", 0): logs.get_or_create("t", 0, overrides), ("t", 1): logs.get_or_create("t", 1),
               ("r", 0): logs.get_or_create("r", 0, {"min.insync.replicas": "2"}),
               ("r", 1): logs.get_or_create("r", 1, {"min.insync.replicas": "2"})}
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,)), 1: PartitionMeta(1, ME, 0, (ME,), (ME,)),
                                   2: PartitionMeta(2, OTHER, 0, (OTHER,), (OTHER,))}, topic_id=T_ID),
              # replicated: 0 has its follower in the ISR (acks=all waits for it), 1 is below min.insync.replicas
              "r": TopicMeta("r", {0: PartitionMeta(0, ME, 0, (ME, OTHER), (ME, OTHER)),
                                   1: PartitionMeta(1, ME, 0, (ME, OTHER), (ME,))}, config={"min.insync.replicas": "2"})}
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093)}
    return Dispatcher(handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                                 partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading))))


def general_reply(dispatcher: Dispatcher, frame: memoryview) -> bytes | None:
    request = decode_request(frame)
    body = handlers.handle_produce(request, dispatcher.state)
    return None if body is None else b"".join(bytes(c) for c in encode_response(request.header, body))


def identified_session(dispatcher: Dispatcher):
    """A session that has named itself (ApiVersions): the fast path serves only those (dispatch.py Rule 4)."""
    session = dispatcher.new_session()
    dispatcher.handle_frame(memoryview(encode_request(ApiKey.API_VERSIONS, 3, 0, "c", ApiVersionsRequest(
        client_software_name="test", client_software_version="1")))[4:], session)
    return session


def produce_frame(topic: str, partition: int, acks: int, timeout_ms: int = 0, correlation_id: int = 1) -> memoryview:
    body = ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=partition, records=build_batch([(None, b"v", None, None)]))])])
    return memoryview(encode_request(ApiKey.PRODUCE, 8, correlation_id, "c", body))[4:]


RECORDS = st.one_of(
    st.lists(st.binary(max_size=40), min_size=1, max_size=5).map(
        lambda values: build_batch([(None, v, None, None) for v in values])),
    st.lists(st.binary(max_size=200), min_size=3, max_size=4).map(  # over max.message.bytes
        lambda values: build_batch([(None, v * 3, None, None) for v in values])),
    st.binary(max_size=80),  # garbage: CORRUPT_MESSAGE, INVALID_RECORD or a torn header
)
REQUESTS = st.tuples(st.integers(*FAST_PATH_VERSIONS), st.sampled_from([1, 1, 1, 0, -1, 2]),
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


def test_acks_all_of_one_partition_takes_the_fast_path_and_parks_as_the_general_path_does(tmp_path):
    """Issue 12: the replicated common case (one partition, acks=all) skips the general path too. A write
    already visible (a single replica, HW at the append) is answered at once; one waiting for a follower
    parks in the purgatory and, not replicated within the request's timeout, gets REQUEST_TIMED_OUT; below
    min.insync.replicas it is refused with nothing appended. Every answer is byte for byte the general
    path's on an identical broker."""
    import asyncio

    from sparklog.broker.network.server import Parked

    async def scenario(fast: Dispatcher, general: Dispatcher) -> None:
        session = identified_session(fast)
        for correlation_id, (topic, partition) in enumerate([("t", 0), ("r", 0), ("r", 1)], 1):
            frame = produce_frame(topic, partition, -1, timeout_ms=50, correlation_id=correlation_id)
            reply = fast.handle_frame(frame, session)
            if reply.__class__ is Parked:
                reply = await asyncio.wait_for(reply.awaitable, 5)
            request = decode_request(frame)
            body = handlers.handle_produce(request, general.state)
            if asyncio.iscoroutine(body):  # the general path parks too
                body = await body
            expected = b"".join(bytes(c) for c in encode_response(request.header, body))
            assert b"".join(bytes(c) for c in reply) == expected
        for key in (("t", 0), ("r", 0), ("r", 1)):
            a, b = fast.state.partitions.snapshot.leading[key], general.state.partitions.snapshot.leading[key]
            assert (a.log_end_offset, a.high_watermark) == (b.log_end_offset, b.high_watermark)
        assert fast.statistics().fast_produces == 2  # below min.insync.replicas: left to the general path
        for d in (fast, general):
            await d.state.replicas.close()

    fast, general = broker(str(tmp_path / "fast")), broker(str(tmp_path / "general"))
    try:
        asyncio.run(scenario(fast, general))
    finally:
        fast.state.logs.close()
        general.state.logs.close()


def test_a_parked_fast_path_acks_all_is_answered_when_the_follower_catches_up(tmp_path):
    """The parked write is answered without error as soon as the follower's fetch moves the HW past it."""
    import asyncio

    from sparklog.broker.network.server import Parked
    from sparklog.protocol.registry import decode_response

    async def scenario(dispatcher: Dispatcher) -> None:
        state = dispatcher.state
        reply = dispatcher.handle_frame(produce_frame("r", 0, -1, timeout_ms=30_000), identified_session(dispatcher))
        assert reply.__class__ is Parked
        task = asyncio.ensure_future(reply.awaitable)
        await asyncio.sleep(0.05)
        assert not task.done()
        led = state.replicas.leader_of(state.partitions.snapshot, ("r", 0))
        state.replicas.record_follower_fetch(led, OTHER, 1)
        answer = b"".join(bytes(c) for c in await asyncio.wait_for(task, 5))
        _, response = decode_response(ApiKey.PRODUCE, 8, memoryview(answer)[4:])
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 0)
        await state.replicas.close()

    dispatcher = broker(str(tmp_path))
    try:
        asyncio.run(scenario(dispatcher))
    finally:
        dispatcher.state.logs.close()


def test_an_acks_all_write_that_waits_holds_no_bytes_of_the_read_it_came_in():
    """The request's record set and frame are views of the connection's read buffer (frame.py Rule 3):
    the waiting coroutine must let that buffer go, or parked writes would pin whole reads."""
    from sparklog.protocol.produce_run import scan_produce_run

    read = bytearray(encode_request(ApiKey.PRODUCE, 8, 1, "c", ProduceRequest(acks=-1, timeout_ms=10, topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=0, records=b"r" * 30)])])))
    view = memoryview(read)
    (request,), _ = scan_produce_run(view, 0, 1, 1 << 20)
    waiting = produce_handlers._await_single_replication(None, request, None, (0, -1, 0), 1)
    del request
    view.release()
    try:
        read += b"more"  # raises BufferError while any view of the read is alive
        assert waiting.cr_frame.f_locals["request"].records is None
    finally:
        waiting.close()


def test_a_transactional_batch_not_yet_verified_is_left_to_the_general_path(tmp_path):
    """produce.py Rule 6: the one-partition fast path and a read's group leave an unverified transactional record
    set (NOT_SERVED_FAST / None) without touching the log; once the partition is verified for the producer,
    the fast path serves its batches; a plain batch is served fast throughout."""
    from sparklog.broker.handlers.error_codes import NOT_SERVED_FAST
    from sparklog.protocol.produce import decode_single_partition

    dispatcher = broker(str(tmp_path))
    try:
        state, plog = dispatcher.state, dispatcher.state.partitions.snapshot.leading[("t", 0)]

        def request(records, correlation_id: int):
            body = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=0, topic_data=[TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=records)])])
            return decode_single_partition(memoryview(encode_request(ApiKey.PRODUCE, 8, correlation_id, "c", body))[4:])

        def txn(sequence: int) -> bytes:
            return build_batch([(None, b"v", None, None)], producer_id=9, producer_epoch=0, base_sequence=sequence,
                               is_transactional=True)

        assert produce_handlers.handle_single_partition_produce(request(txn(0), 1), state) is NOT_SERVED_FAST
        assert produce_handlers.fast_produce_partition(request(txn(0), 2), state) is None
        assert plog.log_end_offset == 0 and plog.transaction_verifier is not None
        assert produce_handlers.handle_single_partition_produce(request(build_batch([(None, b"p", None, None)]), 3),
                                                                state) is not NOT_SERVED_FAST
        assert plog.complete_transaction_verification(9, plog.start_transaction_verification(9, 0), True)
        assert produce_handlers.fast_produce_partition(request(txn(0), 4), state) is not None
        assert produce_handlers.handle_single_partition_produce(request(txn(0), 5), state) is not NOT_SERVED_FAST
        assert plog.log_end_offset == 2
    finally:
        dispatcher.state.logs.close()
