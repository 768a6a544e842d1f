"""Handlers without sockets or ZooKeeper: real partition logs in a temp dir, a hand-made metadata snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination import topic_ids
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import (
    CreatableTopic,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataRequestTopic,
    PartitionProduceData,
    ProduceRequest,
    RequestHeader,
    TopicProduceData,
)
from sparklog.protocol import errors
from sparklog.protocol.registry import Request
from sparklog.storage import LogManager
from sparklog.storage.errors import TransactionRefusedError
from sparklog.records.batch import build_batch, iter_records

ME, OTHER, DEAD = 1, 2, 3


class FakePartitions:
    """The part of PartitionManager handlers use."""

    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.noted = []

    def note_topic(self, assignment):
        self.noted.append(assignment)

    def forget_topic(self, name):
        pass


@pytest.fixture
def logs(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.visibility": "appended", "max.message.bytes": "2000"})
    yield manager
    manager.close()


@pytest.fixture
def state(logs):
    config = BrokerConfig.from_properties({
        "broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "auto.create.topics.enable": "false", "transaction.partition.verification.enable": "false"})
    leading = {("t", 0): logs.get_or_create("t", 0), ("t", 1): logs.get_or_create("t", 1)}
    topics = {
        "t": TopicMeta("t", {
            0: PartitionMeta(0, ME, 0, (ME,), (ME,)),
            1: PartitionMeta(1, ME, 0, (ME,), (ME,)),
            2: PartitionMeta(2, OTHER, 0, (OTHER,), (OTHER,)),
            3: PartitionMeta(3, DEAD, 0, (DEAD,), (DEAD,)),
        }),
    }
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093)}
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                      partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading)))


def request(body, api_key, version):
    return Request(RequestHeader(api_key, version, 7, "test"), body)


def produce(state, parts, acks=1, topic="t", version=8):
    body = ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=p, records=r) for p, r in parts])])
    return handlers.handle_produce(request(body, 0, version), state)


def batch(*values, compression="none"):
    return build_batch([(None, v, None, None) for v in values], compression=compression)


def codes(response):
    return [p.error_code for t in response.responses for p in t.partition_responses]


# -- Produce -------------------------------------------------------------------------------------------------


def test_produce_appends_and_returns_base_offsets(state, logs):
    r1 = produce(state, [(0, batch(b"a", b"b"))])
    r2 = produce(state, [(0, batch(b"c")), (1, batch(b"d"))])
    assert codes(r1) == [0] and codes(r2) == [0, 0]
    assert [p.base_offset for t in r2.responses for p in t.partition_responses] == [2, 0]
    assert logs.get("t", 0).log_end_offset == 3
    assert r2.responses[0].partition_responses[0].log_start_offset == 0


def test_produce_acks_zero_appends_and_answers_nothing(state, logs):
    assert produce(state, [(0, batch(b"a"))], acks=0) is None
    assert logs.get("t", 0).log_end_offset == 1


def test_produce_invalid_acks_appends_nothing(state, logs):
    response = produce(state, [(0, batch(b"a"))], acks=2)
    assert codes(response) == [handlers.INVALID_REQUIRED_ACKS]
    assert logs.get("t", 0).log_end_offset == 0


def test_produce_bad_crc_is_corrupt_message_and_nothing_appended(state, logs):
    good = bytearray(batch(b"a") + batch(b"b"))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the second batch's payload: the first must not be appended either
    response = produce(state, [(0, bytes(bad))])
    assert codes(response) == [handlers.CORRUPT_MESSAGE]
    assert logs.get("t", 0).log_end_offset == 0


def test_produce_over_max_message_bytes_is_message_too_large(state, logs):
    response = produce(state, [(0, batch(b"x" * 3000))])
    assert codes(response) == [handlers.MESSAGE_TOO_LARGE]
    assert logs.get("t", 0).log_end_offset == 0


@pytest.mark.parametrize("topic, partition, code", [
    ("t", 2, handlers.NOT_LEADER_OR_FOLLOWER),
    ("t", 9, handlers.UNKNOWN_TOPIC_OR_PARTITION),
    ("nope", 0, handlers.UNKNOWN_TOPIC_OR_PARTITION),
    ("../etc", 0, handlers.INVALID_TOPIC_EXCEPTION),
    ("a" * 250, 0, handlers.INVALID_TOPIC_EXCEPTION),
])
def test_produce_to_partition_not_served(state, topic, partition, code):
    assert codes(produce(state, [(partition, batch(b"a"))], topic=topic)) == [code]


def test_produce_empty_or_null_records(state, logs):
    assert codes(produce(state, [(0, b""), (1, None)])) == [handlers.INVALID_RECORD] * 2


def test_produce_of_a_transactional_batch_the_verifier_refuses_is_invalid_txn_state_with_why(state, logs):
    txn = build_batch([(None, b"v", None, None)], producer_id=3, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    assert codes(produce(state, [(0, batch(b"a"))])) == [handlers.NONE]  # creates the partition's log
    plog = logs.get("t", 0)

    def refuse(producer_id, epoch):
        raise TransactionRefusedError(f"t-0 is not in an ongoing transaction of producer {producer_id}")

    plog.transaction_verifier = refuse
    response = produce(state, [(0, txn)])
    (part,) = response.responses[0].partition_responses
    assert part.error_code == errors.InvalidTxnStateError.errno
    assert "not in an ongoing transaction of producer 3" in part.error_message
    assert plog.log_end_offset == 1


def test_produce_of_a_transactional_batch_is_taken_and_holds_the_last_stable_offset(state, logs):
    txn = build_batch([(None, b"v", None, None)], producer_id=3, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    assert codes(produce(state, [(0, txn)])) == [handlers.NONE]
    plog = logs.get("t", 0)
    plog.flush()
    assert (plog.log_end_offset, plog.last_stable_offset) == (1, 0)


def test_produce_of_records_that_do_not_parse_is_invalid_record_with_why(state, logs):
    import struct

    from sparklog.records.batch import HEADER_SIZE, compute_crc

    bad = bytearray(batch(b"a"))
    bad[HEADER_SIZE:] = b"\xff" * (len(bad) - HEADER_SIZE)
    struct.pack_into(">I", bad, 17, compute_crc(bad))
    (part,) = produce(state, [(0, bytes(bad))]).responses[0].partition_responses
    assert part.error_code == handlers.INVALID_RECORD and "malformed" in part.error_message
    assert logs.get("t", 0).log_end_offset == 0


# -- Fetch ---------------------------------------------------------------------------------------------------


def fetch_body(offsets, max_wait_ms=0, min_bytes=1, max_bytes=10_000_000, partition_max_bytes=1_000_000):
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, topics=[
        FetchTopic(topic=t, partitions=[FetchPartition(partition=p, fetch_offset=o,
                                                      partition_max_bytes=partition_max_bytes)])
        for t, p, o in offsets])


def fetch(state, offsets, **kw):
    return handlers.handle_fetch(request(fetch_body(offsets, **kw), 1, 11), state)


def parts_of(response):
    return [p for t in response.responses for p in t.partitions]


def values(records) -> list[bytes]:
    data = records.read_bytes() if hasattr(records, "read_bytes") else bytes(records)
    return [r.value for r in iter_records(data)]


def test_fetch_includes_every_partition_and_never_null_records(state):
    produce(state, [(0, batch(b"a", b"b")), (1, batch(b"c"))])
    response = fetch(state, [("t", 0, 0), ("t", 1, 1), ("t", 2, 0), ("nope", 0, 0), ("t", 0, 99)])
    parts = parts_of(response)
    assert [p.error_code for p in parts] == [0, 0, handlers.NOT_LEADER_OR_FOLLOWER,
                                             handlers.UNKNOWN_TOPIC_OR_PARTITION, handlers.OFFSET_OUT_OF_RANGE]
    assert all(p.records is not None for p in parts)
    assert values(parts[0].records) == [b"a", b"b"]
    assert len(parts[1].records) == 0  # at the high watermark: no error, no records
    assert (parts[0].high_watermark, parts[0].last_stable_offset, parts[0].log_start_offset) == (2, 2, 0)
    assert parts[0].preferred_read_replica == -1 and response.session_id == 0


def test_fetch_starts_at_the_batch_holding_the_offset_and_grows_to_one_batch(state):
    produce(state, [(0, batch(b"a", b"b", b"c"))])
    produce(state, [(0, batch(b"d"))])
    parts = parts_of(fetch(state, [("t", 0, 1)], partition_max_bytes=10))
    assert values(parts[0].records) == [b"a", b"b", b"c"]  # the whole first batch, though over 10 bytes


@pytest.mark.parametrize("max_bytes", [0, -1, 10])
def test_a_fetch_whose_max_bytes_is_spent_still_returns_the_first_batch_of_the_first_partition_with_one(
        state, max_bytes):
    """KIP-74, as Kafka's ReplicaManager reads (minOneMessage): a response's max_bytes is soft for the first
    partition with records, so a consumer with a small fetch.max.bytes makes progress instead of receiving
    empty responses forever; later partitions get nothing once it is spent (and still their errors)."""
    produce(state, [(0, batch(b"a", b"b")), (1, batch(b"c"))])
    parts = parts_of(fetch(state, [("t", 0, 2), ("t", 0, 0), ("t", 1, 0), ("t", 1, 99)], max_bytes=max_bytes))
    assert [p.error_code for p in parts] == [0, 0, 0, handlers.OFFSET_OUT_OF_RANGE]
    assert [values(p.records) for p in parts] == [[], [b"a", b"b"], [], []]


def test_fetch_long_poll_wakes_on_append(state):
    """max_wait_ms is ten minutes: only the append can answer the poll within the test's minute (a wake-up
    missed is a hang, not a slow machine)."""
    async def scenario():
        pending = fetch(state, [("t", 0, 0)], max_wait_ms=600_000)
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done()
        produce(state, [(0, batch(b"late"))])
        return await asyncio.wait_for(task, 60)

    response = asyncio.run(scenario())
    assert values(parts_of(response)[0].records) == [b"late"]


def test_fetch_long_poll_times_out_with_empty_records(state):
    async def scenario():
        started = time.monotonic()
        response = await fetch(state, [("t", 0, 0)], max_wait_ms=200)
        return response, time.monotonic() - started

    response, waited = asyncio.run(scenario())
    assert 0.15 < waited < 2.0
    part = parts_of(response)[0]
    assert part.error_code == 0 and len(part.records) == 0


# -- ListOffsets, Metadata -----------------------------------------------------------------------------------


def list_offsets(state, asks, version=5):
    """ListOffsets of topic "t": `asks` are (partition, timestamp); the answered partitions."""
    body = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="t", partitions=[
        ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in asks])])
    return handlers.handle_list_offsets(request(body, 2, version), state).topics[0].partitions


def test_list_offsets_earliest_latest_and_by_timestamp(state):
    produce(state, [(0, build_batch([(None, b"a", None, 1000), (None, b"b", None, 2000)]))])
    produce(state, [(0, build_batch([(None, b"c", None, 3000)]))])
    parts = [list_offsets(state, [(0, ts)])[0] for ts in (-2, -1, 2500, 99999)] + list_offsets(state, [(2, -1)])
    assert [(p.error_code, p.offset) for p in parts] == [(0, 0), (0, 3), (0, 2), (0, -1),
                                                         (handlers.NOT_LEADER_OR_FOLLOWER, -1)]
    assert parts[2].timestamp == 3000


def test_list_offsets_a_partition_asked_twice_is_invalid_request_each_time(state):
    """Kafka's KafkaApis: a partition named more than once in one request is INVALID_REQUEST, the others are
    answered."""
    produce(state, [(0, build_batch([(None, b"a", None, 1000)]))])
    parts = list_offsets(state, [(0, -2), (1, -1), (0, -1)])
    assert [(p.partition_index, p.error_code, p.offset) for p in parts] == [
        (0, handlers.INVALID_REQUEST, -1), (1, 0, 0), (0, handlers.INVALID_REQUEST, -1)]


@pytest.mark.parametrize("version", range(1, 11))
def test_list_offsets_special_timestamps_by_version(state, version):
    """-4 (earliest local, v8+) is the log start, as for a topic without tiered storage; -5 (latest tiered, v9+)
    is offset -1 with no epoch (nothing tiered); below those versions, and for a negative timestamp Kafka does
    not define, UNSUPPORTED_VERSION. -3 (max timestamp) is answered at every version (librdkafka sends it at
    v5 to brokers without v7)."""
    produce(state, [(0, build_batch([(None, b"a", None, 1000), (None, b"b", None, 5000)]))])
    state.replicas.leader_of(state.partitions.snapshot, ("t", 0)).plog.delete_records_before(1)
    got = {ts: list_offsets(state, [(0, ts)], version)[0] for ts in (-3, -4, -5, -6, -100)}
    answers = {ts: (p.error_code, p.offset) for ts, p in got.items()}
    unsupported = (handlers.UNSUPPORTED_VERSION, -1)
    assert answers[-3] == (0, 1)
    assert answers[-4] == ((0, 1) if version >= 8 else unsupported)
    assert answers[-5] == ((0, -1) if version >= 9 else unsupported)
    assert answers[-6] == answers[-100] == unsupported
    if version >= 9:
        assert (got[-5].timestamp, got[-5].leader_epoch) == (-1, -1)


def list_offsets_v0(state, partition, timestamp, max_num_offsets, replica_id=-1):
    body = ListOffsetsRequest(replica_id=replica_id, topics=[ListOffsetsTopic(name="t", partitions=[
        ListOffsetsPartition(partition_index=partition, timestamp=timestamp, max_num_offsets=max_num_offsets)])])
    return handlers.handle_list_offsets(request(body, 2, 0), state).topics[0].partitions[0]


def test_list_offsets_v0_answers_segment_boundaries_as_kafka_s_legacy_lookup(state):
    """sarama sends ListOffsets v0 for an OffsetRequest built without a version (Burrow 1.2's end offsets):
    the broker closed the connection (v0 not served). v0 answers old_style_offsets: the log end for latest,
    the log start for earliest, segment base offsets (largest first) up to max_num_offsets, by the segments'
    last-modified times for a timestamp (storage/legacy_offsets.py)."""
    plog = state.replicas.leader_of(state.partitions.snapshot, ("t", 0)).plog
    produce(state, [(0, batch(b"a", b"b"))])
    plog.roll()
    produce(state, [(0, batch(b"c"))])
    plog.roll()
    produce(state, [(0, batch(b"d", b"e"))])
    now_ms = int(time.time() * 1000)
    answers = {(ts, n): list_offsets_v0(state, 0, ts, n) for ts, n in
               ((-1, 1), (-2, 1), (-1, 10), (now_ms + 60_000, 2), (1, 5))}
    assert {k: (p.error_code, p.old_style_offsets) for k, p in answers.items()} == {
        (-1, 1): (0, [5]), (-2, 1): (0, [0]), (-1, 10): (0, [5, 3, 2, 0]), (now_ms + 60_000, 2): (0, [5, 3]),
        (1, 5): (0, [])}
    assert list_offsets_v0(state, 2, -1, 1).error_code == handlers.NOT_LEADER_OR_FOLLOWER
    assert list_offsets_v0(state, 1, -1, 1).old_style_offsets == [0]  # an empty log: its end


def test_list_offsets_max_timestamp_is_the_record_with_the_largest_timestamp_not_the_first(state):
    """librdkafka's list_offsets(OffsetSpec.max_timestamp()) asks with timestamp -3: it was taken as a time
    and answered offset 0 with the first record's timestamp."""
    produce(state, [(0, build_batch([(None, b"a", None, 1000), (None, b"b", None, 5000)]))])
    produce(state, [(0, build_batch([(None, b"c", None, 3000)]))])
    body = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="t", partitions=[
        ListOffsetsPartition(partition_index=p, timestamp=-3) for p in (0, 1)])])
    parts = handlers.handle_list_offsets(request(body, 2, 5), state).topics[0].partitions
    assert [(p.error_code, p.offset, p.timestamp) for p in parts] == [(0, 1, 5000), (0, -1, -1)]


