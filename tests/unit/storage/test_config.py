import pytest

from sparklog.storage import InvalidConfigError, LogConfig
from sparklog.storage.config import LONG_MAX


def test_defaults_mirror_kafka_except_flush_ms():
    config = LogConfig()
    assert config.segment_bytes == 1024**3 and config.segment_ms == 604_800_000
    assert config.index_interval_bytes == 4096 and config.max_message_bytes == 1048588
    assert config.retention_ms == 604_800_000 and config.retention_bytes == -1
    assert config.flush_messages == LONG_MAX and config.flush_ms == 50
    assert config.file_delete_delay_ms == 60_000 and config.flush_visibility == "flushed"


def test_from_dict_parses_properties_strings_and_round_trips():
    config = LogConfig.from_dict({"segment.bytes": " 1024 ", "flush.visibility": "Appended", "retention.ms": "-1"})
    assert (config.segment_bytes, config.flush_visibility, config.retention_ms) == (1024, "appended", -1)
    assert LogConfig.from_dict(config.to_dict()) == config
    assert LogConfig.from_dict({"flush.visibility": True}).flush_visibility == "appended"


@pytest.mark.parametrize("settings, message", [
    ({"segment.byte": 1}, "unknown log setting 'segment.byte'"),
    ({"segment.bytes": "lots"}, "segment.bytes must be an integer"),
    ({"segment.bytes": 0}, "segment.bytes must be an integer >= 1"),
    ({"segment.bytes": 2**31}, "int32"),
    ({"retention.ms": -2}, "retention.ms"),
    ({"flush.visibility": "sometimes"}, "flush.visibility"),
])
def test_bad_settings_raise_clear_errors(settings, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig.from_dict(settings)


def test_with_overrides_keeps_the_rest():
    base = LogConfig.from_dict({"segment.bytes": 100})
    assert base.with_overrides({"retention.bytes": "5"}) == LogConfig(segment_bytes=100, retention_bytes=5)
