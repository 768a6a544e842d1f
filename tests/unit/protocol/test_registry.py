"""The registry entry points: the ApiVersions fallback, Fetch responses with pass-through records,
header choice, and what the encoders refuse."""

from __future__ import annotations

import struct

import pytest

from sparklog.protocol import (API_VERSIONS, ALL_VERSIONS, ApiKey, ApiVersionsRequest, FetchableTopicResponse,
                               FetchResponse, LocalProtocolError, MalformedRequest, MetadataRequest,
                               PartitionData, ProduceRequest, RequestHeader, UnsupportedVersion,
                               decode_request, decode_response, encode_api_versions_fallback, encode_request,
                               encode_response, PartitionProduceData, TopicProduceData)
from sparklog.protocol.headers import encode_request_header


def test_advertised_table():
    assert API_VERSIONS == {
        ApiKey.PRODUCE: (0, 11), ApiKey.FETCH: (4, 16), ApiKey.LIST_OFFSETS: (1, 9), ApiKey.METADATA: (0, 12),
        ApiKey.OFFSET_COMMIT: (2, 9), ApiKey.OFFSET_FETCH: (1, 9), ApiKey.FIND_COORDINATOR: (0, 5),
        ApiKey.API_VERSIONS: (0, 4), ApiKey.CREATE_TOPICS: (0, 7), ApiKey.DELETE_TOPICS: (0, 6),
        ApiKey.INIT_PRODUCER_ID: (0, 5), ApiKey.DELETE_RECORDS: (0, 2), ApiKey.DESCRIBE_CONFIGS: (0, 4),
        ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.DESCRIBE_CLUSTER: (0, 2), ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.DESCRIBE_GROUPS: (0, 5),
        ApiKey.LIST_GROUPS: (0, 5), ApiKey.DELETE_GROUPS: (0, 2), ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
        ApiKey.OFFSET_DELETE: (0, 0), ApiKey.DESCRIBE_LOG_DIRS: (0, 4), ApiKey.DESCRIBE_PRODUCERS: (0, 0),
        ApiKey.ELECT_LEADERS: (0, 2), ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4), ApiKey.END_TXN: (0, 4),
        ApiKey.WRITE_TXN_MARKERS: (0, 1), ApiKey.TXN_OFFSET_COMMIT: (0, 4), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1), ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_ACLS: (0, 1), ApiKey.CREATE_ACLS: (0, 1), ApiKey.DELETE_ACLS: (0, 1),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0)}
    assert {**API_VERSIONS, ApiKey.LIST_OFFSETS: (0, 10),  # v0 and v10 decoded, not advertised
            ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),  # v4-v5 (brokers') decoded, not advertised
            ApiKey.DESCRIBE_ACLS: (0, 3), ApiKey.CREATE_ACLS: (0, 3),  # v2-v3 decoded, not advertised
            ApiKey.DELETE_ACLS: (0, 3),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # v1 (KIP-860) decoded, not advertised
            ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.ALTER_CLIENT_QUOTAS: (0, 1)} == ALL_VERSIONS  # not advertised


def _kafka_python_max_version(api_key: int) -> int | None:
    """The highest version kafka-python's own schema of the request has (what it sends when the broker allows);
    None for an API it has no schema of (it never sends it: ConsumerGroupHeartbeat, ...)."""
    from kafka.protocol.api_key import ApiKey as TheirKey
    from kafka.protocol.schemas.load_json import load_json

    try:
        return int(load_json(f"{TheirKey(api_key).name}Request")["validVersions"].split("-")[-1])
    except FileNotFoundError:
        return None


def test_kafka_python_names_the_advertised_versions_a_release_no_later_than_what_is_served():
    """kafka-python takes a broker's release from its highest versions and, under a user's pin to that release or
    an older one, sends the pinned release's table (each API at min(the table's, its own highest)): every version
    so sent, for every release from 2.4 (sparklog's baseline) to the one inferred, must be served (else the
    broker closes the connection; stop 20's CI). Produce v11 advertised names 3.8 (Fetch v17 would name 3.9)."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS, infer_broker_version_from_api_versions

    release = infer_broker_version_from_api_versions({int(k): v for k, v in API_VERSIONS.items()})
    assert release == (3, 8), release
    unserved = []
    for pin in (p for p in BROKER_API_VERSIONS if (2, 4) <= p <= release):
        for key, (_, highest) in BROKER_API_VERSIONS[pin].items():
            theirs = _kafka_python_max_version(key)
            if key in ALL_VERSIONS and theirs is not None:  # an API sparklog lacks is refused at any version
                version = min(highest, theirs)
                lo, hi = ALL_VERSIONS[ApiKey(key)]
                if not lo <= version <= hi:
                    unserved.append((pin, ApiKey(key).name, version))
    assert unserved == []


def test_api_versions_fallback_bytes():
    # an ApiVersions v5 request (a client newer than us): header v2 with tags, compact body
    frame = encode_request_header(18, 5, 0x01020304, "new-client", True) + b"\x03py\x021\x00"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 5, 0x01020304)
    assert encode_api_versions_fallback(info.value.correlation_id) == (
        b"\x00\x00\x00\x10"  # size: 16 bytes follow
        b"\x01\x02\x03\x04"  # response header v0: correlation id, no tagged fields
        b"\x00\x23"  # error_code 35 UNSUPPORTED_VERSION
        b"\x00\x00\x00\x01"  # api_keys: int32 count 1 (v0 format, not compact)
        b"\x00\x12\x00\x00\x00\x04")  # ApiVersions: min 0, max 4


def test_fallback_decodes_in_clients_as_v0():
    from kafka.protocol.metadata import ApiVersionsResponse as Theirs
    frame = encode_api_versions_fallback(7)
    theirs = Theirs[3].decode(frame, header=True, framed=True)
    assert theirs.header.correlation_id == 7 and theirs.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys] == [(18, 0, 4)]
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 3, frame[4:])
    assert correlation_id == 7 and body.error_code == 35 and body.api_keys[0].max_version == 4


def test_unknown_api_key_is_unsupported():
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(encode_request_header(999, 0, 5, None, False))
    assert info.value.api_key == 999 and info.value.correlation_id == 5
    with pytest.raises(UnsupportedVersion):  # Fetch v3 is below our range
        decode_request(encode_request_header(1, 3, 5, None, False) + b"\x00" * 20)


class FakeFileSlice:
    """Stands for storage.FileSlice: has a length, is written by the broker with os.sendfile."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length


