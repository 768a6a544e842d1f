"""The transaction apis, one function per api key, `(request, state) -> response` (or a coroutine of it), over
the transaction coordinator `state.transactions` (coordinator.py); registered in the broker's dispatch table
through `TRANSACTION_HANDLERS`. InitProducerId with a transactional id and FindCoordinator with key type 1
come here from the broker's own handlers of those apis.

Rule 1 (errors by version): PRODUCER_FENCED is answered only to versions that know it (InitProducerId v4+,
AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v2+); older ones get INVALID_PRODUCER_EPOCH, as Kafka maps it.
Rule 2 (AddPartitionsToTxn): a partition the cluster does not have gets UNKNOWN_TOPIC_OR_PARTITION and the
others of the request OPERATION_NOT_ATTEMPTED; nothing is added.
Rule 3 (WriteTxnMarkers, on a partition leader): each partition's marker is appended with the producer id,
epoch and coordinator epoch (`PartitionLog.append_control_batch`) and acknowledged once every in-sync replica
has it; on `__consumer_offsets`, the replicated marker then decides the transaction's pending offsets there
(offset_store.py, "Transactional offsets": COMMIT commits them, ABORT drops them).
A partition not led here gets NOT_LEADER_OR_FOLLOWER, one unknown UNKNOWN_TOPIC_OR_PARTITION.
Rule 5 (AddPartitionsToTxn v4+ with verify_only, from a partition leader, KIP-890 part 1): nothing is added;
each partition gets the coordinator's answer (coordinator.verify_partitions): NONE when it is in the producer's
open transaction, INVALID_TXN_STATE when not, or the producer's error for all of them.
Rule 4 (TxnOffsetCommit, on the group's coordinator): checked as OffsetCommit is (the coordinator, the
member's generation when given); the offsets are appended to the group's `__consumer_offsets` partition as a
transactional batch of the request's producer id and epoch, and held pending until the marker (offset_store.py,
"Transactional offsets"); a producer epoch below the one that partition's log holds is INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from sparklog.coordination import brokers as broker_registry
from sparklog.broker.coordinator.transaction.leader_append import append_replicated
from sparklog.broker.coordinator.transaction.metadata import KAFKA_NAMES, TxnState
from sparklog.broker.coordinator.transaction.state_manager import TOPIC as STATE_TOPIC
from sparklog.broker.coordinator.group.handlers import group_error
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC
from sparklog.coordination.offsets import OffsetAndMetadata
from sparklog.protocol import errors
from sparklog.protocol.add_offsets_to_txn import AddOffsetsToTxnResponse
from sparklog.protocol.add_partitions_to_txn import (FIRST_BROKER_VERSION, AddPartitionsToTxnPartitionResult,
                                                     AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
                                                     AddPartitionsToTxnTopicResult, TransactionPartitionResult,
                                                     TransactionTopicResult)
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.describe_transactions import (DescribedTransaction, DescribedTransactionTopic,
                                                     DescribeTransactionsResponse)
from sparklog.protocol.end_txn import EndTxnResponse
from sparklog.protocol.find_coordinator import FindCoordinatorResponse
from sparklog.protocol.init_producer_id import InitProducerIdResponse
from sparklog.protocol.list_transactions import ListedTransaction, ListTransactionsResponse
from sparklog.protocol.txn_offset_commit import (TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition,
                                                 TxnOffsetCommitResponseTopic)
from sparklog.protocol.write_txn_markers import (WritableTxnMarkerPartitionResult, WritableTxnMarkerResult,
                                                 WritableTxnMarkerTopicResult, WriteTxnMarkersResponse)

NONE = 0
PRODUCER_FENCED = errors.ProducerFencedError.errno
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
OPERATION_NOT_ATTEMPTED = errors.OperationNotAttemptedError.errno
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
TRANSACTIONAL_ID_NOT_FOUND = errors.TransactionalIdNotFoundError.errno
MARKER_WRITE_TIMEOUT_S = 10.0  # below the channel's request timeout (inter_broker.REQUEST_TIMEOUT_S)
FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                ApiKey.END_TXN: 2}


def _versioned(code: int, request) -> int:
    """Rule 1."""
    if code == PRODUCER_FENCED and request.api_version < FENCED_SINCE.get(request.api_key, 1 << 15):
        return INVALID_PRODUCER_EPOCH
    return code


# -- FindCoordinator (key type 1), InitProducerId ------------------------------------------------------------

async def find_coordinator(body, state, listener: str = "") -> FindCoordinatorResponse:
    """The leader of the id's `__transaction_state` partition, the topic created first if it does not exist;
    its address on the client's listener."""
    coordinator = state.transactions.state
    await coordinator.ensure_topic()
    snapshot = state.partitions.snapshot
    node = broker_registry.for_listener(snapshot.brokers, listener).get(coordinator.coordinator_for(body.key, snapshot))
    if node is None or state.broker_id not in snapshot.brokers:
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE, node_id=-1, host="",
                                       port=-1)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=NONE, node_id=node.id, host=node.host,
                                   port=node.port)


