"""Broker-coordinated consumer groups with real clients' `subscribe()`: consumer processes
(tests/support/kafka_group_member.py: confluent-kafka or kafka-python) against two real broker processes and
a real ZooKeeper; faults are real (SIGKILL). Session timeouts and the initial rebalance delay are set low so
the module stays fast."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from support import broker_matrix
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, offsets_partition
from support.cluster import REPO, TEST_OFFSETS_TOPIC_PARTITIONS, Cluster
from support.group_members import Member, measure_join

pytestmark = pytest.mark.slow

PARTITIONS = 12
SESSION_MS = 3000
TIMEOUT_S = 40
# After the session expires: a heartbeat, the survivors' JoinGroup and SyncGroup, a poll; seconds on a loaded
# machine. Well under the survivors' rebalance timeout (max.poll.interval.ms, 300 s): a dead member is found
# by its session, not by a rebalance that waits for it.
REJOIN_SLACK_S = 20
# The static member's session: its restart (a "go", then FindCoordinator, JoinGroup, SyncGroup) must land inside
# it, which took over 3 s in a fresh-clone run at load 25 and rightly rebalanced the group.
STATIC_SESSION_MS = 10000
STATIC_SESSION = ("--session-ms", str(STATIC_SESSION_MS))
JOIN_HEARTBEAT_MS = 1000  # the old members learn of a join within this (two rounds for cooperative-sticky)


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/groups-{uuid.uuid4().hex}"
    c = Cluster(zk_connect, tmp_path_factory.mktemp("groups"), brokers=2, overrides={
        "num.partitions": str(PARTITIONS), "log.flush.interval.ms": "20",
        "group.initial.rebalance.delay.ms": "300", "group.min.session.timeout.ms": "1000"})
    request.addfinalizer(c.stop)
    c.start()
    return c


@pytest.fixture
def members():
    started: list[Member] = []
    yield started
    for m in started:
        m.stop(signal.SIGKILL)


def start(members, cluster, client, topic, group, *extra) -> Member:
    member = Member(cluster.bootstrap, client, topic, group, "--session-ms", str(SESSION_MS), *extra)
    members.append(member)
    return member


def wait_until(what: str, predicate, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def produce(cluster, topic: str, count: int) -> set[tuple[int, int]]:
    """`count` messages spread over every partition; returns their (partition, offset)s."""
    written: set[tuple[int, int]] = set()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})

    def delivered(err, msg):
        assert err is None, err
        written.add((msg.partition(), msg.offset()))

    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    return written


def new_topic(cluster) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, PARTITIONS)  # auto-created with num.partitions
    return topic


def partitions_of(members) -> list[int]:
    return sorted(p for m in members for p in (m.assignment() or []))


def balanced(members) -> bool:
    return partitions_of(members) == list(range(PARTITIONS)) and all(m.assignment() for m in members)


def describe(cluster, group: str):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT_S)


def test_three_clients_share_the_topic_and_a_sigkilled_one_is_replaced_from_committed_offsets(cluster, members):
    """One process per real client (librdkafka, kafka-python, aiokafka), subscribe() with the range assignor;
    SIGKILL the librdkafka one: the other two clients take its partitions within the session timeout and
    resume from its committed offsets (each member commits after every poll batch of at most 100)."""
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 600) | {(p, 0) for p in range(PARTITIONS)}
    trio = [start(members, cluster, client, topic, group) for client in ("confluent", "kafka-python", "aiokafka")]
    wait_until("a balanced three-member group", lambda: balanced(trio) and all(len(m.assignment()) == 4 for m in trio))
    wait_until("every message consumed", lambda: set().union(*(m.consumed() for m in trio)) >= written)
    victim, survivors = trio[0], trio[1:]
    orphaned = set(victim.assignment())
    victim.stop(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until("the survivors take the victim's partitions", lambda: balanced(survivors))
    assert time.monotonic() - killed_at < SESSION_MS / 1000 + REJOIN_SLACK_S  # found dead by its session
    more = produce(cluster, topic, 600)
    wait_until("every later message consumed", lambda: set().union(*(m.consumed() for m in survivors)) >= more)
    # resumed from the committed offsets: nothing the victim committed is read again by the survivors
    reread = {(p, o) for m in survivors for p, o in m.consumed() if p in orphaned} & victim.consumed()
    assert len(reread) <= 100  # at most the victim's last uncommitted poll batch
    assert all(m.count("committed") for m in survivors)
    assert not any(m.errors() for m in survivors)


def test_sparklogs_own_member_shares_a_group_with_librdkafka_and_kafka_python_and_takes_over_from_committed(
        cluster, members):
    """sparklog's KafkaGroupConsumer beside librdkafka and kafka-python (range): a balanced group; SIGKILL the
    sparklog member, then the librdkafka one: the survivors take their partitions within the session timeout
    and resume from the committed offsets, and every message is read."""
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 600) | {(p, 0) for p in range(PARTITIONS)}
    trio = [start(members, cluster, client, topic, group) for client in ("sparklog", "confluent", "kafka-python")]
    wait_until("a balanced three-member group", lambda: balanced(trio) and all(len(m.assignment()) == 4 for m in trio))
    for m in trio:  # the range assignor's contiguous runs, whoever was the leader
        assert m.assignment() == list(range(m.assignment()[0], m.assignment()[0] + 4))
    wait_until("every message consumed", lambda: set().union(*(m.consumed() for m in trio)) >= written)
    stable = produce(cluster, topic, 300)  # read and committed in the balanced generation (earlier commits may
    # have met the rebalances of the members' joins: REBALANCE_IN_PROGRESS, as in Kafka)
    wait_until("the balanced group's messages consumed", lambda: set().union(*(m.consumed() for m in trio)) >= stable)
    wait_until("sparklog's member committed", lambda: trio[0].count("committed") > 0)
    survivors = trio
    for victim in trio[:2]:
        survivors = [m for m in survivors if m is not victim]
        orphaned = set(victim.assignment())
        victim.stop(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until("the survivors take the victim's partitions", lambda: balanced(survivors))
        assert time.monotonic() - killed_at < SESSION_MS / 1000 + REJOIN_SLACK_S
        more = produce(cluster, topic, 300)
        wait_until("every later message consumed", lambda: set().union(*(m.consumed() for m in survivors)) >= more)
        reread = {(p, o) for m in survivors for p, o in m.consumed() if p in orphaned} & victim.consumed()
        assert len(reread) <= 100  # at most the victim's last uncommitted poll batch
    assert not trio[0].errors()
    assert not any(m.errors() for m in survivors)


def test_a_group_mixing_librdkafka_and_kafka_python_with_the_range_assignor(cluster, members):
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 240) | {(p, 0) for p in range(PARTITIONS)}
    pair = [start(members, cluster, "confluent", topic, group), start(members, cluster, "kafka-python", topic, group)]
    wait_until("a balanced mixed group", lambda: balanced(pair))
    assert sorted(len(m.assignment()) for m in pair) == [6, 6]
    for m in pair:  # the range assignor gives each member one contiguous run
        assert m.assignment() == list(range(m.assignment()[0], m.assignment()[0] + 6))
    wait_until("every message consumed", lambda: pair[0].consumed() | pair[1].consumed() >= written)
    found = describe(cluster, group)
    assert str(found.state).endswith("STABLE") and found.partition_assignor == "range"
    assert len(found.members) == 2


def test_kcat_balanced_consumer(cluster):
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, 48)
    out = subprocess.run(["kcat", "-b", cluster.bootstrap, "-G", group, "-o", "beginning", "-c", "60",
                          "-f", "%p:%o\\n", "-X", "session.timeout.ms=3000", topic],
                         capture_output=True, timeout=TIMEOUT_S, check=True).stdout.decode()
    got = {tuple(map(int, line.split(":"))) for line in out.split()}
    assert len(got) == 60 and {p for p, _ in got} == set(range(PARTITIONS))


def test_static_member_restarted_within_its_session_keeps_its_assignment_without_a_rebalance(cluster, members):
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    static = start(members, cluster, "confluent", topic, group, "--instance", "static-1", *STATIC_SESSION)
    # the other member's session is as long: at load 16-20 a 3 s session expired under the test (a rebalance
    # that was the load's, not the restart's; a fresh-clone run saw `other` assigned twice)
    other = start(members, cluster, "confluent", topic, group, *STATIC_SESSION)
    wait_until("a balanced group", lambda: balanced([static, other]))
    before, revokes = static.assignment(), other.count("revoked")
    # The restart's process is started beforehand and joins on a word: an interpreter and confluent-kafka
    # starting on a loaded machine can take longer than the session, which would rightly rebalance the group.
    again = start(members, cluster, "confluent", topic, group, "--instance", "static-1", "--wait-for-go",
                  *STATIC_SESSION)
    wait_until("the restart's process ready to join", lambda: again.count("ready"))
    static.stop(signal.SIGKILL)  # a crash: no LeaveGroup
    killed_at = time.monotonic()
    again.go()
    wait_until("the restarted static member's assignment", lambda: again.assignment() is not None)
    assert again.assignment() == before
    time.sleep(max(0.0, killed_at + STATIC_SESSION_MS / 1000 + 1 - time.monotonic()))  # past the old session
    assert other.count("revoked") == revokes and other.count("assigned") == 1
    assert str(describe(cluster, group).state).endswith("STABLE")
    # the same generation: the other member's commits, which carry the generation it joined, still succeed
    commits = other.count("committed")
    more = produce_to(cluster, topic, other.assignment(), 24)
    wait_until("the other member consumed and committed more", lambda: other.consumed() >= more
               and other.count("committed") > commits)
    assert not other.count("commit_failed") and other.count("assigned") == 1


def test_a_duplicate_instance_id_fences_the_older_member(cluster, members):
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    first = start(members, cluster, "confluent", topic, group, "--instance", "twin")
    wait_until("the first member's assignment", lambda: first.assignment() is not None)
    second = start(members, cluster, "confluent", topic, group, "--instance", "twin")
    wait_until("the older member fenced", lambda: first.errors(), timeout=SESSION_MS / 1000 + 20)
    assert "FENCED_INSTANCE_ID" in first.errors()[0] or "fenced" in first.errors()[0].lower()
    assert first.proc.wait(timeout=15) == 3
    assert second.assignment() == list(range(PARTITIONS)) and not second.errors()


def test_cooperative_sticky_keeps_unmoved_partitions_flowing_while_a_member_joins(cluster, members):
    """No stop-the-world: while a third member joins a quick and a busy one under steady produce, the quick
    member's partitions that stay put never wait for the rebalance (support/group_members.py; benchmarks/groups.py
    compares with the eager range assignor, whose unmoved partitions wait for the busy member)."""
    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    found = measure_join(cluster.bootstrap, topic, group, PARTITIONS, "cooperative-sticky", SESSION_MS,
                         JOIN_HEARTBEAT_MS, members)
    kept_by_first = set(members[0].assignment())
    revoked = {p for e in members[0].snapshot() if "revoked" in e for p in e["revoked"]}
    assert revoked and not revoked & kept_by_first  # incremental: only what moved was given up
    assert len(found.unmoved) == PARTITIONS // 3  # sticky: the quick member keeps 4 of its 6
    # not stopped for the rebalance: under half of it, or (a rebalance too short to tell) a few steady gaps
    assert found.unmoved_gap_s < max(found.rebalance_s / 2, 3 * found.steady_gap_s), found
    assert not any(m.errors() for m in members)


def test_aiokafka_subscribe_consumes_and_commits(cluster):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic, group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 60) | {(p, 0) for p in range(PARTITIONS)}

    async def scenario():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)
        await consumer.start()
        try:
            got: set[tuple[int, int]] = set()
            deadline = time.monotonic() + TIMEOUT_S
            while not got >= written and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    got.update((m.partition, m.offset) for m in messages)
            await consumer.commit()
            committed = await consumer.committed(TopicPartition(topic, 0))
            await asyncio.sleep(1)  # a few heartbeats
        finally:
            await consumer.stop()
        return got, committed

    got, committed = asyncio.run(scenario())
    assert got >= written and committed == 1 + max(o for p, o in written if p == 0)


def test_members_follow_a_sigkilled_coordinator_and_resume_from_committed_offsets(zookeeper, tmp_path, members):
    """Its own three brokers, with a short ZooKeeper session so the dead one leaves the metadata quickly. The
    coordinator is the leader of the group's `__consumer_offsets` partition (replicated on all three); SIGKILL
    it while a librdkafka and a kafka-python member consume and commit: the new leader loads the partition
    from its replica, the members find it and continue from the committed offsets."""
    c = Cluster(f"{zookeeper.connect_string}/failover-{uuid.uuid4().hex}", tmp_path, brokers=3, overrides={
        "num.partitions": str(PARTITIONS), "log.flush.interval.ms": "20", "zookeeper.session.timeout.ms": "4000",
        "replica.lag.time.max.ms": "2000", "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000"})
    try:
        c.start()
        topic, group = new_topic(c), f"g-{uuid.uuid4().hex[:8]}"
        written = produce(c, topic, 240) | {(p, 0) for p in range(PARTITIONS)}
        pair = [start(members, c, "confluent", topic, group), start(members, c, "kafka-python", topic, group)]
        wait_until("every message consumed", lambda: set().union(*(m.consumed() for m in pair)) >= written)
        time.sleep(0.5)  # the last batches' commits
        coordinator = describe(c, group).coordinator.id
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        offsets_leaders = admin.list_topics(OFFSETS_TOPIC, timeout=TIMEOUT_S).topics[OFFSETS_TOPIC].partitions
        assert offsets_leaders[offsets_partition(group, TEST_OFFSETS_TOPIC_PARTITIONS)].leader == coordinator
        leaders = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
        kept = {p for p, meta in leaders.items() if meta.leader != coordinator}  # the data stays readable
        c.brokers[coordinator].kill()
        seen_before = [len(m.snapshot()) for m in pair]
        more = produce_to(c, topic, sorted(kept), 120)
        wait_until("new messages after the coordinator died",
                   lambda: set().union(*(m.consumed() for m in pair)) >= more)
        assert describe(c, group).coordinator.id not in (coordinator, -1)
        for member, before in zip(pair, seen_before):  # resumed from the committed offsets: at most one
            again = [e["m"] for e in member.snapshot()[before:] if "m" in e and tuple(e["m"]) in written]
            assert len(again) <= 100  # uncommitted poll batch (100 records) per member is read again
            assert not member.errors()
    finally:
        for m in members:
            m.stop(signal.SIGKILL)
        c.stop()


def produce_to(cluster, topic: str, partitions: list[int], count: int) -> set[tuple[int, int]]:
    written: set[tuple[int, int]] = set()
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(count):
        producer.produce(topic, b"x", partition=partitions[i % len(partitions)],
                         on_delivery=lambda err, msg: err is None and written.add((msg.partition(), msg.offset())))
    assert producer.flush(TIMEOUT_S) == 0 and len(written) == count
    return written


def sparklog(*args: str) -> subprocess.CompletedProcess:
    """The `sparklog` command in a process of its own, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], capture_output=True, timeout=60,
                          cwd=str(REPO), env=env)


