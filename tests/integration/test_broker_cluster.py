"""Several brokers in one ZooKeeper: partitions spread round-robin, clients routed by Metadata, a broker
killed with -9 leaves the registry within the session timeout, and topics are managed by the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from support.cluster import REPO, Cluster
from support.zookeeper import broker_session_ms, failover_session_s

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4000
EXPIRY_SLACK_S = 20  # ZooKeeper expires a session a tick or so after its timeout; seconds later on a loaded machine
LAG_MS = 10_000  # replica.lag.time.max.ms (Kafka's 30 s): these topics have one replica, no ISR changes
TIMEOUT_S = 30

# `three` / `three_zk` (conftest): the module's three brokers, for the tests that leave them all running.


@pytest.fixture
def own_three(request, zk_connect, tmp_path):
    """Three brokers of its own, for the test that kills one and stops another."""
    c = Cluster(zk_connect, tmp_path, brokers=3,
                overrides={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "log.flush.interval.ms": "20"})
    request.addfinalizer(c.stop)
    return c.start()


def test_twelve_partitions_over_three_brokers_produce_and_consume(three, three_zk):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from sparklog.coordination import topics

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("spread", 12, 1)])["spread"].result(TIMEOUT_S)
    leaders = {p: s.leader for p, s in topics.get_topic(three_zk, "spread").states.items()}
    assert sorted(leaders) == list(range(12))
    assert {b: list(leaders.values()).count(b) for b in (1, 2, 3)} == {1: 4, 2: 4, 3: 4}

    # every broker answers Metadata with the same leaders, from ZooKeeper (each broker gets the whole timeout)
    for broker in three.brokers.values():
        single = AdminClient({"bootstrap.servers": broker.address})
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            md = single.list_topics("spread", timeout=10).topics["spread"]
            if len(md.partitions) == 12 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {p: m.leader for p, m in md.partitions.items()} == leaders, broker.address
    deadline = time.monotonic() + TIMEOUT_S

    producer = Producer({"bootstrap.servers": three.bootstrap, "linger.ms": 5})
    sent = [(str(i).encode(), b"value-%d" % i) for i in range(1200)]
    for i, (key, value) in enumerate(sent):
        producer.produce("spread", key=key, value=value, partition=i % 12)
    assert producer.flush(TIMEOUT_S) == 0

    consumer = Consumer({"bootstrap.servers": three.bootstrap, "group.id": "spread-reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("spread", p, 0) for p in range(12)])
        got = []
        while len(got) < len(sent) and time.monotonic() < deadline + TIMEOUT_S:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.key(), m.value()))
    finally:
        consumer.close()
    assert sorted((k, v) for _, k, v in got) == sorted(sent)
    assert {p for p, _, _ in got} == set(range(12))


def test_a_brokers_zookeeper_session_is_the_configured_one(request, zookeeper, zk_connect, zk, tmp_path):
    """The session ZooKeeper negotiated for a broker's registration is zookeeper.session.timeout.ms: 2500 ms
    where it says so, Kafka's 18000 by default. The failover tests bound their waits by it (plus a slack that
    covers a loaded machine's scheduling, larger than some sessions: a broker ignoring the setting would
    pass them without this)."""
    from sparklog.broker.config import DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS

    short = Cluster(zk_connect, tmp_path / "short", brokers=1, overrides={"zookeeper.session.timeout.ms": "2500"})
    request.addfinalizer(short.stop)
    default = Cluster(zk_connect, tmp_path / "default", brokers=1, first_id=2)
    request.addfinalizer(default.stop)
    short.start(), default.start()
    assert broker_session_ms(zookeeper, zk, 1) == 2500
    assert broker_session_ms(zookeeper, zk, 2) == DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS == 18000


def test_kill_9_removes_the_broker_within_the_session_timeout(own_three, zookeeper, zk):
    from sparklog.coordination.brokers import live_brokers

    three = own_three

    assert sorted(live_brokers(zk)) == [1, 2, 3]
    session_s = failover_session_s(zookeeper, zk, 2, SESSION_TIMEOUT_MS)
    three.brokers[2].kill()
    killed_at = time.monotonic()
    while 2 in live_brokers(zk):
        assert time.monotonic() - killed_at < session_s + EXPIRY_SLACK_S, "node outlived the session"
        time.sleep(0.1)
    assert sorted(live_brokers(zk)) == [1, 3]

    # a restarted broker with the same id registers again (waiting out the old session if needed)
    three.brokers[2].start()
    assert sorted(live_brokers(zk)) == [1, 2, 3]

    # SIGTERM: a clean shutdown deregisters at once and exits 0
    assert three.brokers[3].stop() == 0
    assert sorted(live_brokers(zk)) == [1, 2]
    assert "Traceback" not in three.brokers[3].tail(100_000)


def test_a_second_broker_with_the_same_id_fails_clearly(three, tmp_path):
    from sparklog.coordination.zookeeper_server import MIN_SESSION_TIMEOUT_MS
    from support.cluster import BrokerProcess, BrokerStartError

    # The twin waits out its own session timeout (plus a grace) for the node to go before it gives up: the
    # shortest session the test ZooKeeper allows makes that wait short.
    twin = BrokerProcess(1, three.zk_connect, tmp_path / "twin" / "logs",
                         overrides={"zookeeper.session.timeout.ms": str(MIN_SESSION_TIMEOUT_MS)})
    try:
        with pytest.raises(BrokerStartError, match="broker id 1 is registered by another"):
            twin.start(timeout=TIMEOUT_S)
        assert twin.proc.returncode == 1
    finally:
        twin.kill()


def test_a_broker_on_a_live_brokers_log_dir_or_port_fails_in_one_line(three, tmp_path):
    """A second `broker start` on a running broker's log dir (another id and port: a supervisor restarting it
    while the old process still shuts down) opened, recovered and checkpointed the live broker's logs and
    then served them as a broker of its own; on its port it ended in a traceback (OSError: Address already
    in use). Each is now one `error:` line and exit 1, and the log dir's lock is taken before any log opens."""
    from support.cluster import BrokerProcess, BrokerStartError

    live = three.brokers[1]
    for twin, words in [(BrokerProcess(9, three.zk_connect, live.log_dir), ("log dir", str(live.log_dir), "in use")),
                        (BrokerProcess(8, three.zk_connect, tmp_path / "other" / "logs", port=live.port),
                         ("cannot listen on", str(live.port), "in use"))]:
        try:
            with pytest.raises(BrokerStartError) as failure:
                twin.start(timeout=TIMEOUT_S)
            assert twin.proc.returncode == 1
            out = str(failure.value)
            errors = [line for line in out.splitlines() if line.startswith("error: ")]
            assert "Traceback" not in out and len(errors) == 1 and all(w in errors[0] for w in words), out
        finally:
            twin.kill()
    assert live.running


