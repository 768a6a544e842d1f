"""A partition leader's defence against hanging transactions (KIP-890 part 1; Kafka's AddPartitionsToTxnManager
and the verification half of its ReplicaManager): before the first transactional batch of a (producer id,
epoch) is appended to a partition, the transaction coordinator is asked whether the partition is in that
producer's ongoing transaction. A batch that arrives after its transaction ended (a zombie: a producer paused
past its abort, a Produce stuck in the network) is refused, so no transaction is opened that no marker will
ever close and the last stable offset never hangs on it.

Rule 1 (what is verified, `needs`): with `transaction.partition.verification.enable`, a client's transactional
record set (its first batch's producer id and epoch) is verified unless the log's cache says the partition is
in that producer's open transaction already (storage/txn_verification.py Rule: verify-before-first-append) and
no earlier request of the producer to the partition is still being verified here (Rule 3). The first call
for a log installs its verifier, which refuses an unverified transactional batch at the append whatever path
it took.
Rule 2 (one request per coordinator, `verify`): verifications are batched per coordinator broker (the leader of
the id's `__transaction_state` partition in the newest snapshot): one AddPartitionsToTxn v4 with
verify_only=true in flight per coordinator, carrying every transactional id queued while the previous one
was out; two asks for one id with the same producer and epoch share an entry (their partitions joined), a
lower epoch than the queued one is answered INVALID_PRODUCER_EPOCH at once. No coordinator known:
COORDINATOR_NOT_AVAILABLE; a connection failure or timeout: NETWORK_EXCEPTION, for each partition asked.
Rule 3 (order kept, `verified`): a producer's appends to a partition keep their request order: a request with
transactional batches waits for the earlier requests of the same producer to the same partition that are
being verified here (and the Produce fast paths leave such requests to it), then asks the coordinator about
the partitions that still need it, and appends at once, in the same step, after the answer. The guard of
each verification (txn_verification.py Rule: guard-outlives-no-marker) is started before the request is
sent, so a marker written while it was out makes the append refuse the batch.
Rule 4 (errors for Produce v3-v8, `produce_error`, as Kafka answers versions that predate KIP-890): a partition
the coordinator does not have in the transaction INVALID_TXN_STATE ("Partition was not added to the
transaction"); PRODUCER_FENCED INVALID_PRODUCER_EPOCH; NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and CONCURRENT_TRANSACTIONS NOT_ENOUGH_REPLICAS (retriable for
every client, and no metadata refresh); anything else as the coordinator answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, NamedTuple

from sparklog.broker.coordinator.transaction.inter_broker import BrokerConnections
from sparklog.protocol import errors
from sparklog.protocol.add_partitions_to_txn import (AddPartitionsToTxnRequest, AddPartitionsToTxnTransaction,
                                                     TransactionTopic)
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import MalformedResponse

log = logging.getLogger(__name__)

VERSION = 4  # AddPartitionsToTxn v4: the brokers' batched form (v5 only adds TRANSACTION_ABORTABLE)
NONE = 0
INVALID_TXN_STATE = errors.InvalidTxnStateError.errno
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno
NOT_ENOUGH_REPLICAS = errors.NotEnoughReplicasError.errno
NETWORK_EXCEPTION = errors.NetworkExceptionError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
CLUSTER_AUTHORIZATION_FAILED = errors.ClusterAuthorizationFailedError.errno
_RETRIABLE = {NETWORK_EXCEPTION, errors.CoordinatorLoadInProgressError.errno, COORDINATOR_NOT_AVAILABLE,
              errors.NotCoordinatorError.errno, errors.ConcurrentTransactionsError.errno}
_FENCED = {errors.ProducerFencedError.errno: INVALID_PRODUCER_EPOCH}
NOT_ADDED = "Partition was not added to the transaction"

TopicPartition = tuple[str, int]


class Wanted(NamedTuple):
    """One partition of a Produce whose record set is transactional: its log and first batch's producer."""
    tp: TopicPartition
    plog: object
    producer_id: int
    epoch: int


