"""Fixtures shared by the whole suite: one real ZooKeeper server per test session.

- `zookeeper`: the session's EmbeddedZooKeeper (started on first use, stopped at the end of the session).
- `zk_connect`: a connect string `127.0.0.1:<port>/t-<uuid>` with a fresh chroot, for brokers and clients in
  this or other processes; tests never see each other's znodes.
- `zk`: a connected KazooClient on that chroot, closed after the test.
"""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(scope="session")
def zookeeper(request):
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    server = EmbeddedZooKeeper()
    request.addfinalizer(server.stop)  # registered before start() so a failed start is cleaned up too
    server.start()
    return server


@pytest.fixture
def zk_connect(zookeeper) -> str:
    return f"{zookeeper.connect_string}/t-{uuid.uuid4().hex}"


@pytest.fixture
def zk(request, zk_connect):
    from sparklog.coordination.connection import close, connect

    client = connect(zk_connect)
    request.addfinalizer(lambda: close(client))
    return client
