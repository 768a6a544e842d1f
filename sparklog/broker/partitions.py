"""The partitions this broker leads, and the cluster metadata every handler answers from.

Rule 1: the metadata handlers see is one immutable `MetadataSnapshot`, swapped whole under no lock; it is
built from ZooKeeper (the topic registry, partition states, `/config/topics/<t>`, the live brokers) and kept
when ZooKeeper is unreachable, so the broker keeps serving what it leads while ZooKeeper is away.
Rule 2: a partition is served (Produce, Fetch, ListOffsets) only if its state names this broker as leader
and its log is open; the log's high watermark alone decides what consumers may see.

State transitions of one partition on this broker:

    UNKNOWN  --topic appears, state.leader == me-----------> LEADER: log opened (created) with overrides
    UNKNOWN  --topic appears, another leader---------------> REMOTE: only metadata kept
    LEADER   --state.leader moves away (later: replication)-> REMOTE: log closed, kept on disk
    LEADER|REMOTE --topic deleted--------------------------> UNKNOWN: a local log is deleted

The ZooKeeper watch callbacks run on kazoo's thread and only record the newest snapshot; one sync thread
reads states and configs and opens or deletes logs, so a slow disk or ZooKeeper never blocks kazoo.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

from sparklog.coordination import brokers as broker_registry
from sparklog.coordination import topics as topic_registry
from sparklog.storage.config import KEYS as LOG_CONFIG_KEYS

log = logging.getLogger(__name__)

NO_LEADER = -1
SYNC_RETRY_DELAY_S = 1.0  # after a ZooKeeper error the sync thread tries again after this


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicMeta:
    name: str
    partitions: Mapping[int, PartitionMeta]
    config: Mapping[str, str] = field(default_factory=dict)
    assignment: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class MetadataSnapshot:
    """What the cluster looks like, as last read from ZooKeeper."""

    topics: Mapping[str, TopicMeta]
    brokers: Mapping[int, broker_registry.BrokerInfo]
    # (topic, partition) -> the open PartitionLog, for the partitions this broker leads
    leading: Mapping[tuple[str, int], object]

    @property
    def controller_id(self) -> int:
        """Any live broker will do (every broker can create topics); the smallest id is stable."""
        return min(self.brokers) if self.brokers else NO_LEADER


@dataclass(frozen=True)
class PartitionManagerStatistics:
    topics: int
    leading: int
    live_brokers: int
    syncs: int
    sync_errors: int
    last_error: str | None


class PartitionManager:
    """Opens the logs of the partitions this broker leads and keeps `snapshot` current (module docstring)."""

    def __init__(self, zk, broker_id: int, logs, log_defaults: Mapping[str, str] | None = None,
                 self_info: broker_registry.BrokerInfo | None = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.logs = logs
        self.log_defaults = dict(log_defaults or {})
        self.self_info = self_info
        self.snapshot = MetadataSnapshot({}, {self_info.id: self_info} if self_info else {}, {})
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: dict | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._watches: list = []
        self._listeners: list[Callable[[MetadataSnapshot], None]] = []
        self._syncs = 0
        self._sync_errors = 0
        self._last_error: str | None = None
        self._synced = threading.Event()
        self._apply_lock = threading.RLock()  # one writer of topics/leading at a time
        self._noted: set[str] = set()  # created here, not yet seen by the watch

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Watch the registries and open what this broker leads; returns after the first sync."""
        self._thread = threading.Thread(target=self._run, name="partition-sync", daemon=True)
        self._thread.start()
        self._watches.append(broker_registry.watch_brokers(self.zk, self._on_brokers))
        self._watches.append(topic_registry.watch_topics(self.zk, self._on_topics))
        self._synced.wait(timeout)

    def close(self) -> None:
        self._closed = True
        for watch in self._watches:
            watch.stop()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def add_listener(self, fn: Callable[[MetadataSnapshot], None]) -> None:
        """`fn(snapshot)` after each change (called on the sync or kazoo thread)."""
        self._listeners.append(fn)

    def statistics(self) -> PartitionManagerStatistics:
        snap = self.snapshot
        return PartitionManagerStatistics(len(snap.topics), len(snap.leading), len(snap.brokers), self._syncs,
                                          self._sync_errors, self._last_error)

    # -- watch callbacks (kazoo's thread: record and wake only) ---------------------------------------------

    def _on_topics(self, assignments: dict) -> None:
        with self._lock:
            self._pending = assignments
        self._wake.set()

    def _on_brokers(self, live: dict) -> None:
        with self._lock:
            brokers = dict(live)
            if self.self_info is not None:
                brokers.setdefault(self.self_info.id, self.self_info)
            self._publish(brokers=brokers)

    # -- the sync thread --------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is None:
                continue
            try:
                self.sync(pending)
                self._syncs += 1
                self._synced.set()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away or a disk error: keep serving, retry
                self._sync_errors += 1
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.warning("partition sync failed (%s); retrying in %.0fs", self._last_error, SYNC_RETRY_DELAY_S)
                with self._lock:
                    if self._pending is None:
                        self._pending = pending
                self._wake.wait(SYNC_RETRY_DELAY_S)
                self._wake.set()

    def sync(self, assignments: Mapping[str, Mapping[int, tuple[int, ...]]]) -> None:
        """Bring topics and open logs in line with the registry's `{topic: {partition: replicas}}`."""
        with self._apply_lock:
            self._sync(assignments)

    def _sync(self, assignments) -> None:
        old = self.snapshot.topics
        self._noted -= set(assignments)
        topics = {name: old[name] for name in self._noted if name in old}
        for name, assignment in assignments.items():
            known = old.get(name)
            if known is not None and dict(known.assignment) == dict(assignment):
                topics[name] = known
                continue
            try:
                topics[name] = self._read_topic(name)
            except topic_registry.UnknownTopic:
                continue  # deleted since the snapshot
        for name in set(old) - set(topics):
            self._drop_topic(name)
        self._apply(topics)

    def _read_topic(self, name: str) -> TopicMeta:
        found = topic_registry.get_topic(self.zk, name)
        return topic_meta(found)

    def note_topic(self, assignment: topic_registry.TopicAssignment) -> None:
        """A topic this broker just created: serve its metadata (and open its logs) before the watch fires."""
        with self._apply_lock:
            self._noted.add(assignment.name)
            topics = dict(self.snapshot.topics)
            topics[assignment.name] = topic_meta(assignment)
            self._apply(topics)

    def forget_topic(self, name: str) -> None:
        """A topic this broker just deleted: stop serving it before the watch fires."""
        with self._apply_lock:
            self._noted.discard(name)
            if name in self.snapshot.topics:
                self._drop_topic(name)
                self._apply({k: v for k, v in self.snapshot.topics.items() if k != name})

    def _apply(self, topics: dict[str, TopicMeta]) -> None:
        leading = {}
        current = self.snapshot.leading
        for name, topic in topics.items():
            for p, meta in topic.partitions.items():
                if meta.leader != self.broker_id:
                    continue
                opened = current.get((name, p))
                if opened is None:
                    opened = self.logs.get_or_create(name, p, self._overrides(name, topic.config))
                leading[(name, p)] = opened
        with self._lock:
            self._publish(topics=topics, leading=leading)

    def _overrides(self, topic: str, config: Mapping[str, str]) -> dict[str, str]:
        overrides = {}
        for key, value in {**self.log_defaults, **config}.items():
            if key in LOG_CONFIG_KEYS:
                overrides[key] = value
            elif key in config:
                log.info("topic %s: setting %s=%s is not used by the storage", topic, key, value)
        return overrides

    def _drop_topic(self, name: str) -> None:
        for p in list(self.snapshot.topics[name].partitions):
            if self.logs.get(name, p) is not None:
                log.info("topic %s deleted: deleting local log of partition %d", name, p)
                self.logs.delete(name, p)

    def _publish(self, topics=None, brokers=None, leading=None) -> None:
        old = self.snapshot
        self.snapshot = MetadataSnapshot(
            topics=old.topics if topics is None else topics,
            brokers=old.brokers if brokers is None else brokers,
            leading=old.leading if leading is None else leading,
        )
        for fn in self._listeners:
            fn(self.snapshot)


def topic_meta(found: topic_registry.TopicAssignment) -> TopicMeta:
    partitions = {}
    for p, replicas in found.partitions.items():
        state = found.states.get(p)
        if state is None:
            partitions[p] = PartitionMeta(p, NO_LEADER, -1, tuple(replicas), ())
        else:
            partitions[p] = PartitionMeta(p, state.leader, state.leader_epoch, tuple(replicas), tuple(state.isr))
    return TopicMeta(found.name, partitions, dict(found.config), dict(found.partitions))
