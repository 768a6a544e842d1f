"""`__transaction_state`: where each transactional id is coordinated and where its state is kept (Kafka's
`TransactionStateManager`).

Placement: an id belongs to partition `abs(java_hash(id)) % transaction.state.log.num.partitions`; its
coordinator is that partition's leader, and the coordinator epoch is that partition's leader epoch. The topic is
created on demand by the first FindCoordinator for a transaction (as `__consumer_offsets` is, through the
same topic creation), compacted, with `transaction.state.log.replication.factor` replicas (fewer, warned, while
fewer brokers are live) and min.insync.replicas `transaction.state.log.min.isr` (at most the replicas).

Writes (metadata.py Rule 1): a prepared transit is appended as one record (key: the id; value: its state, or a
tombstone for Dead; protocol/transaction_log.py) to the id's partition, which this broker leads, and is
completed only once every in-sync replica has it (leader_append.py); any failure abandons it and answers
NOT_COORDINATOR (leadership lost, the log closed, or the partition led in a newer epoch meanwhile) or
COORDINATOR_NOT_AVAILABLE (too few in-sync replicas, a timeout, a storage error), both retriable.

Load and unload, from every metadata snapshot, on the event loop:
    not led --this broker leads partition p (a new log object)--> LOADING (COORDINATOR_LOAD_IN_PROGRESS): the
        log is read from its start to its end on an executor thread, the last record of each id kept
    LOADING --read to the end--> LOADED: served; `on_loaded(partition, ids)` is called, and the coordinator
        finishes the markers of every id in PrepareCommit / PrepareAbort (metadata.py Rule 3)
    LOADING | LOADED --p no longer led here--> not led: the ids are dropped (NOT_COORDINATOR)
A load that fails is retried after LOAD_RETRY_S while this broker still leads p. A record that does not decode
is logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from sparklog.broker.coordinator.transaction.config import TransactionConfig
from sparklog.broker.coordinator.transaction.leader_append import append_replicated
from sparklog.broker.coordinator.transaction.metadata import TxnMetadata, TxnState, TxnTransit
from sparklog.broker.offset_store import java_string_hash
from sparklog.protocol import errors
from sparklog.protocol import transaction_log as records_schema
from sparklog.records.batch import build_batch, iter_records, next_fetch_offset
from sparklog.storage.errors import LogClosedError, StorageError

log = logging.getLogger(__name__)

TOPIC = records_schema.TOPIC
LOAD_RETRY_S = 1.0
WRITE_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms, which its coordinator waits for the log's replicas
NO_COORDINATOR = -1

NONE = 0
NOT_COORDINATOR = errors.NotCoordinatorError.errno
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
TOPIC_ALREADY_EXISTS = errors.TopicAlreadyExistsError.errno
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno


def state_partition(transactional_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`."""
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % num_partitions


@dataclass
class PartitionTxns:
    """The ids of one led partition of `__transaction_state`."""
    partition: int
    plog: object
    coordinator_epoch: int
    loaded: bool = False
    ids: dict[str, TxnMetadata] = field(default_factory=dict)


@dataclass(frozen=True)
class TransactionStateStatistics:
    loaded_partitions: int
    loading_partitions: int
    transactional_ids: int
    writes: int
    failed_writes: int
    loads: int


