"""One class per Kafka error code; codec errors split into remote and local."""

from __future__ import annotations

from sparklog.protocol import errors


def test_codes_map_to_classes():
    expected = {0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 6: "NOT_LEADER_OR_FOLLOWER",
                35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS", 69: "GROUP_ID_NOT_FOUND",
                74: "FENCED_LEADER_EPOCH", 78: "OFFSET_NOT_AVAILABLE", -1: "UNKNOWN_SERVER_ERROR"}
    for code, message in expected.items():
        cls = errors.for_code(code)
        assert cls.errno == code and cls.message == message
        assert issubclass(cls, errors.KafkaError)
    assert errors.for_code(3) is errors.UnknownTopicOrPartitionError


def test_required_codes_present():
    required = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 24, 25, 27, 28,
                29, 30, 31, 32, 33, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 56, 59, 69, 74, 75, 78, -1]
    for code in required:
        assert errors.for_code(code).__name__.endswith("Error") or code == 0


def test_retriable_follows_kafka():
    assert errors.for_code(6).retriable and errors.for_code(3).retriable and errors.for_code(7).retriable
    assert not errors.for_code(1).retriable and not errors.for_code(36).retriable


def test_unknown_code_keeps_its_number():
    cls = errors.for_code(9999)
    assert cls.errno == 9999 and errors.for_code(9999) is cls
    assert "9999" in str(cls("detail"))


def test_codec_error_hierarchy():
    assert issubclass(errors.FrameTooLarge, errors.RemoteProtocolError)
    assert issubclass(errors.MalformedRequest, errors.RemoteProtocolError)
    assert issubclass(errors.UnsupportedVersion, errors.RemoteProtocolError)
    assert not issubclass(errors.LocalProtocolError, errors.RemoteProtocolError)
    exc = errors.UnsupportedVersion(18, 9, 77)
    assert (exc.api_key, exc.api_version, exc.correlation_id) == (18, 9, 77)
