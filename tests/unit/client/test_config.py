"""Settings: dotted or underscored Kafka names, string conversion, validation."""

from __future__ import annotations

import pytest

from sparklog.client.config import CONSUMER_DEFAULTS, GROUP_DEFAULTS, PRODUCER_DEFAULTS, parse_servers, resolve


def test_dotted_and_underscored_names_mean_the_same_setting():
    a = resolve(PRODUCER_DEFAULTS, {"batch.size": 10})
    b = resolve(PRODUCER_DEFAULTS, {"batch_size": 10})
    assert a["batch.size"] == b["batch.size"] == 10


def test_later_sources_win_and_strings_are_converted_to_the_defaults_type():
    s = resolve(PRODUCER_DEFAULTS, {"linger.ms": 5}, {"linger.ms": "7", "compression.type": "gzip"})
    assert s["linger.ms"] == 7 and s["compression.type"] == "gzip"
    assert resolve(CONSUMER_DEFAULTS, {"check.crcs": "false"})["check.crcs"] is False


@pytest.mark.parametrize("given,expected", [("all", -1), (-1, -1), ("0", 0), (1, 1), ("1", 1)])
def test_acks_are_normalised(given, expected):
    assert resolve(PRODUCER_DEFAULTS, {"acks": given})["acks"] == expected


@pytest.mark.parametrize("given,expected", [("smallest", "earliest"), ("largest", "latest"),
                                            ("earliest", "earliest"), ("LATEST", "latest"), ("none", "none")])
def test_auto_offset_reset_accepts_the_papers_and_kafkas_names(given, expected):
    assert resolve(CONSUMER_DEFAULTS, {"auto.offset.reset": given})["auto.offset.reset"] == expected


def test_group_default_is_the_papers_smallest():
    assert resolve(GROUP_DEFAULTS)["auto.offset.reset"] == "earliest"


@pytest.mark.parametrize("bad", [{"batch.sise": 1}, {"acks": 2}, {"auto.offset.reset": "middle"},
                                 {"linger.ms": "soon"}, {"check.crcs": "maybe"}])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        resolve({**PRODUCER_DEFAULTS, "auto.offset.reset": "latest", "check.crcs": True}, bad)


def test_parse_servers():
    assert parse_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_servers(["[::1]:9092"]) == [("::1", 9092)]
    assert parse_servers(None) == []
    with pytest.raises(ValueError):
        parse_servers("nohost")
