"""Brokers as real subprocesses for integration tests: the product's launcher, plus the repo's path.

Rule 1: every process started here is stopped by `stop()`/`kill()`, by the context manager, or, as a last
resort, at interpreter exit; tests use the `Cluster` context manager inside a fixture with a finalizer.
"""

import time
from pathlib import Path

from sparklog.broker import launcher
from sparklog.broker.launcher import (  # noqa: F401 - re-exported for the tests
    API_MATRIX,
    READY,
    BrokerProcess,
    BrokerStartError,
)

REPO = Path(__file__).resolve().parents[2]
# A test cluster's __consumer_offsets has this many partitions (Kafka's default, 50, opens 50 logs and watches
# per broker on its first FindCoordinator: seconds of a 2-core machine); a test may override it.
TEST_OFFSETS_TOPIC_PARTITIONS = 4


# Retention runs only where a test asks for it (its own log.retention.check.interval.ms): many tests write
# records with fixed CreateTimes of 2023, which Kafka's default 7-day retention deletes at its next check, the
# active segment too, and a module's cluster may well live past the default 5-minute interval on a busy machine.
TEST_RETENTION_CHECK_INTERVAL_MS = 24 * 3600 * 1000


def _test_overrides(overrides: dict | None) -> dict:
    return {"offsets.topic.num.partitions": str(TEST_OFFSETS_TOPIC_PARTITIONS),
            "log.retention.check.interval.ms": str(TEST_RETENTION_CHECK_INTERVAL_MS), **(overrides or {})}


class Cluster(launcher.Cluster):
    """The launcher's Cluster with the test settings above."""

    def __init__(self, zk_connect: str, base_dir: Path, brokers: int = 1, overrides: dict | None = None,
                 first_id: int = 1) -> None:
        super().__init__(zk_connect, base_dir, brokers, _test_overrides(overrides), first_id)


class LocalCluster(launcher.LocalCluster):
    """The launcher's LocalCluster with the test settings above."""

    def __init__(self, base_dir: Path, brokers: int = 3, overrides: dict | None = None,
                 zookeeper_port: int = 0) -> None:
        super().__init__(base_dir, brokers, _test_overrides(overrides), zookeeper_port)


def started_cluster(request, zk_connect: str, base_dir: Path, brokers: int, session_timeout_ms: int,
                    **overrides) -> Cluster:
    """A started Cluster stopped by the test's finalizer, with a short ZooKeeper session (fast failover)."""
    cluster = Cluster(zk_connect, base_dir, brokers=brokers,
                      overrides={"zookeeper.session.timeout.ms": str(session_timeout_ms), **overrides})
    request.addfinalizer(cluster.stop)
    cluster.start()
    wait_until_every_broker_knows_all(cluster)
    return cluster


# How long a started cluster's brokers may take to see each other: each learns of the others through its
# ZooKeeper watch on /brokers/ids, after its own "ready" line.
BROKERS_KNOWN_TIMEOUT_S = 60


def wait_until_every_broker_knows_all(cluster) -> None:
    """Wait until each running broker's Metadata lists every running broker. A broker prints "ready" once it
    has registered itself, but learns of the others by its ZooKeeper watch later: a CreateTopics of
    replication factor N sent before then is refused with INVALID_REPLICATION_FACTOR, as Kafka's would be."""
    from confluent_kafka.admin import AdminClient

    running = {b.broker_id: b.address for b in cluster.brokers.values() if b.running}
    for address in running.values():
        admin = AdminClient({"bootstrap.servers": address})
        wait_until(lambda: set(admin.list_topics(timeout=10).brokers) >= set(running),
                   f"broker {address} to know brokers {sorted(running)}", BROKERS_KNOWN_TIMEOUT_S)


def replicated_cluster(request, zookeeper, tmp_path_factory, name: str, session_timeout_ms: int,
                       lag_time_max_ms: int) -> Cluster:
    """Three brokers for one test module (its own ZooKeeper chroot), stopped by the module's finalizer; short
    session and replica.lag.time.max.ms, so that failover and ISR changes happen within a test."""
    import uuid

    return started_cluster(request, f"{zookeeper.connect_string}/{name}-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp(name), 3, session_timeout_ms,
                           **{"replica.lag.time.max.ms": str(lag_time_max_ms), "log.flush.interval.ms": "20",
                              "auto.create.topics.enable": "false"})


def cluster_zookeeper(request, cluster: Cluster):
    """A ZooKeeper client on the cluster's chroot, closed by the finalizer of `request`'s scope."""
    from sparklog.coordination.connection import close, connect

    client = connect(cluster.zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


WAIT_POLL_S = 0.1


def wait_until(predicate, what: str, timeout: float):
    """`predicate()`'s first truthy value, polled until `timeout`; AssertionError naming `what` after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(WAIT_POLL_S)
    raise AssertionError(f"timed out waiting for {what}")
