"""Replica fetchers: a follower copies its leaders' logs with the Fetch API (Kafka's ReplicaFetcherThread).

One asyncio task per leader broker, one connection to it, all the partitions this broker follows there in
each Fetch request (`replica_id` = this broker's id, `current_leader_epoch` = the epoch it follows in).

Rule 1: a partition starts in TRUNCATING whenever it starts following (a new leader or a new leader
epoch): it asks the leader with OffsetForLeaderEpoch where its own latest epoch ends and truncates its log
exactly there (KIP-101, KIP-279: `truncation_point`), repeating until the answer names an epoch it knows.
Only then is it FETCHING: the leader's batches are appended verbatim (`PartitionLog.append_replicated`)
and its high watermark becomes min(leader's HW, own LEO).
Rule 2: FENCED_LEADER_EPOCH delays that partition by REPLICA_FETCH_BACKOFF_MS (the new state reaches this
broker through its watches and restarts it in TRUNCATING at once); UNKNOWN_LEADER_EPOCH,
NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION (the leader has not seen the state yet) by
LEADER_CATCHING_UP_BACKOFF_MS; OFFSET_OUT_OF_RANGE or a batch that does not continue the log sends it
back to TRUNCATING. A connection error closes the connection and retries after the backoff.
Rule 3: a log with fenced ranges (bit rot, storage/fences.py) is repaired before each fetch: it is
truncated to the start of its first fenced range (`repair_point`, `truncate_replica_to`, crash-safe), which
clears every fence at or above it, and the fetch then re-copies the leader's bytes from there, so the log ends
byte-identical to the leader's. Meanwhile its LEO lags, so the leader takes it out of the ISR, and as a
follower it serves no consumer (reads step over fences in any case).
Rule 4: the fetchers only run on the broker's event loop; `update()` is called there too, so a partition
removed from a fetcher (it became leader, or its leader moved) is never appended to after it returns.
Rule 5: replication throttles (broker/quota/replication.py): while the follower's throttled rate is over its
bound, a partition its topic's follower.replication.throttled.replicas names for this broker is left out of
the Fetch unless it is in sync (its last fetch left it at the leader's high watermark: Kafka's
isReplicaInSync); when every ready partition is left out, the fetcher waits until the rate is back at the bound.
Such a partition asks for at most the throttle's fetch_cap (a window's worth of the rate) in one Fetch.
Rule 6: each fetcher keeps an incremental fetch session (KIP-227) with its leader
(protocol/fetch_session_handler.py): after the first full Fetch, a request names only the partitions whose fetch
offset, leader epoch or log start moved and forgets those no longer asked for (in backoff, or gone); the leader
answers only partitions with records, an error or a moved high watermark. A session error or a lost connection
starts over with a full Fetch. A leader with no slot for it (its
max.incremental.fetch.session.cache.slots, 0 included) answers session id 0, and every request stays full.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from sparklog.broker.network.inter_broker import PLAINTEXT_REGISTERED, InterBrokerListener
from sparklog.broker.quota.replication import ReplicationThrottles
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import MalformedResponse
from sparklog.protocol.fetch import FetchPartition, FetchRequest
from sparklog.protocol.fetch_session_handler import FetchSessionHandler
from sparklog.protocol.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
                                                       OffsetForLeaderTopic)
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import CorruptRecordError
from sparklog.storage.errors import LogClosedError, OffsetsNotContiguous, StorageError
from sparklog.storage.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset

log = logging.getLogger(__name__)

FETCH_VERSION = 11  # current_leader_epoch needs v9+
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # replica_id needs v3+
REPLICA_FETCH_WAIT_MAX_MS = 500  # replica.fetch.wait.max.ms: Kafka's default
REPLICA_FETCH_MIN_BYTES = 1  # replica.fetch.min.bytes: Kafka's default
REPLICA_FETCH_MAX_BYTES = 1048576  # replica.fetch.max.bytes (per partition): Kafka's default
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10485760  # replica.fetch.response.max.bytes: Kafka's default
REPLICA_FETCH_BACKOFF_MS = 1000  # replica.fetch.backoff.ms: Kafka's default
# The leader has not seen the state this follower acts on yet (its own watch fires within milliseconds):
# retry sooner, as failover waits for it. Ours; Kafka's controller tells the leader first instead.
LEADER_CATCHING_UP_BACKOFF_MS = 100
REPLICA_SOCKET_TIMEOUT_MS = 30000  # replica.socket.timeout.ms: Kafka's default
# A response frame larger than this is refused before it is buffered (the response cap plus headers).
MAX_RESPONSE_FRAME_BYTES = REPLICA_FETCH_RESPONSE_MAX_BYTES + 1024 * 1024

NONE = 0
OFFSET_OUT_OF_RANGE = errors.OffsetOutOfRangeError.errno
_LEADER_CATCHING_UP = {errors.UnknownLeaderEpochError.errno, errors.NotLeaderOrFollowerError.errno,
                       errors.UnknownTopicOrPartitionError.errno}
_SIZE = struct.Struct(">i")
# The leader went away or answered garbage, or the local disk failed: logged in one line, then retried.
_EXPECTED_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError, MalformedResponse,
                    StorageError)


def truncation_point(leader: EpochEndOffset, cache, log_end_offset: int, high_watermark: int) -> tuple[int, bool]:
    """Where a follower truncates given the leader's answer for its latest epoch: (offset, finished?).

    KIP-279: if the leader's epoch is one the follower has, the logs agree up to the smaller of the two
    ends of that epoch. If the follower does not have it, it cuts to the end of its own largest epoch
    below it and asks again (not finished). Without any epoch to compare, the HW is the safe point.
    """
    if leader.epoch == UNDEFINED_EPOCH or leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(high_watermark, log_end_offset), True
    own = cache.end_offset_for(leader.epoch, log_end_offset)
    if own.end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(leader.end_offset, log_end_offset), True
    if own.epoch != leader.epoch:
        return min(own.end_offset, log_end_offset), False
    return min(own.end_offset, leader.end_offset, log_end_offset), True


def repair_point(fenced: tuple[tuple[int, int], ...]) -> int | None:
    """Where a follower with fenced ranges truncates to re-fetch them (Rule 3), or None: the start of the
    first, since the log is a prefix and every offset after a damaged one must come from the leader again.
    Kafka has no fences; a Kafka replica with a corrupt log is wiped and re-copied whole, which this bounds."""
    return fenced[0][0] if fenced else None


@dataclass(frozen=True)
class FollowTarget:
    """What a follower partition follows: its log, the leader's broker id and the leader epoch."""

    plog: object
    leader: int
    leader_epoch: int