async def handle_init_producer_id(request, state) -> InitProducerIdResponse:
    body = request.body
    code, producer_id, epoch = await state.transactions.init_producer_id(
        body.transactional_id, body.transaction_timeout_ms, (body.producer_id, body.producer_epoch))
    return InitProducerIdResponse(throttle_time_ms=0, error_code=_versioned(code, request), producer_id=producer_id,
                                  producer_epoch=epoch)


# -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn --------------------------------------------------------------

def handle_add_partitions_to_txn(request, state):
    if request.api_version >= FIRST_BROKER_VERSION:
        return _add_partitions_batched(request, state)
    body = request.body
    return _add_partitions_v3(request, state, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                              body.v3_and_below_producer_epoch, body.v3_and_below_topics)


async def _add_partitions_v3(request, state, tid, producer_id, epoch, topics) -> AddPartitionsToTxnResponse:
    results = await _add_partitions(request, state, tid, producer_id, epoch, topics, _topic_result_v3)
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=results)


async def _add_partitions_batched(request, state) -> AddPartitionsToTxnResponse:
    results = []
    for txn in request.body.transactions:
        if txn.verify_only:
            topics = _verify_partitions(state, txn)
        else:
            topics = await _add_partitions(request, state, txn.transactional_id, txn.producer_id,
                                           txn.producer_epoch, txn.topics, _topic_result_v4)
        results.append(AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=topics))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=NONE, results_by_transaction=results)


def _verify_partitions(state, txn) -> list:
    """Rule 5: a leader's verify_only check, each partition answered (PRODUCER_FENCED as is: v4+ knows it)."""
    wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
    codes = state.transactions.verify_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
    return [_topic_result_v4(t.name, [(p, codes[(t.name, p)]) for p in t.partitions]) for t in txn.topics]


async def _add_partitions(request, state, tid, producer_id, epoch, topics, result) -> list:
    """Rule 2, then the coordinator's answer for every partition."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = _unknown_partitions(wanted, state.partitions.snapshot)
    if unknown:
        codes = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED for tp in wanted}
    else:
        code = await state.transactions.add_partitions(tid, producer_id, epoch, wanted)
        codes = dict.fromkeys(wanted, _versioned(code, request))
    return [result(t.name, [(p, codes[(t.name, p)]) for p in t.partitions]) for t in topics]


def _unknown_partitions(wanted, snapshot) -> set:
    return {(t, p) for t, p in wanted if t not in snapshot.topics or p not in snapshot.topics[t].partitions}


def _topic_result_v3(name, codes):
    return AddPartitionsToTxnTopicResult(name=name, results_by_partition=[
        AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=c) for p, c in codes])


def _topic_result_v4(name, codes):
    return TransactionTopicResult(name=name, results_by_partition=[
        TransactionPartitionResult(partition_index=p, partition_error_code=c) for p, c in codes])


async def handle_add_offsets_to_txn(request, state) -> AddOffsetsToTxnResponse:
    """The group's `__consumer_offsets` partition joins the transaction (its marker decides the offsets)."""
    body = request.body
    partition = (OFFSETS_TOPIC, state.offsets.partition_for(body.group_id))
    code = await state.transactions.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch,
                                                   [partition])
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_versioned(code, request))


async def handle_end_txn(request, state) -> EndTxnResponse:
    body = request.body
    code = await state.transactions.end_txn(body.transactional_id, body.producer_id, body.producer_epoch,
                                            body.committed)
    return EndTxnResponse(throttle_time_ms=0, error_code=_versioned(code, request))


# -- WriteTxnMarkers (Rule 3) --------------------------------------------------------------------------------