def test_list_offsets_a_time_lookup_that_finds_nothing_has_no_leader_epoch(state):
    """Kafka answers a lookup by time (or max timestamp) that finds no record with offset, timestamp and leader
    epoch all -1 (KafkaApis: buildErrorResponse(Errors.NONE)); sparklog gave the current leader epoch beside
    offset -1, so confluent-kafka's offsets_for_times showed leader_epoch=0 for "no such record"."""
    produce(state, [(0, build_batch([(None, b"a", None, 1000)]))])
    past, none_yet = list_offsets(state, [(0, 99999)])[0], list_offsets(state, [(1, -3)])[0]
    found = list_offsets(state, [(0, 500)])[0]
    assert [(p.offset, p.timestamp, p.leader_epoch) for p in (past, none_yet)] == [(-1, -1, -1)] * 2
    led = state.replicas.leader_of(state.partitions.snapshot, ("t", 0))
    assert (found.offset, found.timestamp, found.leader_epoch) == (0, 1000, led.leader_epoch)


def test_metadata_answers_from_the_snapshot(state):
    body = MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in ("t", "missing", "bad/name")],
                           allow_auto_topic_creation=True)
    response = handlers.handle_metadata(request(body, 3, 8), state)
    assert [b.node_id for b in response.brokers] == [ME, OTHER]
    assert response.controller_id == ME and response.cluster_id == "c" * 22
    t, missing, bad = response.topics
    assert (missing.error_code, bad.error_code) == (handlers.UNKNOWN_TOPIC_OR_PARTITION,
                                                    handlers.INVALID_TOPIC_EXCEPTION)
    by_index = {p.partition_index: p for p in t.partitions}
    assert by_index[2].leader_id == OTHER and by_index[2].error_code == 0
    assert by_index[3].leader_id == -1 and by_index[3].error_code == handlers.LEADER_NOT_AVAILABLE
    assert by_index[3].offline_replicas == [DEAD]
    assert [by_index[p].leader_epoch for p in range(4)] == [0, 0, 0, -1]  # the state's epoch; none offline


