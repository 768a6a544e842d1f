"""Consumer-group benchmark: Kafka (broker-coordinated) groups beside the paper's ZooKeeper groups, one run.

    python benchmarks/groups.py [--rounds 5] [--commit-seconds 5] [--partitions 12] [--join-rounds 5]

Everything runs on this machine: an embedded ZooKeeper and three `sparklog broker` processes (LocalCluster).

Time to Stable (`--rounds` each, a new group every round): three members subscribe to one topic of
`--partitions` partitions; the time is from the first member's subscribe to the moment every member holds
its assignment and the assignments cover every partition once.
- Kafka group: three confluent-kafka consumers (threads), range assignor, `on_assign` callbacks. The broker's
  `group.initial.rebalance.delay.ms` (Kafka's default 3000 ms) is printed beside it, since it is a floor on
  this figure by design: it is measured at the broker default and at 0. With no initial delay, members that
  join one by one each start a rebalance that the others learn of at their next heartbeat
  (librdkafka's `heartbeat.interval.ms`, 3000 ms): a third Kafka row sets it to HEARTBEAT_FAST_MS.
- ZooKeeper group: three sparklog `GroupConsumer`s (Algorithm 1), until each `owned()` is its final share.

Offset commits per second (`--commit-seconds` each): one committer, synchronous, one partition's offset per
commit, the offset rising each time; only commits that returned without error count.
- Kafka group: confluent-kafka `commit(offsets=[...], asynchronous=False)` by a member of a Stable group.
- ZooKeeper group: `coordination.offsets.commit_owned` (what `GroupConsumer.commit()` writes per partition),
  after claiming the partition.
The ratio printed is Kafka / ZooKeeper.

A member joining under steady produce (`--join-rounds` each, tests/support/group_members.py): two confluent-kafka
member processes (heartbeat.interval.ms at its default, 3000), a quick one and a busy one (2300 ms of work per
batch), consume the topic while a feeder writes to every partition every 50 ms; a third joins. Printed per
assignor: the rebalance time (the third member started -> the group settled), the longest stop of consumption
on a quick member's partition that did not move (median and max), and its longest gap in the second before the
join (steady state). Eager `range` revokes everything, so the quick member's unmoved partitions wait for the
busy member to rejoin; `cooperative-sticky` revokes only what moves. The ratio printed is cooperative / eager
unmoved stop (medians).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MEMBERS = 3
STABLE_TIMEOUT_S = 60.0
LIBRDKAFKA_LOG_LEVEL = 3  # errors only
HEARTBEAT_FAST_MS = 300


def kafka_time_to_stable(bootstrap: str, topic: str, partitions: int, heartbeat_ms: int | None = None) -> float:
    """Seconds from the first subscribe until three confluent-kafka members hold a full, disjoint assignment."""
    from confluent_kafka import Consumer

    group = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    assignments: dict[int, set[int]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def member(n: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": LIBRDKAFKA_LOG_LEVEL,
                             "partition.assignment.strategy": "range", "enable.auto.commit": False,
                             **({"heartbeat.interval.ms": heartbeat_ms} if heartbeat_ms else {})})

        def on_assign(_consumer, tps) -> None:
            with lock:
                assignments[n] = {tp.partition for tp in tps}

        def on_revoke(_consumer, _tps) -> None:
            with lock:
                assignments.pop(n, None)

        try:
            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
            while not stop.is_set():
                consumer.poll(0.05)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in range(MEMBERS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        return _until_stable(lambda: dict(assignments), partitions, started, lock, errors)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def zookeeper_time_to_stable(zookeeper: str, topic: str, partitions: int) -> float:
    """Seconds from the first start() until three GroupConsumers own a full, disjoint share."""
    from sparklog.client import GroupConsumer

    group = f"bench-zk-{uuid.uuid4().hex[:8]}"
    consumers = [GroupConsumer([topic], group, zookeeper) for _ in range(MEMBERS)]
    started = time.perf_counter()
    try:
        for consumer in consumers:
            consumer.start()

        def owned() -> dict[int, set[int]]:
            return {n: {p for _, p in c.owned()} for n, c in enumerate(consumers) if c.owned()}

        return _until_stable(owned, partitions, started, threading.Lock(), [])
    finally:
        for consumer in consumers:
            consumer.close()


def _until_stable(assignments, partitions: int, started: float, lock, errors) -> float:
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if errors:
            raise errors[0]
        with lock:
            current = assignments()
        owned = [p for share in current.values() for p in share]
        if len(current) == MEMBERS and sorted(owned) == list(range(partitions)):
            return time.perf_counter() - started
        time.sleep(0.005)
    raise TimeoutError(f"the group did not become stable within {STABLE_TIMEOUT_S:.0f}s")


def kafka_commits_per_second(bootstrap: str, topic: str, seconds: float) -> float:
    from confluent_kafka import Consumer, TopicPartition

    group = f"bench-kafka-commit-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": LIBRDKAFKA_LOG_LEVEL,
                         "enable.auto.commit": False})
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda _c, _tps: assigned.set())
    try:
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while not assigned.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("the committing member got no assignment")
            consumer.poll(0.05)
        done, offset = 0, 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            offset += 1
            [result] = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            if result.error is None:
                done += 1
        return done / (time.perf_counter() - started)
    finally:
        consumer.close()


def zookeeper_commits_per_second(zookeeper: str, topic: str, seconds: float) -> float:
    from sparklog.coordination import offsets
    from sparklog.coordination.connection import close, connect

    zk = connect(zookeeper)
    group = f"bench-zk-commit-{uuid.uuid4().hex[:8]}"
    try:
        claim = offsets.claim(zk, group, "bench-member", topic, 0)
        done, offset = 0, 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            offset += 1
            offsets.commit_owned(zk, group, claim, offset)
            done += 1
        return done / (time.perf_counter() - started)
    finally:
        close(zk)


JOIN_ASSIGNORS = ("range", "cooperative-sticky")
JOIN_SESSION_MS = 10_000
JOIN_HEARTBEAT_MS = 3000  # librdkafka's and Kafka's heartbeat.interval.ms default
# The busy member's work per batch: an eager join stops everyone for half of it on average. Not a multiple of
# the heartbeat interval, whose ticks would otherwise fall at the same point of every batch.
JOIN_BUSY_MS = 2300


def join_stops(bootstrap: str, partitions: int, assignor: str) -> tuple[float, float, float]:
    """(rebalance s, longest stop on an unmoved partition s, steady longest gap s) of one join."""
    from sparklog.client.admin import AdminClient
    from support.group_members import measure_join

    topic = f"join-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions)
    started: list = []
    try:
        found = measure_join(bootstrap, topic, f"bench-join-{uuid.uuid4().hex[:8]}", partitions, assignor,
                             JOIN_SESSION_MS, JOIN_HEARTBEAT_MS, started, busy_ms=JOIN_BUSY_MS)
    finally:
        for member in started:
            member.stop()
    return found.rebalance_s, found.unmoved_gap_s, found.steady_gap_s


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"median {statistics.median(ordered):6.2f}s  min {ordered[0]:6.2f}s  max {ordered[-1]:6.2f}s"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--join-rounds", type=int, default=5)
    args = parser.parse_args(argv)

    from sparklog.broker.coordinator.group.config import DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS
    from sparklog.broker.launcher import LocalCluster
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    rows = []
    for delay_ms in (DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS, 0):
        overrides = {"group.initial.rebalance.delay.ms": str(delay_ms)}
        with LocalCluster(Path(tempfile.mkdtemp(prefix="sparklog-groups-bench-")), brokers=3,
                          overrides=overrides) as cluster:
            zk = connect(cluster.zookeeper)
            try:
                topic = f"groups-{uuid.uuid4().hex[:8]}"
                topics.create_topic(zk, topic, args.partitions, 1)
            finally:
                close(zk)
            time.sleep(1.0)  # brokers learn the topic
            kafka = [kafka_time_to_stable(cluster.bootstrap, topic, args.partitions) for _ in range(args.rounds)]
            rows.append((f"Kafka group (initial delay {delay_ms} ms)", kafka))
            if delay_ms == 0:
                fast = [kafka_time_to_stable(cluster.bootstrap, topic, args.partitions, HEARTBEAT_FAST_MS)
                        for _ in range(args.rounds)]
                rows.append((f"Kafka group (delay 0, heartbeat {HEARTBEAT_FAST_MS} ms)", fast))
                zookeeper = [zookeeper_time_to_stable(cluster.zookeeper, topic, args.partitions)
                             for _ in range(args.rounds)]
                rows.append(("ZooKeeper group (Algorithm 1)", zookeeper))
                kafka_rate = kafka_commits_per_second(cluster.bootstrap, topic, args.commit_seconds)
                zookeeper_rate = zookeeper_commits_per_second(cluster.zookeeper, topic, args.commit_seconds)
                joins = {assignor: [join_stops(cluster.bootstrap, args.partitions, assignor)
                                    for _ in range(args.join_rounds)] for assignor in JOIN_ASSIGNORS}

    print(f"time to Stable, {MEMBERS} members, {args.partitions} partitions, {args.rounds} rounds:")
    for name, values in rows:
        print(f"  {name:<40}{summary(values)}")
    print(f"offset commits per second (synchronous, one partition, {args.commit_seconds:.0f}s each):")
    print(f"  {'Kafka group (OffsetCommit)':<40}{kafka_rate:10.0f}")
    print(f"  {'ZooKeeper group (znode write)':<40}{zookeeper_rate:10.0f}")
    print(f"  {'ratio Kafka / ZooKeeper':<40}{kafka_rate / zookeeper_rate:10.2f}")
    print(f"a third member joins two under steady produce, {args.partitions} partitions, {args.join_rounds} rounds "
          "(medians):")
    print(f"  {'assignor':<22}{'rebalance':>12}{'unmoved stop':>14}{'(max)':>8}{'steady gap':>12}")
    stops = {}
    for assignor, runs in joins.items():
        rebalance, stop, steady = (statistics.median(column) for column in zip(*runs))
        stops[assignor] = stop
        print(f"  {assignor:<22}{rebalance:11.2f}s{stop:13.2f}s{max(r[1] for r in runs):7.2f}s{steady:11.2f}s")
    print(f"  {'ratio cooperative / eager unmoved stop':<40}{stops['cooperative-sticky'] / stops['range']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
