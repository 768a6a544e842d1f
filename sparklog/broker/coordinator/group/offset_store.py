"""Where a Kafka group is coordinated and where its committed offsets are kept: the one authority for both.

Placement (Kafka's `GroupMetadataManager.partitionFor`): a group belongs to partition
`abs(java_hash(group)) % offsets.topic.num.partitions` of the `__consumer_offsets` topic, and its coordinator
is that partition's leader. The topic is created on demand by the first FindCoordinator or group request
(offsets_topic.py); until it has a live leader for the group's partition there is no coordinator.

Offsets (design notes 5.5): a commit appends one record per partition, keyed (group, topic, partition) in
Kafka's own schema (protocol/consumer_offsets.py), to the group's partition, which this broker leads; it is
acknowledged only once the high watermark passes it (acks=all: on every in-sync replica), and only then
enters the in-memory cache that `fetch` answers from. The topic is compacted: its last record per key is
the committed offset, a tombstone deletes it.

Answers, as Kafka's coordinator gives them (`status` for every group request, `commit` per partition):
- NOT_COORDINATOR: this broker does not lead the group's partition (or stopped leading it meanwhile, or
  its log failed); the client looks the coordinator up again.
- COORDINATOR_LOAD_IN_PROGRESS: this broker has just become its leader and is reading it into the cache, or
  is about to (the snapshot that names it leader is published before `on_snapshot` starts the load).
- COORDINATOR_NOT_AVAILABLE: no such topic yet, fewer in-sync replicas than min.insync.replicas, or the
  commit was not replicated within `offsets.commit.timeout.ms` (Kafka maps REQUEST_TIMED_OUT and
  NOT_ENOUGH_REPLICAS to it); retriable.
- INVALID_COMMIT_OFFSET_SIZE: the records are larger than the log takes.

Load and unload (Kafka's onElection / onResignation), from every metadata snapshot, on the event loop:
    not led --this broker leads partition p (a new log object or a new leader epoch)--> LOADING: the log is read
        from its start to its end at that moment on an executor thread (`offsets.load.buffer.size` at a time)
    LOADING --read to the end--> LOADED (served)
    LOADING | LOADED --p no longer led here--> not led: the cache is dropped, and the groups placed on p are
        closed (their waiting joins and syncs answered NOT_COORDINATOR) so their members find the new one.
A load that fails (a storage error) is retried after `LOAD_RETRY_S` while this broker still leads p.

Expiry: every `offsets.retention.check.interval.ms`, offset_cache.py's Rule 3 decides which offsets of
groups without members expire; they are deleted by tombstones written like commits. DeleteGroups writes
tombstones for every offset of the group, OffsetDelete for the partitions it names.

Deleted topics (Kafka's `GroupMetadataManager` on partitions deleted): a topic this broker has seen in its
metadata and then sees gone, or replaced by a new life of the same name (another topic id: a deletion and a
re-creation faster than one snapshot), is deleted. Its offsets in every loaded cache are dropped at once and
tombstoned in the log (appended without waiting for the in-sync replicas, as Kafka appends them with acks=0;
a failed append is logged and the cache keeps them dropped); a cache still loading at that moment drops them
when loaded (all it read predates the deletion). A re-created topic then starts without committed offsets,
and a restart does not bring them back (the cache is rebuilt from the log, tombstones included).
    known (in an observed snapshot, with id i) --absent, or id j != i, in a later snapshot--> deleted
A topic never seen is never deleted: the first snapshots after a start (empty, or written before the topics
were read) cannot remove live offsets. Commits and fetches look at the newest snapshot first, so a commit to
a re-created topic cannot be appended before the tombstones of its earlier life. Not covered (as in Kafka's
ZooKeeper mode): a deletion no running coordinator of the group's partition saw (every broker down, or
leadership moving at that very moment); those offsets stay hidden while the topic is absent (handlers'
OffsetFetch) and expire as usual.

Migration from ZooKeeper (offsets committed before this store, in `/consumers/<group>/offsets/...`), as
Kafka 0.8.2's dual-read did: `fetch` of a (group, topic, partition) the topic has never seen (no record of
it, not even a tombstone: offset_cache Rule 2) reads the ZooKeeper registry, read-only; the key's first
commit here moves it to the topic for good (a fetch then never asks ZooKeeper for it). DeleteGroups also
deletes the group's ZooKeeper offsets (so they do not come back), unless a ZooKeeper group of that name has
consumers; expiry deletes only what is in the topic. The paper's ZooKeeper groups and the Spark source keep
their offsets in ZooKeeper (coordination/offsets.py), untouched by this store.

Transactional offsets (TxnOffsetCommit, Kafka's `storeOffsets` with a producer id): the offsets go through
the same append as a commit, as one transactional batch of the request's producer id and epoch (its
sequence the next after that producer's last batch in this log; an epoch below the log's is refused
INVALID_PRODUCER_EPOCH), acknowledged once the in-sync replicas have it, and are then held pending in the
cache (offset_cache Rule: transactional-offsets-pending). The transaction coordinator added this partition to
the transaction (AddOffsetsToTxn), so its marker comes here (WriteTxnMarkers): once the marker is replicated,
`complete_transaction` commits the producer's pending offsets (COMMIT) or drops them (ABORT). A load replays
the log the same way: transactional records pending per producer id, decided by the markers it meets,
those still undecided left pending for the marker to come; so the state after a failover or a restart equals
the state before. The log's own rules keep that true under compaction (storage/cleaner.py Rule: clean-range:
nothing at or past the last stable offset is cleaned, so an undecided transaction's records stay; Rule:
dirty-keys-mapped: an aborted record never supersedes a committed one, and aborted records go; markers are
kept). While the partition has an undecided transaction its LSO stays behind it, which nothing here reads.
    pending --COMMIT marker replicated--> committed (unless the key has a later record: offset_cache Rule 1)
    pending --ABORT marker replicated--> dropped

Consumer groups of the consumer group protocol (KIP-848, consumer_coordinator Rule 5): their records
(consumer_group_state.py) share the group's partition with its offsets. `append_records` appends them as a
commit is appended and acknowledges once the in-sync replicas have them; a load reads them with the offsets
(the last record of each key, a tombstone deleting it) and hands them to the consumer groups in the same
step of the loop that marks the partition LOADED, so no heartbeat is served before its group is rebuilt.

Rule 1: everything here runs on the event loop; reading logs (a load) and ZooKeeper calls run on the
executor, so the loop never waits for them. A commit's append runs on the loop, as a Produce's does
(handlers.produce): one write of one small batch to the page cache (fsynced by the flusher, unless the topic sets
flush.messages), where a hop to an executor thread and back cost more than the write, on every commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.consumer_group_state import GroupRecordSet
from sparklog.broker.coordinator.group.offset_cache import CacheState, Committed, PartitionOffsets
from sparklog.coordination import offsets as offset_registry
from sparklog.coordination import topic_ids as topic_id_codec
from sparklog.protocol import consumer_offsets as records_schema
from sparklog.protocol import errors
from sparklog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, build_batch, iter_batches, next_fetch_offset
from sparklog.records.control import InvalidControlRecord, parse_marker
from sparklog.storage.errors import InvalidProducerEpoch, LogClosedError, RecordBatchTooLarge, StorageError

log = logging.getLogger(__name__)

OFFSETS_TOPIC = records_schema.TOPIC
NO_COORDINATOR = -1
LOAD_RETRY_S = 1.0

NONE = 0
NOT_COORDINATOR = errors.NotCoordinatorError.errno
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
INVALID_COMMIT_OFFSET_SIZE = errors.InvalidCommitOffsetSizeError.errno
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno

TopicPartition = tuple[str, int]
OffsetAndMetadata = offset_registry.OffsetAndMetadata


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units, 32-bit signed), which Kafka partitions groups by."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions` (`Utils.abs` masks the sign)."""
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