def test_metadata_null_topics_lists_all(state):
    response = handlers.handle_metadata(request(MetadataRequest(topics=None), 3, 1), state)
    assert [t.name for t in response.topics] == ["t"]


def test_metadata_v0_empty_topics_lists_all_as_kafka_answers_it():
    """In v0 an empty array means every topic (null came in v1, and with it "empty = none"); a client that
    does not send ApiVersions (kcat with api.version.request=false) asks Metadata v0 this way."""
    from sparklog.protocol.registry import decode_request, encode_request

    frame = encode_request(3, 0, 7, "old", MetadataRequest(topics=[]))
    decoded = decode_request(memoryview(frame)[4:])
    assert decoded.body.topics == [] and decoded.api_version == 0


def test_metadata_v0_empty_topics_are_all_topics_and_v1_empty_are_none(state):
    everything = handlers.handle_metadata(request(MetadataRequest(topics=[]), 3, 0), state)
    assert [t.name for t in everything.topics] == ["t"] and [b.node_id for b in everything.brokers] == [ME, OTHER]
    assert handlers.handle_metadata(request(MetadataRequest(topics=[]), 3, 1), state).topics == []


def with_topic_id(state, topic_id: str):
    snapshot = state.partitions.snapshot
    topics = {"t": dataclasses.replace(snapshot.topics["t"], topic_id=topic_id)}
    state.partitions.snapshot = dataclasses.replace(snapshot, topics=topics)
    return topic_ids.to_uuid(topic_id)


