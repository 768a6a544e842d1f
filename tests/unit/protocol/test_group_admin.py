"""DescribeGroups, ListGroups and DeleteGroups against bytes written out by hand from Kafka's specs: decoded
whole, refused when cut at any byte, and with trailing bytes ignored (registry Rule 1)."""

from __future__ import annotations

import struct

import pytest

from sparklog.protocol import ApiKey, decode_request, decode_response, encode_request
from sparklog.protocol.errors import MalformedRequest, MalformedResponse
from sparklog.protocol.group_admin import (DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse,
                                           DescribedGroup, DescribedGroupMember, DescribeGroupsRequest,
                                           DescribeGroupsResponse, ListedGroup, ListGroupsRequest,
                                           ListGroupsResponse)


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)


CORRELATION = i32(9)

# DescribeGroups v4 response: one group with one static member.
DESCRIBE_V4 = (CORRELATION + i32(0) + i32(1) + i16(0) + s("g") + s("Stable") + s("consumer") + s("range")
               + i32(1) + s("m-1") + i16(2) + b"i1" + s("cli") + s("/10.0.0.1") + b(b"\x00\x01") + b(b"\x02")
               + i32(-2147483648))
DESCRIBED = DescribeGroupsResponse(throttle_time_ms=0, groups=[DescribedGroup(
    error_code=0, group_id="g", group_state="Stable", protocol_type="consumer", protocol_data="range",
    members=[DescribedGroupMember(member_id="m-1", group_instance_id="i1", client_id="cli",
                                  client_host="/10.0.0.1", member_metadata=b"\x00\x01", member_assignment=b"\x02")])])

# ListGroups v1 response: two groups.
LIST_V1 = CORRELATION + i32(0) + i16(0) + i32(2) + s("a") + s("consumer") + s("b") + s("")
LISTED = ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[
    ListedGroup(group_id="a", protocol_type="consumer"), ListedGroup(group_id="b", protocol_type="")])

# ListGroups v4 response (flexible): one group with its state; compact strings and arrays, tagged fields.
def cs(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


LIST_V4 = CORRELATION + b"\x00" + i32(0) + i16(0) + b"\x02" + cs("g") + cs("consumer") + cs("Stable") + b"\x00\x00"
LISTED_V4 = ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[
    ListedGroup(group_id="g", protocol_type="consumer", group_state="Stable")])

# DeleteGroups v1 response: one group refused as non-empty.
DELETE_V1 = CORRELATION + i32(0) + i32(1) + s("g") + i16(68)
DELETED = DeleteGroupsResponse(throttle_time_ms=0, results=[DeletableGroupResult(group_id="g", error_code=68)])

RESPONSES = [(ApiKey.DESCRIBE_GROUPS, 4, DESCRIBE_V4, DESCRIBED), (ApiKey.LIST_GROUPS, 1, LIST_V1, LISTED),
             (ApiKey.LIST_GROUPS, 4, LIST_V4, LISTED_V4),
             (ApiKey.DELETE_GROUPS, 1, DELETE_V1, DELETED)]


@pytest.mark.parametrize("key,version,frame,body", RESPONSES, ids=lambda x: getattr(x, "name", None))
def test_response_decodes_whole(key, version, frame, body):
    assert decode_response(key, version, frame) == (9, body)


@pytest.mark.parametrize("key,version,frame,body", RESPONSES, ids=lambda x: getattr(x, "name", None))
def test_response_cut_at_any_byte_is_refused(key, version, frame, body):
    for end in range(len(frame)):
        with pytest.raises(MalformedResponse):
            decode_response(key, version, frame[:end])


def test_request_bytes_and_trailing_bytes():
    body = DescribeGroupsRequest(groups=["g", "h"], include_authorized_operations=True)
    frame = encode_request(ApiKey.DESCRIBE_GROUPS, 3, 5, "c", body)[4:]
    assert frame.endswith(i32(2) + s("g") + s("h") + b"\x01")
    assert decode_request(frame + b"\xff\xff").body == body
    listing = encode_request(ApiKey.LIST_GROUPS, 4, 5, "c", ListGroupsRequest(states_filter=["Stable", "Empty"]))[4:]
    assert listing.endswith(b"\x03" + cs("Stable") + cs("Empty") + b"\x00")
    assert decode_request(listing).body.states_filter == ["Stable", "Empty"]
    delete = encode_request(ApiKey.DELETE_GROUPS, 1, 6, "c", DeleteGroupsRequest(groups_names=["x"]))[4:]
    assert delete.endswith(i32(1) + s("x"))
    for end in range(len(delete) - 1, 0, -1):
        with pytest.raises(MalformedRequest):
            decode_request(delete[:end])
