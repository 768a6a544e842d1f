"""A replicated ZooKeeper under three brokers (issue 27): three quorum servers (zookeeper_server Rule 3), an
acks=all producer running throughout; SIGKILL the ZooKeeper leader, restart it, SIGKILL a follower, restart it,
then SIGKILL the controller broker: no acknowledged write is lost, the producer sees no error beyond its
retries, and the controller and ISR changes go on through the surviving quorum."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoNodeError

from sparklog.coordination.connection import close, connect
from sparklog.coordination.zookeeper_server import ZooKeeperEnsemble, parse_servers
from support.cluster import Cluster, wait_until, wait_until_every_broker_knows_all

pytestmark = pytest.mark.slow

SESSION_MS = 6000  # the brokers' ZooKeeper session: a quorum server's SIGKILL moves it, it must not expire it
PARTITIONS = 3
FAULT_WAIT_S = 60


class Writer:
    """An acks=all idempotent producer in a thread: every acknowledged (partition, offset, value), every error."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic, self.acked, self.errors = topic, [], []
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 120000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self._producer.produce(self.topic, b"v%d" % n, on_delivery=self._report)
            n += 1
            self._producer.poll(0.01)
        self._producer.flush(120)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)


def read_all(bootstrap: str, topic: str, expected: int) -> set[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: set = set()
    deadline = time.monotonic() + 120
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.add((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def controller(zk) -> int | None:
    """The controller's broker id, None while there is none (the node can go between an exists() and a get():
    a fresh-clone run failed on that NoNodeError when the dead controller's session expired)."""
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except NoNodeError:
        return None


def test_three_zookeepers_lose_their_leader_then_a_follower_and_no_acknowledged_write_is_lost(request, tmp_path):
    ensemble = ZooKeeperEnsemble(3, tmp_path / "zk")
    request.addfinalizer(ensemble.stop)
    ensemble.start()
    assert sorted(m.mode() for m in ensemble.members.values()) == ["follower", "follower", "leader"]
    cluster = Cluster(f"{ensemble.connect_string}/ens", tmp_path / "brokers", brokers=3, overrides={
        "zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
        "log.flush.interval.ms": "20"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    wait_until_every_broker_knows_all(cluster)
    topic = f"ens-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: its futures need the handle alive
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    zk = connect(f"{ensemble.connect_string}/ens")
    request.addfinalizer(lambda: close(zk))
    writer = Writer(cluster.bootstrap, topic)
    try:
        wait_until(lambda: len(writer.acked) > 200, "the first acknowledged writes", FAULT_WAIT_S)
        old_leader = ensemble.leader()
        ensemble.kill(old_leader)
        new_leader = wait_until(ensemble.leader, "a new ZooKeeper leader", FAULT_WAIT_S)
        assert new_leader != old_leader
        progress = len(writer.acked)
        wait_until(lambda: len(writer.acked) > progress + 200, "writes acknowledged without the old leader",
                   FAULT_WAIT_S)
        ensemble.restart(old_leader)
        follower = next(sid for sid, m in ensemble.members.items() if m.mode() == "follower")
        ensemble.kill(follower)
        progress = len(writer.acked)
        wait_until(lambda: len(writer.acked) > progress + 200, "writes acknowledged without a follower",
                   FAULT_WAIT_S)
        ensemble.restart(follower)
        # the controller and ISR changes go on: SIGKILL the controller broker
        victim = wait_until(lambda: controller(zk), "a controller", FAULT_WAIT_S)
        cluster.brokers[victim].kill()
        wait_until(lambda: controller(zk) not in (None, victim), "a new controller", FAULT_WAIT_S)

        def isr_without_victim() -> bool:
            states = [json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
                      for p in range(PARTITIONS)]
            return all(victim not in s["isr"] and s["leader"] != victim for s in states)

        wait_until(isr_without_victim, "the ISR shrunk and leaders moved off the dead broker", FAULT_WAIT_S)
        progress = len(writer.acked)
        wait_until(lambda: len(writer.acked) > progress + 200, "writes acknowledged after the failover",
                   FAULT_WAIT_S)
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    acked = set(writer.acked)
    got = read_all(cluster.bootstrap, topic, len(acked))
    assert acked <= got, f"{len(acked - got)} acknowledged writes lost, e.g. {sorted(acked - got)[:5]}"


def test_an_ensemble_member_s_servers_are_checked_in_one_line():
    assert set(parse_servers("1=h:2888:3888:2181,2=h:2889:3889:2182,3=h:2890:3890:2183")) == {1, 2, 3}
    for bad, words in (("1=h:2888:3888", "ID=HOST:QUORUM_PORT:ELECTION_PORT:CLIENT_PORT"),
                       ("1=h:1:2:3,2=h:4:5:6", "odd number of servers, at least 3, not 2"),
                       ("x=h:1:2:3", "'x=h:1:2:3'")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            parse_servers(bad)