def test_metadata_v12_answers_topic_ids_and_topics_asked_by_id(state):
    known = with_topic_id(state, topic_ids.new_topic_id())
    unknown = topic_ids.to_uuid(topic_ids.new_topic_id())
    body = MetadataRequest(topics=[MetadataRequestTopic(name=None, topic_id=known),
                                   MetadataRequestTopic(name=None, topic_id=unknown)])
    found, missing = handlers.handle_metadata(request(body, 3, 12), state).topics
    assert (found.name, found.topic_id, found.error_code, len(found.partitions)) == ("t", known, 0, 4)
    assert (missing.name, missing.topic_id, missing.error_code) == (None, unknown, errors.UnknownTopicIdError.errno)
    everything = handlers.handle_metadata(request(MetadataRequest(topics=None), 3, 12), state)
    assert [(t.name, t.topic_id) for t in everything.topics] == [("t", known)]
    by_name = handlers.handle_metadata(request(MetadataRequest(topics=[MetadataRequestTopic(name="t")]), 3, 10),
                                       state)
    assert by_name.topics[0].topic_id == known
    asked_v10 = MetadataRequest(topics=[MetadataRequestTopic(name=None, topic_id=unknown)])
    assert handlers.handle_metadata(request(asked_v10, 3, 10), state).topics[0].name == ""  # not nullable yet


