"""The batching producer (paper 3.2, design notes 4.4): `send()` queues, one I/O thread batches and sends.

    with Producer(bootstrap_servers="localhost:9092", **{"linger.ms": 10, "compression.type": "lz4"}) as p:
        future = p.send("topic1", b"value", key=b"user-42")
        p.flush()
        future.get().offset

    producer.send("topic1", MessageSet(Message(b"test message str")))   # the paper's sample API

Threads: the application's threads call `send()`; one daemon thread ("sparklog-producer-io") runs the
`Sender` and the connections. `send()` only appends to the partition's open batch (see accumulator.py).
The sender builds each closed batch once (`records.build_batch`), puts every ready batch for one broker
into one Produce request (many partitions, and several batches per partition back to back, which the
broker appends as one record set), keeps up to `max.in.flight.requests.per.connection` requests in flight
per broker, and completes the batch futures from the responses.

Error handling: a retriable error (NOT_LEADER_OR_FOLLOWER, a lost connection, a timeout...) sends the batch
again after a backoff (exponential from `retry.backoff.ms` to `retry.backoff.max.ms`, backoff.py), after a metadata refresh when leadership may have moved, until
`delivery.timeout.ms` since the batch was created; anything else fails the batch's futures.

Idempotence (`enable.idempotence`, the default, as in Kafka >= 3.0; idempotence.py): the sender first takes
a producer id (InitProducerId), builds each batch once with its partition's next sequence, and puts a retried
batch back ahead of the later batches of its partition, so the broker writes each batch once and in order.
With `enable.idempotence=false`, as in Kafka without idempotence, a retry may reorder batches of one
partition that were in flight together, and a batch whose answer was lost may be written twice.

Transactions (`transactional.id`, transactions.py): confluent-kafka's calls (`init_transactions`,
`begin_transaction`, `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`, and KIP-939's
`prepare_transaction`) are the transaction manager's; the producer's hooks are three: `send`/`send_many`
refuse records outside a transaction, the sender holds a partition's batches until the partition is in the
transaction (`may_send`), and a failed batch makes the transaction abortable (`batch_failed`).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections import deque
from itertools import accumulate, groupby, repeat

from sparklog.client.accumulator import RECORD_OVERHEAD, ProducerBatch, RecordAccumulator
from sparklog.client.config import PRODUCER_DEFAULTS, parse_servers, resolve
from sparklog.client.backoff import ExponentialBackoff
from sparklog.client.connection import IOThread, NetworkClient
from sparklog.client.idempotence import MAX_IN_FLIGHT_FOR_IDEMPOTENCE, ProducerIdentity, configure
from sparklog.client.futures import complete_all
from sparklog.client.errors import (
    METADATA_REFRESH_ERRORS,
    ClientClosed,
    InvalidPartition,
    NoBrokersAvailable,
    UnknownPartition,
    UnknownTopic,
    is_retriable,
)
from sparklog.client.message import MessageSet
from sparklog.client.metadata import NO_LEADER, ClusterMetadata, send_metadata_request
from sparklog.client.partitioner import DefaultPartitioner, partitions_for_keys
from sparklog.client.transactions import PreparedTransaction, TransactionManager
from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData, for_code
from sparklog.records.compression import codec_id
from sparklog.records.batch import build_batch

logger = logging.getLogger(__name__)

PRODUCE_VERSION = 8  # highest Produce version of the shared codec
_BUSY_POLL_S = 0.1  # longest sleep while batches wait for a leader, a connection or a retry
_time_ns = time.time_ns


def bootstrap_from(bootstrap_servers, zookeeper, zookeeper_timeout_ms: int) -> list[tuple[str, int]]:
    """Bootstrap addresses from the servers given, else from the ZooKeeper broker registry (waiting at most
    `zookeeper_timeout_ms`, zookeeper.connection.timeout.ms, for a ZooKeeper server)."""
    servers = parse_servers(bootstrap_servers)
    if servers or zookeeper is None:  # "" is a connect string too, refused by connect() saying so
        if not servers:
            raise ValueError("give bootstrap_servers or zookeeper")
        return servers
    from sparklog.coordination.brokers import live_brokers
    from sparklog.coordination.connection import close, connect

    zk = connect(zookeeper, timeout=zookeeper_timeout_ms / 1000.0)
    try:
        brokers = live_brokers(zk)
    finally:
        close(zk)
    if not brokers:
        raise NoBrokersAvailable(f"no broker is registered in ZooKeeper at {zookeeper}")
    return [(b.host, b.port) for _, b in sorted(brokers.items())]


def _as_bytes(value, what: str):
    if value is None or value.__class__ is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _bytes_column(column: list | None, n: int, what: str) -> list | None:
    """`column` as bytes or None for each of `n` rows (str encoded as UTF-8); None if absent or all None."""
    if column is None:
        return None
    if len(column) != n:
        raise ValueError(f"{what}s has {len(column)} rows, values has {n}")
    if set(map(type, column)) <= {bytes, type(None)}:
        return column
    return [_as_bytes(item, what) for item in column]


def _sizes(column: list, extra: int) -> list:
    """`extra` plus the length of each item (None counts 0): `append`'s size estimate, per row, in C."""
    if None in column:
        return [extra + len(item) if item is not None else extra for item in column]
    return list(map(extra.__add__, map(len, column)))


