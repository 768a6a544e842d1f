"""ZooKeeper consumer groups across processes (paper 3.2-3.3), against a real ZooKeeper and broker."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from sparklog.coordination.offsets import fetch_offsets
from support.client_groups import (Member, Observer, duplicates, foreign_consumption, offset_regressions,
                                   per_member_partitions, wait_for_records)

pytestmark = pytest.mark.slow

PARTITIONS = 12
SESSION_MS = 3000
COMMIT_MS = 500
COMMIT_LATENCY_S = 5.0  # an auto-commit's ZooKeeper write (fsynced by ZooKeeper) on a loaded machine


@pytest.fixture(scope="module")
def group_cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    zk_connect = f"{zookeeper.connect_string}/cg-{uuid.uuid4().hex}"
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("brokers"), brokers=1)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


@pytest.fixture
def observed_zk(request, group_cluster):
    from sparklog.coordination.connection import close, connect

    client = connect(group_cluster.zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


@pytest.fixture
def members(request):
    started: list[Member] = []
    request.addfinalizer(lambda: [m.stop() for m in started])
    return started


@pytest.fixture
def topic(group_cluster):
    from sparklog.client.admin import AdminClient

    name = f"cg-{uuid.uuid4().hex[:8]}"
    with AdminClient(group_cluster.bootstrap) as admin:
        admin.create_topic(name, PARTITIONS)
    return name


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    from sparklog.client import Producer

    with Producer(bootstrap, **{"linger.ms": 5}) as producer:
        futures = [producer.send(topic, b"m%d" % i, key=b"k%d" % i) for i in range(start, start + n)]
        producer.flush(60)
    assert all(f.exception(0) is None for f in futures)


def start_members(members, tmp_path, zk_connect, group, topic, count, prefix, **options):
    new = [Member(tmp_path, f"{prefix}{i}", zk_connect, group, topic, session_ms=SESSION_MS, commit_ms=COMMIT_MS,
                  **options) for i in range(count)]
    members.extend(new)
    return new


def balanced(ids, per_member):
    return lambda owners: (len(owners) == PARTITIONS and set(owners.values()) == set(ids)
                           and all(len(v) == per_member for v in per_member_partitions(owners).values()))


def test_three_members_share_twelve_partitions_each_message_once_and_two_groups_each_get_all(
        group_cluster, observed_zk, members, topic, tmp_path):
    zk_connect = group_cluster.zk_connect
    a = start_members(members, tmp_path, zk_connect, "ga", topic, 3, "a")
    # Group b: two members, one of them with two message streams (the paper's create_message_streams).
    b = start_members(members, tmp_path, zk_connect, "gb", topic, 1, "b")
    b += start_members(members, tmp_path, zk_connect, "gb", topic, 1, "bs", streams=2)
    observer_a = Observer(observed_zk, "ga").start()
    observer_b = Observer(observed_zk, "gb").start()
    try:
        owners = observer_a.wait_for(balanced(["a0", "a1", "a2"], 4), 60, "group a to split 4/4/4")
        assert per_member_partitions(owners) == {"a0": [0, 1, 2, 3], "a1": [4, 5, 6, 7], "a2": [8, 9, 10, 11]}
        # b has three streams (b0-0, bs0-0, bs0-1): 4 partitions each, bs0 owning 8.
        observer_b.wait_for(lambda o: len(o) == PARTITIONS and sorted(
            len(v) for v in per_member_partitions(o).values()) == [4, 8], 60, "group b to split 4/8")

        n = 6000
        produce(group_cluster.bootstrap, topic, n)
        seen_a = wait_for_records(a, n, 90)
        seen_b = wait_for_records(b, n, 90)
        expected = {(p, o) for p in range(PARTITIONS) for o in range(_end_offset(group_cluster, topic, p))}
        assert len(expected) == n
        assert seen_a == expected, f"group a missed {len(expected - seen_a)}"
        assert seen_b == expected, f"group b missed {len(expected - seen_b)}"
        assert not duplicates(a), "a message was consumed twice in steady state"
        assert not duplicates(b)
        assert foreign_consumption(a, observer_a, topic) == []
        assert foreign_consumption(b, observer_b, topic) == []
    finally:
        observer_a.stop()
        observer_b.stop()
    for m in a + b:
        assert m.stop() == 0, m.log()
        assert m.closed_stats() is not None, m.log()


def _end_offset(cluster, topic, partition) -> int:
    from sparklog.client import Consumer

    with Consumer(cluster.bootstrap) as consumer:
        return consumer.end_offsets([(topic, partition)])[(topic, partition)]


def test_kill_9_hands_partitions_over_from_committed_offsets_with_bounded_duplicates(
        group_cluster, observed_zk, members, topic, tmp_path):
    zk_connect = group_cluster.zk_connect
    group = "gk"
    started = start_members(members, tmp_path, zk_connect, group, topic, 3, "k", process_ms=1)
    observer = Observer(observed_zk, group).start()
    try:
        observer.wait_for(balanced(["k0", "k1", "k2"], 4), 60, "4/4/4")
        n = 9000
        produce(group_cluster.bootstrap, topic, n)
        victim = started[0]
        deadline = time.monotonic() + 60
        while len(victim.records()) < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_time = time.time()
        victim.kill()  # SIGKILL: no commit, no release, no deregistration
        # what it had committed: nobody else commits its partitions before its session expires
        committed_at_kill = {p: o.offset for (t, p), o in fetch_offsets(observed_zk, group).items() if t == topic}
        owners = observer.wait_for(balanced(["k1", "k2"], 6), SESSION_MS / 1000 + 30, "k1/k2 to take over 6/6")
        takeover = time.time()
        assert takeover - kill_time < SESSION_MS / 1000 + 20  # found dead by its session, on a loaded machine too
        seen = wait_for_records(started, n, 120)
        assert len(seen) == n, f"lost {n - len(seen)} messages"
        dups = duplicates(started)
        victim_records = {(p, o): t for t, p, o, _ in victim.records()}
        # Every duplicate is a record the victim processed but had not committed: at or after its committed
        # offset, and within one commit interval (plus the commit's own latency: a ZooKeeper write, fsynced,
        # seconds on a loaded machine) before the kill.
        assert set(dups) <= set(victim_records), "a duplicate not caused by the crashed consumer"
        committed_again = sorted(k for k in dups if k[1] < committed_at_kill.get(k[0], 0))
        assert not committed_again, f"duplicates the victim had committed: {committed_again[:5]}"
        window = COMMIT_MS / 1000 + COMMIT_LATENCY_S
        late = {k: victim_records[k] for k in dups if victim_records[k] < kill_time - window}
        assert not late, f"duplicates older than the commit interval: {sorted(late)[:5]}"
        assert max(dups.values(), default=0) <= 1  # none at all is the ideal outcome, not a failure
        # Each of the victim's partitions went to a survivor, which resumed at or before the record after the
        # victim's last one (from the committed offset: nothing skipped).
        by_name = {m.name: m for m in started}
        resumed = {}
        for p in {p for t, p, o, _ in victim.records()}:
            heir = owners[(topic, p)]
            assert heir in ("k1", "k2"), (p, heir)
            victim_last = max(o for _, q, o, _ in victim.records() if q == p)
            taken = [o for t, q, o, _ in by_name[heir].records() if q == p and t >= kill_time]
            if taken:
                resumed[p] = min(taken)
                assert resumed[p] <= victim_last + 1, f"partition {p}: resumed at {resumed[p]}, after {victim_last}"
        assert resumed, "no survivor consumed the victim's partitions after the kill"
        print(f"kill -9: {sum(dups.values())} duplicates of {n}, bound {window}s of the victim's processing")
        assert offset_regressions(observer) == []
        assert foreign_consumption([m for m in started if m is not victim], observer, topic) == []
    finally:
        observer.stop()


def test_a_sigstopped_member_is_fenced_when_it_wakes(group_cluster, observed_zk, members, topic, tmp_path):
    zk_connect = group_cluster.zk_connect
    group = "gs"
    started = start_members(members, tmp_path, zk_connect, group, topic, 2, "s", process_ms=1)
    sleeper, other = started
    observer = Observer(observed_zk, group).start()
    try:
        observer.wait_for(balanced(["s0", "s1"], 6), 60, "6/6")
        n = 9000
        produce(group_cluster.bootstrap, topic, n)
        deadline = time.monotonic() + 60
        while len(sleeper.records()) < 500 and time.monotonic() < deadline:
            time.sleep(0.05)
        sleeper.signal(signal.SIGSTOP)
        stopped_at = time.time()
        committed_at_stop = {p: o.offset for (t, p), o in fetch_offsets(observed_zk, group).items() if t == topic}
        observer.wait_for(balanced(["s1"], 12), SESSION_MS / 1000 + 30, "s1 to own all 12")
        time.sleep(2.0)  # the other member consumes the sleeper's partitions for a while
        count_before_wake = len(sleeper.records())
        woke_at = time.time()
        sleeper.signal(signal.SIGCONT)
        seen = wait_for_records(started, n, 120)
        assert len(seen) == n, f"lost {n - len(seen)} messages"
        observer.wait_for(balanced(["s0", "s1"], 6), 60, "the woken member to rejoin 6/6")
        assert woke_at - stopped_at > SESSION_MS / 1000
        # Fenced: after waking, it processed nothing of partitions the registry gave to the other member,
        # and no committed offset ever went backwards (its stale commits were refused).
        # The one record in the application's hands when it was stopped is finished after waking; it was
        # handed out while the member still owned its partition. Nothing after it may be foreign.
        before = sleeper.records()[:count_before_wake]
        in_hand = sleeper.records()[count_before_wake:count_before_wake + 1]
        last_before = {p: o for _, p, o, _ in before}
        foreign = foreign_consumption([sleeper], observer, topic)
        if in_hand and in_hand[0][2] == last_before.get(in_hand[0][1], -2) + 1:
            foreign = [f for f in foreign if (f[1], f[2]) != (in_hand[0][1], in_hand[0][2])]
        assert foreign == []
        assert foreign_consumption([other], observer, topic) == []
        assert offset_regressions(observer) == []
        # Duplicates: only what the sleeper processed in its last commit interval before it was stopped
        # (plus the record in hand); the rejoin afterwards was a graceful hand-over and added none.
        dups = duplicates(started)
        before_stop = {(p, o): t for t, p, o, _ in before}
        allowed = {k for k, t in before_stop.items() if t >= stopped_at - (COMMIT_MS / 1000 + COMMIT_LATENCY_S)}
        allowed |= {(p, o) for _, p, o, _ in in_hand}
        assert set(dups) <= allowed, f"unexpected duplicates: {sorted(set(dups) - allowed)[:5]}"
        committed_again = sorted(k for k in dups if k[1] < committed_at_stop.get(k[0], 0))
        assert not committed_again, f"duplicates of records committed before the stop: {committed_again[:5]}"
        after_wake = [r for r in sleeper.records()[count_before_wake:]]
        print(f"SIGSTOP: the woken member processed {len(after_wake)} records after rejoining; "
              f"{sum(duplicates(started).values())} duplicates of {n}")
    finally:
        observer.stop()
    for m in started:
        assert m.stop() == 0, m.log()
