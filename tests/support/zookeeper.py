"""Helpers for tests against a real ZooKeeper: waiting for a condition, expiring a session, reading the
session timeout the server negotiated with a client (its `cons` four-letter word: what the server expires by,
whatever the client asked for)."""

from __future__ import annotations

import re
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


_CONNECTION = re.compile(r"sid=0x([0-9a-f]+),.*?\bto=(\d+)")


def negotiated_session_ms(server, session_id: int) -> int:
    """The timeout in ms that the ZooKeeper `server` (an EmbeddedZooKeeper) negotiated for session `session_id`."""
    from sparklog.coordination.zookeeper_server import four_letter_word

    for line in four_letter_word(server.host, server.port, "cons").splitlines():
        match = _CONNECTION.search(line)
        if match and int(match.group(1), 16) == session_id:
            return int(match.group(2))
    raise AssertionError(f"ZooKeeper lists no connection of session {session_id:#x}")


def broker_session_ms(server, zk: KazooClient, broker_id: int) -> int:
    """The negotiated timeout of the session that holds broker `broker_id`'s registration (the ephemeral
    /brokers/ids/<id> under `zk`'s chroot): the one whose expiry fails the broker over."""
    stat = zk.exists(f"/brokers/ids/{broker_id}")
    assert stat is not None, f"broker {broker_id} is not registered"
    return negotiated_session_ms(server, stat.ephemeralOwner)


def failover_session_s(server, zk: KazooClient, broker_id: int, configured_ms: int) -> float:
    """The session a failover of `broker_id` waits out, in seconds, once checked to be `configured_ms` (a
    broker ignoring zookeeper.session.timeout.ms would hold Kafka's 18 s, within many a failover's slack)."""
    negotiated = broker_session_ms(server, zk, broker_id)
    assert negotiated == configured_ms, f"broker {broker_id}'s ZooKeeper session is {negotiated} ms, not {configured_ms}"
    return negotiated / 1000
