"""The one typed definition of settings (sparklog/settings.py) and every table declared with it: names,
types, defaults, ranges and choices; unknown keys name the nearest known one; bad values name the key, the
value and the rule."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.config import BROKER, BrokerConfig, ConfigError
from sparklog.client.config import CONSUMER, GROUP, PRODUCER, resolve, PRODUCER_DEFAULTS
from sparklog.datasource.options import READ_OPTIONS, WRITE_OPTIONS, SparklogOptionError, parse_read_options
from sparklog.settings import (BOOLEAN, DOUBLE, INT, LIST, RAISE, STRING, Definitions, Setting, SettingError)
from sparklog.storage import InvalidConfigError, LogConfig
from sparklog.storage.config import DEFINITIONS as TOPIC

TABLE = Definitions("test", (
    Setting("segment.bytes", INT, 1024, "bytes per segment", low=1, high=2**31 - 1),
    Setting("flush.enable", BOOLEAN, True, "flush"),
    Setting("ratio", DOUBLE, 0.5, "a ratio", low=0.0, high=1.0),
    Setting("policy", LIST, "delete", "policies", choices=("delete", "compact")),
    Setting("mode", STRING, "fast", "mode", choices=("fast", "Safe")),
    Setting("name", STRING, None, "a name"),
))
ALL_TABLES = (TOPIC, BROKER, PRODUCER, CONSUMER, GROUP, READ_OPTIONS, WRITE_OPTIONS)


def test_strings_parse_to_the_declared_types_with_defaults_filled_in():
    assert TABLE.parse({"segment.bytes": " 2048 ", "flush.enable": "FALSE", "ratio": "0.25",
                        "policy": "Compact, delete", "mode": "safe"}) == {
        "segment.bytes": 2048, "flush.enable": False, "ratio": 0.25, "policy": "compact,delete", "mode": "Safe",
        "name": None}
    assert TABLE.parse({}) == TABLE.defaults()


@pytest.mark.parametrize("props, message", [
    ({"segment.bytes": "0"}, r"^segment.bytes: must be an integer \(int\) in \[1, 2147483647\], not 0$"),
    ({"segment.bytes": "lots"}, r"^segment.bytes must be an integer, not 'lots'$"),
    ({"segment.bytes": 1.5}, r"^segment.bytes: must be an integer, not 1.5$"),
    ({"flush.enable": "yes"}, r"^flush.enable must be true or false, not 'yes'$"),
    ({"ratio": "2"}, r"^ratio: must be a number in \[0.0, 1.0\], not 2.0$"),
    ({"ratio": "inf"}, r"^ratio must be a number, not 'inf'$"),
    ({"policy": "compact,forever"}, r"^policy: must be a list of delete, compact, not 'compact,forever'$"),
    ({"mode": "slow"}, r"^mode: must be one of fast, Safe, not 'slow'$"),
])
def test_a_bad_value_is_one_line_naming_the_key_the_value_and_the_rule(props, message):
    with pytest.raises(SettingError, match=message):
        TABLE.parse(props)


def test_an_unknown_key_names_the_nearest_known_one_or_the_table():
    with pytest.raises(SettingError, match=r"^unknown test setting 'segment.byte'; did you mean 'segment.bytes'\?$"):
        TABLE.parse({"segment.byte": "1"})
    with pytest.raises(SettingError, match=r"^unknown test setting 'zzz'; see the test settings$"):
        TABLE.parse({"zzz": "1"})


def test_declarations_are_checked_when_the_table_is_built():
    with pytest.raises(TypeError, match="segment.bytes"):
        Definitions("bad", (Setting("segment.bytes", INT, 0, "doc", low=1),))
    with pytest.raises(ValueError, match="declared twice"):
        Definitions("bad", (Setting("a", INT, 1, "doc"), Setting("a", INT, 2, "doc")))


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda t: t.title)
def test_every_declared_default_passes_its_own_rule_and_round_trips_as_a_string(table):
    for setting in table.values():
        assert setting.doc and setting.importance in ("high", "medium", "low")
        if setting.default is not None:
            assert setting.parse(setting.format(setting.default)) == setting.default, setting.name


@given(st.sampled_from([(t, name) for t in ALL_TABLES for name in t]), st.text(max_size=12))
def test_any_string_for_any_setting_parses_or_raises_the_tables_error_naming_it(table_and_name, text):
    table, name = table_and_name
    setting = table[name]
    try:
        value = setting.parse(text, table.error, table.label)
    except table.error as exc:
        assert name in str(exc) and "\n" not in str(exc)
    else:
        assert setting.problem(value) is None


# -- every parser uses its table -----------------------------------------------------------------------------


def test_topic_configs_name_the_nearest_key():
    with pytest.raises(InvalidConfigError, match="unknown log setting 'retention.mss'; did you mean 'retention.ms'"):
        LogConfig.from_dict({"retention.mss": "1"})


def test_broker_warns_about_an_unknown_key_naming_the_nearest_and_checks_every_known_one(caplog):
    base = {"broker.id": "1", "log.dirs": "/d", "zookeeper.connect": "z:1"}
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig.from_properties({**base, "num.partition": "3"})
    assert config.num_partitions == 1
    assert "unknown broker setting 'num.partition'; did you mean 'num.partitions'?" in caplog.text
    with pytest.raises(ConfigError, match=r"^log.retention.ms: must be an integer \(long\) in \[-1, "):
        BrokerConfig.from_properties({**base, "log.retention.ms": "-5"})  # a topic default, checked at start
    with pytest.raises(ConfigError, match="leader.imbalance.per.broker.percentage: must be an integer"):
        BrokerConfig.from_properties({**base, "leader.imbalance.per.broker.percentage": "101"})
    assert BROKER["log.retention.ms"].default == TOPIC["retention.ms"].default  # one default for both names


def test_client_settings_name_the_nearest_key_and_the_rule():
    with pytest.raises(ValueError, match="unknown client setting 'linger_mss'; did you mean 'linger.ms'"):
        resolve(PRODUCER_DEFAULTS, {"linger_mss": 5})
    with pytest.raises(ValueError, match=r"^linger.ms: must be an integer \(long\) of at least 0, not -1$"):
        resolve(PRODUCER_DEFAULTS, {"linger.ms": -1})
    assert resolve(PRODUCER_DEFAULTS, {"bootstrap.servers": ["a:1", ("b", 2)]})["bootstrap.servers"] == "a:1,b:2"


def test_spark_options_are_typed_and_a_near_miss_is_warned_about(caplog):
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    with caplog.at_level(logging.WARNING):
        options = parse_read_options({**base, "maxtriggerdelay": "30s", "startingOffset": "earliest"}, True)
    assert options.max_trigger_delay_ms == 30_000
    assert "unknown Spark source option 'startingoffset'; did you mean 'startingOffsets'?" in caplog.text
    with pytest.raises(SparklogOptionError, match=r"^Option 'minPartitions': must be an integer \(int\) of at least"):
        parse_read_options({**base, "minPartitions": "0"}, True)
    assert READ_OPTIONS.unknown != RAISE  # Spark itself ignores options it does not know
