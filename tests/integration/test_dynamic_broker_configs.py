"""Dynamic broker configs on real brokers in their own processes, altered with `sparklog configs` and
confluent-kafka's admin client, observed with a real producer: a broker default changed at runtime is applied
by every broker without a restart (the same process ids), one broker's own value wins over the default there
alone, a topic's own override still wins over both, and a key Kafka keeps static is refused in Kafka's words."""

from __future__ import annotations

import uuid

import pytest

BIG, SMALL = b"b" * 5000, b"s" * 500
LIMIT = "2000"  # message.max.bytes: the big record's batch is above it, the small one's below
APPLY_S = 30.0  # generous: the change travels through a ZooKeeper notification and a partition sync

SESSION_TIMEOUT_MS = 18000  # Kafka's default


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import started_cluster

    return started_cluster(request, f"{zookeeper.connect_string}/dyncfg-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("dyncfg"), 2, SESSION_TIMEOUT_MS)


def configs(capsys, *argv) -> tuple[int, str, str]:
    from sparklog.cli import main

    code = main(["configs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def create_topic(cluster, config: dict | None = None) -> str:
    """Partition 0 on broker 1, partition 1 on broker 2."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from integration.conftest import wait_for_leaders

    name = f"dyn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 2, replica_assignment=[[1], [2]], config=config or {})])[name].result(30)
    wait_for_leaders(cluster.bootstrap, name, 2)
    return name


def produce_error(cluster, topic: str, partition: int, value: bytes):
    """The error name of producing one record (None: acknowledged)."""
    from confluent_kafka import Producer

    outcome = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retries": 0,
                         "message.timeout.ms": 20000})
    producer.produce(topic, value, partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1, "no delivery report"
    return outcome[0].name() if outcome[0] is not None else None


def accepted(cluster, topic: str) -> tuple:
    """(broker 1's partition takes the big record, broker 2's does) ."""
    return tuple(produce_error(cluster, topic, p, BIG) is None for p in (0, 1))


def wait_for(cluster, topic: str, wanted: tuple) -> None:
    from support.cluster import wait_until

    wait_until(lambda: accepted(cluster, topic) == wanted, f"big records accepted as {wanted}", APPLY_S)


def test_a_broker_default_changed_at_runtime_applies_without_restart_and_one_brokers_own_wins(cluster, capsys):
    pids = {i: b.pid for i, b in cluster.brokers.items()}
    topic = create_topic(cluster)
    own = create_topic(cluster, {"max.message.bytes": "100000"})
    assert accepted(cluster, topic) == (True, True)
    server = ["--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers"]
    code, out, err = configs(capsys, *server, "--entity-default", "--alter", "--add-config",
                             f"message.max.bytes={LIMIT}")
    assert (code, out) == (0, "Completed updating config for the default broker.\n"), err
    wait_for(cluster, topic, (False, False))
    assert produce_error(cluster, topic, 1, BIG) == "MSG_SIZE_TOO_LARGE"
    assert produce_error(cluster, topic, 0, SMALL) is None and accepted(cluster, own) == (True, True)
    assert configs(capsys, *server, "--entity-name", "1", "--alter", "--add-config", "message.max.bytes=100000")[0] == 0
    wait_for(cluster, topic, (True, False))
    code, out, _ = configs(capsys, *server, "--entity-name", "1", "--describe")
    assert out == "Dynamic configs for broker 1 are:\n  message.max.bytes=100000\n"
    code, out, _ = configs(capsys, *server, "--entity-default", "--describe")
    assert out == f"Default configs for brokers in the cluster are:\n  message.max.bytes={LIMIT}\n"
    assert configs(capsys, *server, "--entity-default", "--alter", "--delete-config", "message.max.bytes")[0] == 0
    assert configs(capsys, *server, "--entity-name", "1", "--alter", "--delete-config", "message.max.bytes")[0] == 0
    wait_for(cluster, topic, (True, True))
    assert {i: b.pid for i, b in cluster.brokers.items()} == pids and all(b.running for b in cluster.brokers.values())


def test_confluent_admin_sees_each_source_and_a_static_key_is_refused_in_kafkas_words(cluster, capsys):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       ResourceType)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    server = ["--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers"]
    two = ConfigResource(ResourceType.BROKER, "2")

    def retention():
        entry = admin.describe_configs([two])[two].result(30)["log.retention.ms"]
        return entry.value, entry.source, entry.is_read_only

    assert configs(capsys, *server, "--entity-default", "--alter", "--add-config", "log.retention.ms=60000")[0] == 0
    try:
        assert retention() == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
        mine = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("log.retention.ms", "70000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([mine])[mine].result(30)
        assert retention() == ("70000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
        assert admin.describe_configs([two])[two].result(30)["num.partitions"].is_read_only
        static = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException, match="Cannot update these configs dynamically: num.partitions"):
            admin.incremental_alter_configs([static])[static].result(30)
        code, _, err = configs(capsys, *server, "--entity-name", "2", "--alter", "--add-config",
                               "log.dirs=/tmp/elsewhere")
        assert code == 1 and err.count("\n") == 1 and "Cannot update these configs dynamically: log.dirs" in err
    finally:
        configs(capsys, *server, "--entity-default", "--alter", "--delete-config", "log.retention.ms")
        configs(capsys, *server, "--entity-name", "2", "--alter", "--delete-config", "log.retention.ms")
