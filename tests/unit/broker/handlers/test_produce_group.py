"""Pipelined Produce requests taken from one read (dispatch.py Rule 5, server.py's handle_frames): grouping
consecutive fast-path requests of one partition into one log append gives the same replies, in the same
order, and the same log bytes, offsets and producer state as handling the same frames one at a time on an
identical broker. Real partition logs in temp dirs, as in test_produce_fast_path.py; small segments so that
groups roll mid-way."""

from __future__ import annotations

import os
import tempfile

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.broker.network.server import CloseConnection
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import ApiKey, ApiVersionsRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.registry import encode_request
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

from unit.broker.handlers.test_handlers import FakePartitions

ME, OTHER = 1, 2
MAX_MESSAGE_BYTES = 600
SEGMENT_BYTES = 1024  # a few batches a segment: groups roll in the middle


def broker(log_dir: str) -> Dispatcher:
    logs = LogManager([log_dir], {"flush.visibility": "appended", "max.message.bytes": str(MAX_MESSAGE_BYTES),
                                  "segment.bytes": str(SEGMENT_BYTES), "flush.messages": "7"})
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": log_dir, "zookeeper.connect": "unused:1",
                                           "auto.create.topics.enable": "false"})
    leading = {("t", 0): logs.get_or_create("t", 0), ("t", 1): logs.get_or_create("t", 1)}
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,)), 1: PartitionMeta(1, ME, 0, (ME,), (ME,)),
                                   2: PartitionMeta(2, OTHER, 0, (OTHER,), (OTHER,))})}
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093)}
    return Dispatcher(handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                                 partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading))))


def identify(dispatcher: Dispatcher):
    session = dispatcher.new_session()
    dispatcher.handle_frame(memoryview(encode_request(ApiKey.API_VERSIONS, 3, 0, "c", ApiVersionsRequest(
        client_software_name="test", client_software_version="1")))[4:], session)
    return session


def idempotent(values, sequence: int, epoch: int) -> bytes:
    return build_batch([(None, v, None, 1000) for v in values], producer_id=7, producer_epoch=epoch,
                       base_sequence=sequence)


VALUES = st.lists(st.binary(max_size=60), min_size=1, max_size=4)
RECORDS = st.one_of(
    VALUES.map(lambda values: build_batch([(None, v, None, 1000) for v in values])),
    st.tuples(VALUES, st.integers(0, 6), st.sampled_from([0, 0, 0, 1])).map(lambda a: idempotent(*a)),
    st.lists(st.binary(max_size=200), min_size=3, max_size=4).map(  # over max.message.bytes
        lambda values: build_batch([(None, v * 3, None, 1000) for v in values])),
    st.tuples(VALUES, VALUES).map(lambda a: build_batch([(None, v, None, 1000) for v in a[0]])  # two batches
                                  + build_batch([(None, v, None, 1000) for v in a[1]])),
    VALUES.map(lambda values: bytearray(build_batch([(None, v, None, 1000) for v in values])))
    .map(lambda b: bytes(b[:-1]) + bytes([b[-1] ^ 1])),  # a CRC mismatch
    st.binary(max_size=80),  # garbage, empty or a torn header
)
REQUESTS = st.tuples(st.sampled_from([8, 8, 7, 3]), st.sampled_from([1, 1, 1, 0, -1, 2]),
                     st.sampled_from(["t", "t", "t", "t", "unknown"]), st.sampled_from([0, 0, 0, 0, 1, 2]), RECORDS)


def frames_of(requests) -> list[bytes]:
    frames = []
    for correlation_id, (version, acks, topic, partition, records) in enumerate(requests, 1):
        body = ProduceRequest(acks=acks, timeout_ms=0, topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(index=partition, records=records)])])
        frames.append(encode_request(ApiKey.PRODUCE, version, correlation_id, "c", body)[4:])
    return frames


def flat(reply) -> bytes | None:
    return None if reply is None else b"".join(bytes(c) for c in reply)


def wire(replies) -> bytes:
    """What the server writes for these replies, in order (a coroutine's answer as a marker)."""
    return b"".join(b"<later>" if r.__class__ is not list else flat(r) for r in replies if r is not None)