def _topic_name(topic):
    """A str subclass as a plain str: the accumulator's keys must hash and compare without Python code
    (_csend.pyx Rule 6)."""
    return str.__str__(topic) if topic.__class__ is not str and isinstance(topic, str) else topic


def _headers(headers):
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return [(k, _as_bytes(v, "header value")) for k, v in items]


class Producer:
    """A thread-safe batching producer; see the module docstring."""

    def __init__(self, bootstrap_servers=None, zookeeper: str | None = None, **settings) -> None:
        config = resolve(PRODUCER_DEFAULTS, settings)
        configure(config, {name.replace("_", "."): value for name, value in settings.items()})
        if bootstrap_servers is not None:
            config["bootstrap.servers"] = bootstrap_servers
        self.config = config
        codec_id(config["compression.type"])  # an unknown codec fails here, not in the sender
        self._client = NetworkClient.from_config(bootstrap_from(config["bootstrap.servers"], zookeeper,
                                                               config["zookeeper.connection.timeout.ms"]), config)
        self._metadata = ClusterMetadata.from_config(config)
        self._partitioner = DefaultPartitioner()
        self._accumulator = RecordAccumulator(
            config["batch.size"], config["batch.num.messages"], config["linger.ms"], config["buffer.memory"],
            config["max.block.ms"], on_ready=self._wake_sender)
        self._accumulator.closed_listener = self._partitioner.batch_closed
        self._sender = Sender(self._client, self._metadata, self._accumulator, config)
        self._closed = False
        # send() is the accumulator's compiled common case, which hands the rest to _send (sendpath.py)
        accumulator = self._accumulator
        accumulator.metadata, accumulator.partitioner, accumulator.slow_send = (
            self._metadata, self._partitioner, self._send)
        self.send = accumulator.send
        self._transactions = self._transaction_manager(config)
        self._thread = IOThread("sparklog-producer-io", self._client, self._sender.run_once)
        self._thread.start()

    def _transaction_manager(self, config: dict) -> TransactionManager | None:
        """With `transactional.id`: the manager, wired to the sender (module docstring, Transactions)."""
        tid = config["transactional.id"]
        if tid is None:
            return None
        if not config["enable.idempotence"]:
            raise ValueError("transactional.id needs enable.idempotence (acks=all, retries > 0, "
                             "max.in.flight.requests.per.connection <= 5)")
        identity = self._sender.identity
        identity.transactional = True
        manager = TransactionManager(tid, config["transaction.timeout.ms"], self._client, identity, self.flush,
                                     ExponentialBackoff.retry(config))
        self._sender.gate = manager
        self._sender.transactional_id = tid
        del self.send  # the class's send: the compiled path does not know transactions (transactions.py Rule 3)
        return manager

    # -- transactions (transactions.py) ---------------------------------------------------------------------

    def _txn_timeout(self, timeout: float | None) -> float:
        if self._transactions is None:
            raise ValueError("this producer has no transactional.id")
        return self.config["transaction.timeout.ms"] / 1000 if timeout is None or timeout < 0 else timeout

    def init_transactions(self, timeout: float | None = None) -> None:
        self._transactions.init_transactions(self._txn_timeout(timeout))

    def begin_transaction(self) -> None:
        self._txn_timeout(None)
        self._transactions.begin_transaction()

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout: float | None = None) -> None:
        self._transactions.send_offsets_to_transaction(offsets, group_metadata, self._txn_timeout(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._transactions.commit_transaction(self._txn_timeout(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._transactions.abort_transaction(self._txn_timeout(timeout))

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """KIP-939: flush, leave the transaction open; `transactions.complete_prepared` ends it anywhere."""
        return self._transactions.prepare_transaction(self._txn_timeout(timeout))

    # -- the hot path ------------------------------------------------------------------------------------

    def send(self, topic: str, value=None, key=None, headers=None, partition: int | None = None,
             timestamp: int | None = None):
        """Queue one record; returns a `RecordFuture` (`get()` -> RecordMetadata). Blocks only when the
        buffer is full or the topic's metadata is not known yet (both up to `max.block.ms`).

        `value` may also be the paper's `MessageSet`; then a list of futures is returned.

        An instance's `send` is its accumulator's `SendPath.send` (set in __init__): the common case in one
        compiled call, the same records and futures as this method, which it calls for everything else.
        """
        return self._send(topic, value, key, headers, partition, timestamp)

    def _send(self, topic: str, value, key, headers, partition: int | None, timestamp: int | None):
        """`send`'s full path: every case, in Python (sendpath.py's slow path)."""
        if self._closed:
            raise ClientClosed("the producer is closed")
        if self._transactions is not None:
            self._transactions.check_can_send()
        topic = _topic_name(topic)
        if value.__class__ is not bytes:
            if isinstance(value, MessageSet):
                return [self.send(topic, m.value, m.key, m.headers, partition, m.timestamp) for m in value]
            value = _as_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes(key, "key")
        if partition is None:
            count = self._metadata.partition_counts.get(topic)
            if count is None:
                count = self._wait_on_metadata(topic)
            partition = 0 if count == 1 else self._partitioner.partition(topic, key, count)
        elif (partition >= self._metadata.partition_counts.get(topic, partition + 1) or partition < 0) and \
                not 0 <= partition < self._count_after_refresh(topic):
            count = self._metadata.partition_counts.get(topic)
            raise InvalidPartition(f"topic {topic!r} has {count} partitions, not partition {partition}"
                                   if partition >= 0 else f"topic {topic!r} has no partition {partition}",
                                   topic, partition, count)
        if headers:
            headers = _headers(headers)
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        return self._accumulator.append(topic, partition, (key, value, headers, timestamp), size)

    def send_many(self, topic: str, values: list, keys: list | None = None, headers: list | None = None,
                  partitions: list | None = None, timestamp: int | None = None) -> list[ProducerBatch]:
        """Queue many records at once (the Spark writer's path: one call per Arrow batch); returns the batch
        futures that hold them, each once.

        Row i is (`values[i]`, `keys[i]`, `headers[i]`, `partitions[i]`), as `send(topic, value, key=...,
        headers=..., partition=...)` would take it; absent lists mean None for every row, and every record
        gets `timestamp` (default: now). The records land in the same partitions and batches, in the same
        order, as that loop of `send` calls would put them (murmur2 for keys, sticky for null keys, the
        accumulator's Rule 4), but the work is per run of rows and per batch: a record is acknowledged
        when its batch is (`batch.succeeded()`, `batch.error`).
        """
        if self._closed:
            raise ClientClosed("the producer is closed")
        if self._transactions is not None:
            self._transactions.check_can_send()
        topic = _topic_name(topic)
        n = len(values)
        values = _bytes_column(values, n, "value")
        keys = _bytes_column(keys, n, "key")
        if keys is not None and keys.count(None) == n:
            keys = None
        if headers is not None and any(headers):
            headers = [_headers(h) for h in headers]
        else:
            headers = None
        count = self._metadata.partition_counts.get(topic)
        if count is None:
            count = self._wait_on_metadata(topic)
        if partitions is not None:
            given = [p for p in partitions if p is not None]
            if given and max(given) >= count:  # added since the metadata came?
                count = max(count, self._count_after_refresh(topic))
            if given and (min(given) < 0 or max(given) >= count):
                bad = next(p for p in given if p < 0 or p >= count)
                raise InvalidPartition(f"topic {topic!r} has no partition {bad}", topic, bad, count)
            if len(given) == n:
                fixed = partitions
            else:
                fixed = None
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        records = list(zip(keys or repeat(None, n), values, headers or repeat(None, n), repeat(timestamp, n)))
        sizes = _sizes(values, RECORD_OVERHEAD)
        if keys is not None:
            sizes = list(map(int.__add__, sizes, _sizes(keys, 0)))
        if keys is None and partitions is None:  # the common case: one sticky run
            return self._fill_sticky(topic, count, records, sizes, [])
        if partitions is None or fixed is None:
            hashed = partitions_for_keys(keys, count) if keys is not None else repeat(None, n)
            if partitions is None:
                fixed = hashed if keys is not None else list(hashed)
            else:
                fixed = [p if p is not None else h for h, p in zip(hashed, partitions)]
        batches: list[ProducerBatch] = []
        start = 0
        for sticky, run in groupby(p is None for p in fixed):
            stop = start + sum(1 for _ in run)
            if sticky:
                self._fill_sticky(topic, count, records[start:stop], sizes[start:stop], batches)
            else:
                self._fill_partitions(topic, records[start:stop], sizes[start:stop], fixed[start:stop], batches)
            start = stop
        return list(dict.fromkeys(batches))  # a partition's open batch may be filled by several runs

    def _fill_sticky(self, topic: str, count: int, records: list, sizes: list, batches: list) -> list:
        """Null keys: the sticky partition takes records until its batch closes, then the partitioner picks
        the next one, exactly as per-record sends would."""
        ends = list(accumulate(sizes))
        fill, partition = self._accumulator.fill, self._partitioner.partition
        start, stop = 0, len(records)
        while start < stop:
            start, batch = fill(topic, partition(topic, None, count), records, ends, start, stop)
            if not batches or batches[-1] is not batch:
                batches.append(batch)
        return batches

    def _fill_partitions(self, topic: str, records: list, sizes: list, partitions: list, batches: list) -> None:
        """Rows with known partitions, grouped by partition with their order kept (a stable sort)."""
        order = sorted(range(len(records)), key=partitions.__getitem__)
        records = [records[i] for i in order]
        ends = list(accumulate([sizes[i] for i in order]))
        keys = [partitions[i] for i in order]
        fill = self._accumulator.fill
        start, stop = 0, len(records)
        while start < stop:
            group_end = bisect_right(keys, keys[start], start, stop)
            while start < group_end:
                start, batch = fill(topic, keys[start], records, ends, start, group_end)
                if not batches or batches[-1] is not batch:
                    batches.append(batch)

    def _wake_sender(self) -> None:
        if self._sender.idle:
            self._client.wakeup()

    # -- the rest ----------------------------------------------------------------------------------------

    def _wait_on_metadata(self, topic: str) -> int:
        deadline = time.monotonic() + self.config["max.block.ms"] / 1000.0
        metadata = self._metadata
        metadata.add_topic(topic)
        while True:
            count = metadata.partition_counts.get(topic)
            if count:
                return count
            error = metadata.topic_errors.get(topic) or (None if metadata.version else self._client.refused_login)
            if error is not None and not is_retriable(error):
                raise error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if not metadata.version:  # never heard from any broker: say which and why
                    raise NoBrokersAvailable(f"{self._client.unreachable()} (gave up after max.block.ms="
                                             f"{self.config['max.block.ms']})")
                raise UnknownTopic(f"topic {topic!r} not in metadata after max.block.ms"
                                   + (f" ({error})" if error is not None else ""))
            version = metadata.request_update()
            self._client.wakeup()
            metadata.wait_for(version, min(remaining, 0.5))

    def _count_after_refresh(self, topic: str) -> int:
        """The topic's partition count from metadata asked for now (within max.block.ms): a partition past the
        cached count may have been added since. Two updates, since the first may have been asked before."""
        deadline = time.monotonic() + self.config["max.block.ms"] / 1000.0
        metadata = self._metadata
        for _ in range(2):
            version = metadata.request_update()
            self._client.wakeup()
            if not metadata.wait_for(version, max(0.0, deadline - time.monotonic())):
                break
        return metadata.partition_counts.get(topic, 0)

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._wait_on_metadata(topic)))

    def flush(self, timeout: float | None = None) -> None:
        """Send every record queued so far and wait for their acknowledgements (or failures)."""
        self._accumulator.close_expired(time.monotonic(), force=True)
        self._client.wakeup()
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch in self._accumulator.incomplete():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.wait(remaining):
                raise TimeoutError(f"flush did not complete within {timeout}s: {self._sender.statistics()}")

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to `timeout`), stop the I/O thread and fail whatever is still unsent."""
        if self._closed:
            return
        self._closed = self._accumulator.closed = True
        try:
            if self._thread.is_alive():
                self.flush(timeout)
        except TimeoutError:
            logger.warning("producer closed with unacknowledged records")
        finally:
            self._thread.stop(timeout=timeout)
            self._sender.fail_all(ClientClosed("the producer was closed before the record was sent"))

    def metrics(self) -> dict:
        return self._sender.statistics()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Sender:
    """Drains ready batches into Produce requests; runs on the I/O thread only (see the module docstring)."""

    def __init__(self, client: NetworkClient, metadata: ClusterMetadata, accumulator: RecordAccumulator,
                 config: dict) -> None:
        self.client = client
        self.metadata = metadata
        self.accumulator = accumulator
        self.acks = config["acks"]
        self.compression = codec_id(config["compression.type"])
        self.max_request_size = config["max.request.size"]
        self.retries = config["retries"]
        self.retry_backoff = ExponentialBackoff.retry(config)
        self.delivery_timeout = config["delivery.timeout.ms"] / 1000.0
        self.request_timeout_ms = config["request.timeout.ms"]
        # closed batches not yet sent, oldest first per partition: a partition that must wait (no leader, no
        # free in-flight slot, a full request) keeps all its batches back in one step, not one per batch
        self.pending: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.identity = ProducerIdentity(config) if config["enable.idempotence"] else None
        self.gate = None  # the transaction manager (transactions.py Rule 2), when transactional
        self.transactional_id = None
        self.unacknowledged: dict[tuple[str, int], int] = {}  # idempotent: batches sent, not yet answered
        self.idle = False
        self.sent_requests = 0
        self.sent_batches = 0
        self.retried_batches = 0
        self.last_error: BaseException | None = None

    def run_once(self) -> float | None:
        """One pass: metadata, linger, drain, send; returns how long the I/O loop may sleep."""
        self.idle = False
        now = time.monotonic()
        if self.metadata.due(now):
            send_metadata_request(self.client, self.metadata)
        next_expiry = self.accumulator.close_expired(now)
        ready, pending = self.accumulator.ready, self.pending
        while ready:
            batch = ready.popleft()
            queue = pending.get((batch.topic, batch.partition))
            if queue is None:
                queue = pending[(batch.topic, batch.partition)] = deque()
            queue.append(batch)
        identity = self.identity
        if identity is not None and not identity.ready:
            identity.request_id(self.client)  # Rule 2 of idempotence.py: nothing goes out before the id
            waiting = self._expire_pending(now)
        else:
            waiting = self._send_ready(now) if self.pending else False
        timeout = None if next_expiry is None else max(0.0, next_expiry - now)
        metadata = self.metadata
        if metadata.need_update and not metadata.in_progress:  # a refresh held back by its backoff: wake for it
            retry_in = max(0.0, metadata.next_attempt - now)
            timeout = retry_in if timeout is None else min(timeout, retry_in)
        if waiting:
            timeout = _BUSY_POLL_S if timeout is None else min(timeout, _BUSY_POLL_S)
        if timeout is None or timeout > 0:
            self.idle = True
            if ready:  # a batch closed after we drained: don't sleep on it (see Producer._wake_sender)
                self.idle = False
                return 0
        return timeout

    def _expire_pending(self, now: float) -> bool:
        """Fail the pending batches past delivery.timeout.ms; return True if batches remain waiting."""
        for tp, queue in list(self.pending.items()):
            for batch in [b for b in queue if now - b.created > self.delivery_timeout]:
                queue.remove(batch)
                self._fail(batch, TimeoutError(f"{batch.topic}-{batch.partition}: not acknowledged within "
                                               "delivery.timeout.ms (no producer id)"))
            if not queue:
                del self.pending[tp]
        return bool(self.pending)

    def _send_ready(self, now: float) -> bool:
        """Send what can go now; return True if batches remain waiting.

        One request per broker carries every ready batch (several per partition, back to back), except
        that an idempotent producer sends a retried batch alone for its partition: the broker answers a
        duplicate with its one original offset, which a record set mixing it with new batches could not
        have (a record set of batches never sent cannot hold a duplicate: the broker appends a record set
        whole or not at all). The batches after it go in further requests (rounds). At most five batches of
        a partition are unacknowledged at a time: the broker recognises a duplicate among its last five."""
        requests: dict[tuple[int, int], dict] = {}  # (node, round) -> {partition: its batches, in order}
        sizes: dict[tuple[int, int], int] = {}
        nodes: set[int] = set()
        client = self.client
        leaders = self.metadata.leaders
        identity = self.identity
        unacknowledged = self.unacknowledged
        oldest_alive = now - self.delivery_timeout  # a batch created before this has timed out
        max_request_size = self.max_request_size
        emptied = []
        for tp, queue in self.pending.items():
            leader = leaders.get(tp, NO_LEADER)
            if leader == NO_LEADER and self._fail_if_no_such_partition(tp, queue):
                emptied.append(tp)
                continue
            # one request to a broker takes one in-flight slot: asked once per broker per pass
            leader_ready = leader != NO_LEADER and (leader in nodes or client.is_ready(leader))
            if identity is None:
                if leader == NO_LEADER:
                    self.metadata.add_topic(tp[0])
                    self.metadata.request_update()
                if leader_ready:
                    if self._take_plain(tp, queue, (leader, 0), requests, sizes, now, oldest_alive):
                        nodes.add(leader)
                else:
                    self._expire_waiting(tp, queue, oldest_alive)
                if not queue:
                    emptied.append(tp)
                continue
            sent = False  # idempotent from here on (the plain producer took _take_plain above)
            last = None  # (the partition's last round, that round closed)
            while queue:
                batch = queue[0]
                if batch.created < oldest_alive:
                    self._time_out(tp, queue)
                    continue
                if self.gate is not None and self.gate.refuses(tp):  # the transaction failed: never sent
                    self._fail(queue.popleft(), self.gate.error)
                    continue
                turn = self._round_of(batch, last)
                if (batch.retry_at > now or not leader_ready
                        or unacknowledged.get(tp, 0) >= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
                        or (self.gate is not None and not self.gate.may_send(tp))):
                    if leader == NO_LEADER:
                        self.metadata.add_topic(batch.topic)
                        self.metadata.request_update()
                    break  # the partition's later batches stay behind this one
                payload = batch.payload
                if payload is None or batch.producer_id != identity.producer_id:
                    payload = batch.payload = self._build(batch)
                key, size = (leader, turn), len(payload)
                request = requests.get(key)
                if request is None:
                    requests[key] = {tp: [batch]}
                    sizes[key] = size
                elif sizes[key] + size > max_request_size:
                    break
                else:
                    group = request.get(tp)
                    if group is None:
                        request[tp] = [batch]
                    else:
                        group.append(batch)
                    sizes[key] += size
                queue.popleft()
                sent = True
                last = (turn, batch.attempts > 0)
                unacknowledged[tp] = unacknowledged.get(tp, 0) + 1
            if sent:
                nodes.add(leader)
            if not queue:
                emptied.append(tp)
        for tp in emptied:
            del self.pending[tp]
        for (node_id, _), by_tp in sorted(requests.items(), key=lambda item: item[0][1]):
            self._produce(node_id, by_tp)
        return bool(self.pending)

    def _fail_if_no_such_partition(self, tp: tuple[str, int], queue: deque) -> bool:
        """Fail the partition's batches if the metadata says the topic has no such partition (they were sent
        before it came: it will never lead); True if it did."""
        count = self.metadata.partition_counts.get(tp[0])
        if not count or 0 <= tp[1] < count:
            return False
        error = UnknownPartition(f"topic {tp[0]!r} has {count} partitions, not partition {tp[1]}")
        while queue:
            self._fail(queue.popleft(), error)
        return True

    def _expire_waiting(self, tp: tuple[str, int], queue: deque, oldest_alive: float) -> None:
        """Fail the batches at the head of a waiting partition's queue that are past delivery.timeout.ms."""
        while queue and queue[0].created < oldest_alive:
            self._time_out(tp, queue)

    def _time_out(self, tp: tuple[str, int], queue: deque) -> None:
        """Fail the batch at the head of `queue`: it is past delivery.timeout.ms."""
        self._fail(queue.popleft(), TimeoutError(f"{tp[0]}-{tp[1]}: not acknowledged within delivery.timeout.ms"))

    def _take_plain(self, tp: tuple[str, int], queue: deque, key: tuple[int, int], requests: dict, sizes: dict,
                    now: float, oldest_alive: float) -> bool:
        """`_send_ready` for a producer without idempotence (one round): move the partition's batches that
        can go from `queue` into the request for `key`, in order, until one must wait (a retry backoff) or
        the request is full; True if any went. Its per-batch work is the least the rules need."""
        request = requests.get(key)
        if request is None:
            request = requests[key] = {}
        total = sizes.get(key, 0)
        group = request.get(tp)
        if group is None:
            group = []
        build, compression, max_request_size = build_batch, self.compression, self.max_request_size
        while queue:
            batch = queue[0]
            if batch.created < oldest_alive:
                self._time_out(tp, queue)
                continue
            if batch.retry_at > now:
                break
            payload = batch.payload
            if payload is None:
                payload = batch.payload = build(batch.records, compression)
            if total + len(payload) > max_request_size and (group or request):
                break  # the first batch of a request always goes: the broker judges one too large alone
            group.append(batch)
            total += len(payload)
            queue.popleft()
        sizes[key] = total
        if group:
            request[tp] = group
        elif not request:
            del requests[key]
        return bool(group)

    @staticmethod
    def _round_of(batch: ProducerBatch, last: tuple[int, bool] | None) -> int:
        """The request round of an idempotent producer's batch: a retried batch opens a round of its own
        for its partition and closes it; batches never sent share their partition's round."""
        if last is None:
            return 0
        turn, closed = last
        return turn + 1 if closed or batch.attempts > 0 else turn

    def _build(self, batch: ProducerBatch) -> bytes:
        """The batch's bytes, built once; an idempotent producer's carry its id and the next sequence."""
        identity = self.identity
        if identity is None:
            return build_batch(batch.records, self.compression)
        batch.producer_id = identity.producer_id
        batch.base_sequence = identity.assign((batch.topic, batch.partition), len(batch.records))
        return build_batch(batch.records, self.compression, producer_id=identity.producer_id,
                           producer_epoch=identity.epoch, base_sequence=batch.base_sequence,
                           is_transactional=self.transactional_id is not None)

    def _produce(self, node_id: int, by_tp: dict[tuple[str, int], list[ProducerBatch]]) -> None:
        """One Produce request to `node_id` with each partition's batches back to back, in order."""
        topics: dict[str, list] = {}
        for (topic, partition), group in by_tp.items():
            records = group[0].payload if len(group) == 1 else b"".join([b.payload for b in group])
            topics.setdefault(topic, []).append(PartitionProduceData(index=partition, records=records))
        request = ProduceRequest(transactional_id=self.transactional_id, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=[TopicProduceData(name=t, partition_data=p) for t, p in topics.items()])
        self.sent_requests += 1
        if self.acks == 0:
            batches = [batch for group in by_tp.values() for batch in group]
            self.client.submit(node_id, ApiKey.PRODUCE, PRODUCE_VERSION, request, expect_response=False,
                               callback=lambda f: self._on_acks0(f, batches), wake=False)
        else:
            self.client.submit(node_id, ApiKey.PRODUCE, PRODUCE_VERSION, request,
                               callback=lambda f: self._on_response(f, by_tp), wake=False)
        self.sent_batches += sum(map(len, by_tp.values()))

    def _on_acks0(self, future, batches: list[ProducerBatch]) -> None:
        if future.error is None:
            for batch in batches:
                batch.complete(-1)
            self.accumulator.release_all(batches)
            return
        for batch in batches:
            self._retry_or_fail(batch, future.error)

    def _on_response(self, future, by_tp: dict[tuple[str, int], list[ProducerBatch]]) -> None:
        if self.identity is not None:
            for tp, group in by_tp.items():
                self.unacknowledged[tp] -= len(group)
        if future.error is not None:
            for group in by_tp.values():
                for batch in group:
                    self._retry_or_fail(batch, future.error)
            return
        answered = set()
        for topic in future.value.responses:
            for part in topic.partition_responses:
                tp = (topic.name, part.index)
                group = by_tp.get(tp)
                if group is None:
                    continue
                answered.add(tp)
                if part.error_code:
                    error = for_code(part.error_code)(part.error_message or f"{tp[0]}-{tp[1]}")
                    for batch in group:
                        self._retry_or_fail(batch, error)
                    continue
                complete_all(group, part.base_offset, part.log_append_time_ms)
                if self.identity is not None:
                    for batch in group:
                        self.identity.acknowledged(tp, batch.producer_id, batch.base_sequence, len(batch.records))
                self.accumulator.release_all(group)
        for tp, group in by_tp.items():
            if tp not in answered:
                for batch in group:
                    self._retry_or_fail(batch, ConnectionError(f"no answer for {tp[0]}-{tp[1]} in the response"))

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.last_error = error
        now = time.monotonic()
        if (self._retriable(batch, error) and batch.attempts < self.retries
                and now - batch.created < self.delivery_timeout):
            batch.retry_at = now + self.retry_backoff.delay(batch.attempts)
            batch.attempts += 1
            self.retried_batches += 1
            if getattr(error, "errno", None) in METADATA_REFRESH_ERRORS or isinstance(error, (ConnectionError,
                                                                                     TimeoutError)):
                self.metadata.request_update()
            self._requeue(batch)
            return
        self._fail(batch, error)

    def _retriable(self, batch: ProducerBatch, error: BaseException) -> bool:
        identity = self.identity
        if is_retriable(error) or identity is None:
            return is_retriable(error)
        if batch.producer_id != identity.producer_id:  # built with an id given up since: rebuilt with the new one
            return identity.is_sequence_error(error)
        return identity.retriable((batch.topic, batch.partition), batch.producer_id, batch.base_sequence, error)

    def _requeue(self, batch: ProducerBatch) -> None:
        """Put a retried batch back ahead of its partition's later batches, behind its earlier ones (an
        idempotent producer's sequences must reach the broker in order)."""
        tp = (batch.topic, batch.partition)
        pending = self.pending.get(tp)
        if pending is None:
            pending = self.pending[tp] = deque()
        if self.identity is None:
            pending.appendleft(batch)
            return
        position = 0
        for i, other in enumerate(pending):
            if other.payload is None or other.producer_id != batch.producer_id or other.base_sequence > batch.base_sequence:
                break
            position = i + 1
        pending.insert(position, batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.fail(error)
        self.accumulator.release(batch)
        if self.gate is not None:
            self.gate.batch_failed(error)
        if self.identity is not None:
            self.identity.failed(batch.producer_id, error)

    def fail_all(self, error: BaseException) -> None:
        """After the I/O thread stopped: fail every unfinished batch."""
        self.accumulator.close_expired(time.monotonic(), force=True)
        for batch in self.accumulator.incomplete():
            if not batch.done():
                self._fail(batch, error)

    def statistics(self) -> dict:
        return {"requests": self.sent_requests, "batches": self.sent_batches, "retried_batches": self.retried_batches,
                "pending_batches": sum(map(len, self.pending.values())), "buffered_bytes": self.accumulator.used_bytes,
                "leaders": {f"{t}-{p}": n for (t, p), n in sorted(self.metadata.leaders.items())},
                "in_flight": {n: self.client.in_flight(n) for n in self.client.nodes},
                "last_error": repr(self.last_error) if self.last_error else None,
                **self.client.throttle_statistics()}