# -- CreateTopics (checks that need no ZooKeeper) ------------------------------------------------------------


def create(state, *topics, validate_only=False, version=4):
    body = CreateTopicsRequest(topics=list(topics), timeout_ms=1000, validate_only=validate_only)
    return asyncio.run(handlers.handle_create_topics(request(body, 19, version), state))


def test_create_topics_v7_validate_only_answers_the_shape_and_configs_and_no_id(state):
    from sparklog.protocol.create_topics import CreatableTopicConfig

    response = create(state, CreatableTopic(name="shaped", num_partitions=3, replication_factor=2, configs=[
        CreatableTopicConfig(name="retention.ms", value="1000")]), validate_only=True, version=7)
    result = response.topics[0]
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 3, 2)
    assert result.topic_id == topic_ids.ZERO  # nothing was created
    configs = {c.name: (c.value, c.config_source) for c in result.configs}
    assert configs["retention.ms"] == ("1000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG


def test_create_topics_errors(state):
    response = create(
        state,
        CreatableTopic(name="bad name", num_partitions=1, replication_factor=1),
        CreatableTopic(name="zero", num_partitions=0, replication_factor=1),
        CreatableTopic(name="rf", num_partitions=1, replication_factor=3),
        CreatableTopic(name="dup", num_partitions=1, replication_factor=1),
        CreatableTopic(name="dup", num_partitions=1, replication_factor=1),
        CreatableTopic(name="t", num_partitions=1, replication_factor=1),
        CreatableTopic(name="new", num_partitions=-1, replication_factor=-1),
        validate_only=True,
    )
    assert [r.error_code for r in response.topics] == [
        handlers.INVALID_TOPIC_EXCEPTION, handlers.INVALID_PARTITIONS, handlers.INVALID_REPLICATION_FACTOR,
        handlers.INVALID_REQUEST, handlers.INVALID_REQUEST, handlers.TOPIC_ALREADY_EXISTS, 0]
    assert state.partitions.noted == []  # validate_only writes nothing


def test_create_topics_replication_and_explicit_assignments(state):
    from sparklog.protocol.create_topics import CreatableReplicaAssignment

    def assigned(name, *replicas, partitions=-1, rf=-1):
        return CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, assignments=[
            CreatableReplicaAssignment(partition_index=i, broker_ids=list(r)) for i, r in enumerate(replicas)])

    response = create(
        state,
        CreatableTopic(name="rf2", num_partitions=3, replication_factor=2),
        assigned("ok", (ME, OTHER), (OTHER, ME)),
        assigned("unknown-broker", (ME, DEAD)),
        assigned("twice", (ME, ME)),
        assigned("uneven", (ME, OTHER), (ME,)),
        assigned("both", (ME,), partitions=1, rf=1),
        validate_only=True,
    )
    codes = {r.name: (r.error_code, r.error_message) for r in response.topics}
    assert codes["rf2"] == codes["ok"] == (0, None)
    assert codes["unknown-broker"][0] == handlers.INVALID_REPLICA_ASSIGNMENT and str(DEAD) in codes["unknown-broker"][1]
    assert codes["twice"][0] == codes["uneven"][0] == handlers.INVALID_REPLICA_ASSIGNMENT
    assert codes["both"][0] == handlers.INVALID_REQUEST
    rf3 = create(state, CreatableTopic(name="rf3", num_partitions=1, replication_factor=3)).topics[0]
    assert rf3.error_code == handlers.INVALID_REPLICATION_FACTOR
    assert rf3.error_message == "replication factor 3 is larger than the number of live brokers (2)"


