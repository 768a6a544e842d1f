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
    ({"segment.bytes": 0}, r"segment.bytes: must be an integer \(int\) in \[1, 2147483647\], not 0"),
    ({"segment.bytes": 2**31}, "2147483647"),
    ({"retention.ms": -2}, "retention.ms"),
    ({"flush.visibility": "sometimes"}, "flush.visibility"),
])
def test_bad_settings_raise_clear_errors(settings, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig.from_dict(settings)


def test_with_overrides_keeps_the_rest():
    base = LogConfig.from_dict({"segment.bytes": 100})
    assert base.with_overrides({"retention.bytes": "5"}) == LogConfig(segment_bytes=100, retention_bytes=5)


# -- the standard topic configs (issue 14): every Kafka topic config accepted, typed, validated --------------

from hypothesis import given, strategies as st  # noqa: E402

from sparklog.storage.config import BROKER_KEYS, DEFINITIONS, KEYS  # noqa: E402

KAFKA_TOPIC_CONFIGS = (
    "cleanup.policy compression.type compression.gzip.level compression.lz4.level compression.zstd.level "
    "delete.retention.ms file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas "
    "index.interval.bytes leader.replication.throttled.replicas local.retention.bytes local.retention.ms "
    "max.compaction.lag.ms max.message.bytes message.downconversion.enable message.format.version "
    "message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.difference.max.ms "
    "message.timestamp.type min.cleanable.dirty.ratio min.compaction.lag.ms min.insync.replicas preallocate "
    "remote.storage.enable retention.bytes retention.ms segment.bytes segment.index.bytes segment.jitter.ms "
    "segment.ms unclean.leader.election.enable"
).split()


def test_every_kafka_topic_config_is_known_with_its_kafka_default():
    assert set(KAFKA_TOPIC_CONFIGS) <= set(KEYS)
    config = LogConfig()
    assert config.message_timestamp_type == "CreateTime" and config.compression_type == "producer"
    assert config.cleanup_policy == "delete" and config.delete_retention_ms == 86_400_000
    assert config.min_insync_replicas == 1 and config.unclean_leader_election_enable is False
    assert config.min_cleanable_dirty_ratio == 0.5 and config.timestamp_bounds_ms == (LONG_MAX, LONG_MAX)


def test_the_standard_configs_parse_from_strings_and_print_as_kafka_does():
    config = LogConfig.from_dict({
        "message.timestamp.type": "logappendtime", "compression.type": "ZSTD", "delete.retention.ms": "100",
        "cleanup.policy": "Compact, delete", "unclean.leader.election.enable": "TRUE",
        "min.insync.replicas": "2", "min.cleanable.dirty.ratio": "0.25"})
    assert config.message_timestamp_type == "LogAppendTime" and config.compression_type == "zstd"
    assert config.cleanup_policies == {"compact", "delete"} and config.unclean_leader_election_enable is True
    printed = config.to_strings()
    assert printed["cleanup.policy"] == "compact,delete" and printed["unclean.leader.election.enable"] == "true"
    assert printed["min.cleanable.dirty.ratio"] == "0.25" and printed["delete.retention.ms"] == "100"
    assert LogConfig.from_dict(printed) == config


@pytest.mark.parametrize("settings, message", [
    ({"compression.type": "brotli"}, "compression.type: must be one of uncompressed, gzip"),
    ({"message.timestamp.type": "Now"}, "message.timestamp.type: must be one of CreateTime, LogAppendTime"),
    ({"cleanup.policy": "compact,forever"}, "cleanup.policy: must be a list of delete, compact"),
    ({"cleanup.policy": ""}, "cleanup.policy"),
    ({"min.insync.replicas": "0"}, "min.insync.replicas"),
    ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable must be true or false"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
    ({"min.cleanable.dirty.ratio": "nan"}, "min.cleanable.dirty.ratio must be a number"),
    ({"message.timestamp.before.max.ms": "-1"}, "message.timestamp.before.max.ms"),
    ({"remote.storage.enable": "true"}, "remote.storage.enable: tiered storage is not supported"),
])
def test_bad_standard_configs_are_refused_naming_the_key(settings, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig.from_dict(settings)


def test_difference_max_bounds_both_sides_unless_a_tighter_bound_is_set():
    config = LogConfig.from_dict({"message.timestamp.difference.max.ms": 1000,
                                  "message.timestamp.after.max.ms": 10})
    assert config.timestamp_bounds_ms == (1000, 10)


def test_broker_synonyms_are_kafkas_log_names():
    assert BROKER_KEYS["log.retention.ms"] == "retention.ms"
    assert BROKER_KEYS["log.message.timestamp.type"] == "message.timestamp.type"
    assert BROKER_KEYS["log.cleaner.delete.retention.ms"] == "delete.retention.ms"
    assert BROKER_KEYS["compression.type"] == "compression.type"
    assert BROKER_KEYS["message.max.bytes"] == "max.message.bytes"
    assert all(DEFINITIONS[topic].synonym == broker for broker, topic in BROKER_KEYS.items())


@given(st.sampled_from(sorted(DEFINITIONS)), st.text(max_size=12))
def test_any_string_for_any_key_parses_or_raises_invalid_config(key, text):
    try:
        config = LogConfig.from_dict({key: text})
    except InvalidConfigError as exc:
        assert key in str(exc)
    else:
        assert LogConfig.from_dict(config.to_strings()) == config
