"""The partitions this broker leads, and the cluster metadata every handler answers from.

Rule 1: the metadata handlers see is one immutable `MetadataSnapshot`, swapped whole under no lock; it is
built from ZooKeeper (the topic registry, partition states, `/config/topics/<t>`, the live brokers) and kept
when ZooKeeper is unreachable, so the broker keeps serving what it leads while ZooKeeper is away.
Rule 2: a partition is served (Produce, Fetch, ListOffsets) only if its state names this broker as leader
and its log is open; the log's high watermark alone decides what consumers may see.
Rule 4 (replication): every partition whose replicas include this broker has its log open: LEADER when its
state names this broker as leader, FOLLOWER otherwise (the replica fetcher copies it from the leader; it is
served to clients only as KIP-392 allows, handlers/follower_reads.py: else NOT_LEADER_OR_FOLLOWER). `snapshot.leading` and `snapshot.following` hold
the open logs by role; the replica manager (replica_manager.py) listens to every snapshot and starts or
stops leader state and fetchers on each change of leader or leader epoch.

Rule 3: a log directory belongs to one life of its topic: the topic id (KIP-516, the `"topic_id"` of the
topic's `/brokers/topics/<t>` JSON, coordination/topic_ids.py) is written into its `partition.metadata` when
the log is created, and a log whose id differs (left by a deleted topic of the same name) is deleted, never
served or adopted: one warning line names the directory and both ids.

State transitions of one partition on this broker:

    UNKNOWN  --topic appears, state.leader == me-----------> LEADER: log opened (created) with overrides; a
                                                             log left by an earlier topic of that name
                                                             (other topic id) is deleted first
    UNKNOWN  --topic appears, another leader, a replica here> FOLLOWER: log opened, fetched from the leader
    UNKNOWN  --topic appears, not a replica here-----------> REMOTE: only metadata kept
    LEADER   --state.leader moves to another broker--------> FOLLOWER (a replica here) or REMOTE (log kept)
    FOLLOWER --state.leader moves here--------------------> LEADER (its leader epoch starts at its LEO)
    LEADER|FOLLOWER --leader epoch changes----------------> the same role, in the new epoch
    REMOTE   --state.leader moves here--------------------> LEADER
    LEADER|REMOTE --topic deleted--------------------------> UNKNOWN: a local log is deleted
    LEADER|REMOTE --topic re-created (new id)--------------> UNKNOWN, then as a new topic
    LEADER   --/config/topics/<t> changes------------------> LEADER: the open log is reconfigured at once
                                                             (see below); made compacted, the cleaner wakes
    LEADER|FOLLOWER --the broker's log defaults change----> the same: reconfigured likewise (set_log_defaults)

At startup, once the registry has been read successfully (never before: ZooKeeper being away must not
look like "every topic was deleted"), log directories of topics or partitions absent from it, or whose
topic id differs, are deleted.

Config changes: a changed override is applied to the open log at once with `PartitionLog.reconfigure`
(Kafka's `UnifiedLog.updateConfig`), never by closing and reopening it (that would fail in-flight appends
and fetches), and counted in `statistics().config_changes_applied`. Overrides the storage refuses (a bad
value written to ZooKeeper by hand: the admin APIs validate before writing) are logged once, leave the log
as it is, and are counted in `config_changes_pending` until a valid value replaces them.

The ZooKeeper watch callbacks run on kazoo's thread and only record what changed; one sync thread reads
states and configs and opens or deletes logs, so a slow disk or ZooKeeper never blocks kazoo. Watched:
the topic registry (created, deleted, grown), and per topic its `/config/topics/<t>` node and every
partition's state node.
Rule: read-what-changed: a sync re-reads a topic whole (assignment, config, every partition state, in one
pipelined round trip) only when it is new or its id or assignment changed (a topic deleted and re-created
has a new id); otherwise a config node that fired has the config alone re-read, a partition state node that
fired that partition's state alone (the rest kept as last read), so a topic whose ISRs change one partition
at a time costs one znode read per change, not one per partition of the topic.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from sparklog.broker.replication import partition_metadata
from sparklog.coordination import brokers as broker_registry
from sparklog.coordination import paths as zk_paths
from sparklog.coordination import topic_ids
from sparklog.coordination import topics as topic_registry
from sparklog.storage.config import CLEANUP_COMPACT
from sparklog.storage.config import KEYS as LOG_CONFIG_KEYS
from sparklog.storage.errors import InvalidConfigError, InvalidTopicName
from sparklog.storage.topic_names import parse_partition_dir

log = logging.getLogger(__name__)

NO_LEADER = -1
SYNC_RETRY_DELAY_S = 1.0  # after a ZooKeeper error the sync thread tries again after this
SYNC_JOIN_TIMEOUT_S = 2.0  # how long close() waits for the sync thread (it is a daemon)


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    zk_version: int = -1  # the state znode's version when read (for version-checked ISR writes)
    controller_epoch: int = 0


@dataclass(frozen=True)
class TopicMeta:
    name: str
    partitions: Mapping[int, PartitionMeta]
    config: Mapping[str, str] = field(default_factory=dict)
    assignment: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str | None = None  # None until read from ZooKeeper (partition_metadata.py)


@dataclass(frozen=True)
class MetadataSnapshot:
    """What the cluster looks like, as last read from ZooKeeper."""

    topics: Mapping[str, TopicMeta]
    brokers: Mapping[int, broker_registry.BrokerInfo]
    # (topic, partition) -> the open PartitionLog, for the partitions this broker leads
    leading: Mapping[tuple[str, int], object]
    # (topic, partition) -> the open PartitionLog, for the partitions this broker follows (Rule 4)
    following: Mapping[tuple[str, int], object] = field(default_factory=dict)

    @property
    def controller_id(self) -> int:
        """Any live broker will do (every broker can create topics); the smallest id is stable."""
        return min(self.brokers) if self.brokers else NO_LEADER

    def topic_named_by_id(self, topic_id: uuid.UUID) -> str | None:
        """The topic whose id is `topic_id` (KIP-516 requests by id), or None (UNKNOWN_TOPIC_ID)."""
        if topic_id == topic_ids.ZERO:
            return None
        wanted = topic_ids.to_string(topic_id)
        return next((name for name, meta in self.topics.items() if meta.topic_id == wanted), None)

    @functools.cached_property
    def names_by_topic_id(self) -> Mapping[uuid.UUID, str]:
        """Each topic's name by its id (Fetch v13+ asks by id on every request: one lookup, built once per
        snapshot); topics whose id is not known yet are absent."""
        return {topic_ids.to_uuid(meta.topic_id): name for name, meta in self.topics.items()
                if meta.topic_id is not None}

    @functools.cached_property
    def topic_ids_by_name(self) -> Mapping[str, uuid.UUID]:
        """`names_by_topic_id` the other way round (a fetch session of ids is marked through it)."""
        return {name: topic_id for topic_id, name in self.names_by_topic_id.items()}


@dataclass(frozen=True)
class PartitionManagerStatistics:
    topics: int
    leading: int
    live_brokers: int
    syncs: int
    sync_errors: int
    last_error: str | None
    config_changes_pending: int  # open logs whose newer overrides the storage refused (left as they were)
    stale_logs_deleted: int  # logs of a topic's earlier life (other topic id) or of absent topics
    watches: int
    config_changes_applied: int = 0  # reconfigure() calls on open logs


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
        self._assignments: dict | None = None  # the registry as last reported by its watch
        self._dirty_configs: set[str] = set()  # topics whose config node fired since read
        self._dirty_states: dict[str, set[int]] = {}  # topic -> partitions whose state changed since read
        self._node_watches: set[str] = set()  # znode paths with a live DataWatch of ours
        self._log_ids: dict[tuple[str, int], str | None] = {}  # open log -> the topic id it belongs to
        self._log_overrides: dict[tuple[str, int], dict] = {}  # open log -> the overrides it was opened with
        self._config_pending: dict[tuple[str, int], dict] = {}  # open log -> newer overrides it refused
        self._config_applied = 0
        self._stale_deleted = 0
        self._strays_checked = False

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
            # a sync waiting on an unreachable ZooKeeper ends when the session closes, later in the shutdown:
            # waiting for it here held a SIGTERMed broker past the launcher's stop timeout (issue 26)
            self._thread.join(timeout=SYNC_JOIN_TIMEOUT_S)

    def add_listener(self, fn: Callable[[MetadataSnapshot], None]) -> None:
        """`fn(snapshot)` after each change (called on the sync or kazoo thread)."""
        self._listeners.append(fn)

    def statistics(self) -> PartitionManagerStatistics:
        snap = self.snapshot
        pending = len(self._config_pending)
        return PartitionManagerStatistics(len(snap.topics), len(snap.leading), len(snap.brokers), self._syncs,
                                          self._sync_errors, self._last_error, pending, self._stale_deleted,
                                          len(self._node_watches), self._config_applied)

    # -- watch callbacks (kazoo's thread: record and wake only) ---------------------------------------------

    def _on_topics(self, assignments: dict) -> None:
        with self._lock:
            self._pending = self._assignments = assignments
        self._wake.set()

    def _on_node_change(self, topic: str, partition: int | None) -> bool | None:
        """A DataWatch on a topic's config (`partition` None) or a partition's state fired: re-read that
        config, or that partition's state, on the next sync (Rule: read-what-changed).

        The watch outlives a deleted node (kazoo keeps an exists-watch), so a topic deleted and re-created
        with the same assignment, which the topic registry's watch may report as no change at all, is still
        seen here. Returning False ends the watch: only when closing."""
        if self._closed:
            return False
        with self._lock:
            if partition is None:
                self._dirty_configs.add(topic)
            else:
                self._dirty_states.setdefault(topic, set()).add(partition)
            if self._pending is None and self._assignments is not None:
                self._pending = self._assignments
        self._wake.set()
        return None

    def set_log_defaults(self, log_defaults: Mapping[str, str]) -> None:
        """New broker-level log defaults (dynamic broker configs): every open log is checked on the next sync
        and reconfigured where its settings change (topics' own overrides still win); new logs open with them."""
        with self._lock:
            self.log_defaults = dict(log_defaults)
            if self._pending is None and self._assignments is not None:
                self._pending = self._assignments
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
                self._watch_nodes()
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
        with self._lock:
            dirty, self._dirty_configs = self._dirty_configs, set()
            dirty_states, self._dirty_states = self._dirty_states, {}
        topics = {name: old[name] for name in self._noted if name in old}
        try:
            for name, assignment in assignments.items():
                topic = self._current_topic(name, assignment, old.get(name), name in dirty,
                                            dirty_states.get(name, ()))
                if topic is not None:
                    topics[name] = topic
        except BaseException:
            self._mark_again(dirty, dirty_states)  # read them again on the retry
            raise
        for name in set(old):
            if name not in topics or topics[name].topic_id != old[name].topic_id:
                self._drop_topic(name)  # deleted, or deleted and re-created: the old logs go
        if not self._strays_checked:
            self._delete_stray_logs(topics)  # the registry has just been read in full
            self._strays_checked = True
        self._apply(topics)

    def _current_topic(self, name: str, assignment, known: TopicMeta | None, dirty: bool,
                       changed_states) -> TopicMeta | None:
        """The topic as ZooKeeper says now, reading only what changed (Rule: read-what-changed); None if it
        no longer exists."""
        topic_id = self._topic_id(name)
        if topic_id is None:
            return None  # deleted since the snapshot
        if known is None or known.topic_id != topic_id or dict(known.assignment) != dict(assignment):
            return self._read_whole(name, topic_id)
        changed = sorted(p for p in changed_states if p in known.assignment)
        try:
            states = topic_registry.partition_states(self.zk, name, changed) if changed else {}
        except topic_registry.UnknownTopic:
            return self._read_whole(name, topic_id)  # a state node is gone: the topic is going
        partitions = dict(known.partitions)
        partitions.update((p, partition_meta(p, known.assignment[p], states[p])) for p in states)
        config = topic_registry.topic_config(self.zk, name) if dirty else known.config
        return dataclasses.replace(known, partitions=partitions, config=config)

    def _read_whole(self, name: str, topic_id: str) -> TopicMeta | None:
        try:
            return self._read_topic(name, topic_id)
        except topic_registry.UnknownTopic:
            return None

    def _mark_again(self, dirty: set[str], dirty_states: dict[str, set[int]]) -> None:
        with self._lock:
            self._dirty_configs |= dirty
            for name, partitions in dirty_states.items():
                self._dirty_states.setdefault(name, set()).update(partitions)

    def _topic_id(self, name: str) -> str | None:
        """The id of the topic's current life (topics.topic_id); None if it does not exist."""
        return topic_registry.topic_id(self.zk, name)

    def _read_topic(self, name: str, topic_id: str | None) -> TopicMeta:
        """The topic whole, every partition state in one round trip (topics.get_topics); raise UnknownTopic."""
        found = topic_registry.get_topics(self.zk, [name]).get(name)
        if found is None:
            raise topic_registry.UnknownTopic(f"unknown topic {name!r}")
        return topic_meta(found, found.topic_id or topic_id)

    def note_topic(self, assignment: topic_registry.TopicAssignment) -> None:
        """A topic this broker just created: serve its metadata (and open its logs) before the watch fires."""
        with self._apply_lock:
            self._noted.add(assignment.name)
            topics = dict(self.snapshot.topics)
            try:
                topic_id = assignment.topic_id or self._topic_id(assignment.name)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next sync fills the id in
                log.info("topic %s: id not read yet (%s)", assignment.name, exc)
                topic_id = None
            topics[assignment.name] = topic_meta(assignment, topic_id)
            self._apply(topics)

    def forget_topic(self, name: str) -> None:
        """A topic this broker just deleted: stop serving it before the watch fires."""
        with self._apply_lock:
            self._noted.discard(name)
            if name in self.snapshot.topics:
                self._drop_topic(name)
                self._apply({k: v for k, v in self.snapshot.topics.items() if k != name})

    def _apply(self, topics: dict[str, TopicMeta]) -> None:
        leading, following = {}, {}
        current = {**self.snapshot.following, **self.snapshot.leading}
        for name, topic in topics.items():
            for p, meta in topic.partitions.items():
                if meta.leader != self.broker_id and self.broker_id not in meta.replicas:
                    continue
                key = (name, p)
                opened = current.get(key)
                if opened is None or key not in self._log_ids or self._log_ids[key] != topic.topic_id:
                    opened = self._open_log(name, p, topic)
                else:
                    self._check_open_log(key, opened, topic)
                (leading if meta.leader == self.broker_id else following)[key] = opened
        with self._lock:
            self._publish(topics=topics, leading=leading, following=following)

    def _open_log(self, name: str, p: int, topic: TopicMeta):
        """Open (or create) the log of a partition we lead; a log of the topic's earlier life is deleted."""
        overrides = self._overrides(name, topic.config)
        plog = self.logs.get_or_create(name, p, overrides)
        found = partition_metadata.read(plog.directory)
        if topic.topic_id is not None and found is not None and found != topic.topic_id:
            log.warning("log %s belongs to an earlier topic %s (id %s, now %s): deleting it", plog.directory,
                        name, found, topic.topic_id)
            self.logs.delete(name, p)
            self._stale_deleted += 1
            plog = self.logs.get_or_create(name, p, overrides)
            found = None
        if topic.topic_id is not None and found is None:
            partition_metadata.write(plog.directory, topic.topic_id)
        self._log_ids[(name, p)] = topic.topic_id if topic.topic_id is not None else found
        self._log_overrides[(name, p)] = overrides
        self._config_pending.pop((name, p), None)
        return plog

    def _check_open_log(self, key: tuple[str, int], plog, topic: TopicMeta) -> None:
        """An open log we keep leading: adopt a topic id learnt late; apply changed overrides at once."""
        if self._log_ids.get(key) is None and topic.topic_id is not None:
            partition_metadata.write(plog.directory, topic.topic_id)
            self._log_ids[key] = topic.topic_id
        wanted = self._overrides(key[0], topic.config, quiet=True)
        opened_with = self._log_overrides.get(key)
        if opened_with is None or wanted == opened_with:
            self._config_pending.pop(key, None)
            return
        changed = sorted(k for k in set(wanted) | set(opened_with) if wanted.get(k) != opened_with.get(k))
        try:
            config = self.logs.default_config.with_overrides(wanted)
        except InvalidConfigError as exc:
            if self._config_pending.get(key) != wanted:  # say it once per change
                self._config_pending[key] = wanted
                log.warning("topic %s partition %d: config %s not applied (%s); the log keeps its settings",
                            key[0], key[1], ", ".join(changed), exc)
            return
        compacted_before = CLEANUP_COMPACT in plog.config.cleanup_policies
        plog.reconfigure(config)
        if CLEANUP_COMPACT in config.cleanup_policies and not compacted_before:
            self.logs.cleaner.wake()  # clean it now, not after log.cleaner.backoff.ms
        self._log_overrides[key] = wanted
        self._config_pending.pop(key, None)
        self._config_applied += 1
        log.info("topic %s partition %d: config %s applied to the open log", key[0], key[1], ", ".join(changed))

    def _overrides(self, topic: str, config: Mapping[str, str], quiet: bool = False) -> dict[str, str]:
        overrides = {}
        for key, value in {**self.log_defaults, **config}.items():
            if key in LOG_CONFIG_KEYS:
                overrides[key] = value
            elif key in config and not quiet:
                log.info("topic %s: setting %s=%s is not used by the storage", topic, key, value)
        return overrides

    def _drop_topic(self, name: str) -> None:
        for p in list(self.snapshot.topics[name].partitions):
            self._log_ids.pop((name, p), None)
            self._log_overrides.pop((name, p), None)
            self._config_pending.pop((name, p), None)
            if self.logs.get(name, p) is not None:
                log.info("topic %s deleted: deleting local log of partition %d", name, p)
                self.logs.delete(name, p)

    def _delete_stray_logs(self, topics: Mapping[str, TopicMeta]) -> None:
        """Delete log dirs of topics or partitions absent from the registry, or of a topic's earlier life.
        Called once, after the registry has been read successfully."""
        for log_dir in self.logs.log_dirs:
            try:
                names = os.listdir(log_dir)
            except FileNotFoundError:
                continue
            for dirname in names:
                path = os.path.join(log_dir, dirname)
                try:
                    name, p = parse_partition_dir(dirname)
                except InvalidTopicName:
                    continue
                topic = topics.get(name)
                found = partition_metadata.read(path)
                if topic is not None and p in topic.partitions and (
                        found is None or topic.topic_id is None or found == topic.topic_id):
                    continue
                if topic is None and self._topic_id(name) is not None:
                    continue  # created since the registry was read: the next sync handles it
                why = "its topic is not in ZooKeeper" if topic is None or p not in topic.partitions else (
                    f"it belongs to an earlier topic {name} (id {found}, now {topic.topic_id})")
                log.warning("deleting log %s: %s", path, why)
                self._stale_deleted += 1
                if self.logs.get(name, p) is not None:
                    self.logs.delete(name, p)
                elif os.path.isdir(path):
                    shutil.rmtree(path)  # never opened: nothing of the storage's holds it

    def _watch_nodes(self) -> None:
        """A DataWatch on each topic's config node and each partition state node (once per path)."""
        for name, topic in self.snapshot.topics.items():
            wanted: list[tuple[str, int | None]] = [(zk_paths.topic_config(name), None)]
            wanted += [(zk_paths.partition_state(name, p), p) for p in topic.partitions]
            for path, partition in wanted:
                with self._lock:
                    if path in self._node_watches or self._closed:
                        continue
                    self._node_watches.add(path)
                self.zk.DataWatch(path, self._node_watcher(name, partition))

    def _node_watcher(self, topic: str, partition: int | None):
        """Every call re-reads what the node holds (the topic for its config node, one partition's state for a
        state node), the call made when the watch is set too: the node may have changed between the sync's
        read and this watch (a restarted broker that the controller re-elects meanwhile must still learn that
        it leads). That costs one more read per node when its watch is set."""

        def watcher(data, stat):  # exactly two parameters (kazoo passes the event to a third)
            return self._on_node_change(topic, partition)

        return watcher

    def _publish(self, topics=None, brokers=None, leading=None, following=None) -> None:
        old = self.snapshot
        self.snapshot = MetadataSnapshot(
            topics=old.topics if topics is None else topics,
            brokers=old.brokers if brokers is None else brokers,
            leading=old.leading if leading is None else leading,
            following=old.following if following is None else following,
        )
        for fn in self._listeners:
            fn(self.snapshot)


def topic_meta(found: topic_registry.TopicAssignment, topic_id: str | None = None) -> TopicMeta:
    partitions = {p: partition_meta(p, replicas, found.states.get(p)) for p, replicas in found.partitions.items()}
    return TopicMeta(found.name, partitions, dict(found.config), dict(found.partitions), topic_id)


def partition_meta(p: int, replicas, state: topic_registry.PartitionState | None) -> PartitionMeta:
    """One partition's metadata from its assignment and its state znode (None: not written yet, no leader)."""
    if state is None:
        return PartitionMeta(p, NO_LEADER, -1, tuple(replicas), ())
    return PartitionMeta(p, state.leader, state.leader_epoch, tuple(replicas), tuple(state.isr), state.zk_version,
                         state.controller_epoch)