class OffsetStoreError(Exception):
    """The store cannot answer for a group now; `code` is the Kafka error to send (module docstring)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or errors.for_code(code).__name__)
        self.code = code


@dataclass(frozen=True)
class OffsetStoreStatistics:
    loaded_partitions: int
    loading_partitions: int
    groups: int
    offsets: int
    commits: int
    failed_commits: int
    expired_offsets: int
    loads: int
    zookeeper_fallbacks: int
    deleted_topic_offsets: int = 0  # offsets dropped because their topic was deleted


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TopicOffsetStore:
    """Committed offsets in `__consumer_offsets` (module docstring). `replicas` is the ReplicaManager (its
    leader states and purgatory), `partitions` anything with `.snapshot`, `groups` the GroupCoordinator."""

    def __init__(self, config: GroupConfig, partitions, replicas, groups, executor=None, zk=None,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.num_partitions = config.offsets_topic_num_partitions
        self.partitions = partitions
        self.replicas = replicas
        self.groups = groups
        self.executor = executor
        self.zk = zk
        self.clock_ms = clock_ms
        self._caches: dict[int, PartitionOffsets] = {}
        self._logs: dict[int, object] = {}  # offsets partition -> the log its cache was loaded from
        self._expiry_task: asyncio.Task | None = None
        self._counts = dict.fromkeys(("commits", "failed_commits", "expired", "loads", "fallbacks", "deleted"), 0)
        self._topic_ids: dict[str, str | None] = {}  # topic -> its id, in the snapshot last observed
        self._topics_seen = None  # that snapshot's `topics` (compared by identity: observed once)
        self._deleted_while_loading: dict[int, set[str]] = {}  # loading partition -> topics deleted meanwhile
        groups.consumer_groups.sink = self  # KIP-848 groups' records go here ("Consumer groups")

    # -- placement ------------------------------------------------------------------------------------------

    def partition_for(self, group: str) -> int:
        return offsets_partition(group, self.num_partitions)

    def coordinator_for(self, group: str, snapshot) -> int:
        """The live leader of the group's offsets partition under this snapshot, or NO_COORDINATOR."""
        topic = snapshot.topics.get(OFFSETS_TOPIC)
        meta = topic.partitions.get(self.partition_for(group)) if topic is not None else None
        if meta is None or meta.leader not in snapshot.brokers:
            return NO_COORDINATOR
        return meta.leader

    def status(self, group: str) -> int:
        """NONE if this broker serves the group's offsets now, else the error to answer (module docstring)."""
        snapshot = self.partitions.snapshot
        if OFFSETS_TOPIC not in snapshot.topics:
            return COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group)
        if (OFFSETS_TOPIC, partition) not in snapshot.leading:
            return NOT_COORDINATOR
        cache = self._caches.get(partition)  # None: led, its load not started yet (on_snapshot runs later)
        return NONE if cache is not None and cache.state is CacheState.LOADED else COORDINATOR_LOAD_IN_PROGRESS

    # -- offsets --------------------------------------------------------------------------------------------

    async def commit(self, group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
                     ) -> dict[TopicPartition, int]:
        """Append the offsets, wait for the in-sync replicas, then cache them; the error code per partition."""
        self.observe_topics()
        now = self.clock_ms()
        changes = {tp: Committed(o.offset, o.metadata, now, -1, o.leader_epoch) for tp, o in offsets.items()}
        code = await self._write(group, changes)
        return dict.fromkeys(offsets, code)

    async def commit_transactional(self, group: str, producer: tuple[int, int],
                                   offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
        """TxnOffsetCommit ("Transactional offsets"): append the offsets as a transactional batch of
        `producer` (id, epoch), wait for the in-sync replicas, then hold them pending until its marker."""
        self.observe_topics()
        now = self.clock_ms()
        changes = {tp: Committed(o.offset, o.metadata, now, -1, o.leader_epoch) for tp, o in offsets.items()}
        code = await self._write(group, changes, producer)
        return dict.fromkeys(offsets, code)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The marker of `producer_id`'s transaction is on offsets partition `partition` (replicated): its
        pending offsets there are committed or dropped (offset_cache Rule: transactional-offsets-pending). A
        partition not (yet) loaded here has nothing to decide: its load reads the marker from the log."""
        cache = self._caches.get(partition)
        if cache is not None:
            decided = cache.complete(producer_id, commit)
            log.debug("%s-%d: producer %d's %d transactional offset(s) %s", OFFSETS_TOPIC, partition, producer_id,
                      decided, "committed" if commit else "aborted")

    def unstable(self, group: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The partitions of `partitions` with transactional offsets of `group` still pending (OffsetFetch's
        require_stable answers them UNSTABLE_OFFSET_COMMIT). Raises OffsetStoreError as `fetch` does."""
        cache = self._served_cache(group)
        return {tp for tp in partitions if cache.has_pending(group, tp)}

    def pending_partitions(self, group: str) -> set[TopicPartition]:
        """Every partition with a pending transactional offset of `group` (require_stable for all partitions)."""
        cache = self._served_cache(group)
        return {tp for held in cache.pending().values() for g, tp in held if g == group}

    async def fetch(self, group: str, partitions: Iterable[TopicPartition] | None
                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of `partitions` (all the group's when None); absent when never committed.
        Keys the topic has never seen are read from ZooKeeper (the migration, module docstring). Raises
        OffsetStoreError when this broker cannot answer for the group now, or ZooKeeper cannot be read."""
        self.observe_topics()
        cache = self._served_cache(group)
        wanted = None if partitions is None else list(partitions)
        found = {tp: OffsetAndMetadata(c.offset, c.metadata, c.leader_epoch)
                 for tp, c in cache.offsets(group, wanted).items()}
        unseen = None if wanted is None else [tp for tp in wanted if not cache.seen(group, tp)]
        if self.zk is None or unseen == []:
            return found
        self._counts["fallbacks"] += 1
        try:
            legacy = await self._blocking(offset_registry.fetch_offsets, self.zk, group, unseen)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: "could not read" is not "none"
            log.warning("reading the ZooKeeper offsets of group %s failed: %s", group, exc)
            raise OffsetStoreError(COORDINATOR_NOT_AVAILABLE, str(exc)) from None
        return {**{tp: o for tp, o in legacy.items() if not cache.seen(group, tp)}, **found}

    async def delete(self, group: str) -> bool:
        """Tombstone every offset of the group (and drop its ZooKeeper offsets); False if it had none.
        Raises OffsetStoreError when the tombstones were not written, offsets.GroupNotEmpty while a ZooKeeper
        group of that name has consumers."""
        cache = self._served_cache(group)
        had = False
        if self.zk is not None:  # first: a ZooKeeper group with consumers keeps everything
            try:
                await self._blocking(offset_registry.delete_group, self.zk, group)
                had = True
            except offset_registry.UnknownGroup:
                pass
        live = cache.offsets(group)
        if live:
            code = await self._write(group, self._tombstones(live))
            if code != NONE:
                raise OffsetStoreError(code)
        return had or bool(live)

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> int:
        """OffsetDelete: tombstone the group's offsets of `partitions` (one batch, acknowledged as a commit is);
        NONE, or the error of the write. A partition whose offset only ZooKeeper holds (the migration) gets a
        tombstone too: a key the topic has seen is never read from ZooKeeper again, so the offset stays gone.
        Raises OffsetStoreError when this broker cannot answer for the group now."""
        self.observe_topics()
        cache = self._served_cache(group)
        wanted = list(partitions)
        live = cache.offsets(group, wanted)
        doomed = [tp for tp in wanted if tp in live or (self.zk is not None and not cache.seen(group, tp))]
        if not doomed:
            return NONE
        return await self._write(group, self._tombstones(dict.fromkeys(doomed)))

    async def append_records(self, group: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """A consumer group's records ("Consumer groups"): appended as one batch, NONE once the in-sync
        replicas have them, else the error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...)."""
        now = self.clock_ms()
        code, led, base = self._append_records(group, [(k, v, None, now) for k, v in records])
        if code != NONE:
            return code
        return await self._replicated(led, base + len(records))

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """The cluster's topic ids by name, in the newest snapshot (topics without an id left out)."""
        return {name: topic_id_codec.to_uuid(meta.topic_id) for name, meta in self.partitions.snapshot.topics.items()
                if meta.topic_id is not None}

    def groups_with_offsets(self, group: str | None = None) -> list[str]:
        """Groups with committed offsets in the partitions loaded here (of `group`'s partition only, if given)."""
        if group is not None:
            cache = self._caches.get(self.partition_for(group))
            caches = [cache] if cache is not None else []
        else:
            caches = list(self._caches.values())
        return sorted(g for c in caches if c.state is CacheState.LOADED for g in c.groups())

    def _served_cache(self, group: str) -> PartitionOffsets:
        code = self.status(group)
        if code != NONE:
            raise OffsetStoreError(code)
        return self._caches[self.partition_for(group)]

    def _tombstones(self, live: Mapping[TopicPartition, Committed]) -> dict[TopicPartition, Committed]:
        now = self.clock_ms()
        return {tp: Committed(None, "", now, -1) for tp in live}

    async def _write(self, group: str, changes: dict[TopicPartition, Committed],
                     producer: tuple[int, int] | None = None) -> int:
        """Append `changes` (None offsets are tombstones) as one batch (transactional, of `producer`, when
        given); NONE once the HW passes it, when the cache takes them (as pending ones, for a transaction);
        else the error code. Counted as commits."""
        code = await self._append_and_wait(group, changes, producer)
        self._counts["commits" if code == NONE else "failed_commits"] += 1
        return code

    async def _append_and_wait(self, group: str, changes: dict[TopicPartition, Committed],
                               producer: tuple[int, int] | None) -> int:
        code, led, base = self._append(group, changes, producer=producer)
        if code != NONE:
            return code
        partition = self.partition_for(group)
        cache = self._caches[partition]
        code = await self._replicated(led, base + len(changes))
        if code == NONE and self._caches.get(partition) is cache:
            for i, (tp, c) in enumerate(changes.items()):
                placed = Committed(c.offset, c.metadata, c.commit_timestamp, base + i, c.leader_epoch)
                if producer is None:
                    cache.apply(group, tp, placed)
                else:
                    cache.add_pending(producer[0], group, tp, placed)
        return code

    def _append(self, group: str, changes: dict[TopicPartition, Committed], acks_all: bool = True,
                producer: tuple[int, int] | None = None) -> tuple[int, object, int]:
        """Append `changes` as one batch on the loop (Rule 1): (NONE, leader state, base offset) or (error, None,
        -1). `acks_all` refuses first when the in-sync replicas are fewer than min.insync.replicas. A
        transactional batch of `producer` takes the sequence after the producer's last one in this log (the
        store is the log's only writer, on the loop: nothing comes between); a fenced epoch is refused."""
        records = [(_key(group, tp), _value(c), None, c.commit_timestamp) for tp, c in changes.items()]
        return self._append_records(group, records, acks_all, producer)

    def _append_records(self, group: str, records: list, acks_all: bool = True,
                        producer: tuple[int, int] | None = None) -> tuple[int, object, int]:
        """`_append` of records already built: (key, value, headers, timestamp) each."""
        code = self.status(group)
        if code != NONE:
            return code, None, -1
        partition = self.partition_for(group)
        led = self.replicas.leader_of(self.partitions.snapshot, (OFFSETS_TOPIC, partition))
        if led is None or led.fenced:
            return NOT_COORDINATOR, None, -1
        if acks_all and led.below_min_insync:
            return COORDINATOR_NOT_AVAILABLE, None, -1  # Kafka's mapping of NOT_ENOUGH_REPLICAS
        batch = build_batch(records) if producer is None else build_batch(
            records, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True,
            base_sequence=_next_sequence(led.plog, *producer))
        try:
            base = led.plog.append_as_leader(batch, led.leader_epoch)
        except InvalidProducerEpoch:
            return INVALID_PRODUCER_EPOCH, None, -1
        except LogClosedError:
            return NOT_COORDINATOR, None, -1
        except RecordBatchTooLarge:
            return INVALID_COMMIT_OFFSET_SIZE, None, -1
        except (OSError, StorageError) as exc:  # Kafka: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR
            log.error("appending offsets of group %s to %s-%d failed: %s", group, OFFSETS_TOPIC, partition, exc)
            return NOT_COORDINATOR, None, -1
        self.replicas.after_leader_append(led)
        return NONE, led, base

    async def _replicated(self, led, required_offset: int) -> int:
        """acks=all: wait in the purgatory until the HW reaches `required_offset` (handlers' DelayedProduce)."""
        outcome = []

        def settled() -> bool:
            outcome[:] = [self.replicas.produce_outcome(led, required_offset)]
            return outcome[0] is not None

        self.replicas.hasten_visibility(led)
        loop = asyncio.get_running_loop()
        await self.replicas.purgatory.wait_until([led.plog], settled,
                                                 loop.time() + self.config.offsets_commit_timeout_ms / 1000)
        code = outcome[0] if outcome else None
        if code is None:
            return COORDINATOR_NOT_AVAILABLE  # Kafka's mapping of REQUEST_TIMED_OUT
        if code == NOT_LEADER_OR_FOLLOWER:
            return NOT_COORDINATOR
        return NONE if code == NONE else COORDINATOR_NOT_AVAILABLE

    async def _blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # -- deleted topics -------------------------------------------------------------------------------------

    def observe_topics(self) -> None:
        """Loop thread: drop and tombstone the offsets of topics deleted since the snapshot last observed
        (module docstring, "Deleted topics"). Always the newest snapshot: listeners run late on the loop."""
        topics = self.partitions.snapshot.topics
        if topics is self._topics_seen:
            return
        self._topics_seen = topics
        ids = {name: meta.topic_id for name, meta in topics.items()}
        deleted = sorted(name for name, known in self._topic_ids.items()
                         if name not in ids or (known is not None and ids[name] != known))
        self._topic_ids = ids
        if not deleted:
            return
        for partition, cache in list(self._caches.items()):
            if cache.state is CacheState.LOADED:
                self._drop_topics(cache, deleted)
            else:
                self._deleted_while_loading.setdefault(partition, set()).update(deleted)

    def _drop_topics(self, cache: PartitionOffsets, topics) -> None:
        """Drop the offsets of `topics` from a loaded cache and append their tombstones (acks=0, as Kafka)."""
        for group, tps in cache.of_topics(topics).items():
            changes = self._tombstones(dict.fromkeys(tps))
            code, _, base = self._append(group, changes, acks_all=False)
            if code == NONE:
                for i, (tp, c) in enumerate(changes.items()):
                    cache.apply(group, tp, Committed(None, "", c.commit_timestamp, base + i))
            else:
                log.error("group %s: the tombstones of %d offset(s) of deleted topics were not appended (%s); "
                          "dropped from the cache only", group, len(tps), errors.for_code(code).__name__)
                cache.drop(group, tps, self._logs[cache.partition].log_end_offset - 1)
            self._counts["deleted"] += len(tps)
            log.info("group %s: offsets of %d partition(s) of deleted topic(s) %s deleted", group, len(tps),
                     ", ".join(sorted({t for t, _ in tps})))

    # -- load and unload ------------------------------------------------------------------------------------

    def on_snapshot(self, snapshot) -> None:
        """Loop thread: load the offsets partitions newly led here, drop those no longer led."""
        self.observe_topics()  # before new caches: what they load is read after the deletion
        led = {p: plog for (topic, p), plog in snapshot.leading.items() if topic == OFFSETS_TOPIC}
        for partition in list(self._caches):
            if led.get(partition) is not self._logs.get(partition):
                self._unload(partition)
        for partition, plog in led.items():
            if partition not in self._caches:
                self._load_soon(partition, plog)

    def _load_soon(self, partition: int, plog) -> None:
        cache = PartitionOffsets(partition)
        self._caches[partition] = cache
        self._logs[partition] = plog
        asyncio.get_running_loop().create_task(self._load(partition, plog, cache), name=f"load-offsets-{partition}")

    async def _load(self, partition: int, plog, cache: PartitionOffsets) -> None:
        started = time.monotonic()
        while self._caches.get(partition) is cache:
            consumer_groups = GroupRecordSet()
            try:
                found = await self._blocking(read_offsets, plog, self.config.offsets_load_buffer_size,
                                             consumer_groups)
            except (OSError, StorageError, ValueError) as exc:
                log.warning("loading %s-%d failed (%s); retrying in %.0fs", OFFSETS_TOPIC, partition, exc,
                            LOAD_RETRY_S)
                await asyncio.sleep(LOAD_RETRY_S)
                continue
            if self._caches.get(partition) is not cache:
                return  # unloaded meanwhile
            cache.take_over(found)
            cache.loaded()
            rebuilt = self._load_consumer_groups(consumer_groups)
            self._counts["loads"] += 1
            deleted = self._deleted_while_loading.pop(partition, None)
            if deleted:
                self._drop_topics(cache, deleted)
            groups, offsets = cache.statistics()
            log.info("%s-%d loaded: %d offsets of %d groups, %d consumer groups, in %.0f ms", OFFSETS_TOPIC,
                     partition, offsets, groups, rebuilt, (time.monotonic() - started) * 1000)
            return

    def _load_consumer_groups(self, loaded: GroupRecordSet) -> int:
        """Hand the consumer groups' records just read to the consumer groups ("Consumer groups")."""
        if not loaded.decoded:
            return 0
        topics = self.partitions.snapshot.topics
        names = {topic_id: name for name, topic_id in self.topic_ids().items()}
        return self.groups.consumer_groups.load(loaded, names, {n: len(m.partitions) for n, m in topics.items()})

    def _unload(self, partition: int) -> None:
        self._caches.pop(partition, None)
        self._deleted_while_loading.pop(partition, None)
        self._logs.pop(partition, None)
        closed = self.groups.unload(lambda group: self.partition_for(group) == partition, NOT_COORDINATOR)
        log.info("%s-%d no longer led here: cache dropped, %d group(s) closed", OFFSETS_TOPIC, partition, closed)

    # -- expiry ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """On the loop: start the expiry task."""
        self._expiry_task = asyncio.get_running_loop().create_task(self._expire_loop(), name="offsets-expiry")

    async def close(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            await asyncio.gather(self._expiry_task, return_exceptions=True)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                await self.expire()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("offsets expiry failed")

    async def expire(self) -> int:
        """One expiry round (offset_cache Rule 3) over the loaded partitions; the number of offsets deleted."""
        retention_ms = self.config.offsets_retention_minutes * 60_000
        deleted = 0
        for cache in list(self._caches.values()):
            if cache.state is not CacheState.LOADED:
                continue
            for group, tps in cache.expired(self.groups.has_members, self.clock_ms(), retention_ms).items():
                code = await self._write(group, self._tombstones(dict.fromkeys(tps)))
                if code == NONE:
                    deleted += len(tps)
                    log.info("group %s: %d offset(s) expired", group, len(tps))
        self._counts["expired"] += deleted
        return deleted

    def committed_offsets(self) -> list[tuple[str, TopicPartition, int]]:
        """(group, partition, offset) of every live committed offset of the loaded offsets partitions: the
        groups this broker coordinates (for the lag metric; any thread)."""
        return [entry for cache in list(self._caches.values()) if cache.state is CacheState.LOADED
                for entry in cache.all_offsets()]

    def statistics(self) -> OffsetStoreStatistics:
        loaded = [c for c in self._caches.values() if c.state is CacheState.LOADED]
        sizes = [c.statistics() for c in loaded]
        counts = self._counts
        return OffsetStoreStatistics(len(loaded), len(self._caches) - len(loaded), sum(g for g, _ in sizes),
                                     sum(o for _, o in sizes), counts["commits"], counts["failed_commits"],
                                     counts["expired"], counts["loads"], counts["fallbacks"], counts["deleted"])


def _key(group: str, tp: TopicPartition) -> bytes:
    return records_schema.encode_key(records_schema.CommitKey(group, tp[0], tp[1]))


def _value(c: Committed) -> bytes | None:
    if c.offset is None:
        return None
    return records_schema.encode_value(records_schema.CommitValue(c.offset, c.metadata, c.commit_timestamp,
                                                                  c.leader_epoch))


def _next_sequence(plog, producer_id: int, epoch: int) -> int:
    """The base sequence of `producer_id`'s next batch in `plog`: after its last one in the same epoch, else 0."""
    for pid, held_epoch, last, _, _ in plog.active_producers():
        if pid == producer_id and held_epoch == epoch and last >= 0:
            return last + 1 if last < 0x7FFFFFFF else 0
    return 0


def read_offsets(plog, buffer_size: int, consumer_groups: GroupRecordSet | None = None) -> PartitionOffsets:
    """Blocking: the offsets of `plog` from its start to its end now, replayed into a fresh cache ("Load and
    unload"): each key's last offset commit or tombstone (as compaction would leave it: memory grows with the
    keys, not with the records read), and transactional offsets per producer id, pending until a marker in
    the log commits or drops them (offset_cache Rule: transactional-offsets-pending); those still undecided at
    the end stay pending. The consumer groups' records go to `consumer_groups` ("Consumer groups"); records of
    other types (a classic group's metadata) are skipped; a record that does not decode is logged and skipped
    (one bad record must not make a whole partition's groups unreachable)."""
    replayed = PartitionOffsets(-1)
    replayed.loaded()  # decides markers as it meets them
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        data = plog.read_replica(offset, buffer_size).read_bytes()
        following = next_fetch_offset(data, offset)
        if following <= offset:
            break
        for batch in iter_batches(data):
            if batch.last_offset >= offset:
                _replay_batch(replayed, batch, offset, consumer_groups)
        offset = following
    return replayed


def _replay_batch(replayed: PartitionOffsets, batch, start: int, consumer_groups: GroupRecordSet | None = None
                  ) -> None:
    if batch.attributes & CONTROL_MASK:
        try:
            marker = parse_marker(batch.raw)
        except InvalidControlRecord as exc:
            log.warning("%s control batch at offset %d skipped: %s", OFFSETS_TOPIC, batch.base_offset, exc)
            return
        replayed.complete(marker.producer_id, marker.commit)
        return
    producer_id = batch.producer_id if batch.attributes & TRANSACTIONAL_MASK else None
    for record in batch.records():
        if record.offset < start or record.key is None:
            continue
        found = _decoded(record)
        if found is None:
            if producer_id is None and consumer_groups is not None:
                _replay_group_record(consumer_groups, record)
            continue
        group, tp, committed = found
        if producer_id is None:
            replayed.apply(group, tp, committed)
        else:
            replayed.add_pending(producer_id, group, tp, committed)


def _replay_group_record(consumer_groups: GroupRecordSet, record) -> None:
    try:
        consumer_groups.apply(record.key, record.value)
    except ValueError as exc:
        log.warning("%s record at offset %d skipped: %s", OFFSETS_TOPIC, record.offset, exc)


def _decoded(record) -> tuple[str, TopicPartition, Committed] | None:
    """(group, partition, its commit or tombstone) of an offset-commit record; None for another type or one
    that does not decode (logged)."""
    try:
        key = records_schema.decode_key(record.key)
        if key is records_schema.NOT_AN_OFFSET:
            return None
        value = None if record.value is None else records_schema.decode_value(record.value)
    except ValueError as exc:
        log.warning("%s record at offset %d skipped: %s", OFFSETS_TOPIC, record.offset, exc)
        return None
    committed = (Committed(None, "", record.timestamp, record.offset) if value is None else
                 Committed(value.offset, value.metadata, value.commit_timestamp, record.offset, value.leader_epoch))
    return key.group, (key.topic, key.partition), committed
