"""Every api x version round-trips through our own encoder and decoder, requests and responses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

from sparklog.protocol import (ALL_VERSIONS, REQUESTS, RESPONSES, ApiKey, RequestHeader, decode_request,
                               decode_response, encode_request, encode_response)
from unit.protocol.strategies import struct_of

CASES = [(key, v) for key, (lo, hi) in ALL_VERSIONS.items() for v in range(lo, hi + 1)]
IDS = [f"{key.name}-v{v}" for key, v in CASES]


def _response_version(key, version, body):
    # ApiVersions responses carrying an error are sent in the v0 format (registry Rule 3)
    return 0 if key == ApiKey.API_VERSIONS and body.error_code else version


@pytest.mark.parametrize("key,version", CASES, ids=IDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_roundtrip(key, version, data):
    body = data.draw(struct_of(REQUESTS[key], version))
    client_id = data.draw(st.none() | st.text(max_size=5))
    frame = encode_request(key, version, 123, client_id, body)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    request = decode_request(frame[4:])
    assert request.header == RequestHeader(key, version, 123, client_id, REQUESTS[key].is_flexible(version))
    assert request.body == body


@pytest.mark.parametrize("key,version", CASES, ids=IDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_response_roundtrip(key, version, data):
    body = data.draw(struct_of(RESPONSES[key], version))
    header = RequestHeader(key, version, -7, "c")
    chunks = encode_response(header, body)
    frame = b"".join(bytes(c) for c in chunks)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    correlation_id, decoded = decode_response(key, version, frame[4:])
    assert correlation_id == -7
    if _response_version(key, version, body) == version:
        assert decoded == body
    else:
        assert decoded == struct_of_v0(body)


def struct_of_v0(body):
    """An ApiVersionsResponse reduced to its v0 fields."""
    return type(body)(error_code=body.error_code, api_keys=body.api_keys)


def test_flexible_api_versions_v3_bytes():
    """ApiVersions v3 request: header v2 (int16 client_id + tags), compact strings, tags."""
    from sparklog.protocol import ApiVersionsRequest
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "c", ApiVersionsRequest(
        client_software_name="py", client_software_version="1"))
    assert frame[4:] == (b"\x00\x12\x00\x03\x00\x00\x00\x01" b"\x00\x01c" b"\x00"
                         b"\x03py" b"\x021" b"\x00")


def test_api_versions_v3_response_uses_header_v0_and_tags():
    from sparklog.protocol import ApiVersion, ApiVersionsResponse
    body = ApiVersionsResponse(api_keys=[ApiVersion(api_key=0, min_version=3, max_version=8)],
                               throttle_time_ms=0, zk_migration_ready=True)
    frame = b"".join(encode_response(RequestHeader(ApiKey.API_VERSIONS, 3, 9), body))
    assert frame[4:] == (b"\x00\x00\x00\x09"  # correlation id, header v0: no tag section
                         b"\x00\x00"  # error code
                         b"\x02" b"\x00\x00\x00\x03\x00\x08\x00"  # compact array of 1, element tags
                         b"\x00\x00\x00\x00"  # throttle
                         b"\x01" b"\x03\x01\x01")  # one tagged field: tag 3, size 1, true
    assert decode_response(ApiKey.API_VERSIONS, 3, frame[4:]) == (9, body)


def test_a_tagged_struct_equal_to_its_default_is_not_sent():
    """Kafka writes a tagged field only when it differs from its default, and a tagged struct's default is the
    struct of its fields' defaults: a default CurrentLeader is the same bytes as none at all, and decodes to none."""
    from sparklog.protocol.produce import (LeaderIdAndEpoch, PartitionProduceResponse, ProduceResponse,
                                           TopicProduceResponse)

    def response(current_leader):
        return ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[
            PartitionProduceResponse(index=0, error_code=0, base_offset=5, current_leader=current_leader)])])

    header = RequestHeader(ApiKey.PRODUCE, 10, 7, "c")
    bare = b"".join(bytes(c) for c in encode_response(header, response(None)))
    assert b"".join(bytes(c) for c in encode_response(header, response(LeaderIdAndEpoch()))) == bare
    assert decode_response(ApiKey.PRODUCE, 10, bare[4:])[1] == response(None)
    hinted = b"".join(bytes(c) for c in encode_response(header, response(LeaderIdAndEpoch(leader_id=2,
                                                                                          leader_epoch=-1))))
    assert len(hinted) == len(bare) + 11  # tag 0, size 8, the two int32s
