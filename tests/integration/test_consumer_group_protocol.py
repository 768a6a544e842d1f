"""KIP-848 consumer groups with librdkafka's `group.protocol=consumer` (confluent-kafka, one process per member:
tests/support/kafka_group_member.py `confluent-848`) against two real broker processes and a real ZooKeeper;
the faults are real (SIGKILL). The broker's group.consumer.* settings are set low so the module stays fast.

Ownership is checked on the members' own timelines: each prints its whole assignment after every assign and
every revoke, so a partition that two members owned at once shows as a partition in one member's assignment
printed while another's printed assignment still held it (the revoke is printed before the member's next
heartbeat acknowledges it, and the coordinator gives the partition away only after that heartbeat)."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from support.cluster import Cluster
from support.group_members import Member
from integration.test_kafka_groups import (PARTITIONS, columns, members, produce, sparklog,  # noqa: F401 - members: the fixture
                                           wait_until)

pytestmark = pytest.mark.slow

SESSION_MS = 4000
HEARTBEAT_MS = 500
TIMEOUT_S = 60
# After the session expires: the survivors' next heartbeats (one interval), their revocation-free takeover,
# a poll; seconds on a loaded machine.
TAKEOVER_SLACK_S = 15


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/kip848-{uuid.uuid4().hex}"
    c = Cluster(zk_connect, tmp_path_factory.mktemp("kip848"), brokers=2, overrides={
        "num.partitions": str(PARTITIONS), "log.flush.interval.ms": "20",
        "group.consumer.session.timeout.ms": str(SESSION_MS),
        "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS)})
    request.addfinalizer(c.stop)
    c.start()
    return c


def start(members, cluster, topic, group, assignor="uniform") -> Member:
    member = Member(cluster.bootstrap, "confluent-848", topic, group, "--assignor", assignor)
    members.append(member)
    return member


def covering(group: list[Member]) -> bool:
    """Every partition owned, by exactly one member, and every member owns some."""
    owned = [p for m in group for p in (m.assignment() or [])]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assignment() for m in group)


def overlaps(group: list[Member]) -> list[str]:
    """Partitions two members owned at once, by the members' printed timelines (the module docstring)."""
    timeline = sorted((e["t"], i, set(e["assigned"])) for i, m in enumerate(group) for e in m.snapshot()
                      if "assigned" in e)
    current: dict[int, set[int]] = {}
    found = []
    for t, i, owned in timeline:
        current[i] = owned
        for j, other in current.items():
            if j != i and owned & other:
                found.append(f"at {t:.3f} members {i} and {j} both own {sorted(owned & other)}")
    return found


def revoked(member: Member) -> set[int]:
    return {p for e in member.snapshot() if "revoked" in e for p in e["revoked"]}


def test_two_share_a_third_joins_under_produce_and_a_sigkilled_one_is_replaced(cluster, members):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 600)
    pair = [start(members, cluster, topic, group) for _ in range(2)]
    wait_until("two members sharing every partition", lambda: covering(pair))
    wait_until("every record read", lambda: set().union(*(m.consumed() for m in pair)) >= written)
    assert not overlaps(pair)
    assert not [e for m in pair for e in m.errors()]

    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(cluster, topic, stop), daemon=True)
    feeder.start()
    try:
        before = {m: set(m.assignment()) for m in pair}
        revoked_before = {m: revoked(m) for m in pair}
        third = start(members, cluster, topic, group)
        trio = [*pair, third]
        wait_until("three members sharing every partition", lambda: covering(trio))
        assert not overlaps(trio)
        for m in pair:  # no stop-the-world: a member is told to revoke only what moves
            unmoved = before[m] & set(m.assignment())
            assert unmoved and not (revoked(m) - revoked_before[m]) & unmoved
        assert sorted(len(m.assignment()) for m in trio) == [4, 4, 4]

        victim, survivors = trio[0], trio[1:]
        victim.stop(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until("the survivors take the victim's partitions", lambda: covering(survivors))
        took_s = time.monotonic() - killed_at
        assert took_s < SESSION_MS / 1000 + TAKEOVER_SLACK_S, took_s
        assert not overlaps(survivors)
    finally:
        stop.set()
        feeder.join(15)
    fed = produce(cluster, topic, PARTITIONS)
    wait_until("the survivors read what is produced after the kill",
               lambda: set().union(*(m.consumed() for m in survivors)) >= fed)
    assert not [e for m in trio for e in m.errors()]


def _feed(cluster, topic: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1})
    while not stop.is_set():
        for p in range(PARTITIONS):
            producer.produce(topic, b"x", partition=p)
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(10)