@dataclass
class _Partition:
    target: FollowTarget
    truncating: bool = True
    retry_at: float = 0.0
    lag: int | None = None  # the leader's HW minus this log's end after the last fetch (Rule 5)
    leader_high_watermark: int = -1  # the leader's HW in its last answer (handlers/follower_reads.py Rule 3)


@dataclass(frozen=True)
class ReplicaFetcherStatistics:
    leader: int
    partitions: int
    truncating: int
    fetches: int
    appended_bytes: int
    truncations: int
    repairs: int  # truncations to a fenced range (Rule 3)
    errors: int
    last_error: str | None


@dataclass
class _Counters:
    fetches: int = 0
    appended_bytes: int = 0
    truncations: int = 0
    repairs: int = 0
    errors: int = 0
    last_error: str | None = None


class ReplicaFetcher:
    """Copies the partitions led by one broker (module docstring)."""

    def __init__(self, broker_id: int, leader_id: int,
                 inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED, connect=None,
                 throttles: ReplicationThrottles | None = None) -> None:
        self.broker_id = broker_id
        self.throttles = throttles if throttles is not None else ReplicationThrottles(broker_id)
        self.inter_broker = inter_broker
        self.leader_id = leader_id
        # opens a connection to the leader (over TLS, and logged in on a SASL listener: security/inter_broker.py)
        self._open = connect or (lambda host, port, _client_id, timeout:
                                 inter_broker.open_connection(host, port, timeout))
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._address: tuple[str, int] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False  # checked by the loop: a cancellation alone can be lost (see stop)
        self._streams = None
        self._correlation = itertools.count()
        self._counters = _Counters()
        self.session = FetchSessionHandler()  # Rule 6

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        """End the loop and wait for it. The flag and the wake-up, not only the cancellation: Python 3.11's
        asyncio.wait_for can swallow a cancellation that arrives as its call completes (gh-86296), and a
        broker's shutdown then waited forever here."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})  # its errors were logged; our own cancellation propagates
        self._disconnect()

    def set_partitions(self, targets: Mapping[tuple[str, int], FollowTarget], address: tuple[str, int] | None) -> None:
        """Follow exactly `targets`; a changed target (new epoch) starts over in TRUNCATING (Rule 1)."""
        for key in list(self._partitions):
            if key not in targets:
                del self._partitions[key]
        for key, target in targets.items():
            known = self._partitions.get(key)
            if known is None or known.target != target:
                self._partitions[key] = _Partition(target)
        if address != self._address:
            self._address = address
            self._disconnect()
        self._wake.set()

    @property
    def partitions(self) -> dict:
        return self._partitions

    def statistics(self) -> ReplicaFetcherStatistics:
        c = self._counters
        truncating = sum(1 for p in self._partitions.values() if p.truncating)
        return ReplicaFetcherStatistics(self.leader_id, len(self._partitions), truncating, c.fetches,
                                        c.appended_bytes, c.truncations, c.repairs, c.errors, c.last_error)

    # -- the loop ------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            if not self._partitions or self._address is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                if any(p.truncating for p in self._ready()):
                    await self._truncate()
                elif self._fetchable():
                    await self._fetch()
                elif self._ready():
                    await self._wait_for_throttle()
                else:
                    await self._sleep_until_ready()
            except Exception as exc:  # noqa: BLE001 - not even a bug here may end replication from this leader
                if not isinstance(exc, _EXPECTED_ERRORS):
                    log.exception("replica fetcher for leader %d failed; retrying", self.leader_id)
                self._note_error(f"{type(exc).__name__}: {exc}")
                self._disconnect()
                await asyncio.sleep(REPLICA_FETCH_BACKOFF_MS / 1000)

    def _ready(self) -> list[_Partition]:
        now = time.monotonic()
        return [p for p in self._partitions.values() if p.retry_at <= now]

    def _fetchable(self) -> dict[tuple[str, int], _Partition]:
        """The ready partitions, less those the follower's throttle holds back now (Rule 5)."""
        throttles = self.throttles
        held = not throttles.follower.unbounded and throttles.follower.exceeded()
        now = time.monotonic()
        return {key: p for key, p in self._partitions.items() if p.retry_at <= now
                and not (held and self._held_back(key, p))}

    def _held_back(self, key, part: _Partition) -> bool:
        in_sync = part.lag is not None and part.lag <= 0
        return not in_sync and self.throttles.follower_throttled(part.target.plog, key[1])

    def _max_bytes(self, key, part: _Partition) -> int:
        """replica.fetch.max.bytes, or the follower's fetch_cap for a throttled partition behind (Rule 5)."""
        if self.throttles.follower.unbounded or not self._held_back(key, part):
            return REPLICA_FETCH_MAX_BYTES
        return min(REPLICA_FETCH_MAX_BYTES, self.throttles.follower.fetch_cap())

    async def _wait_for_throttle(self) -> None:
        """Every ready partition is held back: wait until the follower's rate is back at its bound (or a change)."""
        delay = min(max(self.throttles.follower.delay_s(), 0.05), REPLICA_FETCH_BACKOFF_MS / 1000)
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.TimeoutError:
            pass

    async def _sleep_until_ready(self) -> None:
        wake_at = min(p.retry_at for p in self._partitions.values())
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), max(0.0, wake_at - time.monotonic()))
        except asyncio.TimeoutError:
            pass

    def _note_error(self, message: str) -> None:
        self._counters.errors += 1
        if message != self._counters.last_error:
            log.warning("replica fetcher for leader %d: %s", self.leader_id, message)
        self._counters.last_error = message

    def _back_off(self, key, part: _Partition, code: int) -> None:
        self._note_error(f"{key[0]}-{key[1]}: {errors.for_code(code).__name__}")
        delay_ms = LEADER_CATCHING_UP_BACKOFF_MS if code in _LEADER_CATCHING_UP else REPLICA_FETCH_BACKOFF_MS
        part.retry_at = time.monotonic() + delay_ms / 1000

    # -- truncation (Rule 1) -------------------------------------------------------------------------------

    async def _truncate(self) -> None:
        asking = {key: p for key, p in self._partitions.items() if p.truncating and p.retry_at <= time.monotonic()}
        by_topic: dict[str, list] = {}
        for (topic, index), part in asking.items():
            by_topic.setdefault(topic, []).append(OffsetForLeaderPartition(
                partition=index, current_leader_epoch=part.target.leader_epoch,
                leader_epoch=part.target.plog.leader_epochs.latest_epoch))
        request = OffsetForLeaderEpochRequest(replica_id=self.broker_id, topics=[
            OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
        response = await self._call(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, request)
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition)
                part = asking.get(key)
                if part is None or self._partitions.get(key) is not part:
                    continue  # no longer ours (Rule 4)
                if answer.error_code != NONE:
                    self._back_off(key, part, answer.error_code)
                    continue
                self._apply_truncation(part, EpochEndOffset(answer.leader_epoch, answer.end_offset))

    def _apply_truncation(self, part: _Partition, leader: EpochEndOffset) -> None:
        plog = part.target.plog
        offset, finished = truncation_point(leader, plog.leader_epochs, plog.log_end_offset, plog.high_watermark)
        if offset < plog.log_end_offset:
            log.info("%s: truncating from %d to %d (leader %d, epoch %d, leader's end of epoch %d: %d)",
                     plog.name, plog.log_end_offset, offset, self.leader_id, part.target.leader_epoch,
                     leader.epoch, leader.end_offset)
            plog.truncate_replica_to(offset)
            self._counters.truncations += 1
        part.truncating = not finished

    def _repair(self, plog) -> None:
        """Rule 3: cut a damaged log back to its first fenced range, so that this fetch re-copies it."""
        offset = repair_point(plog.fenced_ranges())
        if offset is None:
            return
        log.warning("%s: offsets %s are fenced (damaged on disk): truncating from %d to %d to re-fetch them "
                    "from leader %d", plog.name, plog.fenced_ranges(), plog.log_end_offset, offset, self.leader_id)
        plog.truncate_replica_to(offset)
        self._counters.truncations += 1
        self._counters.repairs += 1

    # -- fetching ------------------------------------------------------------------------------------------

    async def _fetch(self) -> None:
        asking = self._fetchable()
        wanted = {}
        for key, part in asking.items():
            plog = part.target.plog
            self._repair(plog)
            wanted[key] = FetchPartition(
                partition=key[1], current_leader_epoch=part.target.leader_epoch, fetch_offset=plog.log_end_offset,
                log_start_offset=plog.log_start_offset, partition_max_bytes=self._max_bytes(key, part))
        session_id, epoch, topics, forgotten = self.session.build(wanted)
        request = FetchRequest(
            replica_id=self.broker_id, max_wait_ms=REPLICA_FETCH_WAIT_MAX_MS, min_bytes=REPLICA_FETCH_MIN_BYTES,
            max_bytes=REPLICA_FETCH_RESPONSE_MAX_BYTES, isolation_level=0, session_id=session_id,
            session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten, rack_id="")
        response = await self._call(ApiKey.FETCH, FETCH_VERSION, request)
        self._counters.fetches += 1
        if not self.session.handle(response):
            self._note_error(f"fetch session {session_id}: {errors.for_code(response.error_code).__name__}; "
                             "starting over with a full fetch")
            return
        if epoch == 0 and self.session.session_id:
            log.info("fetch session %d with leader %d: incremental fetches from now on", self.session.session_id,
                     self.leader_id)
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                part = asking.get(key)
                if part is None or self._partitions.get(key) is not part or part.truncating:
                    continue  # no longer ours, or restarted meanwhile (Rule 4)
                self._apply_fetched(key, part, data)

    def _apply_fetched(self, key, part: _Partition, data) -> None:
        code = data.error_code
        plog = part.target.plog
        if code == OFFSET_OUT_OF_RANGE and plog.log_end_offset < data.log_start_offset:
            log.info("%s: the leader's log starts at %d, past this log's end %d: restarting there", plog.name,
                     data.log_start_offset, plog.log_end_offset)
            plog.truncate_fully_and_start_at(data.log_start_offset)
            return
        if code == OFFSET_OUT_OF_RANGE:
            part.truncating = True
            self._back_off(key, part, code)
            return
        if code != NONE:
            self._back_off(key, part, code)
            return
        records = data.records
        try:
            if records is not None and len(records):
                plog.append_replicated(records)
                self._counters.appended_bytes += len(records)
                if self.throttles.follower_throttled(plog, key[1]):
                    self.throttles.follower.record(len(records))
        except OffsetsNotContiguous as exc:
            self._note_error(str(exc))
            part.truncating = True
            return
        except CorruptRecordError as exc:
            self._note_error(f"{plog.name}: corrupt batch from leader {self.leader_id}: {exc}")
            part.retry_at = time.monotonic() + REPLICA_FETCH_BACKOFF_MS / 1000
            return
        except LogClosedError:
            return
        plog.set_high_watermark(min(data.high_watermark, plog.log_end_offset))
        part.lag = max(0, data.high_watermark - plog.log_end_offset)
        part.leader_high_watermark = data.high_watermark

    # -- the connection ------------------------------------------------------------------------------------

    async def _call(self, api_key: int, version: int, body):
        reader, writer = await self._connect()
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        writer.write(encode_request(api_key, version, correlation_id, f"replica-{self.broker_id}", body))
        timeout = REPLICA_SOCKET_TIMEOUT_MS / 1000
        await asyncio.wait_for(writer.drain(), timeout)
        (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(_SIZE.size), timeout))
        if not 0 < size <= MAX_RESPONSE_FRAME_BYTES:
            raise MalformedResponse(f"response of {size} bytes from leader {self.leader_id}")
        frame = await asyncio.wait_for(reader.readexactly(size), timeout)
        got, response = decode_response(api_key, version, frame)
        if got != correlation_id:
            raise MalformedResponse(f"correlation id {got} from leader {self.leader_id}, expected {correlation_id}")
        return response

    async def _connect(self):
        if self._streams is None:
            host, port = self._address
            self._streams = await self._open(host, port, f"replica-{self.broker_id}", REPLICA_SOCKET_TIMEOUT_MS / 1000)
        return self._streams

    def _disconnect(self) -> None:
        self.session.lost()  # a request may have been cut off: the session starts over (Rule 6)
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