def test_create_topics_accepts_the_unclean_election_override_and_checks_it(state):
    from sparklog.protocol.create_topics import CreatableTopicConfig

    good = CreatableTopic(name="u1", num_partitions=1, replication_factor=1, configs=[
        CreatableTopicConfig(name="unclean.leader.election.enable", value="true")])
    bad = CreatableTopic(name="u2", num_partitions=1, replication_factor=1, configs=[
        CreatableTopicConfig(name="unclean.leader.election.enable", value="maybe")])
    response = create(state, good, bad, validate_only=True)
    assert [r.error_code for r in response.topics] == [0, handlers.INVALID_CONFIG]


# -- CreateTopics partition limits (issue 14: checked before any ZooKeeper write) ----------------------------


class NoZooKeeper:
    """A ZooKeeper client that fails the test if a handler touches it."""

    def __getattr__(self, name):
        raise AssertionError(f"ZooKeeper touched ({name}) before the partition limits were checked")


def test_create_topics_refuses_a_million_partitions_before_zookeeper(state):
    state.zk = NoZooKeeper()
    response = create(state, CreatableTopic(name="huge", num_partitions=1_000_000, replication_factor=1))
    (result,) = response.topics
    assert result.error_code == handlers.INVALID_PARTITIONS
    assert "max.partitions.per.topic=2000" in result.error_message
    assert state.counters["zookeeper_calls"] == 0 and state.partitions.noted == []