def sparklog_here(*args: str) -> subprocess.CompletedProcess:
    """The same command's `main` in this process (no interpreter start per call: the module stays short)."""
    from sparklog.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue().encode(), err.getvalue().encode())


def columns(out: str, header: str) -> list[dict]:
    """The rows of Kafka-shaped column output (left-aligned, two spaces apart) under the header line that
    starts with `header`, each value cut at its header's position."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = re.split(r"\s{2,}", lines[at].strip())
    starts = [lines[at].index(name) for name in names] + [None]
    rows = []
    for line in lines[at + 1:]:
        if not line.strip():
            break
        rows.append({name: line[starts[i]:starts[i + 1]].strip() for i, name in enumerate(names)})
    return rows


def committed_over_the_protocol(cluster, group: str) -> dict[tuple[str, int], int]:
    from sparklog.client.kafka_groups import KafkaGroupAdmin

    with KafkaGroupAdmin(cluster.bootstrap) as admin:
        return admin.committed_offsets(group)


def test_groups_command_shows_and_manages_a_kafka_and_a_zookeeper_group_side_by_side(cluster, members):
    from sparklog.client import GroupConsumer

    topic, group, zk_group = new_topic(cluster), f"g-{uuid.uuid4().hex[:8]}", f"zk-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 120) | {(p, 0) for p in range(PARTITIONS)}
    pair = [start(members, cluster, "confluent", topic, group), start(members, cluster, "kafka-python", topic, group)]
    zk_member = GroupConsumer([topic], zk_group, cluster.zk_connect, auto_offset_reset="smallest",
                              consumer_timeout_ms=10_000)
    try:
        records = iter(zk_member)
        zk_read = [next(records) for _ in range(30)]
        zk_member.commit()
        ends = {(topic, p): 1 + max(o for q, o in written if q == p) for p in range(PARTITIONS)}
        wait_until("a balanced group that consumed and committed everything", lambda: balanced(pair) and (
            pair[0].consumed() | pair[1].consumed()) >= written and committed_over_the_protocol(cluster, group) == ends)
        time.sleep(0.5)  # the last batch's commit
        base = ("groups", "--zookeeper", cluster.zk_connect, "--bootstrap-server", cluster.bootstrap)

        listed = {r["GROUP"]: r for r in columns(sparklog(*base, "list").stdout.decode(), "GROUP")}
        assert listed[group] == {"GROUP": group, "TYPE": "kafka", "STATE": "Stable", "#MEMBERS": "2"}
        assert listed[zk_group] == {"GROUP": zk_group, "TYPE": "zookeeper", "STATE": "Active", "#MEMBERS": "1"}

        described = sparklog_here(*base, "describe", group)
        assert described.returncode == 0, described.stderr.decode()
        rows = columns(described.stdout.decode(), "GROUP")
        assert [(r["TOPIC"], int(r["PARTITION"])) for r in rows] == [(topic, p) for p in range(PARTITIONS)]
        assert all(int(r["CURRENT-OFFSET"]) == int(r["LOG-END-OFFSET"]) == ends[(topic, int(r["PARTITION"]))]
                   and r["LAG"] == "0" for r in rows)
        members_view = columns(sparklog_here(*base, "describe", group, "--members").stdout.decode(), "GROUP")
        by_client = {r["CLIENT-ID"]: r for r in members_view}
        assert set(by_client) == {"member-dynamic", "member-kafka-python"}
        for member, client in zip(pair, ("member-dynamic", "member-kafka-python")):  # the decoded assignment
            assert by_client[client]["HOST"] == "/127.0.0.1"  # the member's address, written as Kafka does
            assert by_client[client]["ASSIGNMENT"] == ",".join(f"{topic}-{p}" for p in member.assignment())
            owned = {r["CONSUMER-ID"] for r in rows if int(r["PARTITION"]) in member.assignment()}
            assert owned == {by_client[client]["CONSUMER-ID"]}
        [state] = columns(sparklog_here(*base, "describe", group, "--state").stdout.decode(), "GROUP")
        assert (state["TYPE"], state["STATE"], state["ASSIGNMENT-STRATEGY"], state["#MEMBERS"]) == (
            "kafka", "Stable", "range", "2")
        assert re.fullmatch(r"127\.0\.0\.1:\d+ \(\d\)", state["COORDINATOR (ID)"]), state

        zk_rows = columns(sparklog_here(*base, "describe", zk_group).stdout.decode(), "GROUP")
        assert {r["CONSUMER-ID"] for r in zk_rows} == {zk_member.consumer_id}
        zk_committed = {(r["TOPIC"], int(r["PARTITION"])): r["CURRENT-OFFSET"] for r in zk_rows}
        assert sum(int(o) for o in zk_committed.values() if o != "-") == len(zk_read)

        for name in (group, zk_group):  # Rule 3: members are there
            refused = sparklog_here(*base, "reset-offsets", name, "--to", "earliest")
            assert refused.returncode == 1 and b"inactive" in refused.stderr, refused.stderr
            assert len(refused.stderr.splitlines()) == 1
        deleting = sparklog_here(*base, "delete", group)
        assert deleting.returncode == 1 and b"not empty" in deleting.stderr
    finally:
        zk_member.close()

    for m in pair:
        m.stop()  # SIGTERM: the members close and leave the group
    produce(cluster, topic, 24)  # two more a partition: lag 2 each
    idle = sparklog_here(*base, "describe", group)
    assert b"has no active members" in idle.stdout and b"TOTAL-LAG 24" in idle.stdout, idle.stdout
    reset = sparklog_here(*base, "reset-offsets", group, "--to", "earliest")
    assert reset.returncode == 0, reset.stderr.decode()
    assert committed_over_the_protocol(cluster, group) == {(topic, p): 0 for p in range(PARTITIONS)}
    reset = sparklog_here(*base, "reset-offsets", group, "--to", "3", "--topic", topic)
    assert reset.returncode == 0 and committed_over_the_protocol(cluster, group) == {
        (topic, p): 3 for p in range(PARTITIONS)}
    zk_reset = sparklog_here(*base, "reset-offsets", zk_group, "--to", "latest")
    assert zk_reset.returncode == 0, zk_reset.stderr.decode()
    zk_rows = columns(sparklog_here(*base, "describe", zk_group).stdout.decode(), "GROUP")
    assert zk_rows and all(r["LAG"] == "0" for r in zk_rows)

    for name in (group, zk_group):
        deleted = sparklog_here(*base, "delete", name)
        assert deleted.returncode == 0, deleted.stderr.decode()
        gone = sparklog_here(*base, "describe", name)
        assert gone.returncode == 1 and b"does not exist" in gone.stderr


# The group apis each client negotiates against our advertised ranges (the flexible versions since grpflex:
# kafka-python caps JoinGroup at 7 and OffsetCommit/OffsetFetch at 8 itself), as observed (client names as in
# test_broker_interop.py; kcat is Debian's, librdkafka 2.0, whose LeaveGroup stops at v1; aiokafka stays at the
# versions it has always sent).
NEGOTIATED = {
    "confluent-kafka-python 2.16": {"FindCoordinator": {2}, "JoinGroup": {5}, "SyncGroup": {3}, "Heartbeat": {3},
                                    "LeaveGroup": {1}, "OffsetCommit": {9}, "OffsetFetch": {9},
                                    "DescribeGroups": {5}, "ListGroups": {5}, "DeleteGroups": {1}},
    "kafka-python 3.0": {"FindCoordinator": {5}, "JoinGroup": {7}, "SyncGroup": {5}, "Heartbeat": {4},
                         "LeaveGroup": {5}, "OffsetCommit": {8}, "OffsetFetch": {8}},
    "librdkafka 2.0": {"FindCoordinator": {2}, "JoinGroup": {5}, "SyncGroup": {3}, "Heartbeat": {3},
                       "LeaveGroup": {1}, "OffsetCommit": {7}, "OffsetFetch": {5}},
    "aiokafka-0.14": {"FindCoordinator": {1}, "JoinGroup": {5}, "SyncGroup": {3}, "Heartbeat": {1},
                      "LeaveGroup": {1}, "OffsetCommit": {3}, "OffsetFetch": {3}},
    # its admin (sparklog groups: OffsetFetch v5) and its KafkaGroupConsumer (a member: OffsetFetch v7)
    "sparklog-python": {"FindCoordinator": {2}, "ListGroups": {2}, "DescribeGroups": {4}, "DeleteGroups": {1},
                        "OffsetFetch": {5, 7}, "OffsetCommit": {7}, "JoinGroup": {5}, "SyncGroup": {3},
                        "Heartbeat": {3}, "LeaveGroup": {3}},
}
MEMBERS = ("confluent-kafka-python 2.16", "kafka-python 3.0", "librdkafka 2.0", "aiokafka-0.14", "sparklog-python")
GROUP_APIS = {"FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
              "OffsetFetch", "DescribeGroups", "ListGroups", "DeleteGroups"}


def test_group_api_versions_per_client(cluster):
    """Runs last in the module: every group api each client used in it, at exactly the versions above, and
    every member client was seen. Recorded for the run's matrix table."""
    served: dict[str, dict[str, set[int]]] = {}
    for broker in cluster.brokers.values():
        matrix = broker.api_matrix()
        broker_matrix.record(matrix)
        for client, apis in matrix["served"].items():
            software = next((name for name in NEGOTIATED if client.startswith(name)), client)
            for api, versions in apis.items():
                if api in GROUP_APIS:
                    served.setdefault(software, {}).setdefault(api, set()).update(versions)
    assert set(MEMBERS) <= set(served) <= set(NEGOTIATED), sorted(served)
    for software, apis in served.items():
        for api, versions in apis.items():
            assert versions == NEGOTIATED[software][api], (software, api, versions)