def produce_error(code: int) -> tuple[int, str | None]:
    """Rule 4: the Produce answer (code, message) for the coordinator's answer `code` (not NONE)."""
    if code in _RETRIABLE:
        return NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the transaction. "
                                     f"Underlying error: {errors.for_code(code).message}")
    if code == INVALID_TXN_STATE:
        return code, NOT_ADDED
    return _FENCED.get(code, code), None


@dataclass
class _Queued:
    """One transactional id's verification waiting for its coordinator's next request (Rule 2)."""
    producer_id: int
    epoch: int
    partitions: set = field(default_factory=set)
    answers: list = field(default_factory=list)  # futures of the asks that share it


class PartitionVerifier:
    """The leader side of KIP-890 part 1 (module docstring). `coordinator_for(tid, snapshot)` is the
    coordinator's broker id (the state manager's); `partitions.snapshot` has the brokers."""

    def __init__(self, partitions, coordinator_for: Callable, broker_id: int, enabled: bool) -> None:
        self.partitions = partitions
        self.coordinator_for = coordinator_for
        self.enabled = enabled
        self.client_id = f"txn-verifier-{broker_id}"
        self._queued: dict[int, dict[str, _Queued]] = {}  # coordinator -> transactional id -> its ask
        self._senders: dict[int, asyncio.Task] = {}
        self.connections = BrokerConnections(partitions)
        self._tails: dict[tuple[TopicPartition, int], asyncio.Future] = {}  # Rule 3: (tp, pid) -> last request
        self.requests = 0
        self.refused = 0

    # -- Rule 1 ----------------------------------------------------------------------------------------------

    def needs(self, plog, tp: TopicPartition, producer_id: int, epoch: int) -> bool:
        """Rule 1 for one transactional record set of (producer id, epoch) for `plog`."""
        if not self.enabled:
            return False
        if plog.transaction_verifier is None:
            plog.verify_transactions(True)
        return (tp, producer_id) in self._tails or plog.transaction_needs_verification(producer_id, epoch)

    # -- Rule 3 ----------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def verified(self, transactional_id: str | None,
                       wanted: list[Wanted]) -> AsyncIterator[dict[TopicPartition, tuple[int, str | None]]]:
        """Rule 3: wait for the producer's earlier requests to these partitions, verify what still needs it,
        and yield the partitions refused ({tp: (code, message)}); append inside the block, without awaiting."""
        keys = {(w.tp, w.producer_id) for w in wanted}
        earlier = {self._tails[key] for key in keys if key in self._tails}
        mine = asyncio.get_running_loop().create_future()
        self._tails.update(dict.fromkeys(keys, mine))
        try:
            if earlier:
                await asyncio.wait(earlier)
            yield await self._refused(transactional_id, [
                w for w in wanted if w.plog.transaction_needs_verification(w.producer_id, w.epoch)])
        finally:
            mine.set_result(None)
            for key in keys:
                if self._tails.get(key) is mine:
                    del self._tails[key]

    async def _refused(self, transactional_id: str | None, unverified: list[Wanted]) -> dict:
        guards = [w.plog.start_transaction_verification(w.producer_id, w.epoch) for w in unverified]
        codes: dict[TopicPartition, int] = {}
        for (producer_id, epoch), tps in _by_producer(unverified).items():
            codes.update(await self.verify(transactional_id, producer_id, epoch, tps))
        refused = {}
        for w, guard in zip(unverified, guards):
            code = codes[w.tp]
            if not w.plog.complete_transaction_verification(w.producer_id, guard, code == NONE) and code == NONE:
                code = INVALID_TXN_STATE  # its transaction ended (a marker) while the coordinator answered
            if code != NONE:
                refused[w.tp] = produce_error(code)
        self.refused += len(refused)
        return refused

    # -- Rule 2 ----------------------------------------------------------------------------------------------

    async def verify(self, transactional_id: str | None, producer_id: int, epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The coordinator's code for each partition: is it in the ongoing transaction of (producer, epoch)?"""
        if not transactional_id:
            return dict.fromkeys(partitions, INVALID_TXN_STATE)  # a transactional batch outside a transaction
        snapshot = self.partitions.snapshot
        node = self.coordinator_for(transactional_id, snapshot)
        if node not in snapshot.brokers:
            return dict.fromkeys(partitions, COORDINATOR_NOT_AVAILABLE)
        answer = self._enqueue(node, transactional_id, producer_id, epoch, partitions)
        if isinstance(answer, int):
            return dict.fromkeys(partitions, answer)
        codes = await answer
        return {tp: codes.get(tp, INVALID_TXN_STATE) for tp in partitions}

    def _enqueue(self, node: int, tid: str, producer_id: int, epoch: int, partitions) -> asyncio.Future | int:
        queue = self._queued.setdefault(node, {})
        queued = queue.get(tid)
        if queued is not None and (queued.producer_id, queued.epoch) != (producer_id, epoch):
            if epoch < queued.epoch:
                return INVALID_PRODUCER_EPOCH
            _answer(queued, dict.fromkeys(queued.partitions, INVALID_PRODUCER_EPOCH))
            queued = None
        if queued is None:
            queued = queue[tid] = _Queued(producer_id, epoch)
        queued.partitions.update(partitions)
        answer = asyncio.get_running_loop().create_future()
        queued.answers.append(answer)
        sender = self._senders.get(node)
        if sender is None or sender.done():
            self._senders[node] = asyncio.get_running_loop().create_task(self._send_queued(node),
                                                                          name=f"txn-verify-{node}")
        return answer

    async def _send_queued(self, node: int) -> None:
        """Rule 2: one request at a time to `node`, each with everything queued for it meanwhile."""
        while self._queued.get(node):
            batch = self._queued.pop(node)
            results = await self._send(node, batch)
            for tid, queued in batch.items():
                _answer(queued, results.get(tid) or dict.fromkeys(queued.partitions, INVALID_TXN_STATE))

    async def _send(self, node: int, batch: dict[str, _Queued]) -> dict[str, dict[TopicPartition, int]]:
        request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=q.producer_id, producer_epoch=q.epoch, verify_only=True,
            topics=_topics(q.partitions)) for tid, q in batch.items()])
        self.requests += 1
        try:
            response = await self.connections.get(node).call(ApiKey.ADD_PARTITIONS_TO_TXN, VERSION, request,
                                                          self.client_id)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, MalformedResponse,
                KeyError) as exc:  # KeyError: the coordinator left the snapshot since the ask
            log.info("AddPartitionsToTxn (verify) to broker %d failed: %s", node, exc)
            self.connections.drop(node)
            return {tid: dict.fromkeys(q.partitions, NETWORK_EXCEPTION) for tid, q in batch.items()}
        if response.error_code != NONE:
            code = INVALID_TXN_STATE if response.error_code == CLUSTER_AUTHORIZATION_FAILED else response.error_code
            return {tid: dict.fromkeys(q.partitions, code) for tid, q in batch.items()}
        return {result.transactional_id: {(topic.name, part.partition_index): part.partition_error_code
                                          for topic in result.topic_results for part in topic.results_by_partition}
                for result in response.results_by_transaction}

    async def close(self) -> None:
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        self.connections.close()


def _answer(queued: _Queued, codes: dict) -> None:
    for answer in queued.answers:
        if not answer.done():
            answer.set_result(codes)


def _topics(partitions) -> list:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [TransactionTopic(name=t, partitions=ps) for t, ps in by_topic.items()]


def _by_producer(unverified: list[Wanted]) -> dict[tuple[int, int], list[TopicPartition]]:
    grouped: dict[tuple[int, int], list[TopicPartition]] = {}
    for w in unverified:
        grouped.setdefault((w.producer_id, w.epoch), []).append(w.tp)
    return grouped
