"""Fuzzing the request path at the dispatcher (issue 3): random bytes and mutated valid frames go through
`Dispatcher.handle_frame`; only `CloseConnection`, nothing (Produce with acks=0), or a well-formed reply may
come out: one whose size prefix counts every byte, whose correlation id is the request's, and which the
client-side codec decodes as the response to that request. Any other exception is a broker bug. A valid
frame (every api and version served, default and populated bodies) must get a reply, never a close; every
body encodes in every version but where a version cannot carry a null it holds (named, not skipped).

Real partition logs in a temp dir and a hand-made metadata snapshot; no ZooKeeper (`zk=None`, so the
handlers that would write to it take their "ZooKeeper unreachable" branch, which must answer too).
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.broker.network.server import CloseConnection, Parked
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import (
    ApiKey,
    ApiVersionsRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    FindCoordinatorRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataRequestTopic,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from sparklog.protocol.errors import LocalProtocolError, RemoteProtocolError
from sparklog.protocol.alter_partition_reassignments import (AlterPartitionReassignmentsRequest,
                                                             ReassignablePartition, ReassignableTopic)
from sparklog.protocol.registry import ALL_VERSIONS, REQUESTS, decode_request, decode_response, encode_request
from sparklog.storage import LogManager
from sparklog.records.batch import build_batch

from unit.broker.handlers.test_handlers import FakePartitions

ME, OTHER = 1, 2
SIZE = struct.Struct(">i")
# A long-polling Fetch may legitimately wait up to its max_wait_ms; past this the test stops waiting.
LONG_POLL_CUTOFF_S = 0.3
# Any other asynchronous reply (a ZooKeeper call on an executor thread) must come within this.
ASYNC_REPLY_TIMEOUT_S = 20.0
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def dispatcher(tmp_path_factory):
    logs = LogManager([str(tmp_path_factory.mktemp("fuzz-logs"))],
                      {"flush.visibility": "appended", "max.message.bytes": "4096"})
    config = BrokerConfig.from_properties({
        "broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "auto.create.topics.enable": "true", "socket.request.max.bytes": "65536"})
    leading = {("t", 0): logs.get_or_create("t", 0), ("t", 1): logs.get_or_create("t", 1)}
    leading[("t", 0)].append(build_batch([(b"k", b"v" * 100, None, None)] * 3))
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,)), 1: PartitionMeta(1, ME, 0, (ME,), (ME,)),
                                   2: PartitionMeta(2, OTHER, 0, (OTHER,), (OTHER,))})}
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093)}
    state = handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                       partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading)))
    yield Dispatcher(state)
    logs.close()


def _bodies() -> dict[int, list]:
    """Populated request bodies per api (every api also gets its default, empty body)."""
    batch = build_batch([(b"k", b"value", None, None), (None, b"", None, None)])
    def produce(acks, name):
        return ProduceRequest(acks=acks, timeout_ms=100, topic_data=[TopicProduceData(name=name, partition_data=[
            PartitionProduceData(index=p, records=batch) for p in (0, 1, 2, 9)])])

    return {
        ApiKey.PRODUCE: [produce(acks, name) for acks in (0, 1, -1) for name in ("t", "new")],
        ApiKey.FETCH: [FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=10_000, topics=[FetchTopic(
            topic="t", partitions=[FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=500)
                                   for p, o in ((0, 0), (0, 2), (1, 0), (2, 0), (0, 99))])],
            session_id=session_id, session_epoch=epoch, forgotten_topics_data=[ForgottenTopic(topic=t, partitions=ps)
                                                                              for t, ps in forgotten])
            # sessionless; a new session; incremental in an unknown session; a session closed (fetch_sessions.py)
            for session_id, epoch, forgotten in ((0, -1, ()), (0, 0, ()), (12345, 1, (("t", [1]), ("gone", [0]))),
                                                 (12345, -1, ()))],
        ApiKey.LIST_OFFSETS: [ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="t", partitions=[
            ListOffsetsPartition(partition_index=p, timestamp=ts) for p in (0, 1, 2) for ts in (-2, -1, 0)])])],
        ApiKey.METADATA: [MetadataRequest(topics=None),
                          MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in ("t", "auto", "bad/")],
                                          allow_auto_topic_creation=True)],
        ApiKey.OFFSET_COMMIT: [OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, topics=[
            OffsetCommitRequestTopic(name="t", partitions=[OffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_metadata="m")])])],
        ApiKey.OFFSET_FETCH: [OffsetFetchRequest(group_id="g", topics=[OffsetFetchRequestTopic(
            name="t", partition_indexes=[0, 1])]), OffsetFetchRequest(group_id="g", topics=None)],
        ApiKey.FIND_COORDINATOR: [FindCoordinatorRequest(key="g", key_type=0)],
        ApiKey.API_VERSIONS: [ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")],
        ApiKey.CREATE_TOPICS: [CreateTopicsRequest(topics=[CreatableTopic(name="c", num_partitions=2,
                                                                          replication_factor=1)], timeout_ms=100)],
        ApiKey.DELETE_TOPICS: [DeleteTopicsRequest(topic_names=["t-gone"], timeout_ms=100)],
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: [AlterPartitionReassignmentsRequest(
            timeout_ms=100, allow_replication_factor_change=False, topics=[ReassignableTopic(name="t", partitions=[
                ReassignablePartition(partition_index=0, replicas=[ME, OTHER]),
                ReassignablePartition(partition_index=1, replicas=None)])])],
    }


def valid_frames() -> list[bytes]:
    """One frame per (api, version, body) that we decode, size prefix included; a body a version cannot
    carry is left out only for `_cannot_carry`'s reason, and every (api, version) gets its default body."""
    frames = []
    populated = _bodies()
    for api_key, (lo, hi) in ALL_VERSIONS.items():
        for version in range(lo, hi + 1):
            frames.append(encode_request(api_key, version, 1000 + version, "fuzz", REQUESTS[api_key]()))
            for body in populated.get(api_key, []):
                try:
                    frames.append(encode_request(api_key, version, 1000 + version, "fuzz", body))
                except LocalProtocolError as exc:
                    if not _cannot_carry(body, exc):
                        raise
    return frames