async def handle_write_txn_markers(request, state) -> WriteTxnMarkersResponse:
    results = []
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            parts = [WritableTxnMarkerPartitionResult(partition_index=p, error_code=await _write_marker(
                state, marker, (topic.name, p))) for p in topic.partition_indexes]
            topics.append(WritableTxnMarkerTopicResult(name=topic.name, partitions=parts))
        results.append(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


async def _write_marker(state, marker, tp: tuple[str, int]) -> int:
    snapshot = state.partitions.snapshot
    if tp[0] not in snapshot.topics or tp[1] not in snapshot.topics[tp[0]].partitions:
        return UNKNOWN_TOPIC_OR_PARTITION
    if tp not in snapshot.leading:
        return NOT_LEADER_OR_FOLLOWER
    code = await append_replicated(state.replicas, snapshot, tp, lambda led: 1 + led.plog.append_control_batch(
        marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch,
        led.leader_epoch), MARKER_WRITE_TIMEOUT_S)
    if code == NONE and tp[0] == OFFSETS_TOPIC:
        state.offsets.complete_transaction(tp[1], marker.producer_id, marker.transaction_result)
    return code


# -- TxnOffsetCommit (Rule 4) --------------------------------------------------------------------------------

def handle_txn_offset_commit(request, state):
    body = request.body
    code = group_error(state, body.group_id)
    if code == NONE and (body.generation_id >= 0 or body.member_id):
        code = state.groups.check_commit(body.group_id, body.member_id, body.group_instance_id, body.generation_id)
    unknown = _unknown_partitions([(t.name, p.partition_index) for t in body.topics for p in t.partitions],
                                  state.partitions.snapshot)
    offsets = {(t.name, p.partition_index): OffsetAndMetadata(p.committed_offset, p.committed_metadata or "",
                                                              p.committed_leader_epoch)
               for t in body.topics for p in t.partitions if (t.name, p.partition_index) not in unknown}
    if code != NONE or not offsets:
        return _txn_offset_commit_response(body, unknown, lambda tp: code)
    return _txn_offset_commit(body, state, unknown, offsets)


async def _txn_offset_commit(body, state, unknown, offsets) -> TxnOffsetCommitResponse:
    """Rule 4: appended to the group's partition as a transactional batch (offset_store.py, "Transactional
    offsets"), pending until the marker."""
    codes = await state.offsets.commit_transactional(body.group_id, (body.producer_id, body.producer_epoch),
                                                     offsets)
    return _txn_offset_commit_response(body, unknown, codes.get)


def _txn_offset_commit_response(body, unknown, code_of) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=UNKNOWN_TOPIC_OR_PARTITION if (
            t.name, p.partition_index) in unknown else code_of((t.name, p.partition_index))) for p in t.partitions])
        for t in body.topics])


# -- DescribeTransactions, ListTransactions ------------------------------------------------------------------

def handle_describe_transactions(request, state) -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
        _describe(state.transactions.state, tid) for tid in request.body.transactional_ids])


def _describe(manager, tid: str) -> DescribedTransaction:
    code = manager.status(tid)
    meta = manager.get(tid) if code == NONE else None
    if meta is None:
        return DescribedTransaction(error_code=code or TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid,
                                    transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                                    producer_id=-1, producer_epoch=-1)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return DescribedTransaction(
        error_code=NONE, transactional_id=tid, transaction_state=KAFKA_NAMES[meta.pending or meta.state],
        transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
        topics=[DescribedTransactionTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])


_STATES_BY_NAME = {name: state for state, name in KAFKA_NAMES.items()}


def handle_list_transactions(request, state) -> ListTransactionsResponse:
    body = request.body
    unknown = [name for name in body.state_filters if name not in _STATES_BY_NAME]
    wanted_states = {_STATES_BY_NAME[n] for n in body.state_filters if n in _STATES_BY_NAME}
    coordinator = state.transactions
    now = coordinator.clock_ms()
    listed = []
    for meta in coordinator.state.loaded_ids():
        shown = meta.pending or meta.state
        if (body.state_filters and shown not in wanted_states) or shown == TxnState.DEAD or (
                body.producer_id_filters and meta.producer_id not in body.producer_id_filters) or (
                body.duration_filter >= 0 and (meta.start_ms < 0 or now - meta.start_ms < body.duration_filter)):
            continue
        listed.append(ListedTransaction(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                                        transaction_state=KAFKA_NAMES[shown]))
    return ListTransactionsResponse(throttle_time_ms=0, error_code=NONE, unknown_state_filters=unknown,
                                    transaction_states=sorted(listed, key=lambda t: t.transactional_id))


TRANSACTION_HANDLERS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}

__all__ = ["TRANSACTION_HANDLERS", "find_coordinator", "handle_init_producer_id", "STATE_TOPIC"]
