"""Helpers for tests against a real ZooKeeper: waiting for a condition, expiring a session."""

from __future__ import annotations

import time

from kazoo.client import KazooClient

DEFAULT_WAIT_S = 10.0


def wait_for(predicate, timeout: float = DEFAULT_WAIT_S, interval: float = 0.05) -> None:
    """Poll `predicate` until true; fail the test if it is not by `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(interval)


def expire_session(client: KazooClient, zookeeper) -> None:
    """Kazoo harness's trick: a second client joins the same session, then closes it on the server."""
    session_id, password = client.client_id
    thief = KazooClient(hosts=zookeeper.connect_string, client_id=(session_id, password))
    thief.start(timeout=10)
    thief.stop()
    thief.close()