def test_create_topics_refuses_a_request_over_its_partition_total(state):
    state.zk = NoZooKeeper()
    topics = [CreatableTopic(name=f"many-{i}", num_partitions=1000, replication_factor=1) for i in range(5)]
    response = create(state, *topics)
    assert {r.error_code for r in response.topics} == {errors.PolicyViolationError.errno}
    assert all("5000 partitions in total" in r.error_message for r in response.topics)
    assert state.counters["zookeeper_calls"] == 0


def test_create_topics_refuses_what_would_overfill_a_broker(state):
    state.config = state.config.with_overrides({"max.broker.partitions": "4"})
    state.partitions.snapshot = dataclasses.replace(state.partitions.snapshot, topics={
        "t": dataclasses.replace(state.partitions.snapshot.topics["t"], assignment={0: (ME,), 1: (ME,), 2: (ME,)})})
    fits = create(state, CreatableTopic(name="two", num_partitions=2, replication_factor=1), validate_only=True)
    over = create(state, CreatableTopic(name="three", num_partitions=3, replication_factor=1), validate_only=True)
    assert fits.topics[0].error_code == 0
    assert over.topics[0].error_code == errors.PolicyViolationError.errno
    assert over.topics[0].error_message == (
        f"broker {ME} holds 3 partitions; 2 more would exceed max.broker.partitions=4")


# -- read_committed (broker/handlers/read_committed.py) -------------------------------------------------------------


def _transactional(pid, value, sequence=0):
    return build_batch([(None, value, None, None)], producer_id=pid, producer_epoch=0, base_sequence=sequence,
                       is_transactional=True)


def test_fetch_read_committed_stops_at_the_lso_and_lists_the_aborted_transactions(state, logs):
    produce(state, [(0, batch(b"a"))])  # 0
    produce(state, [(0, _transactional(7, b"aborted"))])  # 1
    produce(state, [(0, _transactional(8, b"committed"))])  # 2
    plog = logs.get("t", 0)
    plog.append_control_batch(7, 0, False, 1, 0)  # 3: aborts 7's
    produce(state, [(0, batch(b"b"))])  # 4
    produce(state, [(0, _transactional(9, b"open"))])  # 5, never ended
    body = fetch_body([("t", 0, 0)])
    body.isolation_level = 1
    (part,) = parts_of(handlers.handle_fetch(request(body, 1, 11), state))
    assert (part.high_watermark, part.last_stable_offset) == (6, 2)  # 8's transaction is still open
    assert values(part.records) == [b"a", b"aborted"]
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 1)]
    plog.append_control_batch(8, 0, True, 1, 0)  # 6: commits 8's
    (part,) = parts_of(handlers.handle_fetch(request(body, 1, 11), state))
    assert part.last_stable_offset == 5 and values(part.records) == [b"a", b"aborted", b"committed", b"b"]
    (uncommitted,) = parts_of(fetch(state, [("t", 0, 0)]))
    assert uncommitted.aborted_transactions is None and b"open" in values(uncommitted.records)


def test_list_offsets_read_committed_answers_the_lso(state, logs):
    produce(state, [(0, build_batch([(None, b"a", None, 1000)]))])
    produce(state, [(0, build_batch([(None, b"t", None, 2000)], producer_id=7, producer_epoch=0, base_sequence=0,
                                    is_transactional=True))])
    parts = []
    for ts in (-1, -2, 1000, 2000):
        body = ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsTopic(name="t", partitions=[
            ListOffsetsPartition(partition_index=0, timestamp=ts)])])
        parts += handlers.handle_list_offsets(request(body, 2, 5), state).topics[0].partitions
    assert [(p.error_code, p.offset) for p in parts] == [(0, 1), (0, 0), (0, 0), (0, -1)]
    assert [list_offsets(state, [(0, ts)])[0].offset for ts in (-1, 2000)] == [2, 1]  # read_uncommitted


