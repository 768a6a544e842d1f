"""Dynamic broker configs through the admin handlers (handlers/broker_configs.py) over a real ZooKeeper, and the
watch that tells a broker of their changes (coordination/broker_configs.py), without sockets."""

from __future__ import annotations

import threading

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.dynamic_config import DynamicBrokerConfig, in_force
from sparklog.broker.handlers import admin as admin_handlers
from sparklog.coordination import broker_configs
from sparklog.coordination.client_quotas import CONFIG_CHANGES
from sparklog.coordination.connection import decode
from sparklog.protocol import ApiKey
from sparklog.protocol.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from sparklog.protocol.describe_configs import (RESOURCE_BROKER, SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER,
                                               SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, SOURCE_TOPIC)
from sparklog.protocol.incremental_alter_configs import OP_DELETE, OP_SET
from tests.unit.broker.handlers.test_admin_handlers import logs, state  # noqa: F401 - fixtures
from tests.unit.broker.handlers.test_admin_handlers import ME, OTHER, call, describe, incremental

WAIT_S = 30.0


def alter_broker(state, *ops, name=str(ME), validate_only=False):
    return incremental(state, *ops, name=name, validate_only=validate_only, resource_type=RESOURCE_BROKER)


def sources(result, key):
    entry = {c.name: c for c in result.configs}[key]
    return entry.value, entry.config_source, [(s.value, s.source) for s in entry.synonyms]


def test_alter_the_default_then_one_broker_stores_kafkas_layout_and_describe_names_each_source(state, zk):
    assert alter_broker(state, ("log.retention.ms", OP_SET, "60000"), name="").error_code == 0
    assert broker_configs.read(zk, "<default>") == {"log.retention.ms": "60000"}
    changes = [decode(zk.get(f"{CONFIG_CHANGES}/{c}")[0]) for c in sorted(zk.get_children(CONFIG_CHANGES))]
    assert changes == [{"version": 2, "entity_path": "brokers/<default>"}]
    broker = describe(state, name=str(ME), resource_type=RESOURCE_BROKER)
    assert sources(broker, "log.retention.ms") == ("60000", SOURCE_DYNAMIC_DEFAULT_BROKER, [
        ("60000", SOURCE_DYNAMIC_DEFAULT_BROKER), ("3600000", SOURCE_STATIC_BROKER), ("604800000", SOURCE_DEFAULT)])
    assert alter_broker(state, ("log.retention.ms", OP_SET, "5000")).error_code == 0
    assert broker_configs.read(zk, str(ME)) == {"log.retention.ms": "5000"}
    broker = describe(state, name=str(ME), resource_type=RESOURCE_BROKER)
    assert sources(broker, "log.retention.ms")[:2] == ("5000", SOURCE_DYNAMIC_BROKER)
    topic = describe(state, name="t")  # its own retention.ms override still wins
    assert [s for _, s in sources(topic, "retention.ms")[2]] == [
        SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, SOURCE_DEFAULT]
    default = describe(state, name="", resource_type=RESOURCE_BROKER)
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [
        ("log.retention.ms", "60000", SOURCE_DYNAMIC_DEFAULT_BROKER)]


def test_describe_marks_the_keys_that_cannot_change_at_runtime_read_only(state):
    by_name = {c.name: c for c in describe(state, name=str(ME), resource_type=RESOURCE_BROKER).configs}
    assert by_name["num.partitions"].read_only and by_name["log.dirs"].read_only
    assert not by_name["log.retention.ms"].read_only and not by_name["message.max.bytes"].read_only