def _cannot_carry(body, exc: LocalProtocolError) -> bool:
    """The one body a version may refuse: null topics ("all topics") where that version has no null."""
    return getattr(body, "topics", ()) is None and "topics is not nullable" in str(exc)


VALID = valid_frames()


def run_to_reply(result, request):
    """The reply of handle_frame, awaiting it if it is asynchronous (a Parked one too, as the server does);
    None when a long poll is cut short."""
    if result is None or isinstance(result, list):
        return result
    if isinstance(result, Parked):
        result = result.awaitable
    long_poll = request is not None and request.api_key == ApiKey.FETCH and (
        request.body.max_wait_ms >= LONG_POLL_CUTOFF_S * 1000)

    async def wait():
        try:
            return await asyncio.wait_for(result, LONG_POLL_CUTOFF_S if long_poll else ASYNC_REPLY_TIMEOUT_S)
        except asyncio.TimeoutError:
            assert long_poll, f"no reply within {ASYNC_REPLY_TIMEOUT_S}s to {request!r}"
            return None

    return asyncio.run(wait())


def reply_bytes(chunks) -> bytes:
    out = bytearray()
    for chunk in chunks:
        out += chunk if isinstance(chunk, (bytes, bytearray, memoryview)) else chunk.read_bytes()
    return bytes(out)


def check(dispatcher: Dispatcher, frame: bytes, valid: bool = False) -> None:
    """The property: CloseConnection (never for a `valid` frame), None where allowed, or a well-formed reply;
    nothing else escapes."""
    try:
        request = decode_request(frame)
    except RemoteProtocolError:
        request = None
    try:
        result = dispatcher.handle_frame(frame)
    except CloseConnection as exc:
        assert not valid, f"closed the connection on a valid {request!r}: {exc}"
        return
    reply = run_to_reply(result, request)
    if reply is None:
        assert request is not None, "no reply to a frame that does not decode"
        if request.api_key == ApiKey.PRODUCE and request.body.acks == 0:
            return  # answered by nothing: at once, or once its transactional batches are verified (Parked)
        assert result is not None, f"no reply to {request!r}"  # else a long poll still waiting
        assert request.api_key == ApiKey.FETCH and request.body.max_wait_ms >= LONG_POLL_CUTOFF_S * 1000
        return
    data = reply_bytes(reply)
    (size,) = SIZE.unpack_from(data)
    assert size == len(data) - 4
    if request is None:  # only the ApiVersions fallback answers what we could not decode
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        assert api_key == ApiKey.API_VERSIONS
        got_id, body = decode_response(ApiKey.API_VERSIONS, 0, data[4:])
        assert (got_id, body.error_code) == (correlation_id, 35)
        return
    got_id, _ = decode_response(request.api_key, request.api_version, data[4:])
    assert got_id == request.header.correlation_id


