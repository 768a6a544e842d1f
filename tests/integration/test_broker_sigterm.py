"""SIGTERM while ZooKeeper is down (issue 26): the broker logs the signal at once and is gone within
controlled.shutdown.timeout.ms plus one ZooKeeper session and its own closing, not when ZooKeeper comes back. Down as a stopped
(SIGSTOPped) server is: the connection stays open and answers nothing, so the broker still thinks it connected."""

from __future__ import annotations

import os
import signal
import time

SHUTDOWN_TIMEOUT_MS = 3000
SESSION_TIMEOUT_MS = 18000  # Kafka's default: stopping a ZooKeeper client may wait this long for its thread
CLOSING_S = 10.0  # generous: closing the logs and the server on a loaded machine
NOTICE_S = 5.0  # "at once", on a loaded machine


def test_sigterm_with_zookeeper_down_is_logged_at_once_and_honours_the_shutdown_timeout(tmp_path):
    from sparklog.broker.launcher import LocalCluster
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    overrides = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                 "controlled.shutdown.timeout.ms": str(SHUTDOWN_TIMEOUT_MS)}
    with LocalCluster(tmp_path, brokers=2, overrides=overrides) as c:
        zk = connect(c.zookeeper)
        topics.create_topic(zk, "alone", 2, 2)
        close(zk)
        os.kill(c.zk_server.pid, signal.SIGSTOP)
        try:
            took, noticed = sigterm(c.brokers[1])
        finally:
            os.kill(c.zk_server.pid, signal.SIGCONT)
        broker = c.brokers[1]
        assert broker.proc.returncode == 0, broker.tail(3000)
        assert noticed is not None and noticed < NOTICE_S, (noticed, broker.tail(3000))
        # closing waits at most one session more: a ZooKeeper call in flight when the client is stopped fails
        # once kazoo's connection thread gives up on the unanswering server (the controller's event thread)
        assert took < (SHUTDOWN_TIMEOUT_MS + SESSION_TIMEOUT_MS) / 1000 + CLOSING_S, (took, broker.tail(3000))


def sigterm(broker) -> tuple[float, float | None]:
    """SIGTERM `broker`; (seconds until it exited, or 120; seconds until it logged the signal, or None)."""
    before = len(broker.tail(1_000_000))
    started = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    noticed = None
    while broker.proc.poll() is None and time.monotonic() - started < 120:
        if noticed is None and "received SIGTERM" in broker.tail(1_000_000)[before:]:
            noticed = time.monotonic() - started
        time.sleep(0.05)
    return time.monotonic() - started, noticed