@pytest.mark.parametrize("overrides, words", [
    ({"listeners": "SSL://:0"}, ["listener 'SSL://:0'", "SSL", "PLAINTEXT"]),
    ({"listeners": "SASL_SSL://127.0.0.1:0"}, ["listener 'SASL_SSL://127.0.0.1:0'", "SASL_SSL"]),
    ({"listeners": "CLIENT://:0", "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT"},
     ["sasl.enabled.mechanisms", "GSSAPI", "CLIENT"]),  # SASL_PLAINTEXT is served: Kafka's default GSSAPI is not
    ({"listeners": "INTERNAL://:0"}, ["listener 'INTERNAL://:0'", "listener.security.protocol.map"]),
    ({"advertised.listeners": "SSL://broker.example:9093"}, ["advertised listener 'SSL://broker.example:9093'",
                                                            "SSL"]),
])
def test_a_listener_that_is_not_served_is_refused_at_start_in_one_line(zk_connect, tmp_path, overrides, words):
    """A listener named SSL:// or SASL_SSL:// (or mapped to such a protocol) was served as plaintext. `broker
    start` refuses what it does not serve as named (SASL, an SSL listener without a key store): one `error:`
    line naming the listener, exit status 2, nothing started (no log dir made). (Several listeners are served
    since named listeners landed: test_broker_listeners.py.)"""
    command = [sys.executable, "-m", "sparklog.cli", "broker", "start", "--id", "7", "--log-dir",
               str(tmp_path / "logs"), "--zookeeper", zk_connect]
    for key, value in overrides.items():
        command += ["--override", f"{key}={value}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=str(REPO))  # started: killed
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines
    assert not (tmp_path / "logs").exists()


def sparklog(*args, zk_connect):
    result = subprocess.run([sys.executable, "-m", "sparklog.cli", "topics", "--zookeeper", zk_connect, *args],
                            capture_output=True, text=True, timeout=60, cwd=str(REPO),
                            env={**os.environ, "COLUMNS": "200"})  # a table row per line, however many columns
    return result.returncode, result.stdout + result.stderr


def test_topics_cli_create_list_describe_delete(three, three_zk):
    from sparklog.coordination import topics

    zk_connect = three.zk_connect
    code, out = sparklog("create", "cli-topic", "--partitions", "6", "--replication-factor", "1",
                         "--config", "retention.ms=60000", zk_connect=zk_connect)
    assert code == 0, out
    assert "Created topic cli-topic" in out
    code, out = sparklog("create", "cli-topic", "--partitions", "1", zk_connect=zk_connect)
    assert code == 1 and "already exists" in out
    code, out = sparklog("create", "bad/name", zk_connect=zk_connect)
    assert code == 1

    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": three.bootstrap})
    for i in range(12):
        producer.produce("cli-topic", value=b"x", partition=i % 6)
    assert producer.flush(TIMEOUT_S) == 0

    code, out = sparklog("list", zk_connect=zk_connect)
    assert code == 0 and "cli-topic" in out.split()
    code, out = sparklog("describe", "cli-topic", zk_connect=zk_connect)
    assert code == 0, out
    assert "retention.ms=60000" in out
    lines = out.splitlines()  # Kafka's plain columns, two spaces or more apart (issue 26: no table wrapping)
    header_at = next(i for i, line in enumerate(lines) if line.startswith("partition  "))
    log_end = re.split(r"\s{2,}", lines[header_at]).index("log end")
    rows = [re.split(r"\s{2,}", line) for line in lines[header_at + 1:] if line.strip()]
    assert len(rows) == 6
    assert all(cells[log_end] == "2" for cells in rows)  # 2 messages each

    # the leader of each partition deletes its local log once the topic is gone
    code, out = sparklog("delete", "cli-topic", zk_connect=zk_connect)
    assert code == 0, out
    assert "cli-topic" not in topics.list_topics(three_zk)
    deadline = time.monotonic() + TIMEOUT_S
    dirs = lambda: [d for b in three.brokers.values() for d in b.log_dir.glob("cli-topic-*")]  # noqa: E731
    while dirs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dirs() == []