@pytest.mark.parametrize("ops, name, code, message", [
    ([("num.partitions", OP_SET, "3"), ("broker.id", OP_SET, "9")], str(ME), handlers.INVALID_REQUEST,
     "Cannot update these configs dynamically: broker.id, num.partitions"),
    ([("log.retention.mss", OP_SET, "3")], str(ME), handlers.INVALID_CONFIG,
     "unknown broker config 'log.retention.mss'; did you mean 'log.retention.ms'?"),
    ([("log.retention.ms", OP_SET, "soon")], "", handlers.INVALID_CONFIG, "log.retention.ms must be an integer"),
    ([("min.insync.replicas", OP_SET, "0")], "", handlers.INVALID_CONFIG, "min.insync.replicas"),
    ([("log.retention.ms", OP_SET, "1")], str(OTHER), handlers.INVALID_REQUEST, "Unexpected broker id"),
    ([("log.retention.ms", OP_SET, "1")], "x/../y", handlers.INVALID_REQUEST, "Unexpected broker id"),
])
def test_refused_alters_name_the_problem_and_write_nothing(state, zk, ops, name, code, message):
    result = alter_broker(state, ("log.segment.bytes", OP_SET, "1048576"), *ops, name=name)
    assert result.error_code == code and message in result.error_message, result.error_message
    assert broker_configs.read(zk, "<default>") == {} and broker_configs.read(zk, str(ME)) == {}
    assert zk.exists(CONFIG_CHANGES) is None or zk.get_children(CONFIG_CHANGES) == []


def test_validate_only_delete_and_the_legacy_alter_replacing_the_whole_set(state, zk):
    assert alter_broker(state, ("log.roll.ms", OP_SET, "1000"), validate_only=True).error_code == 0
    assert broker_configs.read(zk, str(ME)) == {}
    kerberos = alter_broker(state, ("sasl.kerberos.min.time.before.relogin", OP_SET, "58000"), validate_only=True)
    assert kerberos.error_code == 0  # dynamic in Kafka; librdkafka's 0081_admin sets it (no effect here)
    assert alter_broker(state, ("log.roll.ms", OP_SET, "1000"), ("message.max.bytes", OP_SET, "2000")).error_code == 0
    assert alter_broker(state, ("log.roll.ms", OP_DELETE, None)).error_code == 0
    assert broker_configs.read(zk, str(ME)) == {"message.max.bytes": "2000"}
    body = AlterConfigsRequest(resources=[AlterConfigsResource(resource_type=RESOURCE_BROKER, resource_name=str(ME),
                                                               configs=[AlterableConfig(name="log.roll.ms",
                                                                                        value="7000")])])
    (result,) = call(admin_handlers.handle_alter_configs, body, ApiKey.ALTER_CONFIGS, 1, state).responses
    assert result.error_code == 0
    assert broker_configs.read(zk, str(ME)) == {"log.roll.ms": "7000"}


def test_in_force_lays_the_dynamic_keys_over_server_properties_and_leaves_out_bad_stored_values():
    static = BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/unused", "zookeeper.connect": "x:1",
                                           "log.retention.ms": "3600000", "log.segment.bytes": "2000000"})
    config = in_force(static, {"log.retention.ms": "60000", "message.max.bytes": "2000", "log.segment.bytes": "-5",
                               "num.partitions": "7"})
    assert config.log_defaults["retention.ms"] == "60000" and config.log_defaults["segment.bytes"] == "2000000"
    assert config.log_defaults["max.message.bytes"] == "2000" and config.message_max_bytes == 2000
    assert config.num_partitions == 1 and config.raw == static.raw


def test_the_watch_tells_the_broker_of_its_own_and_the_default_entity_only(zk):
    static = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "x:1"})
    seen, changed = [], threading.Event()

    def on_defaults(defaults):
        seen.append(defaults.get("retention.ms"))
        changed.set()

    dynamic = DynamicBrokerConfig(static, on_defaults, lambda config: None)
    broker_configs.write(zk, "<default>", {"log.retention.ms": "60000"})
    watch = broker_configs.BrokerConfigWatch(zk, ME, dynamic.on_change)
    watch.start()
    assert seen == ["60000"]
    changed.clear()
    broker_configs.write(zk, str(OTHER), {"log.retention.ms": "1"})  # another broker's: not ours
    broker_configs.write(zk, str(ME), {"log.retention.ms": "5000"})
    assert changed.wait(WAIT_S)
    assert seen == ["60000", "5000"]
    changed.clear()
    broker_configs.write(zk, str(ME), {})
    assert changed.wait(WAIT_S) and seen == ["60000", "5000", "60000"]
    watch.close()