class TransactionStateManager:
    """`partitions` has `.snapshot`; `replicas` is the ReplicaManager; `create_topic(name, partitions, replication,
    overrides)` is the brokers' topic creation (an awaitable of (error code, message))."""

    def __init__(self, config: TransactionConfig, partitions, replicas, create_topic: Callable, executor=None,
                 on_loaded: Callable | None = None) -> None:
        self.config = config
        self.partitions = partitions
        self.replicas = replicas
        self.create_topic = create_topic
        self.executor = executor
        self.on_loaded = on_loaded or (lambda partition, ids: None)
        self._led: dict[int, PartitionTxns] = {}
        self._creation: asyncio.Future | None = None
        self._counts = dict.fromkeys(("writes", "failed_writes", "loads"), 0)

    # -- placement ------------------------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return state_partition(transactional_id, self.config.num_partitions)

    def coordinator_for(self, transactional_id: str, snapshot) -> int:
        topic = snapshot.topics.get(TOPIC)
        meta = topic.partitions.get(self.partition_for(transactional_id)) if topic is not None else None
        if meta is None or meta.leader not in snapshot.brokers:
            return NO_COORDINATOR
        return meta.leader

    def status(self, transactional_id: str) -> int:
        """NONE if this broker coordinates the id now, else the error to answer."""
        snapshot = self.partitions.snapshot
        if TOPIC not in snapshot.topics:
            return COORDINATOR_NOT_AVAILABLE
        led = self._led.get(self.partition_for(transactional_id))
        if led is None or snapshot.leading.get((TOPIC, led.partition)) is not led.plog:
            return NOT_COORDINATOR
        return NONE if led.loaded else COORDINATOR_LOAD_IN_PROGRESS

    def get(self, transactional_id: str) -> TxnMetadata | None:
        """The id's metadata (status() must be NONE), None for an id never seen or Dead."""
        return self._led[self.partition_for(transactional_id)].ids.get(transactional_id)

    def put(self, meta: TxnMetadata) -> None:
        self._led[self.partition_for(meta.transactional_id)].ids[meta.transactional_id] = meta

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self._led[self.partition_for(transactional_id)].coordinator_epoch

    def loaded_ids(self) -> Iterator[TxnMetadata]:
        for led in list(self._led.values()):
            if led.loaded:
                yield from list(led.ids.values())

    # -- the topic ------------------------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` unless it exists; one creation at a time, shared by its waiters."""
        if TOPIC in self.partitions.snapshot.topics:
            return
        if self._creation is None or self._creation.done():
            self._creation = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creation)

    async def _create(self) -> None:
        cfg = self.config
        live = len(self.partitions.snapshot.brokers)
        replication = cfg.replication_factor
        if 0 < live < replication:
            log.warning("%s: transaction.state.log.replication.factor is %d but only %d broker(s) are live; "
                        "creating it with replication factor %d", TOPIC, replication, live, live)
            replication = live
        overrides = {"cleanup.policy": "compact", "segment.bytes": str(cfg.segment_bytes),
                     "min.insync.replicas": str(min(cfg.min_isr, replication))}
        try:
            code, message = await self.create_topic(TOPIC, cfg.num_partitions, replication, overrides)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the caller answers "not available"
            code, message = COORDINATOR_NOT_AVAILABLE, str(exc)
        if code == NONE:
            log.info("created %s: %d partitions, replication factor %d", TOPIC, cfg.num_partitions, replication)
        elif code != TOPIC_ALREADY_EXISTS:
            log.warning("creating %s failed: %s (%s)", TOPIC, errors.for_code(code).__name__, message)

    # -- writes ---------------------------------------------------------------------------------------------

    async def write(self, meta: TxnMetadata, transit: TxnTransit) -> int:
        """Append the prepared `transit` of `meta` and wait for the in-sync replicas; then complete it (NONE),
        else abandon it (module docstring: NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE)."""
        partition = self.partition_for(meta.transactional_id)
        led = self._led.get(partition)
        code = NOT_COORDINATOR
        if led is not None:
            record = _record(meta.transactional_id, transit)
            code = await append_replicated(
                self.replicas, self.partitions.snapshot, (TOPIC, partition),
                lambda lp: _append(lp, led, record), WRITE_TIMEOUT_S)
            if code == NONE and self._led.get(partition) is not led:
                code = NOT_LEADER_OR_FOLLOWER  # unloaded meanwhile: a newer coordinator owns the id
        self._counts["writes" if code == NONE else "failed_writes"] += 1
        if code != NONE:
            meta.abandon()
            return NOT_COORDINATOR if code == NOT_LEADER_OR_FOLLOWER else COORDINATOR_NOT_AVAILABLE
        meta.complete(transit)
        if transit.state == TxnState.DEAD:
            led.ids.pop(meta.transactional_id, None)
        return NONE

    # -- load and unload ------------------------------------------------------------------------------------

    def on_snapshot(self, snapshot) -> None:
        """Loop thread: load the partitions newly led here, drop those no longer led."""
        led = {p: (plog, self._epoch(snapshot, p)) for (topic, p), plog in snapshot.leading.items() if topic == TOPIC}
        for partition, txns in list(self._led.items()):
            if led.get(partition) != (txns.plog, txns.coordinator_epoch):
                self._led.pop(partition)
                log.info("%s-%d no longer led here in epoch %d: its transactional ids dropped", TOPIC, partition,
                         txns.coordinator_epoch)
        for partition, (plog, epoch) in led.items():
            if partition not in self._led:
                self._led[partition] = txns = PartitionTxns(partition, plog, epoch)
                asyncio.get_running_loop().create_task(self._load(txns), name=f"load-txns-{partition}")

    def _epoch(self, snapshot, partition: int) -> int:
        """The coordinator epoch: the partition's leader epoch (a new one is a new coordinator: reloaded)."""
        led = self.replicas.leader_of(snapshot, (TOPIC, partition))
        return led.leader_epoch if led is not None else -1

    async def _load(self, txns: PartitionTxns) -> None:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        while self._led.get(txns.partition) is txns:
            try:
                found = await loop.run_in_executor(self.executor, read_state, txns.plog, self.config.load_buffer_size)
            except (OSError, StorageError, ValueError) as exc:
                log.warning("loading %s-%d failed (%s); retrying in %.0fs", TOPIC, txns.partition, exc, LOAD_RETRY_S)
                await asyncio.sleep(LOAD_RETRY_S)
                continue
            if self._led.get(txns.partition) is not txns:
                return
            txns.ids = {tid: TxnMetadata.from_transit(tid, transit) for tid, transit in found.items()}
            txns.loaded = True
            self._counts["loads"] += 1
            log.info("%s-%d loaded (coordinator epoch %d): %d transactional ids in %.0f ms", TOPIC, txns.partition,
                     txns.coordinator_epoch, len(txns.ids), (time.monotonic() - started) * 1000)
            self.on_loaded(txns.partition, list(txns.ids.values()))
            return

    def statistics(self) -> TransactionStateStatistics:
        loaded = [t for t in self._led.values() if t.loaded]
        return TransactionStateStatistics(len(loaded), len(self._led) - len(loaded), sum(len(t.ids) for t in loaded),
                                          self._counts["writes"], self._counts["failed_writes"], self._counts["loads"])


