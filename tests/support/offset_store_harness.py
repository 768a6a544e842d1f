"""The `__consumer_offsets` store's test harness: a hand-made metadata snapshot in which this broker leads
partition 0 (or loses it), an injected clock, a store over a real replica manager and purgatory, and the wait
for its load. Shared by the store's tests (tests/unit/broker/coordinator/group)."""

from __future__ import annotations

import asyncio

from sparklog.broker.coordinator.group import offset_store
from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.coordinator import GroupCoordinator
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, TopicOffsetStore
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.broker.replication.purgatory import Purgatory
from sparklog.broker.replication.replica_manager import ReplicaManager
from sparklog.coordination.brokers import BrokerInfo

ME, OTHER, THIRD = 1, 2, 3
RETENTION_MIN = 10


class Partitions:
    def __init__(self):
        self.snapshot = MetadataSnapshot({}, {}, {})

    def lead(self, plog, replicas=(ME,), isr=(ME,), min_insync=1, epoch=0):
        meta = PartitionMeta(0, ME, epoch, replicas, isr)
        topic = TopicMeta(OFFSETS_TOPIC, {0: meta}, {"min.insync.replicas": str(min_insync)})
        plog.reconfigure(plog.config.with_overrides(topic.config))  # as the partition manager applies it
        brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (ME, OTHER, THIRD)}
        self.snapshot = MetadataSnapshot({OFFSETS_TOPIC: topic}, brokers, {(OFFSETS_TOPIC, 0): plog})

    def topics(self, **ids):
        """Set the cluster's other topics: {name: topic id (None: not read yet)}, one partition each."""
        topics = {OFFSETS_TOPIC: self.snapshot.topics[OFFSETS_TOPIC]}
        for name, topic_id in ids.items():
            topics[name] = TopicMeta(name, {0: PartitionMeta(0, OTHER, 0, (OTHER,), (OTHER,))}, {}, {}, topic_id)
        self.snapshot = MetadataSnapshot(topics, self.snapshot.brokers, self.snapshot.leading)

    def lose(self):
        topic = self.snapshot.topics[OFFSETS_TOPIC]
        moved = TopicMeta(OFFSETS_TOPIC, {0: PartitionMeta(0, OTHER, 1, (ME, OTHER), (OTHER,))}, topic.config)
        self.snapshot = MetadataSnapshot({OFFSETS_TOPIC: moved}, self.snapshot.brokers, {})


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self):
        return self.now


def new_store(partitions, clock=None, zk=None, **config):
    settings = {"offsets_topic_num_partitions": 1, "offsets_commit_timeout_ms": 300,
                "offsets_retention_minutes": RETENTION_MIN, **config}
    replicas = ReplicaManager(None, ME, Purgatory())
    return TopicOffsetStore(GroupConfig(**settings), partitions, replicas, GroupCoordinator(GroupConfig()),
                            zk=zk, clock_ms=clock or Clock())


async def loaded(store):
    store.on_snapshot(store.partitions.snapshot)
    for _ in range(3000):  # 30 s: the load runs on the executor, which a loaded machine schedules late
        if store.status("g") != offset_store.COORDINATOR_LOAD_IN_PROGRESS:
            return store
        await asyncio.sleep(0.01)
    raise AssertionError("the offsets partition did not load")
