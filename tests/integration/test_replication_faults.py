"""Replication under faults (issue 9, "Faults" and "What must be shown"), with three real brokers, a real
ZooKeeper and real clients: a zombie leader (SIGSTOP past its session, SIGCONT) never gets an acks=all
write acknowledged and no consumer sees what is later lost; a follower cut off from its leader (a TCP proxy
that cuts only its replica fetcher) leaves the ISR while writes go on and rejoins after healing; a replica
restarted with a corrupt tail truncates it and re-fetches; while ZooKeeper is away leaders keep serving
and an ISR change waits for it. Each history is judged by tests/support/history.py."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from support import wire
from support.cluster import Cluster, LocalCluster, wait_until
from support.fault_run import RunResult, consume, final_read, produce, wait_for_leaders
from support.history import History
from support.proxy import TcpProxy

pytestmark = pytest.mark.slow

SESSION_MS = 3000  # zookeeper.session.timeout.ms: short, so that a paused broker loses its session soon
LAG_MS = 1500  # replica.lag.time.max.ms: short, so that ISR changes happen within a test
TIMEOUT_S = 30
RATE = 50  # acks=all messages a second while a fault is on
TAIL_BYTES = 1000  # in the follower's log before it is killed: a tail of whole batches to tear (200 bytes)
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
             "log.flush.interval.ms": "50", "auto.create.topics.enable": "false"}


def _wait(predicate, what, timeout=TIMEOUT_S):
    return wait_until(predicate, what, timeout)


def _create(cluster, zk_connect, prefix, replicas=(1, 2, 3), config=None) -> str:
    """A new topic of one partition on `replicas`, the first one leading, min.insync.replicas=2 (and
    `config`), once led."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    zk = connect(zk_connect)
    try:
        topics.create_topic(zk, topic, 1, len(replicas), {"min.insync.replicas": "2", **(config or {})},
                            assignment={0: tuple(replicas)})
    finally:
        close(zk)
    wait_for_leaders(cluster.bootstrap, topic, 1)
    return topic


def _state(zk_connect, topic):
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    zk = connect(zk_connect)
    try:
        return topics.partition_state(zk, topic, 0)
    finally:
        close(zk)


class Load:
    """An acks=all producer and a live consumer recording into one History, as the fault run's."""

    def __init__(self, cluster, topic):
        self.cluster, self.topic = cluster, topic
        self.history, self.result, self.stop = History(), RunResult(), threading.Event()
        self.threads = [threading.Thread(target=produce, args=(cluster, topic, self.history, self.result, RATE,
                                                               self.stop)),
                        threading.Thread(target=consume, args=(cluster, topic, 1, self.history, "live", self.stop))]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def check(self):
        wait_for_leaders(self.cluster.bootstrap, self.topic, 1)
        final_read(self.cluster, self.topic, 1, self.history)
        report = self.history.check()
        assert report.ok and report.acknowledged > 0, report
        assert sum(self.result.produce_errors.values()) == 0, self.result.produce_errors
        return report


def _log_bytes(broker, topic) -> bytes:
    directory = Path(broker.log_dir) / f"{topic}-0"
    return b"".join((directory / n).read_bytes() for n in sorted(os.listdir(directory)) if n.endswith(".log"))


def _log_size(broker, topic) -> int:
    """The bytes of `broker`'s log of `topic`-0 (0 before the replica made its directory)."""
    return sum(f.stat().st_size for f in (Path(broker.log_dir) / f"{topic}-0").glob("*.log"))


def _identical_logs(cluster, topic):
    logs = [_log_bytes(b, topic) for b in cluster.brokers.values()]
    return logs if len(set(logs)) == 1 and logs[0] else None


def _raw_produce(address, topic, value):
    """One acks=all Produce straight to `address`, whatever the metadata says: its error code."""
    from sparklog.protocol import PartitionProduceData, ProduceRequest, TopicProduceData
    from sparklog.records.batch import build_batch

    host, port = address.split(":")
    body = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, value, None, None)]))])])
    response = wire.request(host, int(port), 0, 8, body, timeout=TIMEOUT_S)
    return response.responses[0].partition_responses[0].error_code


@pytest.fixture
def three(request, zk_connect, tmp_path):
    cluster = Cluster(zk_connect, tmp_path, brokers=3, overrides=OVERRIDES)
    request.addfinalizer(cluster.stop)
    return cluster.start()