def _record(transactional_id: str, t: TxnTransit) -> tuple[bytes, bytes | None]:
    key = records_schema.encode_key(transactional_id)
    if t.state == TxnState.DEAD:
        return key, None
    return key, records_schema.encode_value(records_schema.TxnLogEntry(
        t.producer_id, t.producer_epoch, t.timeout_ms, int(t.state), tuple(sorted(t.partitions)),
        t.last_update_ms, t.start_ms))


def _append(led_partition, txns: PartitionTxns, record: tuple[bytes, bytes | None]) -> int:
    """One record appended as leader (refused if led in another epoch than the one loaded); the offset after it."""
    if led_partition.leader_epoch != txns.coordinator_epoch or led_partition.plog is not txns.plog:
        raise _NotLoadedEpoch()
    key, value = record
    base = led_partition.plog.append_as_leader(build_batch([(key, value, None, None)]), led_partition.leader_epoch)
    return base + 1


class _NotLoadedEpoch(LogClosedError):
    """The partition is led in another epoch (or log) than the one this coordinator loaded."""


def read_state(plog, buffer_size: int) -> dict[str, TxnTransit]:
    """Blocking: the last state of each transactional id in `plog`, from its start to its end now (tombstones
    remove an id). A record that does not decode is logged and skipped."""
    found: dict[str, TxnTransit] = {}
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        data = plog.read_replica(offset, buffer_size).read_bytes()
        following = next_fetch_offset(data, offset)
        if following <= offset:
            break
        for record in iter_records(data):
            if record.offset >= offset and record.key is not None:
                _read_record(record, found)
        offset = following
    return found


def _read_record(record, found: dict[str, TxnTransit]) -> None:
    try:
        tid = records_schema.decode_key(record.key)
        entry = None if record.value is None else records_schema.decode_value(record.value)
        state = None if entry is None else TxnState(entry.status)
    except ValueError as exc:
        log.warning("%s record at offset %d skipped: %s", TOPIC, record.offset, exc)
        return
    if entry is None:
        found.pop(tid, None)
        return
    found[tid] = TxnTransit(entry.producer_id, -1, entry.producer_epoch, -1, entry.timeout_ms, state,
                            frozenset(entry.partitions), entry.start_ms, entry.last_update_ms)
