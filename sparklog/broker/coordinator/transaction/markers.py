"""The marker channel (Kafka's `TransactionMarkerChannelManager`): a decided transaction's commit or abort
markers sent to the leaders of its partitions with WriteTxnMarkers, retried until every one is written.

Rule 1: the partitions are grouped by their leader in the newest metadata snapshot; one request per leader,
the leaders in parallel; one connection per leader broker, one request at a time on it.
Rule 2: a partition answered NONE is done. So is one answered INVALID_PRODUCER_EPOCH (the partition has seen
a newer epoch of the producer: this transaction is over there, as Kafka's channel drops such markers), and one
whose topic is gone from the metadata (its marker has nowhere to go, as Kafka drops it). Anything else (no leader, NOT_LEADER_OR_FOLLOWER, a timeout, a
refused connection, NOT_ENOUGH_REPLICAS) is retried after a backoff, from RETRY_BACKOFF_MS doubling to
MAX_BACKOFF_MS, with the leaders looked up again.
Rule 3: `send` returns True once every partition is done, False as soon as `still_coordinator()` is false
(the coordinator lost the id's partition: its successor finishes the markers on load, metadata.py Rule 3).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
from typing import Callable

from sparklog.broker.network.inter_broker import PLAINTEXT_REGISTERED, InterBrokerListener
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import MalformedResponse
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.protocol.write_txn_markers import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 100  # Kafka's retry.backoff.ms
MAX_BACKOFF_MS = 1000
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for the channel
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
VERSION = 1  # WriteTxnMarkers v1 (flexible), what every sparklog broker serves
NONE = 0
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno
_DONE = frozenset({NONE, INVALID_PRODUCER_EPOCH})  # Rule 2
_SIZE = struct.Struct(">i")

TopicPartition = tuple[str, int]


class MarkerChannel:
    """`partitions` has `.snapshot` (topics, brokers); `broker_id` names this coordinator to the leaders."""

    def __init__(self, partitions, broker_id: int, inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED) -> None:
        self.partitions = partitions
        self.inter_broker = inter_broker  # the leaders' listener the markers go to
        self.client_id = f"txn-coordinator-{broker_id}"
        self._connections: dict[int, _Connection] = {}
        self.requests = 0
        self.retries = 0

    async def send(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                   partitions, still_coordinator: Callable[[], bool]) -> bool:
        """Rule 3: True once every partition's marker is written, False if this broker stopped coordinating."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_MS
        while remaining:
            if not still_coordinator():
                return False
            remaining -= self._gone(remaining)
            by_leader, leaderless = self._by_leader(remaining)
            results = await asyncio.gather(*(self._write(broker, producer_id, epoch, commit, coordinator_epoch, tps)
                                             for broker, tps in by_leader.items()))
            remaining = leaderless.union(*results)
            if remaining:
                self.retries += 1
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, MAX_BACKOFF_MS)
        return True

    def _gone(self, remaining: set[TopicPartition]) -> set[TopicPartition]:
        topics = self.partitions.snapshot.topics
        gone = {tp for tp in remaining if tp[0] not in topics or tp[1] not in topics[tp[0]].partitions}
        for tp in sorted(gone):
            log.info("no marker for %s-%d: the partition no longer exists", *tp)
        return gone

    def _by_leader(self, remaining: set[TopicPartition]) -> tuple[dict[int, list[TopicPartition]], set]:
        snapshot = self.partitions.snapshot
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless = set()
        for tp in sorted(remaining):
            leader = snapshot.topics[tp[0]].partitions[tp[1]].leader
            if leader in snapshot.brokers:
                by_leader.setdefault(leader, []).append(tp)
            else:
                leaderless.add(tp)
        return by_leader, leaderless

    async def _write(self, broker: int, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                     tps: list[TopicPartition]) -> set[TopicPartition]:
        """The partitions of `tps` whose marker is not written (Rule 2)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        self.requests += 1
        try:
            response = await self._connection(broker).call(request, self.client_id)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, MalformedResponse) as exc:
            log.info("WriteTxnMarkers to broker %d failed (%s); retrying", broker, exc)
            self._drop(broker)
            return set(tps)
        return set(tps) - _written(response)

    def _connection(self, broker: int) -> "_Connection":
        address = self.inter_broker.address(self.partitions.snapshot.brokers[broker])
        if address is None:
            raise OSError(f"broker {broker} has no {self.inter_broker.name} listener")
        conn = self._connections.get(broker)
        if conn is None or conn.address != address:
            self._drop(broker)
            conn = self._connections[broker] = _Connection(address, self.inter_broker)
        return conn

    def _drop(self, broker: int) -> None:
        conn = self._connections.pop(broker, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for broker in list(self._connections):
            self._drop(broker)


def _written(response) -> set[TopicPartition]:
    done = set()
    for marker in response.markers:
        for topic in marker.topics:
            for part in topic.partitions:
                if part.error_code in _DONE:
                    done.add((topic.name, part.partition_index))
                if part.error_code != NONE:
                    log.info("marker for %s-%d not written: %s", topic.name, part.partition_index,
                             errors.for_code(part.error_code).__name__)
    return done


class _Connection:
    """One connection to a leader broker, one request at a time (Rule 1)."""

    def __init__(self, address: tuple[str, int], inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED) -> None:
        self.address = address
        self.inter_broker = inter_broker
        self._streams = None
        self._lock = asyncio.Lock()
        self._correlation = itertools.count(1)

    async def call(self, request, client_id: str):
        async with self._lock:
            if self._streams is None:
                self._streams = await self.inter_broker.open_connection(*self.address, REQUEST_TIMEOUT_S)
            reader, writer = self._streams
            correlation_id = next(self._correlation) & 0x7FFFFFFF
            writer.write(encode_request(ApiKey.WRITE_TXN_MARKERS, VERSION, correlation_id, client_id, request))
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
            (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(_SIZE.size), REQUEST_TIMEOUT_S))
            if not 0 < size <= MAX_RESPONSE_BYTES:
                raise MalformedResponse(f"WriteTxnMarkers response of {size} bytes")
            frame = await asyncio.wait_for(reader.readexactly(size), REQUEST_TIMEOUT_S)
            got, response = decode_response(ApiKey.WRITE_TXN_MARKERS, VERSION, frame)
            if got != correlation_id:
                raise MalformedResponse(f"correlation id {got}, expected {correlation_id}")
            return response

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