def test_fetch_response_with_records_object_counts_it_in_the_size():
    records = FakeFileSlice(1_000_000)
    body = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=0, high_watermark=10, records=records),
        PartitionData(partition_index=1, high_watermark=3, records=b"small"),
    ])])
    chunks = encode_response(RequestHeader(ApiKey.FETCH, 10, 99), body)
    assert len(chunks) == 3 and chunks[1] is records
    total = sum(len(c) for c in chunks)
    assert struct.unpack(">i", bytes(chunks[0][:4]))[0] == total - 4
    # with the object's bytes in place, the frame decodes
    frame = bytes(chunks[0]) + b"\x00" * len(records) + bytes(chunks[2])
    correlation_id, decoded = decode_response(ApiKey.FETCH, 10, frame[4:])
    assert correlation_id == 99
    assert decoded.responses[0].partitions[0].records == b"\x00" * len(records)
    assert decoded.responses[0].partitions[1].records == b"small"


def test_large_bytes_records_are_not_copied():
    big = memoryview(bytes(100_000))
    body = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=0, records=big)])])
    chunks = encode_response(RequestHeader(ApiKey.FETCH, 11, 1), body)
    assert any(c is big for c in chunks)


def test_produce_records_decode_as_views_of_the_frame():
    body = ProduceRequest(acks=1, timeout_ms=5, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"R" * 12_000)])])
    frame = memoryview(encode_request(ApiKey.PRODUCE, 7, 1, "c", body))[4:]
    records = decode_request(frame).body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame.obj and records == b"R" * 12_000


def test_flexible_request_header_keeps_int16_client_id():
    frame = encode_request(ApiKey.API_VERSIONS, 4, 3, "abc", ApiVersionsRequest())
    assert frame[4:18] == b"\x00\x12\x00\x04\x00\x00\x00\x03\x00\x03abc\x00"
    request = decode_request(frame[4:])
    assert request.header.client_id == "abc" and request.header.flexible


def test_encoders_refuse_misuse():
    with pytest.raises(LocalProtocolError):  # wrong body class
        encode_response(RequestHeader(ApiKey.METADATA, 8, 1), FetchResponse())
    with pytest.raises(LocalProtocolError):  # topic_data is not nullable
        encode_request(ApiKey.PRODUCE, 7, 1, None, ProduceRequest(topic_data=None))
    with pytest.raises(LocalProtocolError):  # int16 out of range
        encode_request(ApiKey.PRODUCE, 7, 1, None, ProduceRequest(acks=1 << 20))
    with pytest.raises(LocalProtocolError):  # a version we do not serve
        encode_request(ApiKey.METADATA, 13, 1, None, MetadataRequest())


def test_metadata_null_topics_means_all():
    frame = encode_request(ApiKey.METADATA, 1, 1, None, MetadataRequest(topics=None))
    assert frame[-4:] == b"\xff\xff\xff\xff"
    assert decode_request(frame[4:]).body.topics is None


def test_malformed_request_carries_header():
    frame = encode_request(ApiKey.METADATA, 4, 8, "c", MetadataRequest(topics=[]))[4:-3]
    with pytest.raises(MalformedRequest) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 8


def test_api_versions_error_response_is_encoded_as_v0():
    from sparklog.protocol import ApiVersionsResponse
    chunks = encode_response(RequestHeader(ApiKey.API_VERSIONS, 3, 2),
                             ApiVersionsResponse(error_code=42, api_keys=[]))
    assert b"".join(chunks) == b"\x00\x00\x00\x0a\x00\x00\x00\x02\x00\x2a\x00\x00\x00\x00"
