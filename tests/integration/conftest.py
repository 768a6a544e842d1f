"""Fixtures for the Spark integration tests: one SparkSession per test session, brokers per module.

- `spark`: local[2] session, stopped at the end of the session.
- `sparklog_cluster`: two broker subprocesses on one ZooKeeper chroot (module scope; stopped after).
- `make_topic(name, partitions)`: creates a topic in that cluster's ZooKeeper and waits for its leaders.
- `three` / `three_zk`: three brokers per module (the module's SESSION_TIMEOUT_MS and LAG_MS), and a
  ZooKeeper client on their chroot; a test that kills a broker restarts it before it ends.
"""

from __future__ import annotations

import time
import uuid

import pytest


@pytest.fixture(scope="session")
def spark():
    from support.spark import new_session

    session = new_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def sparklog_cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    zk_connect = f"{zookeeper.connect_string}/ds-{uuid.uuid4().hex}"
    # Retention is checked every 500 ms for the tests of it, which set their topics' retention.ms; the others
    # keep what they write, whatever its CreateTime (the jobs' tests replay events of 2023, which Kafka's
    # default 7-day retention would delete, the active segment too, at its next check).
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("brokers"), brokers=2,
                      overrides={"log.retention.check.interval.ms": 500, "log.retention.ms": -1})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def cluster_zk(request, sparklog_cluster):
    from sparklog.coordination.connection import close, connect

    client = connect(sparklog_cluster.zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


@pytest.fixture
def make_topic(cluster_zk, sparklog_cluster):
    from sparklog.coordination.topics import create_topic

    def make(name: str | None = None, partitions: int = 4, config: dict | None = None) -> str:
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        create_topic(cluster_zk, name, partitions, 1, config)
        wait_for_leaders(sparklog_cluster.bootstrap, name, partitions)
        return name

    return make


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Until every partition of `topic` has a leader in the brokers' metadata."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            t = admin.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:  # no answer within the call's timeout (a loaded machine): ask again
            t = None
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 0 and p.error is None for p in t.partitions.values()
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leaders after {timeout}s")


@pytest.fixture(scope="module")
def three(request, zookeeper, tmp_path_factory):
    from support.cluster import replicated_cluster

    module = request.module
    return replicated_cluster(request, zookeeper, tmp_path_factory, module.__name__.rsplit(".", 1)[-1],
                              module.SESSION_TIMEOUT_MS, module.LAG_MS)


@pytest.fixture(scope="module")
def three_zk(request, three):
    from support.cluster import cluster_zookeeper

    return cluster_zookeeper(request, three)


@pytest.fixture
def client_opens(monkeypatch):
    """Call it to start counting: returns (connects, consumers), every address sparklog's client connects to and
    every Consumer it makes from then on, in order, until the test ends."""
    from sparklog.client import connection as connection_module
    from sparklog.client import consumer as consumer_module

    def start() -> tuple[list, list]:
        connects, consumers = [], []
        real_connect, real_init = connection_module.socket.create_connection, consumer_module.Consumer.__init__

        def counted_connect(address, *args, **kwargs):
            connects.append(address)
            return real_connect(address, *args, **kwargs)

        def counted_init(self, *args, **kwargs):
            consumers.append(self)
            real_init(self, *args, **kwargs)

        monkeypatch.setattr(connection_module.socket, "create_connection", counted_connect)
        monkeypatch.setattr(consumer_module.Consumer, "__init__", counted_init)
        return connects, consumers

    return start