def split_replies(data: bytes) -> list[bytes]:
    out = []
    while data:
        size = int.from_bytes(data[:4], "big") + 4
        out.append(data[:size])
        data = data[size:]
    return out


def log_files(dispatcher: Dispatcher, key) -> dict[str, bytes]:
    plog = dispatcher.state.partitions.snapshot.leading[key]
    plog.flush()
    return {name: open(os.path.join(plog.directory, name), "rb").read()
            for name in sorted(os.listdir(plog.directory)) if name.endswith(".log")}


# One partition, one acks: a single group that rolls several segments in its middle (a roll once named the
# new segment for the log end before the group).
ONE_GROUP_ROLLING = [(8, 1, "t", 0, build_batch([(None, b"v" * 120, None, 1000)]))] * 14


@settings(max_examples=40, deadline=None)
@given(st.lists(REQUESTS, min_size=1, max_size=14))
@example(ONE_GROUP_ROLLING)
def test_a_grouped_run_answers_and_appends_as_one_request_at_a_time(requests):
    with tempfile.TemporaryDirectory() as grouped_dir, tempfile.TemporaryDirectory() as single_dir:
        grouped, single = broker(grouped_dir), broker(single_dir)
        try:
            frames = frames_of(requests)
            replies: list = []
            grouped.handle_frames(frames, identify(grouped), replies)
            session = identify(single)
            expected = [single.handle_frame(frame, session) for frame in frames]
            # one reply per frame, the same bytes in the same order; a reply may carry the ones after it
            # (those are then None: server.py's contract), so only what leaves, in order, is compared
            assert len(replies) == len(frames)
            assert wire(replies) == wire(expected)
            for key in (("t", 0), ("t", 1)):
                a, b = grouped.state.partitions.snapshot.leading[key], single.state.partitions.snapshot.leading[key]
                assert (a.log_end_offset, a.high_watermark) == (b.log_end_offset, b.high_watermark)
                assert a._producers.producers.keys() == b._producers.producers.keys()
                for pid, entry in a._producers.producers.items():
                    assert (entry.epoch, list(entry.batches)) == (b._producers.producers[pid].epoch,
                                                                  list(b._producers.producers[pid].batches))
                assert log_files(grouped, key) == log_files(single, key)
        finally:
            grouped.state.logs.close()
            single.state.logs.close()


def test_a_run_of_pipelined_requests_is_one_append_with_an_offset_and_a_reply_each(tmp_path):
    dispatcher = broker(str(tmp_path))
    try:
        plog = dispatcher.state.partitions.snapshot.leading[("t", 0)]
        frames = frames_of([(8, 1, "t", 0, build_batch([(None, b"v%d" % i, None, 1000)])) for i in range(5)])
        replies: list = []
        dispatcher.handle_frames(frames, identify(dispatcher), replies)
        assert len(replies) == 5 and plog.log_end_offset == 5
        assert dispatcher.statistics().grouped_produces == 5
        assert plog.statistics().appends == 5
        assert [r is None for r in replies] == [False, True, True, True, True]  # one buffer carries the five
        offsets = [int.from_bytes(r[25:33], "big") for r in split_replies(wire(replies))]  # each v8 base_offset
        assert offsets == [0, 1, 2, 3, 4]
    finally:
        dispatcher.state.logs.close()


def test_a_malformed_frame_in_a_run_closes_after_the_replies_before_it(tmp_path):
    dispatcher = broker(str(tmp_path))
    try:
        good = frames_of([(8, 1, "t", 0, build_batch([(None, b"v", None, 1000)]))] * 2)
        bad = good[0][:12]  # a Produce request cut short: the general decoder refuses it
        replies: list = []
        try:
            dispatcher.handle_frames(good + [bad] + good, identify(dispatcher), replies)
        except CloseConnection:
            pass
        else:
            raise AssertionError("a malformed frame must close the connection")
        assert len(replies) == 2
        assert dispatcher.state.partitions.snapshot.leading[("t", 0)].log_end_offset == 2
    finally:
        dispatcher.state.logs.close()