def test_every_valid_frame_gets_a_well_formed_reply(dispatcher):
    for frame in VALID:
        check(dispatcher, frame[4:], valid=True)


def test_every_api_version_and_populated_body_makes_valid_frames():
    """Nothing is left out silently: a frame per (api, version) and default body, and a frame per populated
    body and version but the null-topics bodies in the versions without a null (Metadata v0, OffsetFetch v1)."""
    populated = _bodies()
    expected = sum((hi - lo + 1) * (1 + len(populated.get(api, []))) for api, (lo, hi) in ALL_VERSIONS.items())
    left_out = [(api, version) for api, (lo, hi) in ALL_VERSIONS.items() for version in range(lo, hi + 1)
                for body in populated.get(api, []) if getattr(body, "topics", ()) is None and not _carries_null(
                    api, version, body)]
    assert left_out == [(ApiKey.METADATA, 0), (ApiKey.OFFSET_FETCH, 1)]
    assert len(VALID) == expected - len(left_out)


def _carries_null(api, version, body) -> bool:
    try:
        encode_request(api, version, 1, "fuzz", body)
    except LocalProtocolError:
        return False
    return True


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(dispatcher, frame):
    check(dispatcher, frame)


@FUZZ
@given(st.integers(-3, 80), st.integers(-3, 20), st.integers(-2**31, 2**31 - 1), st.binary(max_size=300))
def test_random_body_behind_a_plausible_header(dispatcher, api_key, version, correlation_id, rest):
    check(dispatcher, struct.pack(">hhi", api_key, version, correlation_id) + rest)


@st.composite
def mutated_frames(draw):
    frame = bytearray(draw(st.sampled_from(VALID))[4:])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "extreme"]))
        pos = draw(st.integers(0, max(0, len(frame) - 1)))
        if kind == "flip" and frame:
            frame[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and frame:
            frame[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del frame[pos:]
        elif kind == "insert":
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del frame[pos:pos + draw(st.integers(1, 8))]
        elif kind == "extreme":  # a length, count or offset field at a boundary value
            frame[pos:pos + 4] = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
                                                       b"\x00\x00\x00\x00", b"\xff\xff", b"\x7f\xff"]))
    return bytes(frame)


@FUZZ
@given(mutated_frames())
def test_mutated_valid_frames(dispatcher, frame):
    check(dispatcher, frame)


# A Produce v3 acks=0 whose batches a mutation made transactional: the handler verifies them first, so the
# dispatcher returns it Parked, and it resolves to no reply (hypothesis found it; the harness took Parked for
# a reply and failed with "An asyncio.Future, a coroutine or an awaitable is required").
PARKED_ACKS0_PRODUCE = (
    b"\x00\x00\x00\x03\x00\x00\x03\xeb\x00\x04fuzz\xff\xff\x00\x00\x00\x00\x00d\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x04\x00\x00\x00Q\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\xff\xff\xff\xff\x02\x1c\xbf\xf3s\x00\x00\x00\x00\x00\x01\x00\x00\x01\xa2'\xde\x89\x18\x00\x00\x01\xa2'\xde\x89\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02\x18\x00\x00\x00\x02k\nvalue\x00\x0c\x00\x00\x02\x01\x00\x00\x00\x00\x00\x01\x00\x00\x00Q\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\xff\xff\xff\xff\x02\x1c\xbf\xf3s\x00\x00\x00\x00\x00\x01\x00\x00\x01\xa2'\xde\x89\x18\x00\x00\x01\xa2'\xde\x89\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02\x18\x00\x00\x00\x02k\nvalue\x00\x0c\x00\x00\x02\x01\x00\x00\x00\x00\x00\x02\x00\x00\x00Q\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\xff\xff\xff\xff\x02\x1c\xbf\xf3s\x00\x00\x00\x00\x00\x01\x00\x00\x01\xa2'\xde\x89\x18\x00\x00\x01\xa2'\xde\x89\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02\x18\x00\x00\x00\x02k\nvalue\x00\x0c\x00\x00\x02\x01\x00\x00\x00\x00\x00\t\x00\x00\x00Q\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\xff\xff\xff\xff\x02\x1c\xbf\xf3s\x00\x00\x00\x00\x00\x01\x00\x00\x01\xa2'\xde\x89\x18\x00\x00\x01\xa2'\xde\x89\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02\x18\x00\x00\x00\x02k\nvalue\x00\x0c\x00\x00\x02\x01\x00\x00")


