"""The broker's resource-limit keys (issue 14): Kafka's names, defaults that bound memory, clear errors."""

from __future__ import annotations

import re

import pytest

from sparklog.broker.config import BrokerConfig, ConfigError

BASE = {"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "localhost:2181"}


def config(**overrides) -> BrokerConfig:
    return BrokerConfig.from_properties({**BASE, **{k.replace("_", "."): v for k, v in overrides.items()}})


def test_queued_request_bytes_default_to_one_largest_request():
    assert config().queued_max_request_bytes == config().socket_request_max_bytes == 104857600
    assert config(socket_request_max_bytes="1048576").queued_max_request_bytes == 1048576


def test_queued_request_bytes_take_kafkas_unlimited_or_at_least_one_request():
    assert config(queued_max_request_bytes="-1").queued_max_request_bytes == -1
    with pytest.raises(ConfigError, match="queued.max.request.bytes=1000 must be -1 or at least "
                                          "socket.request.max.bytes=104857600"):
        config(queued_max_request_bytes="1000")


def test_connection_and_partition_limits():
    c = config(max_connections_per_ip="10", max_broker_partitions="100", max_partitions_per_topic="50",
               max_partitions_per_request="60")
    assert (c.max_connections_per_ip, c.max_broker_partitions, c.max_partitions_per_topic,
            c.max_partitions_per_request) == (10, 100, 50, 60)
    with pytest.raises(ConfigError, match=r"max.partitions.per.topic: must be an integer \(int\) of at least 1, not 0"):
        config(max_partitions_per_topic="0")


def test_group_coordinator_settings():
    from sparklog.broker.coordinator.group.config import GroupConfig

    base = {"broker.id": "1", "log.dirs": "/d", "zookeeper.connect": "z:1"}
    assert GroupConfig.from_properties(base) == GroupConfig(3000, 6000, 1800000, 2147483647, 50)
    low = GroupConfig.from_properties({**base, "group.initial.rebalance.delay.ms": "0",
                                       "group.min.session.timeout.ms": "500"})
    assert (low.initial_rebalance_delay_ms, low.min_session_timeout_ms) == (0, 500)
    with pytest.raises(ConfigError, match="group.initial.rebalance.delay.ms must be an integer, not 'soon'"):
        BrokerConfig.from_properties({**base, "group.initial.rebalance.delay.ms": "soon"})
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms=9000 is above group.max.session"):
        BrokerConfig.from_properties({**base, "group.min.session.timeout.ms": "9000",
                                      "group.max.session.timeout.ms": "8000"})


@pytest.mark.parametrize("key, value, message", [
    ("listeners", "PLAINTEXT://:99999", "listener 'PLAINTEXT://:99999': port 99999 is not in [0, 65535]"),
    ("zookeeper.connect", "127.0.0.1:notaport", "'127.0.0.1:notaport' is not host:port"),
    ("zookeeper.connect", "/chroot", "ZooKeeper connect string '/chroot': no host"),
    ("zookeeper.connection.timeout.ms", "0", "zookeeper.connection.timeout.ms: must be an integer (int) of at least 1"),
])
def test_an_address_that_cannot_work_is_refused_at_start_naming_it(key, value, message):
    """Refused by the configuration (exit status 2, before anything starts), not by a bind or a connect
    after the broker has opened its logs."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        config(**{key.replace(".", "_"): value})
    assert config(zookeeper_connection_timeout_ms="1500").zookeeper_connection_timeout_ms == 1500


def test_a_properties_file_that_is_not_text_is_refused_naming_it(tmp_path):
    from sparklog.broker.config import load_properties

    path = tmp_path / "server.properties"
    path.write_bytes(b"\xff\xfe broker.id=1\n")
    with pytest.raises(ConfigError, match=f"{re.escape(str(path))}: not UTF-8 text"):
        load_properties(path)


def test_the_brokers_min_insync_replicas_is_the_default_every_log_holds_typed():
    """min.insync.replicas has one default (storage/config.py) and is read typed from each log's config: the
    broker's setting reaches the logs' defaults, a topic's override wins over it."""
    from sparklog.storage.config import LogConfig

    base = {"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "zk:2181"}
    assert LogConfig.from_dict(BrokerConfig.from_properties(base).log_defaults).min_insync_replicas == 1
    config = BrokerConfig.from_properties({**base, "min.insync.replicas": "2"})
    defaults = LogConfig.from_dict(config.log_defaults)
    assert defaults.min_insync_replicas == 2
    assert defaults.with_overrides({"min.insync.replicas": "3"}).min_insync_replicas == 3
    assert not hasattr(config, "min_insync_replicas")  # no second, broker-level copy to drift from the logs'