def test_a_read_committed_fetch_is_served_fast_only_when_nothing_is_unstable_or_aborted(state, logs):
    from sparklog.protocol.fetch import decode_single_partition
    from sparklog.protocol.registry import encode_request

    def fast(offset):
        body = fetch_body([("t", 0, offset)])
        body.isolation_level = 1
        frame = encode_request(1, 11, 7, "c", body)[4:]
        return handlers.handle_single_partition_fetch(decode_single_partition(frame), state)

    produce(state, [(0, batch(b"a"))])
    assert fast(0) is not handlers.NOT_SERVED_FAST
    produce(state, [(0, _transactional(7, b"t"))])  # 1: open
    assert fast(0) is handlers.NOT_SERVED_FAST
    logs.get("t", 0).append_control_batch(7, 0, False, 1, 0)  # 2: aborted
    assert fast(0) is handlers.NOT_SERVED_FAST and fast(1) is handlers.NOT_SERVED_FAST
    produce(state, [(0, batch(b"b"))])
    assert fast(3) is not handlers.NOT_SERVED_FAST  # nothing aborted from offset 3 on


# -- Fetch sessions (fetch_sessions.py) ----------------------------------------------------------------------


def session_fetch(state, offsets, session_id, epoch, **kw):
    body = fetch_body(offsets, **kw)
    body.session_id, body.session_epoch = session_id, epoch
    return handlers.handle_fetch(request(body, 1, 11), state)


def answer_of(part) -> tuple:
    return (part.partition_index, part.error_code, part.high_watermark, part.last_stable_offset,
            part.log_start_offset, values(part.records))


@pytest.mark.parametrize("seed", range(6))
def test_an_incremental_fetch_answers_the_sessionless_answer_less_what_is_unchanged(state, seed):
    """Rule 3 through the handler, the quiet partitions it does not read included: each incremental answer is the
    sessionless answer of the same offsets less the partitions with no records, no error and the same HW, LSO and
    log start as last answered (a partition that is not led here is answered every time, with its error)."""
    import random

    rng = random.Random(seed)
    keys = [("t", 0), ("t", 1), ("t", 2)]
    offsets = {key: 0 for key in keys}
    first = session_fetch(state, [(t, p, offsets[(t, p)]) for t, p in keys], 0, 0)
    session_id = first.session_id
    last = {(t.topic, p.partition_index): answer_of(p)[1:5] for t in first.responses for p in t.partitions}
    for epoch in range(1, 25):
        if rng.random() < 0.4:
            produce(state, [(rng.choice([0, 1]), batch(b"v%d" % epoch))])
        moved = [key for key in keys if rng.random() < 0.3 and key != ("t", 2)]
        for key in moved:
            offsets[key] = state.logs.get(*key).high_watermark
        whole = fetch(state, [(t, p, offsets[(t, p)]) for t, p in keys])
        answer = session_fetch(state, [(t, p, offsets[(t, p)]) for t, p in moved], session_id, epoch)
        assert answer.error_code == 0 and answer.session_id == session_id
        expected = [answer_of(p) for p in parts_of(whole)
                    if p.error_code or len(p.records) or answer_of(p)[1:5] != last[("t", p.partition_index)]]
        assert [answer_of(p) for p in parts_of(answer)] == expected
        last.update({("t", p.partition_index): answer_of(p)[1:5] for p in parts_of(answer)})


def test_an_incremental_long_poll_waits_on_its_quiet_partitions_and_wakes_on_append(state):
    produce(state, [(0, batch(b"a")), (1, batch(b"b"))])
    first = session_fetch(state, [("t", 0, 1), ("t", 1, 1)], 0, 0)
    assert first.session_id != 0 and [len(p.records) for p in parts_of(first)] == [0, 0]

    async def scenario():
        task = asyncio.ensure_future(session_fetch(state, [], first.session_id, 1, max_wait_ms=600_000))
        await asyncio.sleep(0.05)
        assert not task.done()  # both partitions quiet: waited on, not answered at once
        produce(state, [(1, batch(b"late"))])
        return await asyncio.wait_for(task, 60)

    response = asyncio.run(scenario())
    assert [(p.partition_index, values(p.records)) for p in parts_of(response)] == [(1, [b"late"])]


def test_a_session_error_answers_no_partition(state):
    response = session_fetch(state, [("t", 0, 0)], 12345, 1)
    assert response.error_code == errors.FetchSessionIdNotFoundError.errno
    assert response.responses == [] and response.session_id == 0
