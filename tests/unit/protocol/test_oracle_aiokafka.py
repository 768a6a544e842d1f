"""aiokafka 0.14 as a second oracle. Its protocol classes (hand-written, positional) are checked at the
byte level: what we encode, aiokafka decodes and re-encodes to the very same bytes, for every
api x version aiokafka implements within our ranges; and aiokafka's request headers equal ours."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka.protocol.api import RequestStruct, Response
from sparklog.protocol import ALL_VERSIONS, REQUESTS, RESPONSES, ApiKey, RequestHeader, encode_request, encode_response
from unit.protocol.strategies import struct_of

_MODULES = ["admin", "commit", "coordination", "fetch", "group", "metadata", "offset", "produce",
            "transaction"]


def _aiokafka_classes():
    found = {}
    for name in _MODULES:
        module = importlib.import_module(f"aiokafka.protocol.{name}")
        for attr in dir(module):
            cls = getattr(module, attr)
            if not isinstance(cls, type) or not isinstance(getattr(cls, "API_VERSION", None), int):
                continue
            if issubclass(cls, RequestStruct):
                found[(cls.API_KEY, cls.API_VERSION, "request")] = cls
            elif issubclass(cls, Response):
                found[(cls.API_KEY, cls.API_VERSION, "response")] = cls
    return found


# aiokafka's own classes that disagree with Kafka's specs, and that aiokafka never sends (its
# OffsetRequest type alias leaves them out as "not yet supported"): current_leader_epoch is an Int64.
# DescribeAcls v2 is flexible in Kafka's DescribeAcls*.json ("flexibleVersions": "2+"); aiokafka's v2 is v1's
# non-flexible layout again.
_BROKEN_IN_AIOKAFKA = {(ApiKey.LIST_OFFSETS, 4, "request"), (ApiKey.LIST_OFFSETS, 5, "request"),
                       (ApiKey.DESCRIBE_ACLS, 2, "request"), (ApiKey.DESCRIBE_ACLS, 2, "response")}

THEIRS = _aiokafka_classes()
CASES = [(key, v, kind) for key, (lo, hi) in ALL_VERSIONS.items() for v in range(lo, hi + 1)
         for kind in ("request", "response")
         if (int(key), v, kind) in THEIRS and (key, v, kind) not in _BROKEN_IN_AIOKAFKA]
IDS = [f"{key.name}-v{v}-{kind}" for key, v, kind in CASES]


def test_aiokafka_covers_the_main_apis():
    keys = {key for key, _, _ in CASES}
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT,
            ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS} <= keys
    assert len(CASES) > 40


@pytest.mark.parametrize("key,version,kind", CASES, ids=IDS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_aiokafka_reencodes_our_bytes(key, version, kind, data):
    cls = THEIRS[(int(key), version, kind)]
    if kind == "request":
        body = data.draw(struct_of(REQUESTS[key], version))
        frame = encode_request(key, version, 5, "sparklog", body)
        header_size = 4 + 8 + 2 + len("sparklog") + (1 if cls.FLEXIBLE_VERSION else 0)
        theirs = cls.decode(frame[header_size:])
        assert theirs.build_request_header(5, "sparklog").encode() == frame[4:header_size]
        assert theirs.encode() == frame[header_size:]
    else:
        body = data.draw(struct_of(RESPONSES[key], version))
        if key == ApiKey.API_VERSIONS:
            body.error_code = 0
        frame = b"".join(bytes(c) for c in encode_response(RequestHeader(key, version, 5), body))
        # size, correlation id, and the tagged fields of a flexible response header (not ApiVersions': v0)
        start = 8 + (RESPONSES[key].is_flexible(version) and key != ApiKey.API_VERSIONS)
        assert cls.decode(frame[start:]).encode() == frame[start:]