def test_a_zombie_leader_never_acknowledges_acks_all_and_no_consumer_sees_what_it_loses(three, zk_connect):
    """The fault hits what it means to: the frozen broker leads the partition and has acknowledged writes when
    it stops, and its successor acknowledges an acks=all write while it is frozen; the zombie reader reads."""
    topic = _create(three, zk_connect, "zombie")
    zombie = three.brokers[1]
    with Load(three, topic) as load:
        _wait(lambda: load.history.acknowledged() > 0, "writes acknowledged by the leader-to-be-frozen")
        assert _state(zk_connect, topic).leader == 1, "the broker to freeze is not the partition's leader"
        os.kill(zombie.pid, signal.SIGSTOP)
        try:
            successor = _wait(lambda: (lambda leader: leader not in (1, -1) and leader)(_state(zk_connect, topic).leader),
                              "a new leader")
            # the new leader takes acks=all writes while the old one is frozen (asked directly: librdkafka may
            # wait on the frozen broker's open connections for its socket timeout before it finds the new one)
            _wait(lambda: _raw_produce(three.brokers[successor].address, topic, b"successor-write") == 0,
                  "an acks=all write acknowledged by the successor")
            answer = {}
            # sent while it is frozen: the kernel queues it, the zombie reads it first thing when resumed
            sender = threading.Thread(target=lambda: answer.update(
                code=_raw_produce(zombie.address, topic, b"zombie-write")))
            sender.start()
            time.sleep(0.5)
        finally:
            os.kill(zombie.pid, signal.SIGCONT)
        sender.join(TIMEOUT_S)
        consume_from_zombie = threading.Event()  # a consumer that asks the resumed zombie first
        reader = threading.Thread(target=consume, args=(SimpleNamespace(bootstrap=zombie.address), topic, 1,
                                                        load.history, "zombie-reader", consume_from_zombie))
        reader.start()
        time.sleep(3)
        consume_from_zombie.set()
        reader.join()
    assert answer.get("code", 0) != 0, "the zombie acknowledged an acks=all write"
    load.check()  # nothing acknowledged lost; what any reader saw, the final log holds at that offset
    assert b"zombie-write" not in load.history.values_read()
    assert load.history.read_by("zombie-reader") > 0, "the reader that asked the resumed zombie first read nothing"


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_writes_go_on_and_it_rejoins(request, zk_connect,
                                                                                       tmp_path):
    from sparklog.coordination.zookeeper_server import free_port

    leader_port = free_port()
    proxy = TcpProxy(("127.0.0.1", leader_port))
    request.addfinalizer(proxy.close)
    cluster = Cluster(zk_connect, tmp_path, brokers=3, overrides=OVERRIDES)
    request.addfinalizer(cluster.stop)
    # Broker 1 advertises the proxy: its clients and its followers reach it through it, and the proxy cuts
    # only broker 3's replica fetcher (client id "replica-3"): broker 3 is cut off from its only leader.
    cluster.brokers[1].port = leader_port
    cluster.brokers[1].overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    cluster.start()
    topic = _create(cluster, zk_connect, "cut")
    with Load(cluster, topic) as load:
        _wait(lambda: _state(zk_connect, topic).isr == (1, 2, 3), "a full ISR")
        proxy.cut(client_ids={"replica-3"})
        _wait(lambda: _state(zk_connect, topic).isr == (1, 2), "broker 3 out of the ISR")
        acked_while_cut = load.history.acknowledged()
        _wait(lambda: load.history.acknowledged() > acked_while_cut, "writes going on with the ISR of two")
        proxy.heal()
        _wait(lambda: _state(zk_connect, topic).isr == (1, 2, 3), "broker 3 back in the ISR")
    assert _state(zk_connect, topic).leader == 1
    load.check()
    _wait(lambda: _identical_logs(cluster, topic), "three identical logs")


def test_a_replica_back_with_a_corrupt_tail_truncates_it_and_refetches(three, zk_connect):
    topic = _create(three, zk_connect, "tail")
    follower = three.brokers[3]
    with Load(three, topic) as load:
        _wait(lambda: _log_size(follower, topic) >= TAIL_BYTES, f"{TAIL_BYTES} bytes in the follower's log")
        follower.kill()
        segment = sorted((Path(follower.log_dir) / f"{topic}-0").glob("*.log"))[-1]
        data = segment.read_bytes()
        torn = bytearray(data[-200:])  # a copy of the tail with a flipped byte: a batch whose CRC fails
        torn[-5] ^= 0xFF
        with open(segment, "ab") as f:
            f.write(torn)
        time.sleep(1)
        follower.start()
        _wait(lambda: _state(zk_connect, topic).isr == (1, 2, 3), "the repaired replica back in the ISR")
    load.check()
    _wait(lambda: _identical_logs(three, topic), "three identical logs")


def test_while_zookeeper_is_away_leaders_serve_and_the_isr_change_waits(tmp_path):
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, free_port

    with LocalCluster(tmp_path, brokers=3, overrides={**OVERRIDES, "zookeeper.session.timeout.ms": "10000"},
                      zookeeper_port=free_port()) as cluster:
        topic = _create(cluster, cluster.zookeeper, "zkaway")
        with Load(cluster, topic) as load:
            _wait(lambda: _state(cluster.zookeeper, topic).isr == (1, 2, 3), "a full ISR")
            _wait(lambda: load.history.acknowledged() > 0, "the first acks=all acknowledgements")
            cluster.zk_server.stop()
            try:
                before = load.history.acknowledged()  # the leader serves acks=all with its ISR:
                _wait(lambda: load.history.acknowledged() > before, "acks=all answered while ZooKeeper is away")
                cluster.brokers[3].kill()  # the shrink this needs cannot be written
                sent_after_kill = load.history.handed_out()
                time.sleep(LAG_MS / 1000 * 2 + 1.5)  # past the lag time: a leader that shrank alone would ack
                stalled = load.history.acknowledged()
                # not acknowledged by a leader alone: nothing sent after the kill (what was sent before may
                # be acknowledged late, broker 3 having fetched it before it died)
                assert load.history.acknowledged_after(sent_after_kill) == 0
            finally:  # the same port and data: the brokers' sessions resume
                cluster.zk_server = EmbeddedZooKeeper(port=cluster.zk_server.port,
                                                      data_dir=cluster.zk_server.data_dir).start()
            _wait(lambda: _state(cluster.zookeeper, topic).isr == (1, 2), "the shrink, written once it is back")
            _wait(lambda: load.history.acknowledged() > stalled + RATE, "acks=all answered again")
            cluster.brokers[3].start()
            _wait(lambda: _state(cluster.zookeeper, topic).isr == (1, 2, 3), "broker 3 back in the ISR")
        load.check()
