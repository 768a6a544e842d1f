"""The pull consumer (design notes 4.5): assigned partitions, pipelined fetches, records decoded per batch.

    consumer = Consumer(bootstrap_servers="localhost:9092", **{"auto.offset.reset": "earliest"})
    consumer.assign([("topic1", 0), ("topic1", 1)])
    for record in consumer:            # record.topic, .partition, .offset, .timestamp, .key, .value, .headers
        ...

Threads: the application thread iterates (or polls); one daemon I/O thread ("sparklog-consumer-io") runs the
`Fetcher`. The fetcher keeps one Fetch request in flight per broker and sends the next one as soon as the
previous answer arrives, so the next fetch is on the wire while the application iterates over the current
one; at most `queued.max.chunks` answered partition chunks wait for the application, which bounds memory.
The fetcher only walks batch headers (`records.batch.next_fetch_offset`, to know where the next fetch starts);
the application thread decodes each chunk with `records.batch.chunk_tuples` (CRC-32C checked when
`check.crcs`, the default: a bad batch raises `CorruptRecordError` and is never yielded): the trimming rule of
`batches_in_range`, which the Spark fetcher shares, with the ConsumerRecords built by the compiled codec, a few
batches per call. A truncated last batch, which a fetch response may end with, is skipped and fetched again
whole.

Rule 1 (positions): `position(tp)` is the offset of the next record the application will get; a record is
yielded only if its offset is at least the position it was fetched for. `seek` bumps the partition's epoch:
chunks and in-flight answers of an older epoch are dropped. The I/O thread changes positions and epochs only
under the lock `seek` holds (see `Fetcher`). `fetch_until(tp, offset)` stops the fetches of a partition at an
offset (a reader of a fixed range), until a later `fetch_until` moves or lifts it.
Rule 2 (resets): a partition without a position, or whose fetch says OFFSET_OUT_OF_RANGE, is reset by
`auto.offset.reset`: `earliest`/`smallest` or `latest`/`largest` through ListOffsets, or `none`: the
application gets `OffsetOutOfRange` / `NoOffsetForPartition`.
Rule 3 (commits): `commit` and `committed` go to the group's coordinator, found with FindCoordinator; an
answer that says it is loading or moved (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR) makes the consumer find it again and ask again, with the backoff, until the timeout, as
Kafka's consumer does; any other error is raised. `committed` asks OffsetFetch v7 with require_stable under
read_committed (as Kafka's consumer does, KIP-447): a partition whose offsets a transaction has committed but
whose marker is not yet written answers UNSTABLE_OFFSET_COMMIT, asked again the same way (else the consumer
would start from the offsets before that transaction and read its input again).
Rule 4 (isolation.level): read_committed fetches with isolation_level 1: the broker serves up to the last
stable offset with the aborted transactions of the range, whose data batches the application never gets
(records/aborted.py); control batches (markers) are never records, in either mode. A reset to latest asks
for the last stable offset.
Rule 5 (fetch sessions, KIP-227): the fetcher keeps an incremental fetch session with each broker
(protocol/fetch_session_handler.py): after a full Fetch, a request names only the partitions whose fetch offset
moved (and forgets those it stopped fetching); a partition missing from an answer in a session has nothing new. A
session error (FETCH_SESSION_ID_NOT_FOUND after an eviction, INVALID_FETCH_SESSION_EPOCH) or a failed request
starts over with a full Fetch at once; a broker that makes no session is fetched from in full each time.
Rule 6 (fetch from the closest replica, KIP-392): with `client.rack` set, fetches name the rack and a partition
is fetched from the replica its leader prefers, back to the leader when that replica fails
(client/read_replica.py).
The consumer is not thread-safe (like Kafka's): one application thread uses it; `close()` may come from another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Iterable, Iterator

from sparklog.client.backoff import ExponentialBackoff, Retry
from sparklog.client.config import CONSUMER_DEFAULTS, resolve
from sparklog.client.connection import IOThread, NetworkClient
from sparklog.client.errors import (COORDINATOR_MOVED_ERRORS, METADATA_REFRESH_ERRORS, ClientClosed, NoBrokersAvailable,
                                    UnknownTopic, is_retriable)
from sparklog.client.message import ConsumerRecord
from sparklog.client.metadata import NO_LEADER, ClusterMetadata, send_metadata_request
from sparklog.client.read_replica import ReadReplicas
from sparklog.client.producer import bootstrap_from
from sparklog.protocol import (ApiKey, FetchPartition, FetchRequest, ListOffsetsPartition,
                               ListOffsetsRequest, ListOffsetsTopic, OffsetCommitRequest,
                               OffsetCommitRequestPartition, OffsetCommitRequestTopic, OffsetFetchRequest,
                               OffsetFetchRequestTopic, for_code)
from sparklog.protocol.fetch_session_handler import FetchSessionHandler
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, FindCoordinatorRequest
from sparklog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from sparklog.records.aborted import AbortedTransactions
from sparklog.records.batch import chunk_tuples, next_fetch_offset, tuples_in_range

logger = logging.getLogger(__name__)

FETCH_VERSION = 11  # highest Fetch version of the shared codec
LIST_OFFSETS_VERSION = 5
OFFSET_COMMIT_VERSION = 7
FIND_COORDINATOR_VERSION = 2
OFFSET_FETCH_VERSION = 7  # require_stable
UNSTABLE_OFFSET_COMMIT = 88
_BUSY_POLL_S = 0.1  # longest sleep while partitions wait for a leader, a reset or a backoff
_OFFSET_OUT_OF_RANGE = 1

TopicPartition = tuple[str, int]


class OffsetOutOfRange(Exception):
    """The position is outside the log and `auto.offset.reset` is `none`."""


class NoOffsetForPartition(Exception):
    """A partition has no position and `auto.offset.reset` is `none`."""


class _PartitionState:
    """Where one assigned partition stands. `position`: next offset the application gets; `fetch_offset`:
    next offset to fetch (ahead of position while chunks are queued); None means "reset first"."""

    __slots__ = ("tp", "position", "fetch_offset", "epoch", "paused", "resetting", "in_flight", "retry_at",
                 "failures", "high_watermark", "processed", "stop_at")

    def __init__(self, tp: TopicPartition, position: int | None) -> None:
        self.tp = tp
        self.position = position
        self.fetch_offset = position
        self.epoch = 0
        self.paused = False
        self.resetting = False
        self.in_flight = False
        self.retry_at = 0.0
        self.failures = 0  # failed fetches or resets in a row: the backoff's exponent
        self.high_watermark = -1
        self.processed: int | None = None  # group consumers: offset after the last record the app finished
        self.stop_at: int | None = None  # no fetch from this offset on (`fetch_until`); None: no limit


class Consumer:
    """A pull consumer of assigned partitions; see the module docstring."""

    def __init__(self, bootstrap_servers=None, zookeeper: str | None = None, **settings) -> None:
        config = resolve(CONSUMER_DEFAULTS, settings)
        if bootstrap_servers is not None:
            config["bootstrap.servers"] = bootstrap_servers
        self.config = config
        self._client = NetworkClient.from_config(bootstrap_from(config["bootstrap.servers"], zookeeper,
                                                                config["zookeeper.connection.timeout.ms"]), config,
                                                 config["request.timeout.ms"] + config["fetch.max.wait.ms"])
        self._metadata = ClusterMetadata.from_config(config)
        self._backoff = ExponentialBackoff.retry(config)
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._lock = threading.Lock()
        self._chunks: deque = deque()
        self._chunk_ready = threading.Condition(self._lock)
        self._current: Iterator | None = None
        self._closed = False
        self._fetcher = Fetcher(self)
        self._thread = IOThread("sparklog-consumer-io", self._client, self._fetcher.run_once)
        self._thread.start()

    # -- assignment and positions ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions: from the group's committed offsets when `group.id` is set and
        it committed some, else from where `auto.offset.reset` says. Partitions kept keep their position."""
        wanted = [(t, int(p)) for t, p in partitions]
        positions: dict[TopicPartition, int | None] = {tp: None for tp in wanted}
        if self.config["group.id"]:
            new = [tp for tp in wanted if tp not in self._states]
            if new:
                for tp, offset in self.committed(new).items():
                    positions[tp] = offset
        self._assign(positions, keep_positions=True)

    # -- offsets committed through the brokers (the Kafka API; ZooKeeper groups use GroupConsumer) ------

    def commit(self, offsets: dict | None = None, timeout: float | None = None, member: tuple[int, str] = (-1, ""),
               ) -> None:
        """Store offsets for `group.id` through a broker (OffsetCommit): by default every assigned
        partition's position, i.e. everything returned so far. `member` is (generation, member id) of a group
        member (kafka_group_consumer.py), whose commit the coordinator fences; the default (-1, "") is Kafka's
        member-less commit, accepted only while the group has no members."""
        group = self._group_id()
        if offsets is None:
            offsets = self.positions()
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=int(offset), committed_metadata=""))
        if not topics:
            return
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=member[0], member_id=member[1],
                                      topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in topics.items()])
        def errors(response):
            return [(part.error_code, f"commit of {topic.name}-{part.partition_index}")
                    for topic in response.topics for part in topic.partitions if part.error_code]

        self.at_coordinator(ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, request, timeout, errors)

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None) -> dict:
        """{tp: committed offset} for `group.id`; partitions it never committed are left out."""
        group = self._group_id()
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(int(partition))
        request = OffsetFetchRequest(group_id=group, require_stable=self._fetcher.isolation == 1, topics=[
            OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()])
        def errors(response):
            unstable = [(UNSTABLE_OFFSET_COMMIT, f"offsets of group {group}: {t.name}-{p.partition_index} pending "
                         "in a transaction") for t in response.topics for p in t.partitions
                        if p.error_code == UNSTABLE_OFFSET_COMMIT]
            return [(response.error_code, f"offsets of group {group}")] if response.error_code else unstable

        response = self.at_coordinator(ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, request, timeout, errors,
                                        retried=COORDINATOR_MOVED_ERRORS | {UNSTABLE_OFFSET_COMMIT})
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions
                if not p.error_code and p.committed_offset >= 0}

    def _group_id(self) -> str:
        if not self.config["group.id"]:
            raise ValueError("commit() and committed() need the group.id setting")
        return self.config["group.id"]

    def at_coordinator(self, api_key: int, version: int, body, timeout: float | None, errors,
                       retried=COORDINATOR_MOVED_ERRORS, request_timeout: float | None = None):
        """The answer of `group.id`'s coordinator (Rule 3); `errors(response)` lists its (code, what) errors, of
        which those in `retried` are asked again until the timeout. `request_timeout`: how long one request may
        wait for its answer (a JoinGroup waits for the whole rebalance), by default the client's."""
        group = self._group_id()
        retry = Retry(self._backoff, self.config["request.timeout.ms"] / 1000 if timeout is None else timeout)
        while True:
            found = self._any_broker(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                     FindCoordinatorRequest(key=group, key_type=KEY_TYPE_GROUP), retry.remaining())
            if found.error_code:
                failures = [(found.error_code, f"coordinator of group {group}")]
            else:
                self._client.set_nodes({found.node_id: (found.host, found.port)})
                try:
                    response = self._client.submit(found.node_id, api_key, version, body, timeout=request_timeout
                                                   ).wait(max(0.01, retry.remaining()))
                except Exception as exc:
                    if not is_retriable(exc) or retry.expired():
                        raise
                    retry.sleep()
                    continue
                failures = errors(response)
                if not failures:
                    return response
            code, what = failures[0]
            if code not in retried or retry.expired():
                raise for_code(code)(what)
            retry.sleep()

    def _any_broker(self, api_key: int, version: int, body, timeout: float | None):
        retry = Retry(self._backoff, self.config["request.timeout.ms"] / 1000 if timeout is None else timeout)
        while True:
            node = self._client.least_loaded_node()
            try:
                if node is None:
                    raise NoBrokersAvailable(self._client.unreachable())
                return self._client.submit(node, api_key, version, body).wait(max(0.01, retry.remaining()))
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                if retry.expired():
                    raise self._unreachable_or(exc) from None
                retry.sleep()

    def _unreachable_or(self, error: BaseException) -> BaseException:
        """The error of a caller that gives up: which brokers are unreachable and why, if none ever answered."""
        if not self._client.ever_connected:
            return NoBrokersAvailable(self._client.unreachable())
        return error

    def _assign(self, positions: dict[TopicPartition, int | None], keep_positions: bool = False) -> None:
        """Replace the assignment; `positions` gives each partition's start (None: reset)."""
        with self._lock:
            old = self._states
            states = {}
            for tp, position in positions.items():
                if keep_positions and tp in old and position is None:
                    states[tp] = old[tp]
                    continue
                states[tp] = _PartitionState(tp, position)
                if tp in old:
                    states[tp].epoch = old[tp].epoch + 1
            for tp, state in old.items():
                if tp not in states:
                    state.epoch += 1  # drops its queued chunks and in-flight answers
            self._states = states
            self._chunks = deque(c for c in self._chunks if states.get(c[0].tp) is c[0] and c[0].epoch == c[1])
            self._current = None
            for topic in {t for t, _ in states}:
                self._metadata.add_topic(topic)
        self._client.wakeup()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def positions(self) -> dict[TopicPartition, int]:
        """{tp: position} of every assigned partition that has one (Rule 1): what `commit()` stores."""
        return {tp: s.position for tp, s in self._states.items() if s.position is not None}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make `offset` the next record returned for `partition`."""
        with self._lock:
            state = self._state(partition)
            state.epoch += 1
            state.position = state.fetch_offset = int(offset)
            state.retry_at = 0.0
            self._chunks = deque(c for c in self._chunks if c[0] is not state)
            self._current = None
        self._client.wakeup()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp, offset in self.beginning_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp, offset in self.end_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record the application will get (resolving a reset first if needed)."""
        state = self._state(partition)
        deadline = time.monotonic() + (timeout if timeout is not None else self.config["request.timeout.ms"] / 1000)
        while state.position is None:
            if time.monotonic() > deadline:
                raise self._unreachable_or(TimeoutError(f"no position for {tp_name(partition)} yet"))
            self._client.wakeup()
            time.sleep(0.01)
        return state.position

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._client.wakeup()

    def fetch_until(self, partition: TopicPartition, offset: int | None) -> None:
        """Send no fetch for `partition` from `offset` on (None: no limit; `seek` keeps it). A reader of a
        fixed range (the Spark source) then ends with no request left waiting `fetch.max.wait.ms` at the log's
        end, which would hold back the next fetch on that connection after a `seek`."""
        self._state(partition).stop_at = None if offset is None else int(offset)
        self._client.wakeup()

    def highwater(self, partition: TopicPartition) -> int:
        """The high watermark seen in the last fetch answer for `partition` (-1 before any)."""
        return self._state(partition).high_watermark

    def _state(self, partition: TopicPartition) -> _PartitionState:
        try:
            return self._states[(partition[0], int(partition[1]))]
        except KeyError:
            raise ValueError(f"{tp_name(partition)} is not assigned") from None

    # -- offsets lookups -------------------------------------------------------------------------------

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None) -> dict:
        return {tp: v[0] for tp, v in self._list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions}, timeout).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None) -> dict:
        """The high watermark of each partition (the last stable offset under read_committed, Rule 4)."""
        return {tp: v[0] for tp, v in self._list_offsets({tp: LATEST_TIMESTAMP for tp in partitions}, timeout).items()}

    def offsets_for_times(self, timestamps: dict, timeout: float | None = None) -> dict:
        """{tp: (offset, timestamp)} of the first record with a timestamp >= the one asked, or None."""
        found = self._list_offsets(dict(timestamps), timeout)
        return {tp: (None if v[0] < 0 else v) for tp, v in found.items()}

    def _list_offsets(self, timestamps: dict, timeout: float | None) -> dict:
        timeout = self.config["request.timeout.ms"] / 1000 if timeout is None else timeout
        retry = Retry(self._backoff, timeout)
        deadline = retry.deadline
        result: dict = {}
        todo = {(t, int(p)): ts for (t, p), ts in timestamps.items()}
        while todo:
            leaders = self._leaders_for({t for t, _ in todo}, deadline, todo)
            futures = []
            for node_id, tps in _group_by(todo, leaders).items():
                futures.append((tps, self._client.submit(node_id, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                                         list_offsets_request({tp: todo[tp] for tp in tps},
                                                                              self._fetcher.isolation))))
            retry_error = None
            for tps, future in futures:
                try:
                    response = future.wait(max(0.0, deadline - time.monotonic()))
                except Exception as exc:
                    if not is_retriable(exc):
                        raise
                    retry_error = exc
                    continue
                for topic in response.topics:
                    for part in topic.partitions:
                        tp = (topic.name, part.partition_index)
                        if part.error_code:
                            error = for_code(part.error_code)(f"{tp[0]}-{tp[1]}")
                            if not error.retriable:
                                raise error
                            retry_error = error
                            continue
                        result[tp] = (part.offset, part.timestamp)
                        todo.pop(tp, None)
            if todo:
                if retry.expired():
                    raise self._unreachable_or(TimeoutError(f"ListOffsets for {', '.join(map(tp_name, sorted(todo)))} failed: {retry_error}"))
                self._metadata.request_update()
                retry.sleep()
        return result

    def _leaders_for(self, topics: set[str], deadline: float, wanted=(), need_leaders: bool = True
                     ) -> dict[TopicPartition, int]:
        """The leaders once `topics`, and the partitions `wanted`, are known with a leader each (without
        `need_leaders`: once they are known at all); a wanted partition the cached metadata lacks (added to
        the topic since) is asked for again, as Kafka's consumer does, until `deadline`."""
        metadata = self._metadata
        for topic in topics:
            metadata.add_topic(topic)
        while True:
            leaders = metadata.leaders
            missing = [t for t in topics if t not in metadata.partition_counts]
            missing += [tp_name(tp) for tp in wanted if tp not in leaders and tp[0] not in missing]
            asked = wanted or [tp for tp in leaders if tp[0] in topics]  # another partition's leader is not asked
            leaderless = [tp_name(tp) for tp in sorted(asked) if need_leaders and leaders.get(tp) == NO_LEADER]
            if not missing and not leaderless:
                return metadata.leaders
            if time.monotonic() > deadline:
                what = f"no metadata for {', '.join(missing)}" if missing else f"no leader for {', '.join(leaderless)}"
                raise self._unreachable_or(UnknownTopic(what))
            version = metadata.request_update()
            self._client.wakeup()
            metadata.wait_for(version, min(0.5, max(0.01, deadline - time.monotonic())))

    def partitions_for_topic(self, topic: str, timeout: float | None = None) -> list[int]:
        """The topic's partitions, with a leader or not (Kafka's partitionsFor): a consumer assigned all of them
        fetches those with a leader and waits for the others' (the fetcher asks the metadata again)."""
        deadline = time.monotonic() + (self.config["request.timeout.ms"] / 1000 if timeout is None else timeout)
        self._leaders_for({topic}, deadline, need_leaders=False)
        return list(range(self._metadata.partition_counts[topic]))

    # -- records ---------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records in fetch order; never ends unless `consumer.timeout.ms` >= 0 passes with none."""
        idle_ms = self.config["consumer.timeout.ms"]
        idle = None if idle_ms < 0 else idle_ms / 1000.0
        while not self._closed:
            current = self._current
            if current is None:
                try:
                    chunk = self.next_chunk(idle)
                except ClientClosed:
                    return  # closed from another thread: the iteration ends
                if chunk is None:
                    if idle is not None:
                        self._check_reached()
                        return
                    continue
                current = self._current = self._chunk_records(chunk)
            for record in current:  # not `yield from`: closing this generator must not close `current`
                yield record
            if self._current is current:
                self._current = None

    def poll(self, timeout: float | None = 0.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` (default `max.poll.records`) records; waits up to `timeout` s for the first."""
        limit = max_records or self.config["max.poll.records"]
        out: list[ConsumerRecord] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(out) < limit and not self._closed:
            current = self._current
            if current is None:
                wait = 0.0 if out else (None if deadline is None else max(0.0, deadline - time.monotonic()))
                chunk = self.next_chunk(wait)
                if chunk is None:
                    break
                current = self._current = self._chunk_records(chunk)
            for record in current:
                out.append(record)
                if len(out) >= limit:
                    return out
            if self._current is current:
                self._current = None
        return out

    def _check_reached(self) -> None:
        """An idle timeout with no broker ever reached is "could not reach", never "no records"."""
        if not self._client.ever_connected and self._client.unreachable() != "no broker answered":
            raise NoBrokersAvailable(self._client.unreachable())

    def next_chunk(self, timeout: float | None):
        """The next fetched chunk `(partition state, epoch, records view, start offset)`, or None after
        `timeout`: for readers that decode whole batches themselves (the Spark data source). An error chunk
        (OffsetOutOfRange, NoOffsetForPartition) raises here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._chunk_ready:
            while True:
                if self._closed:
                    raise ClientClosed("the consumer is closed")
                while self._chunks:
                    chunk = self._chunks.popleft()
                    state, epoch = chunk[0], chunk[1]
                    if state.epoch != epoch or self._states.get(state.tp) is not state:
                        continue
                    if self._fetcher.waiting_for_space:
                        self._client.wakeup()
                    if isinstance(chunk[2], BaseException):
                        raise chunk[2]
                    return chunk
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._chunk_ready.wait(remaining if remaining is None or remaining < 1.0 else 1.0)

    def _chunk_records(self, chunk) -> Iterator[ConsumerRecord]:
        """Decode one chunk batch by batch (the hot loop of consumption: keep it lean). Each batch arrives as
        a list of finished ConsumerRecords (built in C by the compiled codec); per record only the epoch
        check and the position of Rule 1 remain."""
        state, epoch, view, start, aborted = chunk
        if aborted is None:
            batches = chunk_tuples(view, start, state.tp, ConsumerRecord, self.config["check.crcs"])
        else:  # Rule 4: read_committed with aborted transactions in the chunk, batch by batch
            batches = _committed(tuples_in_range(view, start, state.tp, ConsumerRecord, self.config["check.crcs"]),
                                 aborted)
        for batch, records in batches:
            if records is None:  # a control batch, or aborted data (Rule 4)
                if state.epoch == epoch:
                    state.position = batch.next_offset
                continue
            for record in records:
                if state.epoch != epoch:
                    return  # seek or reassignment since this chunk was fetched
                state.position = record[2] + 1
                yield record

    def _deliver(self, chunk) -> None:
        """I/O thread: queue an answered chunk for the application."""
        with self._chunk_ready:
            self._deliver_locked(chunk)

    def _deliver_locked(self, chunk) -> None:
        self._chunks.append(chunk)
        self._chunk_ready.notify()

    def queued_chunks(self) -> int:
        return len(self._chunks)

    def metrics(self) -> dict:
        """The throttles the brokers answered with (connection.py Rule 5)."""
        return self._client.throttle_statistics()

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        with self._chunk_ready:
            self._chunk_ready.notify_all()
        self._thread.stop(timeout=timeout)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tp_name(tp) -> str:
    """A partition as Kafka's tools name it in messages: `events-2`, never a tuple's repr."""
    return f"{tp[0]}-{tp[1]}"


def _committed(batches: Iterator, aborted: AbortedTransactions) -> Iterator:
    """Rule 4: tuples_in_range's (batch, records) with aborted data batches given as (batch, None)."""
    for batch, records in batches:
        yield batch, None if aborted.skips(batch) else records


def _group_by(tps: Iterable[TopicPartition], leaders: dict[TopicPartition, int]) -> dict[int, list[TopicPartition]]:
    out: dict[int, list[TopicPartition]] = {}
    for tp in tps:
        leader = leaders.get(tp, NO_LEADER)
        if leader == NO_LEADER:
            raise UnknownTopic(f"{tp_name(tp)} does not exist or has no leader")
        out.setdefault(leader, []).append(tp)
    return out


def list_offsets_request(timestamps: dict[TopicPartition, int], isolation: int = 0) -> ListOffsetsRequest:
    topics: dict[str, list] = {}
    for (topic, partition), ts in timestamps.items():
        topics.setdefault(topic, []).append(ListOffsetsPartition(partition_index=partition, timestamp=ts))
    return ListOffsetsRequest(replica_id=-1, isolation_level=isolation,
                              topics=[ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()])


class Fetcher:
    """Keeps fetches in flight and positions resolved; runs on the consumer's I/O thread only.

    Rule: every change it makes to a partition's position, fetch offset or epoch is made under the
    consumer's lock, after checking the epoch the request was sent with: `seek` and reassignment change
    them under the same lock, so an answer to an older request can never undo them.
    """

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.client = consumer._client
        self.metadata = consumer._metadata
        config = consumer.config
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.max_chunks = max(1, config["queued.max.chunks"])
        self.reset = config["auto.offset.reset"]
        self.backoff = consumer._backoff
        self.lock = consumer._lock
        self.isolation = 1 if config["isolation.level"] == "read_committed" else 0
        self.in_flight_nodes: set[int] = set()
        self.waiting_for_space = False
        self.fetches = 0
        self.sessions: dict[int, FetchSessionHandler] = {}  # per broker (Rule 5)
        self.rack = config["client.rack"]  # Rule 6
        self.read_replicas = ReadReplicas(config["metadata.max.age.ms"] / 1000)

    def run_once(self) -> float | None:
        now = time.monotonic()
        if self.metadata.due(now):
            send_metadata_request(self.client, self.metadata)
        states = list(self.consumer._states.values())
        busy = self._resets(states, now)
        self.waiting_for_space = len(self.consumer._chunks) >= self.max_chunks
        if not self.waiting_for_space:
            busy |= self._fetches(states, now)
        return _BUSY_POLL_S if busy or self.metadata.need_update else None

    # -- resets ------------------------------------------------------------------------------------------

    def _resets(self, states: list[_PartitionState], now: float) -> bool:
        todo: dict[int, list[_PartitionState]] = {}
        waiting = False
        for state in states:
            if state.fetch_offset is not None or state.resetting:
                continue
            waiting = True
            if state.retry_at > now:
                continue
            if self.reset == "none":
                state.retry_at = float("inf")
                self.consumer._deliver((state, state.epoch, NoOffsetForPartition(f"{tp_name(state.tp)} has no position"), None))
                continue
            leader = self.metadata.leader(*state.tp)
            if leader == NO_LEADER:
                self.metadata.add_topic(state.tp[0])
                self.metadata.request_update()
                continue
            todo.setdefault(leader, []).append(state)
        timestamp = EARLIEST_TIMESTAMP if self.reset == "earliest" else LATEST_TIMESTAMP
        for node_id, group in todo.items():
            for state in group:
                state.resetting = True
            epochs = {state.tp: (state, state.epoch) for state in group}
            self.client.submit(node_id, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                               list_offsets_request({s.tp: timestamp for s in group}, self.isolation),
                               callback=lambda f, e=epochs: self._on_reset(f, e), wake=False)
        return waiting

    def _on_reset(self, future, epochs: dict) -> None:
        answered = {}
        if future.error is None:
            for topic in future.value.topics:
                for part in topic.partitions:
                    answered[(topic.name, part.partition_index)] = part
        for tp, (state, epoch) in epochs.items():
            state.resetting = False
            part = answered.get(tp)
            if part is None or part.error_code or part.offset < 0:
                self._back_off(state)
                self.metadata.request_update()
                continue
            with self.lock:
                if state.epoch == epoch and state.fetch_offset is None:
                    state.position = state.fetch_offset = part.offset
                    state.failures = 0

    def _back_off(self, state: _PartitionState) -> None:
        state.retry_at = time.monotonic() + self.backoff.delay(state.failures)
        state.failures += 1

    # -- fetches -----------------------------------------------------------------------------------------

    def _fetches(self, states: list[_PartitionState], now: float) -> bool:
        by_node: dict[int, list[_PartitionState]] = {}
        busy = False
        for state in states:
            if state.fetch_offset is None or state.paused or state.in_flight:
                continue
            if state.stop_at is not None and state.fetch_offset >= state.stop_at:
                continue
            if state.retry_at > now:
                busy = True
                continue
            leader = self.metadata.leader(*state.tp)
            if leader == NO_LEADER:
                self.metadata.add_topic(state.tp[0])
                self.metadata.request_update()
                busy = True
                continue
            node = self.read_replicas.node_for(state.tp, leader, self.metadata.brokers, now)  # Rule 6
            if node in self.in_flight_nodes:
                continue
            by_node.setdefault(node, []).append(state)
        for node_id, group in by_node.items():
            self._send_fetch(node_id, group)
        return busy

    def _send_fetch(self, node_id: int, group: list[_PartitionState]) -> None:
        wanted = {}
        sent = []
        for state in group:
            state.in_flight = True
            with self.lock:
                epoch, offset = state.epoch, state.fetch_offset
            sent.append((state, epoch, offset))
            wanted[state.tp] = FetchPartition(partition=state.tp[1], fetch_offset=offset,
                                              partition_max_bytes=self.partition_max_bytes)
        session = self.sessions.setdefault(node_id, FetchSessionHandler())
        session_id, session_epoch, topics, forgotten = session.build(wanted)
        request = FetchRequest(replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                               max_bytes=self.max_bytes, isolation_level=self.isolation, session_id=session_id,
                               session_epoch=session_epoch, topics=topics, forgotten_topics_data=forgotten,
                               rack_id=self.rack)
        self.in_flight_nodes.add(node_id)
        self.fetches += 1
        self.client.submit(node_id, ApiKey.FETCH, FETCH_VERSION, request,
                           callback=lambda f: self._on_fetch(f, node_id, sent), wake=False)

    def _on_fetch(self, future, node_id: int, sent: list) -> None:
        self.in_flight_nodes.discard(node_id)
        answered = {}
        in_session = session_error = False
        session = self.sessions.setdefault(node_id, FetchSessionHandler())
        if future.error is None:
            session_error = not session.handle(future.value)
            in_session = future.value.session_id != 0
            for topic in future.value.responses:
                for part in topic.partitions:
                    answered[(topic.topic, part.partition_index)] = part
        else:
            session.lost()
            self.read_replicas.fetch_failed([state.tp for state, _, _ in sent], node_id)  # Rule 6
            if not is_retriable(future.error):
                logger.warning("fetch from broker %s failed: %s", node_id, future.error)
        if session_error:
            logger.info("fetch session with broker %s: %s; starting over with a full fetch", node_id,
                        for_code(future.value.error_code).__name__)
        for state, epoch, offset in sent:
            state.in_flight = False
            if state.epoch != epoch or session_error:
                continue
            part = answered.get(state.tp)
            if part is None and in_session:
                continue  # nothing new (Rule 5)
            if part is None:
                self._back_off(state)
                self.metadata.request_update()
            elif part.error_code:
                if not self.read_replicas.partition_failed(state.tp, node_id, part.error_code):  # Rule 6
                    self._fetch_error(state, epoch, offset, part.error_code)
            else:
                self._fetched(state, epoch, offset, part)

    def _fetched(self, state: _PartitionState, epoch: int, offset: int, part) -> None:
        if part.preferred_read_replica >= 0:  # Rule 6
            self.read_replicas.prefer(state.tp, part.preferred_read_replica, time.monotonic())
            if part.preferred_read_replica not in self.metadata.brokers:
                self.metadata.request_update()
        state.high_watermark = part.high_watermark
        state.failures = 0
        view = part.records
        if view is None or not len(view):
            return
        next_offset = next_fetch_offset(view, offset)
        if next_offset == offset:
            if len(view) >= self.partition_max_bytes:
                logger.warning("%s: a batch at %d is larger than max.partition.fetch.bytes", state.tp, offset)
            return
        with self.lock:  # see the class docstring
            if state.epoch == epoch:
                state.fetch_offset = next_offset
                self.consumer._deliver_locked((state, epoch, view, offset, self._aborted(part)))

    def _aborted(self, part) -> AbortedTransactions | None:
        """Rule 4: the aborted transactions of a read_committed answer (None: no batch of it is aborted)."""
        if not self.isolation or not part.aborted_transactions:
            return None
        return AbortedTransactions((a.producer_id, a.first_offset) for a in part.aborted_transactions)

    def _fetch_error(self, state: _PartitionState, epoch: int, offset: int, code: int) -> None:
        if code == _OFFSET_OUT_OF_RANGE:
            with self.lock:  # see the class docstring
                if state.epoch != epoch:
                    return
                if self.reset == "none":
                    state.retry_at = float("inf")
                    self.consumer._deliver_locked((state, epoch, OffsetOutOfRange(
                        f"{tp_name(state.tp)}: offset {offset} is out of range"), None, None))
                    return
                state.epoch += 1
                state.position = state.fetch_offset = None
            logger.info("%s: offset %s out of range, resetting to %s", state.tp, offset, self.reset)
            return
        self._back_off(state)
        if code in METADATA_REFRESH_ERRORS or for_code(code).retriable:
            self.metadata.request_update()
