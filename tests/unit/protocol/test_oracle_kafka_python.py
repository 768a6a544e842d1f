"""kafka-python 3.0 as an oracle: its protocol classes are generated from Kafka's JSON specs
independently of ours. For every api x version we serve (kafka-python implements them all):

* what we encode, kafka-python decodes to the same values, and re-encodes to the same bytes;
* so what kafka-python encodes, we decode (and our decoder is checked on its bytes too).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
from kafka.protocol.api_message import ApiMessage
from sparklog.protocol import (ALL_VERSIONS, REQUESTS, RESPONSES, ApiKey, decode_request, decode_response,
                               encode_request, encode_response)
from sparklog.protocol.headers import RequestHeader
from unit.protocol.strategies import struct_of


def _kafka_python_classes():
    found = {}
    for module in (kafka.protocol.admin, kafka.protocol.consumer, kafka.protocol.metadata,
                   kafka.protocol.producer, kafka.protocol.sasl):
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and cls is not ApiMessage:
                found[(cls.API_KEY, cls.type)] = cls
    return found


THEIRS = _kafka_python_classes()
# kafka-python 3.0 has no classes for the KIP-848 apis (it names their keys only): their codecs are checked
# against librdkafka instead (tests/integration/test_consumer_group_protocol.py).
NOT_IN_KAFKA_PYTHON = {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}
CASES = [(key, v) for key, (lo, hi) in ALL_VERSIONS.items() for v in range(lo, hi + 1)
         if key not in NOT_IN_KAFKA_PYTHON]
IDS = [f"{key.name}-v{v}" for key, v in CASES]


def ours_as_dict(obj, version):
    """Our object as kafka-python's ``to_dict(json=False)`` shows it: fields of the version only."""
    out = {}
    for f in obj._fields:
        if version not in f.versions:
            continue
        v = getattr(obj, f.name)
        if f.fields is not None and v is not None and not f.type.startswith("[]"):  # a single struct
            v = ours_as_dict(v, version)
        elif f.fields is not None and v is not None:
            v = [ours_as_dict(e, version) for e in v]
        elif isinstance(v, memoryview):
            v = bytes(v)
        out[f.name] = v
    return out


# kafka-python turns Metadata's authorized-operations bitfields into sets under another name; those
# fields are checked by the byte-for-byte comparison instead.
_RENAMED = {"authorized_operations", "cluster_authorized_operations", "topic_authorized_operations"}


def _comparable(value):
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in _RENAMED}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def test_kafka_python_covers_every_api():
    for key in set(ALL_VERSIONS) - NOT_IN_KAFKA_PYTHON:
        assert (int(key), "request") in THEIRS and (int(key), "response") in THEIRS


@pytest.mark.parametrize("key,version", CASES, ids=IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_requests_agree(key, version, data):
    body = data.draw(struct_of(REQUESTS[key], version))
    frame = encode_request(key, version, 42, "sparklog", body)
    theirs = THEIRS[(int(key), "request")][version].decode(frame, header=True, framed=True)
    assert theirs.header.correlation_id == 42 and theirs.header.client_id == "sparklog"
    assert _comparable(theirs.to_dict(json=False)) == _comparable(ours_as_dict(body, version))
    theirs.with_header(correlation_id=42, client_id="sparklog")
    their_frame = bytes(theirs.encode(header=True, framed=True))  # version: as decoded
    assert their_frame == frame
    assert decode_request(their_frame[4:]).body == body


@pytest.mark.parametrize("key,version", CASES, ids=IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_responses_agree(key, version, data):
    body = data.draw(struct_of(RESPONSES[key], version))
    if key == ApiKey.API_VERSIONS:
        body.error_code = 0  # an error makes both sides switch to v0: covered in test_api_versions_fallback
    frame = b"".join(bytes(c) for c in encode_response(RequestHeader(key, version, 77), body))
    theirs = THEIRS[(int(key), "response")][version].decode(frame, header=True, framed=True)
    assert theirs.header.correlation_id == 77
    assert _comparable(theirs.to_dict(json=False)) == _comparable(ours_as_dict(body, version))
    theirs.with_header(correlation_id=77)
    their_frame = bytes(theirs.encode(header=True, framed=True))  # version: as decoded
    assert their_frame == frame
    assert decode_response(key, version, their_frame[4:]) == (77, body)
