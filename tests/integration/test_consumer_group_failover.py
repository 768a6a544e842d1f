"""A KIP-848 group outlives its coordinator: two librdkafka members (`group.protocol=consumer`, one process each)
share a topic of replication factor 3 on three real brokers; the broker coordinating the group is SIGKILLed. The
group's state is in `__consumer_offsets` (consumer_coordinator Rule 5), so the broker that takes the group's
partition over rebuilds it: the members carry on with their epochs and partitions (nothing revoked, the group
epoch where it was) and read what is produced after the kill, each record once."""

from __future__ import annotations

import signal
import uuid
from collections import Counter

import pytest

from support.cluster import started_cluster
from support.group_members import Member
from integration.test_kafka_groups import PARTITIONS, members, produce, wait_until  # noqa: F401 - members: the fixture
from sparklog.client.kafka_groups import KafkaGroupAdmin
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.consumer_group import ConsumerGroupDescribeRequest

pytestmark = pytest.mark.slow

ZK_SESSION_MS = 6000  # how soon the controller sees the killed broker gone and moves its partitions
FAILOVER_S = 120  # the kill, the new leaders, the members finding the new coordinator: a loaded machine


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return started_cluster(request, f"{zookeeper.connect_string}/kip848-failover-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("kip848-failover"), 3, ZK_SESSION_MS,
                           **{"num.partitions": str(PARTITIONS), "default.replication.factor": "3",
                              "offsets.topic.replication.factor": "3", "log.flush.interval.ms": "20",
                              "group.consumer.heartbeat.interval.ms": "500"})


def described(admin: KafkaGroupAdmin, group: str):
    """The group as its coordinator describes it (ConsumerGroupDescribe v0): (coordinator, the group)."""
    return admin._at_coordinator(group, ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                                 ConsumerGroupDescribeRequest(group_ids=[group]),
                                 lambda response, node: (node, response.groups[0]))


def epochs(group) -> tuple[int, int, dict[str, int]]:
    return group.group_epoch, group.assignment_epoch, {m.member_id: m.member_epoch for m in group.members}


def reads(member: Member) -> list[tuple[int, int]]:
    return [tuple(e["m"]) for e in member.snapshot() if "m" in e]


def covering(group: list[Member]) -> bool:
    owned = sorted(p for m in group for p in (m.assignment() or []))
    return owned == list(range(PARTITIONS)) and all(m.assignment() for m in group)


def start(members, cluster, topic: str, group: str) -> Member:
    member = Member(cluster.bootstrap, "confluent-848", topic, group, "--assignor", "uniform")
    members.append(member)
    return member


def test_the_members_carry_on_when_their_coordinator_is_sigkilled(cluster, members):
    """A third member joins and leaves first, so the group epoch is well past what two fresh joins reach (a
    group restarted from epoch 0 would not end at the same epochs)."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 600)
    pair = [start(members, cluster, topic, group) for _ in range(2)]
    wait_until("two members sharing every partition", lambda: covering(pair))
    third = start(members, cluster, topic, group)
    wait_until("three members sharing every partition", lambda: covering([*pair, third]))
    third.stop(signal.SIGTERM)  # leaves the group (epoch -1)
    wait_until("two members sharing every partition again", lambda: covering(pair))
    wait_until("every record read", lambda: set().union(*(set(reads(m)) for m in (*pair, third))) >= written)
    admin = KafkaGroupAdmin(bootstrap_servers=cluster.bootstrap)
    coordinator, before = described(admin, group)
    assert before.group_state == "Stable" and before.group_epoch > 3
    owned = {i: set(m.assignment()) for i, m in enumerate(pair)}
    seen = {i: len(m.snapshot()) for i, m in enumerate(pair)}
    seen_reads = {m: len(reads(m)) for m in pair}

    cluster.brokers[coordinator].kill()
    fed = produce(cluster, topic, 240)
    wait_until("the records produced after the kill read", lambda: set().union(
        *(set(reads(m)) for m in pair)) >= fed, FAILOVER_S)
    admin = KafkaGroupAdmin(bootstrap_servers=cluster.bootstrap)
    wait_until("the group at a new coordinator", lambda: described(admin, group)[0] != coordinator, FAILOVER_S)
    _, after = described(admin, group)

    assert epochs(after) == epochs(before)  # not restarted from epoch 0, no member rejoined
    for i, m in enumerate(pair):
        since = m.snapshot()[seen[i]:]
        assert not [e for e in since if "revoked" in e or "assigned" in e], since  # nothing moved
        assert set(m.assignment()) == owned[i]
    read_before = {r for m in pair for r in reads(m)[:seen_reads[m]]}
    read_after = Counter(r for m in pair for r in reads(m)[seen_reads[m]:])
    twice = sorted(r for r, n in read_after.items() if n > 1 or r in read_before)
    assert twice == []  # the members kept their positions: nothing read again after the kill
    assert not [e for m in pair for e in m.errors()]
    for m in pair:
        m.stop(signal.SIGTERM)