def test_a_produce_with_acks_0_parked_for_verification_answers_nothing(dispatcher):
    parked = dispatcher.handle_frame(PARKED_ACKS0_PRODUCE)
    assert isinstance(parked, Parked)
    assert run_to_reply(parked, decode_request(PARKED_ACKS0_PRODUCE)) is None
    check(dispatcher, PARKED_ACKS0_PRODUCE)


def test_the_matrix_counts_what_was_served(dispatcher):
    """Session naming: ApiVersions v3+ names the client by its software; otherwise by client_id."""
    d = dispatcher
    named, unnamed = d.new_session(), d.new_session()
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "cid", ApiVersionsRequest(
        client_software_name="fuzzlib", client_software_version="9.9"))
    d.handle_frame(frame[4:], named)
    d.handle_frame(encode_request(ApiKey.METADATA, 8, 2, "cid", MetadataRequest(topics=None))[4:], named)
    d.handle_frame(encode_request(ApiKey.METADATA, 1, 3, "other-id", MetadataRequest(topics=None))[4:], unnamed)
    d.handle_frame(encode_request(ApiKey.API_VERSIONS, 0, 4, "other-id", ApiVersionsRequest())[4:], unnamed)
    assert d.handle_frame(struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 5, -1), unnamed)  # the v0 fallback
    stats = d.statistics()
    assert stats.versions_by_client["fuzzlib 9.9"] == {"ApiVersions": (3,), "Metadata": (8,)}
    assert stats.versions_by_client["other-id"] == {"ApiVersions": (0,), "Metadata": (1,)}
    assert stats.refused_by_client["other-id"] == {"ApiVersions": (99,)}


def test_every_advertised_api_has_a_handler_and_every_handler_is_advertised():
    """ApiVersions advertises only what is served: no api a client would pick and then be closed on."""
    from sparklog.broker.network.dispatch import HANDLERS
    from sparklog.protocol.registry import API_VERSIONS, UNADVERTISED

    # the client quota apis are served unadvertised (registry.UNADVERTISED: kafka-python would take them for
    # Kafka 2.6); every other handler is advertised
    assert set(API_VERSIONS) == set(HANDLERS) - set(UNADVERTISED) and set(UNADVERTISED) <= set(HANDLERS)


@pytest.mark.parametrize("bound", [1e12, 1.0], ids=["within-quota", "throttled"])
def test_metered_frames_get_well_formed_replies_too(dispatcher, bound):
    """dispatch Rule 7: with quotas on the fuzz client (never reached, or reached by every request), every
    valid frame still gets its well-formed reply (a throttled one stamped, a throttled Fetch empty), and random
    bytes still get nothing but a close or a reply."""
    from sparklog.coordination.client_quotas import QUOTA_KEYS, Entity

    quotas = dispatcher.state.quotas
    quotas.update(Entity(client="fuzz"), {key: min(bound, 1000.0) if key == "request_percentage" else bound
                                          for key in QUOTA_KEYS})
    throttled = dispatcher.throttled
    try:
        assert dispatcher.metering
        for frame in VALID:
            check(dispatcher, frame[4:], valid=True)
        assert (dispatcher.throttled > throttled) == (bound == 1.0)
        for frame in (b"", b"\x00\x01", b"\x00\x00\x00\x08\x00\x00\x00\x01\xff\xff", bytes(range(40))):
            check(dispatcher, frame)
    finally:
        quotas.update(Entity(client="fuzz"), {})
    assert not dispatcher.metering