@dataclass
class ReplicaFetcherManager:
    """One ReplicaFetcher per leader broker this broker follows partitions of (loop thread only)."""

    broker_id: int
    fetchers: dict[int, ReplicaFetcher] = field(default_factory=dict)
    inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED  # the leaders' listener fetched from
    connect: Any = None  # security/inter_broker.py's connector for it (TLS, the SASL login)
    throttles: ReplicationThrottles | None = None  # the follower's replication throttle (Rule 5)

    async def update(self, targets: Mapping[tuple[str, int], FollowTarget], brokers: Mapping) -> None:
        by_leader: dict[int, dict] = {}
        for key, target in targets.items():
            by_leader.setdefault(target.leader, {})[key] = target
        for leader_id in [lid for lid in self.fetchers if lid not in by_leader]:
            fetcher = self.fetchers.pop(leader_id)
            fetcher.set_partitions({}, None)  # nothing is appended after this returns (Rule 4)
            await fetcher.stop()
        for leader_id, parts in by_leader.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(self.broker_id, leader_id, self.inter_broker,
                                                                     self.connect, self.throttles)
                fetcher.start()
            fetcher.set_partitions(parts, self.inter_broker.address(brokers.get(leader_id)))

    async def close(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.set_partitions({}, None)
            await fetcher.stop()
        self.fetchers.clear()

    def statistics(self) -> list[ReplicaFetcherStatistics]:
        return [f.statistics() for f in self.fetchers.values()]

    def leader_high_watermark(self, key: tuple[str, int], leader_id: int) -> int:
        """The HW `leader_id` last answered this broker's fetcher for `key`; -1 when not known."""
        fetcher = self.fetchers.get(leader_id)
        part = None if fetcher is None else fetcher.partitions.get(key)
        return -1 if part is None else part.leader_high_watermark
