"""What handlers may use: `BrokerState`, its collaborators typed and built in one place (`BrokerState.build`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sparklog.broker.config import BrokerConfig
from sparklog.broker.handlers.fetch_sessions import FetchSessionCache
from sparklog.broker.coordinator.group.coordinator import GroupCoordinator
from sparklog.broker.coordinator.group.offset_store import TopicOffsetStore
from sparklog.broker.coordinator.transaction.coordinator import TransactionCoordinator
from sparklog.broker.quota.manager import QuotaManager, QuotaWindows
from sparklog.broker.meters import RequestMeters, TopicMeters
from sparklog.broker.replication.purgatory import Purgatory
from sparklog.broker.replication.replica_manager import ReplicaManager
from sparklog.coordination.producer_ids import ProducerIdAllocator

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from sparklog.broker.authorization import Authorization
    from sparklog.broker.replication.controller import Controller
    from sparklog.broker.replication.partitions import MetadataSnapshot
    from sparklog.storage import LogManager


class Partitions(Protocol):
    """What handlers use of replication.partitions.PartitionManager: the current metadata and two notes."""

    snapshot: MetadataSnapshot

    def note_topic(self, assignment: Any) -> None: ...

    def forget_topic(self, name: str) -> None: ...


@dataclass
class BrokerState:
    """What handlers may use. `partitions.snapshot` is the metadata; `executor` runs blocking calls (None:
    the loop's default executor). Built by `build`; `zk`, `logs` and `producer_ids` are None only where no
    ZooKeeper or log manager is wanted (unit tests, the request benchmark)."""

    config: BrokerConfig
    broker_id: int
    cluster_id: str
    zk: KazooClient | None
    logs: LogManager | None
    partitions: Partitions
    executor: concurrent.futures.Executor | None
    loop: asyncio.AbstractEventLoop | None
    producer_ids: ProducerIdAllocator | None
    waiters: Purgatory  # parked long-polling fetches and acks=all produces
    replicas: ReplicaManager  # leader state and followers (replica_manager.py)
    groups: GroupCoordinator
    offsets: TopicOffsetStore  # placement and committed offsets of Kafka groups
    transactions: TransactionCoordinator = field(init=False)  # coordinator/transaction/, built by `build`
    controller: Controller | None = None  # who the controller is (Metadata's controller_id)
    authorization: Authorization | None = None  # authorizer.class.name set: every request checked (authorization.py)
    quotas: QuotaManager = field(default_factory=QuotaManager)  # client quotas (dispatch Rule 7)
    offsets_topic_creation: asyncio.Future | None = None  # the one creation of __consumer_offsets in flight
    counters: dict = field(default_factory=lambda: dict.fromkeys(
        ("produced_batches_bytes", "produce_errors", "fetch_waits", "zookeeper_calls"), 0))
    topic_meters: TopicMeters = field(default_factory=TopicMeters)  # per topic, for the metrics endpoint
    request_meters: RequestMeters = field(default_factory=RequestMeters)  # per api (broker/meters.py)
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)  # KIP-227 (fetch_sessions.py)

    @classmethod
    def build(cls, config: BrokerConfig, partitions: Partitions, *, cluster_id: str, zk: KazooClient | None = None,
              logs: LogManager | None = None, executor: concurrent.futures.Executor | None = None,
              loop: asyncio.AbstractEventLoop | None = None, waiters: Purgatory | None = None,
              replicas: ReplicaManager | None = None, groups: GroupCoordinator | None = None,
              offsets: TopicOffsetStore | None = None) -> BrokerState:
        """The one place the handlers' collaborators are made: those not given are built from `config`."""
        waiters = waiters if waiters is not None else Purgatory()
        if replicas is None:
            replicas = ReplicaManager(zk, config.broker_id, waiters, executor)
        groups = groups if groups is not None else GroupCoordinator(config.group)
        if offsets is None:
            offsets = TopicOffsetStore(config.group, partitions, replicas, groups, executor, zk)
        producer_ids = ProducerIdAllocator(zk, config.broker_id) if zk is not None else None
        state = cls(config=config, broker_id=config.broker_id, cluster_id=cluster_id, zk=zk, logs=logs,
                    partitions=partitions, executor=executor, loop=loop, producer_ids=producer_ids, waiters=waiters,
                    replicas=replicas, groups=groups, offsets=offsets,
                    quotas=QuotaManager(QuotaWindows(config.quota_window_num, config.quota_window_size_seconds)),
                    fetch_sessions=FetchSessionCache(
                        config.max_incremental_fetch_session_cache_slots, wake=waiters.wake,
                        topic_id_of=lambda topic: partitions.snapshot.topic_ids_by_name.get(topic)))
        waiters.observe(state.fetch_sessions.changed)  # fetch_sessions.py Rule 5
        state.transactions = TransactionCoordinator(
            config.transaction, partitions, replicas, producer_ids, lambda *topic: _create_topic(state, *topic),
            config.broker_id, executor)
        return state

    async def blocking(self, fn, *args):
        """Run a blocking (ZooKeeper) call on the executor."""
        self.counters["zookeeper_calls"] += 1
        loop = self.loop or asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)


async def _create_topic(state: BrokerState, *topic: Any) -> tuple[int, str | None]:
    """The transaction coordinator's creation of `__transaction_state`: the brokers' one way to create a topic."""
    from sparklog.broker.handlers.metadata import create_topic  # the handlers import this module

    return await create_topic(state, *topic)