def test_the_range_assignor_and_a_classic_member_refused(cluster, members):
    """`group.remote.assignor=range` is honoured (contiguous ranges in member id order); a classic member
    (librdkafka's default protocol) of the same group id is refused (INCONSISTENT_GROUP_PROTOCOL): it gets no
    partition, and the consumer members keep theirs."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, PARTITIONS)
    pair = [start(members, cluster, topic, group, assignor="range") for _ in range(2)]
    wait_until("two range members sharing every partition", lambda: covering(pair))
    assert sorted(tuple(m.assignment()) for m in pair) == [tuple(range(6)), tuple(range(6, 12))]
    classic = Member(cluster.bootstrap, "confluent", topic, group, "--session-ms", "6000")
    members.append(classic)
    time.sleep(8)  # the classic member's JoinGroups are refused meanwhile
    assert classic.assignment() is None
    assert covering(pair) and sorted(tuple(m.assignment()) for m in pair) == [tuple(range(6)), tuple(range(6, 12))]


def test_describe_shows_the_consumer_group(cluster, members):
    """librdkafka's describe_consumer_groups (ConsumerGroupDescribe) and `sparklog groups list|describe`: the
    group is kafka-consumer, Stable, its assignor the strategy, each member with its partitions, the offsets
    its members committed (with the member epoch as the generation) without lag."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 60)
    pair = [start(members, cluster, topic, group) for _ in range(2)]
    wait_until("two members sharing every partition", lambda: covering(pair))
    wait_until("every record read", lambda: set().union(*(m.consumed() for m in pair)) >= written)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT_S)
    assert len(described.members) == 2
    assigned = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
    assert assigned == list(range(PARTITIONS))

    base = ("groups", "--bootstrap-server", cluster.bootstrap)
    listed = {r["GROUP"]: r for r in columns(sparklog(*base, "list").stdout.decode(), "GROUP")}
    assert listed[group] == {"GROUP": group, "TYPE": "kafka-consumer", "STATE": "Stable", "#MEMBERS": "2"}
    [state] = columns(sparklog(*base, "describe", group, "--state").stdout.decode(), "GROUP")
    assert (state["TYPE"], state["STATE"], state["ASSIGNMENT-STRATEGY"], state["#MEMBERS"]) == (
        "kafka-consumer", "Stable", "uniform", "2")
    shown = columns(sparklog(*base, "describe", group, "--members").stdout.decode(), "GROUP")
    assert sorted(r["ASSIGNMENT"] for r in shown) == sorted(",".join(f"{topic}-{p}" for p in m.assignment())
                                                            for m in pair)
    ends = {p: 1 + max(o for q, o in written if q == p) for p in range(PARTITIONS)}
    wait_until("every offset committed", lambda: _lags(base, group, ends) == [0] * PARTITIONS)


def _lags(base, group: str, ends: dict[int, int]) -> list[int]:
    rows = columns(sparklog(*base, "describe", group).stdout.decode(), "GROUP")
    assert all(int(r["LOG-END-OFFSET"]) == ends[int(r["PARTITION"])] for r in rows)
    return [int(r["LAG"]) if r["LAG"] != "-" else -1 for r in rows]


def test_a_regex_subscription_is_evaluated_by_the_broker(cluster, members):
    """librdkafka sends `^prefix.*` as SubscribedTopicRegex (it does not expand it): the coordinator assigns
    every partition of the matching topics, and those of a matching topic created later."""
    prefix = f"r{uuid.uuid4().hex[:6]}-"
    for name in ("a", "b"):
        produce(cluster, prefix + name, PARTITIONS)
    produce(cluster, f"other-{prefix}", PARTITIONS)  # does not match
    member = start(members, cluster, f"^{prefix}.*", f"g-{uuid.uuid4().hex[:8]}")
    # the member prints partitions without their topics: count the records read (one per partition per topic)
    wait_until("the records of the two matching topics read", lambda: member.count("m") >= 2 * PARTITIONS)
    time.sleep(2)
    assert member.count("m") == 2 * PARTITIONS  # nothing of the topic that does not match
    produce(cluster, prefix + "c", PARTITIONS)
    wait_until("the records of a matching topic created later read", lambda: member.count("m") >= 3 * PARTITIONS)
    assert not member.errors()


def test_a_static_member_comes_back_to_its_partitions(cluster, members):
    """A static member (group.instance.id) that closes leaves with epoch -2: its partitions wait for it for
    the session timeout, nobody else is given them or revokes anything, and the restarted process with the
    same instance id gets them back (its interpreter started beforehand, so it rejoins well within it)."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, PARTITIONS)
    static = Member(cluster.bootstrap, "confluent-848", topic, group, "--assignor", "uniform", "--instance", "i1")
    members.append(static)
    other = start(members, cluster, topic, group)
    wait_until("two members sharing every partition", lambda: covering([static, other]))
    mine, theirs, revoked_before = set(static.assignment()), set(other.assignment()), revoked(other)
    back = Member(cluster.bootstrap, "confluent-848", topic, group, "--assignor", "uniform", "--instance", "i1",
                  "--wait-for-go")
    members.append(back)
    wait_until("the new process ready", lambda: back.count("ready"))
    static.stop(signal.SIGTERM)  # closes the consumer: a static member's leave heartbeat (epoch -2)
    time.sleep(4 * HEARTBEAT_MS / 1000)  # the other member heartbeats meanwhile: nothing is given to it
    assert set(other.assignment()) == theirs
    back.go()
    wait_until("the static member back with its partitions", lambda: set(back.assignment() or []) == mine)
    assert set(other.assignment()) == theirs and revoked(other) == revoked_before
    assert not back.errors()
