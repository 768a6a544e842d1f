"""The transaction coordinator (Kafka's `TransactionCoordinator`): each api's steps over the state machine
(metadata.py), `__transaction_state` (state_manager.py) and the marker channel (markers.py).

Rule 1 (the order of a transaction's end): EndTxn writes PrepareCommit / PrepareAbort and answers the client
as soon as it is replicated; the markers are then sent (retried until written), and CompleteCommit /
CompleteAbort is written last. Until then the id is busy (CONCURRENT_TRANSACTIONS). One marker task per id.
Rule 2 (InitProducerId): `transaction.timeout.ms` must be in 1..transaction.max.timeout.ms, else
INVALID_TRANSACTION_TIMEOUT. An open transaction of the id is aborted first, its producer fenced (the epoch
bumped, metadata.py), and the caller answered CONCURRENT_TRANSACTIONS: it retries and gets the next epoch.
Rule 3 (the timer): every transaction.abort.timed.out.transaction.cleanup.interval.ms the open transactions older
than their timeout are aborted the same way; every transaction.remove.expired.transaction.cleanup.interval.ms
the ids past transactional.id.expiration.ms are removed (Dead, a tombstone).
Rule 4 (take-over): a partition of `__transaction_state` loaded here has the markers of each prepared
transaction sent again, then its Complete* written (metadata.py Rule 3).
Everything runs on the event loop; a producer id is allocated on the executor (ZooKeeper).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from sparklog.broker.coordinator.transaction import metadata as m
from sparklog.broker.coordinator.transaction.config import TransactionConfig
from sparklog.broker.coordinator.transaction.markers import MarkerChannel
from sparklog.broker.coordinator.transaction.metadata import TxnMetadata, TxnState
from sparklog.broker.coordinator.transaction.state_manager import TransactionStateManager
from sparklog.broker.coordinator.transaction.verifier import PartitionVerifier
from sparklog.protocol import errors

log = logging.getLogger(__name__)

NONE = 0
INVALID_TRANSACTION_TIMEOUT = errors.InvalidTransactionTimeoutError.errno
CONCURRENT_TRANSACTIONS = errors.ConcurrentTransactionsError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
INVALID_REQUEST = errors.InvalidRequestError.errno


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class TransactionCoordinatorStatistics:
    state: object  # TransactionStateStatistics
    marker_requests: int
    marker_retries: int
    markers_in_flight: int
    timed_out_aborts: int


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, partitions, replicas, producer_ids, create_topic: Callable,
                 broker_id: int, executor=None, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.executor = executor
        self.clock_ms = clock_ms
        self.state = TransactionStateManager(config, partitions, replicas, create_topic, executor,
                                             on_loaded=self._on_loaded)
        self.markers = MarkerChannel(partitions, broker_id)
        self.verifier = PartitionVerifier(partitions, self.state.coordinator_for, broker_id,
                                          config.partition_verification_enable)  # as a partition leader (KIP-890)
        self._marker_tasks: dict[str, asyncio.Task] = {}
        self._timers: list[asyncio.Task] = []
        self._timed_out = 0

    # -- InitProducerId (Rule 2) -----------------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int]) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for InitProducerId with a transactional id."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        code = self.state.status(tid)
        if code != NONE:
            return code, -1, -1
        meta = self.state.get(tid)
        new_pid = -1
        if m.needs_new_producer_id(meta):
            try:
                new_pid = await asyncio.get_running_loop().run_in_executor(self.executor, self.producer_ids.next_id)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: retriable for the client
                log.warning("allocating a producer id for %r failed: %s", tid, exc)
                return COORDINATOR_NOT_AVAILABLE, -1, -1
            code = self.state.status(tid)  # the executor hop: still the coordinator?
            if code != NONE:
                return code, -1, -1
            meta = self.state.get(tid)
        if meta is None or meta.state == TxnState.DEAD:
            meta = TxnMetadata(tid, new_pid, timeout_ms, self.clock_ms())
            self.state.put(meta)
        return await self._init(meta, timeout_ms, expected, new_pid)

    async def _init(self, meta: TxnMetadata, timeout_ms: int, expected, new_pid: int) -> tuple[int, int, int]:
        decision = m.init_producer_id(meta, timeout_ms, expected, self.clock_ms(), new_pid)
        if decision == m.FENCE:
            await self._fence_and_abort(meta, "a new producer instance")
            return CONCURRENT_TRANSACTIONS, -1, -1
        if isinstance(decision, int):
            return (decision, meta.producer_id, meta.producer_epoch) if decision == NONE else (decision, -1, -1)
        code = await self.state.write(meta, meta.prepare(decision))
        return (code, meta.producer_id, meta.producer_epoch) if code == NONE else (code, -1, -1)

    # -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ---------------------------------------------------------

    def verify_partitions(self, tid: str, producer_id: int, epoch: int, partitions) -> dict:
        """KIP-890 part 1 (AddPartitionsToTxn verify_only): each partition's code (metadata.verify_partitions)."""
        meta, code = self._served(tid)
        if meta is not None:
            decided = m.verify_partitions(meta, producer_id, epoch, partitions)
            if isinstance(decided, dict):
                return decided
            code = decided
        return dict.fromkeys(partitions, code)

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions) -> int:
        meta, code = self._served(tid)
        if meta is None:
            return code
        decision = m.add_partitions(meta, producer_id, epoch, partitions, self.clock_ms())
        if isinstance(decision, int):
            return decision
        return await self.state.write(meta, meta.prepare(decision))

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> int:
        meta, code = self._served(tid)
        if meta is None:
            return code
        decision = m.end_txn(meta, producer_id, epoch, commit, self.clock_ms())
        if isinstance(decision, int):
            return decision
        code = await self.state.write(meta, meta.prepare(decision))
        if code == NONE:
            self._send_markers_soon(meta)
        return code

    def _served(self, tid: str) -> tuple[TxnMetadata | None, int]:
        """The id's metadata, or (None, the error): not coordinated here, or unknown (INVALID_PRODUCER_ID_MAPPING,
        as Kafka answers a request for an id that has no producer id)."""
        code = self.state.status(tid)
        if code != NONE:
            return None, code
        meta = self.state.get(tid)
        if meta is None:
            return None, errors.InvalidProducerIdMappingError.errno
        return meta, NONE

    # -- aborts by the coordinator, markers (Rules 1, 3, 4) --------------------------------------------------

    async def _fence_and_abort(self, meta: TxnMetadata, why: str) -> int:
        decision = m.fence_and_abort(meta, self.clock_ms())
        if isinstance(decision, int):
            return decision
        code = await self.state.write(meta, meta.prepare(decision, pending=TxnState.PREPARE_EPOCH_FENCE))
        if code == NONE:
            log.info("transaction of %r aborted (%s); producer %d fenced at epoch %d", meta.transactional_id, why,
                     meta.producer_id, meta.producer_epoch)
            self._send_markers_soon(meta)
        return code

    def _send_markers_soon(self, meta: TxnMetadata) -> None:
        tid = meta.transactional_id
        task = self._marker_tasks.get(tid)
        if task is None or task.done():
            self._marker_tasks[tid] = asyncio.get_running_loop().create_task(self._complete(meta), name=f"txn-{tid}")

    async def _complete(self, meta: TxnMetadata) -> None:
        """Rule 1: the markers of the prepared transaction, then Complete*; retried while coordinator."""
        tid = meta.transactional_id
        epoch = self.state.coordinator_epoch(tid)

        def still_coordinator() -> bool:
            return self.state.status(tid) == NONE and self.state.get(tid) is meta and \
                self.state.coordinator_epoch(tid) == epoch

        while meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            commit = meta.state == TxnState.PREPARE_COMMIT
            if not await self.markers.send(meta.producer_id, meta.producer_epoch, commit, epoch, meta.partitions,
                                           still_coordinator):
                return
            while meta.pending is not None and still_coordinator():
                await asyncio.sleep(0.05)  # a write in flight on the id (cannot happen but for a retry)
            if not still_coordinator():
                return
            if await self.state.write(meta, meta.prepare(m.complete_markers(meta, self.clock_ms()))) != NONE:
                await asyncio.sleep(1)

    def _on_loaded(self, partition: int, ids: list[TxnMetadata]) -> None:
        for meta in ids:
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("%r: completing its %s after a take-over", meta.transactional_id, meta.state.name)
                self._send_markers_soon(meta)

    async def abort_timed_out(self) -> int:
        """Rule 3: abort the open transactions past their timeout; how many."""
        now, aborted = self.clock_ms(), 0
        for meta in list(self.state.loaded_ids()):
            if m.timed_out(meta, now) and await self._fence_and_abort(meta, "transaction.timeout.ms passed") == NONE:
                aborted += 1
        self._timed_out += aborted
        return aborted

    async def remove_expired(self) -> int:
        """Rule 3: the ids past transactional.id.expiration.ms become Dead (tombstones); how many."""
        now, removed = self.clock_ms(), 0
        for meta in list(self.state.loaded_ids()):
            transit = m.expire(meta, now, self.config.id_expiration_ms)
            if transit is not None and await self.state.write(meta, meta.prepare(transit)) == NONE:
                removed += 1
        return removed

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """On the loop: start the timers (Rule 3)."""
        loop = asyncio.get_running_loop()
        self._timers = [
            loop.create_task(self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out),
                             name="txn-abort-timed-out"),
            loop.create_task(self._every(self.config.remove_expired_interval_ms, self.remove_expired),
                             name="txn-remove-expired")]

    async def _every(self, interval_ms: int, job) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("transaction coordinator timer failed")

    def on_snapshot(self, snapshot) -> None:
        self.state.on_snapshot(snapshot)

    async def close(self) -> None:
        tasks = self._timers + list(self._marker_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.markers.close()
        await self.verifier.close()

    def statistics(self) -> TransactionCoordinatorStatistics:
        in_flight = sum(1 for t in self._marker_tasks.values() if not t.done())
        return TransactionCoordinatorStatistics(self.state.statistics(), self.markers.requests, self.markers.retries,
                                                in_flight, self._timed_out)
