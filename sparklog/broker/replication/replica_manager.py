"""The replica manager: what this broker does for each partition it leads or follows (Kafka's ReplicaManager).

It listens to the partition manager's snapshots (partitions.py Rule 4) and, on the event loop:
- for each LEADER partition keeps a `LedPartition`: the log, a `LeaderState` (replica_state.py), the
  state znode's version; min.insync.replicas is the log's own typed config. Becoming leader, or a new leader
  epoch, records the epoch's start in the log's epoch cache; with more than one replica the log's HW is then
  set by replication only. A new replica set in the same epoch (a reassignment's STARTED step) makes a new
  `LeaderState` too, so the replicas it adds are followers (they read past the HW and may join the ISR).
- hands the FOLLOWER partitions to the replica fetchers (replica_fetcher.py), one per leader broker.

ISR changes (Kafka's maybeShrinkIsr / maybeExpandIsr):
Rule 1: the leader writes the state znode with the version it last read, keeping leader, leader_epoch and
controller_epoch; only the ISR changes. One write per partition at a time.
Rule 2: on a version conflict it re-reads: if leader and leader epoch are unchanged it adopts that state
(ISR, version) and tries again later; otherwise it is FENCED: it acknowledges no more acks=all writes and
waits for the new state to arrive through its watch (then it follows or goes). A zombie leader can thus
never shrink the ISR it would need to acknowledge alone.
Rule 3: while ZooKeeper is unreachable the write fails and is retried at the next check; the leader keeps
serving with the ISR it has.

States of a led partition: LEADER (epoch e) --ISR write conflicts, epoch moved--> FENCED --new state-->
FOLLOWER or REMOTE; LEADER (e) --state with epoch e' > e names it leader--> LEADER (e').
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from dataclasses import dataclass
from typing import Any

from sparklog.broker.network.inter_broker import PLAINTEXT_REGISTERED, InterBrokerListener
from sparklog.broker.replication.purgatory import Purgatory
from sparklog.broker.quota.replication import ReplicationThrottles
from sparklog.broker.replication.replica_fetcher import FollowTarget, ReplicaFetcherManager
from sparklog.broker.replication.replica_state import LeaderState
from sparklog.coordination import topics as topic_registry
from sparklog.protocol import errors

log = logging.getLogger(__name__)

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30000  # replica.lag.time.max.ms: Kafka's default

NONE = 0
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
FENCED_LEADER_EPOCH = errors.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = errors.UnknownLeaderEpochError.errno
NOT_ENOUGH_REPLICAS_AFTER_APPEND = errors.NotEnoughReplicasAfterAppendError.errno
NO_EPOCH_CHECK = -1  # current_leader_epoch of a client that does not fence


@dataclass(frozen=True)
class ReplicaManagerStatistics:
    leading: int
    fenced_now: int  # led partitions fenced and waiting for their new state
    isr_writes: int
    fencings: int
    fetchers: tuple
    isr_shrinks: int = 0  # ISR changes of a led partition (written here or by the controller) that dropped a replica
    isr_expands: int = 0  # ... that added one


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(eq=False)
class LedPartition:
    """One partition this broker leads, in one leader epoch."""

    key: tuple[str, int]
    plog: Any
    state: LeaderState
    zk_version: int
    controller_epoch: int
    replicated: bool  # more than one replica: the HW follows the ISR
    fenced: bool = False
    writing: bool = False  # an ISR write is in flight (Rule 1)
    flush_wanted: bool = False  # an acks=all write waits for an fsync (hasten_visibility)
    flushing: bool = False

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def min_insync(self) -> int:
        """min.insync.replicas, typed by the log's own config (the topic's override, else the broker's default:
        storage/config.py holds the one default); reconfigured with the topic (partitions.py)."""
        return self.plog.config.min_insync_replicas

    @property
    def below_min_insync(self) -> bool:
        """The min ISR rule, in this one place: fewer in-sync replicas than min.insync.replicas. An acks=all
        write is then refused before its append (NOT_ENOUGH_REPLICAS: handlers' produce_target, the offset
        store's commits) and answered NOT_ENOUGH_REPLICAS_AFTER_APPEND after it (`produce_outcome`)."""
        return len(self.state.isr) < self.plog.config.min_insync_replicas  # min_insync, read without a second call


class ReplicaManager:
    """Leader state and replica fetchers of this broker (module docstring). Loop thread only, except
    `on_snapshot`, which any thread may call."""

    def __init__(self, zk, broker_id: int, purgatory: Purgatory, executor=None, *,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED,
                 throttles: ReplicationThrottles | None = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.purgatory = purgatory
        self.executor = executor
        self.lag_time_max_ms = replica_lag_time_max_ms
        self.leaders: dict[tuple[str, int], LedPartition] = {}
        self.throttles = throttles or ReplicationThrottles(broker_id)  # replication throttles (broker/quota/replication.py)
        self.fetchers = ReplicaFetcherManager(broker_id, inter_broker=inter_broker, throttles=self.throttles)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._isr_task: asyncio.Task | None = None
        self._pending_snapshot = None
        self._applying: asyncio.Task | None = None
        self._isr_writes = 0
        self._isr_shrinks = 0
        self._isr_expands = 0
        self._fenced = 0
        self._flusher: concurrent.futures.ThreadPoolExecutor | None = None  # hasten_visibility's fsyncs
        self._following_stopped = False  # controlled shutdown: this broker no longer fetches (stop_following)

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.call_soon_threadsafe(self._start_isr_task)
        if self._pending_snapshot is not None:
            self.on_snapshot(self._pending_snapshot)

    def _start_isr_task(self) -> None:
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_loop(), name="isr-check")

    async def stop_following(self) -> None:
        """Controlled shutdown (Kafka's StopReplica): stop fetching for good, so that leaders let this broker
        leave their ISR and do not take it back while it is going away."""
        self._following_stopped = True
        await self.fetchers.close()

    async def close(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
        if self._applying is not None:
            await asyncio.gather(self._applying, return_exceptions=True)
        await self.fetchers.close()
        if self._flusher is not None:
            self._flusher.shutdown(wait=True)

    def statistics(self) -> ReplicaManagerStatistics:
        return ReplicaManagerStatistics(len(self.leaders), sum(1 for led in self.leaders.values() if led.fenced),
                                        self._isr_writes, self._fenced, tuple(self.fetchers.statistics()),
                                        self._isr_shrinks, self._isr_expands)

    # -- snapshots -----------------------------------------------------------------------------------------

    def on_snapshot(self, snapshot) -> None:
        """The partition manager's listener (any thread): apply the roles on the loop, latest first."""
        if self._loop is None:
            self._pending_snapshot = snapshot
            return
        try:
            self._loop.call_soon_threadsafe(self.apply, snapshot)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def apply(self, snapshot) -> None:
        """Leader states now; the fetchers' update follows (it may wait for a stopping fetcher)."""
        leaders = {}
        for key, plog in snapshot.leading.items():
            topic = snapshot.topics.get(key[0])
            meta = topic.partitions.get(key[1]) if topic is not None else None
            if meta is None:
                continue
            leaders[key] = self._leader_for(key, plog, meta)
        self.leaders = leaders
        targets = {}
        for key, plog in ({} if self._following_stopped else snapshot.following).items():
            meta = snapshot.topics[key[0]].partitions[key[1]]
            plog.use_replicated_high_watermark()
            targets[key] = FollowTarget(plog, meta.leader, meta.leader_epoch)
        previous = self._applying
        self._applying = asyncio.get_running_loop().create_task(
            self._update_fetchers(previous, targets, snapshot.brokers))
        self.purgatory.notify_all()  # parked produces re-check their leadership

    async def _update_fetchers(self, previous, targets, brokers) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await self.fetchers.update(targets, brokers)

    def _leader_for(self, key, plog, meta) -> LedPartition:
        old = self.leaders.get(key)
        # a reassignment changes the replicas in the same epoch (reassignment.py STARTED): a new state, so that
        # the replicas it adds are followers here (read past the HW, join the ISR) and those it drops are not
        if (old is not None and old.plog is plog and old.leader_epoch == meta.leader_epoch
                and old.state.replicas == tuple(meta.replicas)):
            if meta.zk_version > old.zk_version and not old.writing:
                old.zk_version = meta.zk_version
                self._count_isr_change(old.state.isr, meta.isr)
                old.state.set_isr(meta.isr, _now_ms())
            return old
        replicated = len(meta.replicas) > 1
        plog.assign_leader_epoch(meta.leader_epoch)
        if replicated:
            plog.use_replicated_high_watermark()
        else:  # it may have been a follower of nobody (offline) since it was opened: fsyncs move its HW again
            plog.use_local_high_watermark()
        state = LeaderState(self.broker_id, meta.replicas, meta.isr, meta.leader_epoch, plog.log_end_offset,
                            plog.high_watermark, _now_ms())
        led = LedPartition(key, plog, state, meta.zk_version, meta.controller_epoch, replicated)
        log.info("%s-%d: leader in epoch %d (replicas %s, isr %s)", key[0], key[1], meta.leader_epoch,
                 list(meta.replicas), sorted(state.isr))
        self._advance_hw(led)
        return led

    def _count_isr_change(self, old, new) -> None:
        """A led partition's ISR changes (written here, or by the controller): a shrink, an expand, or both."""
        new = set(new)
        self._isr_shrinks += bool(old - new)
        self._isr_expands += bool(new - old)

    # -- what the handlers ask (loop thread) ----------------------------------------------------------------

    def leader_of(self, snapshot, key) -> LedPartition | None:
        """The led partition `key` of `snapshot`, its leader state made at once if `apply` has not run yet."""
        plog = snapshot.leading.get(key)
        if plog is None:
            return None
        led = self.leaders.get(key)
        if led is not None and led.plog is plog:
            return led
        topic = snapshot.topics.get(key[0])
        meta = topic.partitions.get(key[1]) if topic is not None else None
        if meta is None:
            return None
        led = self._leader_for(key, plog, meta)
        self.leaders = {**self.leaders, key: led}
        return led

    @staticmethod
    def epoch_error(led: LedPartition, current_leader_epoch: int) -> int:
        """FENCED_LEADER_EPOCH for a requester behind this leader's epoch, UNKNOWN_LEADER_EPOCH ahead of it."""
        if current_leader_epoch == NO_EPOCH_CHECK or current_leader_epoch == led.leader_epoch:
            return NONE
        return FENCED_LEADER_EPOCH if current_leader_epoch < led.leader_epoch else UNKNOWN_LEADER_EPOCH

    def after_leader_append(self, led: LedPartition) -> None:
        """New data on a leader: the HW may move (ISR of one), and waiting followers should fetch it."""
        if led.replicated:
            self._advance_hw(led)
            self.purgatory.notify(led.plog)

    def record_follower_fetch(self, led: LedPartition, replica: int, fetch_offset: int) -> None:
        """Called for every partition of every follower fetch: with a full ISR there is nothing to expand."""
        state, leo = led.state, led.plog.log_end_offset
        state.update_follower(replica, fetch_offset, leo, _now_ms())
        self._advance_hw(led)
        if not state.followers.keys() <= state.isr and state.to_expand(leo):
            self._write_isr_soon(led)

    def produce_outcome(self, led: LedPartition, required_offset: int) -> int | None:
        """An acks=all write ending at `required_offset`: its answer, or None while it must wait.

        A new leader epoch with this broker still leader (the same log) keeps the write waiting, as Kafka's
        DelayedProduce does; losing leadership, or being fenced, answers NOT_LEADER_OR_FOLLOWER."""
        current = self.leaders.get(led.key)
        if current is None or current.fenced or current.plog is not led.plog:
            return NOT_LEADER_OR_FOLLOWER
        if current.plog.high_watermark < required_offset:
            return None
        if current.below_min_insync:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return NONE

    def hasten_visibility(self, led: LedPartition) -> None:
        """An acks=all write waits on a single-replica log whose HW is its fsynced offset: fsync now, on
        one background thread, instead of after flush.ms (a group commit: writes arriving meanwhile share
        the next fsync). Replicated logs need no fsync to become visible. A request landing just as the
        last fsync ends may wait for the log's own flush, at most flush.ms."""
        if led.replicated:
            return
        led.flush_wanted = True
        if led.flushing:
            return
        led.flushing = True
        if self._flusher is None:
            self._flusher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="acks-all-flush")
        self._flusher.submit(self._flush_while_wanted, led)

    @staticmethod
    def _flush_while_wanted(led: LedPartition) -> None:
        try:
            while led.flush_wanted:
                led.flush_wanted = False
                led.plog.flush()  # moves the HW, which wakes the purgatory through the log's listener
        except Exception:  # noqa: BLE001 - the flusher thread retries at flush.ms; the write times out or not
            log.exception("%s-%d: flush for an acks=all write failed", led.key[0], led.key[1])
        finally:
            led.flushing = False

    def _advance_hw(self, led: LedPartition) -> None:
        if led.replicated and not led.fenced:
            plog = led.plog
            high_watermark = led.state.compute_high_watermark(plog.log_end_offset)
            if high_watermark > plog.high_watermark:  # set_high_watermark would ignore it, under the log's lock
                plog.set_high_watermark(high_watermark)

    # -- ISR changes (Rules 1-3) ----------------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        interval = max(0.05, self.lag_time_max_ms / 2000)  # Kafka checks every replica.lag.time.max.ms / 2
        while True:
            await asyncio.sleep(interval)
            now = _now_ms()
            for led in list(self.leaders.values()):
                if led.replicated and not led.fenced and (
                        led.state.to_shrink(now, self.lag_time_max_ms) or led.state.to_expand(led.plog.log_end_offset)):
                    self._write_isr_soon(led)

    def _write_isr_soon(self, led: LedPartition) -> None:
        if not led.writing and not led.fenced:
            led.writing = True
            asyncio.get_running_loop().create_task(self._write_isr(led))

    async def _write_isr(self, led: LedPartition) -> None:
        try:
            now = _now_ms()
            shrink = led.state.to_shrink(now, self.lag_time_max_ms)
            expand = led.state.to_expand(led.plog.log_end_offset)
            isr = tuple(sorted((led.state.isr - shrink) | expand))
            if set(isr) == led.state.isr:
                return
            wanted = topic_registry.PartitionState(self.broker_id, isr, led.leader_epoch, led.controller_epoch)
            loop = asyncio.get_running_loop()
            try:
                written = await loop.run_in_executor(self.executor, topic_registry.set_partition_state, self.zk,
                                                     led.key[0], led.key[1], wanted, led.zk_version)
            except topic_registry.PartitionStateConflict:
                await self._on_conflict(led)
                return
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the ISR change waits (Rule 3)
                log.warning("%s-%d: ISR change to %s not written (%s); will retry", led.key[0], led.key[1],
                            list(isr), exc)
                return
            self._isr_writes += 1
            self._count_isr_change(led.state.isr, isr)
            log.info("%s-%d: ISR %s -> %s (epoch %d)", led.key[0], led.key[1], sorted(led.state.isr), list(isr),
                     led.leader_epoch)
            led.zk_version = written.zk_version
            led.state.set_isr(isr, _now_ms())
            self._advance_hw(led)
            self.purgatory.notify(led.plog)
        finally:
            led.writing = False

    async def _on_conflict(self, led: LedPartition) -> None:
        loop = asyncio.get_running_loop()
        try:
            current = await loop.run_in_executor(self.executor, topic_registry.partition_state, self.zk,
                                                 led.key[0], led.key[1])
        except Exception as exc:  # noqa: BLE001 - unreachable or deleted: decide on the next attempt
            log.warning("%s-%d: re-reading the state after a conflict failed: %s", led.key[0], led.key[1], exc)
            return
        if current.leader == self.broker_id and current.leader_epoch == led.leader_epoch:
            led.zk_version = current.zk_version
            led.controller_epoch = current.controller_epoch
            led.state.set_isr(current.isr, _now_ms())
            return
        log.warning("%s-%d: fenced: the state moved to leader %d epoch %d while this broker led epoch %d",
                    led.key[0], led.key[1], current.leader, current.leader_epoch, led.leader_epoch)
        led.fenced = True
        self._fenced += 1
        self.purgatory.notify(led.plog)
