"""Brokers as real subprocesses for integration tests: the product's launcher, plus the repo's path.

Rule 1: every process started here is stopped by `stop()`/`kill()`, by the context manager, or, as a last
resort, at interpreter exit; tests use the `Cluster` context manager inside a fixture with a finalizer.
"""

import time
from pathlib import Path

from sparklog.broker.launcher import (  # noqa: F401 - re-exported for the tests
    API_MATRIX,
    READY,
    BrokerProcess,
    BrokerStartError,
    Cluster,
    LocalCluster,
)

REPO = Path(__file__).resolve().parents[2]


def started_cluster(request, zk_connect: str, base_dir: Path, brokers: int, session_timeout_ms: int,
                    **overrides) -> Cluster:
    """A started Cluster stopped by the test's finalizer, with a short ZooKeeper session (fast failover)."""
    cluster = Cluster(zk_connect, base_dir, brokers=brokers,
                      overrides={"zookeeper.session.timeout.ms": str(session_timeout_ms), **overrides})
    request.addfinalizer(cluster.stop)
    return cluster.start()


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
