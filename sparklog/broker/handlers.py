"""One function per Kafka API: `handle_x(request, state) -> response body`, with no socket access.

Rule 1: a handler returns the response body, or None (Produce with acks=0), or a coroutine that resolves to
one of those (a long-polling Fetch, an acks=all Produce parked in the purgatory until the high watermark
passes its batches, anything that writes to ZooKeeper: those calls block, so they run on `state.executor`
threads and the event loop never waits for ZooKeeper).
Rule 3: Produce, Fetch, ListOffsets and OffsetForLeaderEpoch are served by the leader only, in its current
leader epoch (`current_leader_epoch` older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH); a follower's
Fetch (replica_id >= 0) reads up to the log end and reports the follower's LEO (replica_manager.py).
Rule 4: a Fetch at an offset inside a fenced range (bit rot, storage/fences.py) of a leader with another
in-sync replica answers NOT_LEADER_OR_FOLLOWER: that replica is about to lead (leader_election Rule 6) and
holds the range whole, so the client retries there instead of stepping over a gap. A leader alone in its
ISR serves around the fence (the next batch after it).
Rule 2: what a client sends never raises out of a handler: every per-topic or per-partition problem becomes
that entry's error code. An exception escaping a handler is a broker bug (the server closes the connection).

Hot paths are per batch, not per record: Produce hands each partition's record set (a memoryview of the
request frame) to one `PartitionLog.append`; Fetch returns `FileSlice`s that the server sends with
`os.sendfile`. The common Produce (one partition, acks 0, 1 or all, led here) has a fast path that the dispatcher
tries first: `handle_single_partition_produce` over protocol.produce's one-partition decoder and encoder
(and `handle_produce_group` for a read's run of them, its replies encoded by protocol.produce_run),
answering byte for byte as handle_produce does (an acks=all write waits in the purgatory the same way), and
leaving everything else to it. A consumer's Fetch of one partition with records ready has one too:
`handle_single_partition_fetch` answers a response head built once (protocol.fetch's one-partition encoder)
and the FileSlice, byte for byte as handle_fetch, and leaves followers, errors and long polls to it. None of
them touches ZooKeeper: they look the partition up in the current `MetadataSnapshot`.

The group apis (JoinGroup ... DeleteGroups) are in group_handlers.py, over `state.groups` (the group
coordinator); FindCoordinator, OffsetCommit and OffsetFetch are here, over `state.offsets` (offset_store.py:
`__consumer_offsets`, which FindCoordinator creates on demand). `__consumer_offsets` is internal
(offsets_topic.py Rule 2): Produce and DeleteTopics refuse it, Metadata flags it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sparklog.broker import group_handlers, offsets_topic, partition_limits, read_committed
from sparklog.broker.config import BrokerConfig
from sparklog.broker.group_config import GroupConfig
from sparklog.broker.group_coordinator import GroupCoordinator
from sparklog.broker.offset_store import OFFSETS_TOPIC, OffsetStoreError, TopicOffsetStore
from sparklog.broker.purgatory import Purgatory
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.coordination import offsets as offset_registry
from sparklog.coordination import topics as topic_registry
from sparklog.coordination.producer_ids import ProducerIdAllocator
from sparklog.broker.coordinator.transaction import handlers as transaction_handlers
from sparklog.broker.coordinator.transaction.config import TransactionConfig
from sparklog.broker.coordinator.transaction.coordinator import TransactionCoordinator
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.api_versions import ApiVersionsResponse
from sparklog.protocol.create_topics import CreatableTopicResult, CreateTopicsResponse
from sparklog.protocol.delete_topics import DeletableTopicResult, DeleteTopicsResponse
from sparklog.protocol.fetch import (FetchableTopicResponse, FetchResponse, PartitionData, SinglePartitionFetch,
                                     encode_single_partition_head as encode_single_partition_fetch_head)
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, FindCoordinatorResponse
from sparklog.protocol.init_producer_id import InitProducerIdResponse
from sparklog.protocol.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    TIMESTAMP_MIN_VERSION,
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from sparklog.protocol.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from sparklog.protocol.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from sparklog.protocol.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from sparklog.protocol.offset_for_leader_epoch import (EpochEndOffset, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderTopicResult)
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.produce import (PartitionProduceResponse, ProduceResponse, SinglePartitionProduce,
                                       TopicProduceResponse, encode_single_partition_response)
from sparklog.protocol.produce_run import encode_produce_replies
from sparklog.protocol.registry import advertised_api_versions, encode_response
from sparklog.storage.config import KEYS as LOG_CONFIG_KEYS
from sparklog.storage.config import LogConfig
from sparklog.storage.errors import (DuplicateSequence, InvalidProducerEpoch, InvalidRecordError, InvalidTimestampError,
                                     LogClosedError, OffsetOutOfRange, OutOfOrderSequence, RecordBatchTooLarge,
                                     StorageError, TransactionRefusedError)
from sparklog.records.batch import CorruptRecordError
from sparklog.storage.topic_names import validate_topic

log = logging.getLogger(__name__)

# Error codes, as plain ints for the hot paths.
NONE = 0
OFFSET_OUT_OF_RANGE = errors.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE = errors.CorruptMessageError.errno
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
MESSAGE_TOO_LARGE = errors.MessageTooLargeError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
INVALID_TOPIC_EXCEPTION = errors.InvalidTopicError.errno
INVALID_REQUIRED_ACKS = errors.InvalidRequiredAcksError.errno
OFFSET_METADATA_TOO_LARGE = errors.OffsetMetadataTooLargeError.errno
INVALID_GROUP_ID = errors.InvalidGroupIdError.errno
TOPIC_ALREADY_EXISTS = errors.TopicAlreadyExistsError.errno
INVALID_PARTITIONS = errors.InvalidPartitionsError.errno
INVALID_REPLICATION_FACTOR = errors.InvalidReplicationFactorError.errno
INVALID_REPLICA_ASSIGNMENT = errors.InvalidReplicaAssignmentError.errno
INVALID_CONFIG = errors.InvalidConfigError.errno
INVALID_REQUEST = errors.InvalidRequestError.errno
KAFKA_STORAGE_ERROR = errors.KafkaStorageError.errno
TOPIC_DELETION_DISABLED = errors.TopicDeletionDisabledError.errno
INVALID_RECORD = errors.InvalidRecordError.errno
INVALID_TXN_STATE = errors.InvalidTxnStateError.errno
INVALID_TIMESTAMP = errors.InvalidTimestampError.errno
UNKNOWN_SERVER_ERROR = errors.UnknownServerError.errno
REQUEST_TIMED_OUT = errors.RequestTimedOutError.errno
UNSUPPORTED_VERSION = errors.UnsupportedVersionError.errno
NOT_ENOUGH_REPLICAS = errors.NotEnoughReplicasError.errno
OFFSET_NOT_AVAILABLE = errors.OffsetNotAvailableError.errno
# The idempotent producer's refusals (storage/producer_state.py Rule 1), by the storage exception.
PRODUCER_STATE_ERRORS = {
    OutOfOrderSequence: errors.OutOfOrderSequenceNumberError.errno,
    InvalidProducerEpoch: errors.InvalidProducerEpochError.errno,
    DuplicateSequence: errors.DuplicateSequenceNumberError.errno,
}

NO_OFFSET = -1
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes: Kafka's default


class NotServedFast:
    """What handle_single_partition_produce returns for a request it leaves to the general path."""


NOT_SERVED_FAST = NotServedFast()
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH

@dataclass
class BrokerState:
    """What handlers may use. `partitions.snapshot` is the metadata; `executor` runs blocking calls."""

    config: BrokerConfig
    broker_id: int
    cluster_id: str
    zk: Any
    logs: Any
    partitions: Any  # PartitionManager (or a stand-in with `.snapshot`, `note_topic`, `forget_topic`)
    executor: Any = None
    loop: asyncio.AbstractEventLoop | None = None
    producer_ids: ProducerIdAllocator | None = None
    waiters: Purgatory | None = None  # parked long-polling fetches and acks=all produces
    replicas: ReplicaManager | None = None  # leader state and followers (replica_manager.py)
    groups: GroupCoordinator | None = None
    offsets: TopicOffsetStore | None = None  # placement and committed offsets of Kafka groups
    offsets_topic_creation: asyncio.Future | None = None  # the one creation of __consumer_offsets in flight
    transactions: TransactionCoordinator | None = None  # coordinator/transaction/
    controller: Any = None  # broker.controller.Controller: who the controller is (Metadata's controller_id)
    counters: dict = field(default_factory=lambda: dict.fromkeys(
        ("produced_batches_bytes", "produce_errors", "fetch_waits", "zookeeper_calls"), 0))

    def __post_init__(self) -> None:
        if self.producer_ids is None and self.zk is not None:
            self.producer_ids = ProducerIdAllocator(self.zk, self.broker_id)
        if self.waiters is None:
            self.waiters = Purgatory()
        if self.replicas is None:
            self.replicas = ReplicaManager(self.zk, self.broker_id, self.waiters, self.executor)
        group_config = GroupConfig.from_properties(self.config.raw)
        if self.groups is None:
            self.groups = GroupCoordinator(group_config)
        if self.offsets is None:
            self.offsets = TopicOffsetStore(group_config, self.partitions, self.replicas, self.groups, self.executor,
                                            self.zk)
        if self.transactions is None:
            self.transactions = TransactionCoordinator(
                TransactionConfig.from_properties(self.config.raw), self.partitions, self.replicas, self.producer_ids,
                lambda *topic: _create_topic(self, *topic), self.broker_id, self.executor)

    async def blocking(self, fn, *args):
        """Run a blocking (ZooKeeper) call on the executor."""
        self.counters["zookeeper_calls"] += 1
        loop = self.loop or asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)


# ---------------------------------------------------------------------------------------------------------
# ApiVersions


def api_versions_body() -> ApiVersionsResponse:
    """Exactly the versions the codec advertises (issue 3's table); the group apis are left out."""
    return ApiVersionsResponse(error_code=NONE, api_keys=advertised_api_versions(), throttle_time_ms=0)


_API_VERSIONS = api_versions_body()


def handle_api_versions(request, state) -> ApiVersionsResponse:
    return _API_VERSIONS


# ---------------------------------------------------------------------------------------------------------
# Produce


NOT_REPLICATED = "not replicated to the in-sync replicas within the request's timeout"


def handle_produce(request, state):
    """Append each partition's record set in one call; acks=0 gets no response (None); acks=all waits in
    the purgatory until the HW passes each batch (a coroutine then), or answers at once when it already has."""
    body = request.body
    acks = body.acks
    snapshot = state.partitions.snapshot
    replicas = state.replicas
    responses = []
    delayed = []  # (parts, position, led, offset the HW must reach)
    bad_acks = acks not in (0, 1, -1)
    for topic in body.topic_data:
        name = topic.name
        parts = []
        for part in topic.partition_data:
            index = part.index
            led = None if bad_acks else replicas.leader_of(snapshot, (name, index))
            if bad_acks:
                parts.append(_produce_error(index, INVALID_REQUIRED_ACKS))
            elif offsets_topic.is_internal(name):
                parts.append(_produce_error(index, INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {name}"))
            elif led is None:
                parts.append(_produce_error(index, _not_led_error(snapshot, name, index)))
            elif led.fenced:
                parts.append(_produce_error(index, NOT_LEADER_OR_FOLLOWER))
            elif acks == -1 and len(led.state.isr) < led.min_insync:
                parts.append(_produce_error(index, NOT_ENOUGH_REPLICAS, (
                    f"{len(led.state.isr)} in-sync replicas, min.insync.replicas is {led.min_insync}")))
            else:
                result = _append(led, index, part.records, state)
                parts.append(result)
                if result.error_code == NONE:
                    replicas.after_leader_append(led)
                    if acks == -1:
                        delayed.append((parts, len(parts) - 1, led, led.plog.log_end_offset))
        responses.append(TopicProduceResponse(name=name, partition_responses=parts))
    if acks == 0:
        return None
    response = ProduceResponse(responses=responses, throttle_time_ms=0)
    if delayed and not _settle_produces(delayed, replicas):
        return _await_replication(state, response, delayed, body.timeout_ms)
    return response


def _settle_produces(delayed: list, replicas) -> bool:
    """Answer the acks=all partitions that can be answered now (removed from `delayed`); True if all were."""
    waiting = []
    for item in delayed:
        parts, position, led, required = item
        code = replicas.produce_outcome(led, required)
        if code is None:
            waiting.append(item)
        elif code != NONE:
            parts[position] = _produce_error(parts[position].index, code)
    delayed[:] = waiting
    return not waiting


async def _await_replication(state, response, delayed: list, timeout_ms: int) -> ProduceResponse:
    """Kafka's DelayedProduce: woken by HW moves and ISR or leadership changes; REQUEST_TIMED_OUT at timeout."""
    loop = asyncio.get_running_loop()
    plogs = list({id(item[2].plog): item[2].plog for item in delayed}.values())
    for _, _, led, _ in delayed:
        state.replicas.hasten_visibility(led)
    await state.waiters.wait_until(plogs, lambda: _settle_produces(delayed, state.replicas),
                                   loop.time() + max(0, timeout_ms) / 1000)
    for parts, position, _, _ in delayed:
        parts[position] = _produce_error(parts[position].index, REQUEST_TIMED_OUT, NOT_REPLICATED)
    return response


def handle_single_partition_produce(request: SinglePartitionProduce, state):
    """The common Produce (one topic, one partition, led here) answered as handle_produce answers it, without
    building request or response objects: a reply, None (acks=0), or, for an acks=all write not yet
    replicated, a coroutine that waits in the purgatory as the general path's does (the dispatcher parks
    it). NOT_SERVED_FAST, before anything is done, for any other request (the caller then runs the general
    path): other acks values, an internal topic, a partition not led or fenced, acks=all below
    min.insync.replicas."""
    acks = request.acks
    if (acks != 1 and acks != -1 and acks != 0) or offsets_topic.is_internal(request.topic):
        return NOT_SERVED_FAST
    replicas = state.replicas
    led = replicas.leader_of(state.partitions.snapshot, (request.topic, request.index))
    if led is None or led.fenced or (acks == -1 and len(led.state.isr) < led.min_insync):
        return NOT_SERVED_FAST
    outcome = _append_outcome(led, request.index, request.records)
    if outcome.__class__ is not tuple:
        return None if acks == 0 else _single_partition_reply(request, outcome)
    replicas.after_leader_append(led)
    if acks == 0:
        return None
    appended = (outcome[0], outcome[1], led.plog.log_start_offset)  # answered as of the append, as in _append
    if acks == -1:
        required = led.plog.log_end_offset
        code = replicas.produce_outcome(led, required)
        if code is None:
            return _await_single_replication(state, request, led, appended, required)
        if code != NONE:
            return _single_partition_reply(request, _produce_error(request.index, code))
    return [encode_single_partition_response(request, *appended)]


def fast_produce_partition(request: SinglePartitionProduce, state):
    """The led partition a one-partition Produce would be appended to by the fast path, or None when
    handle_single_partition_produce would leave it to the general path (NOT_SERVED_FAST). No side effects."""
    acks = request.acks
    if (acks != 1 and acks != -1 and acks != 0) or offsets_topic.is_internal(request.topic):
        return None
    led = state.replicas.leader_of(state.partitions.snapshot, (request.topic, request.index))
    if led is None or led.fenced or (acks == -1 and len(led.state.isr) < led.min_insync):
        return None
    return led


def handle_produce_group(requests: list, led, state) -> list:
    """Several one-partition Produce requests of one connection, in order, for the same led partition (each
    accepted by fast_produce_partition, each with a non-empty record set): their record sets go to the log in one group append
    (PartitionLog.append_group_as_leader) and each gets the reply handle_single_partition_produce would give
    it alone, in order: a reply, None (acks=0), or a coroutine of an acks=all write not yet replicated. The
    replies of consecutive successes answered at once are encoded in one call and carried by the first of
    them, the others None (the server's contract: the same bytes leave)."""
    plog = led.plog
    append_time = time.time_ns() // 1_000_000 if plog.stamps_append_time else NO_TIMESTAMP
    outcomes = plog.append_group_as_leader([r.records for r in requests],
                                           led.leader_epoch, append_time if append_time != NO_TIMESTAMP else None)
    replicas = state.replicas
    for outcome in outcomes:
        if outcome.__class__ is tuple:
            replicas.after_leader_append(led)
            break
    log_start = plog.log_start_offset
    bases = [outcome[0] for outcome in outcomes if outcome.__class__ is tuple]
    if len(bases) == len(requests) and all([request.acks == 1 for request in requests]):
        # the common case (every set appended, acks=1): one reply buffer, carried by the first request
        replies = [None] * len(requests)
        replies[0] = [encode_produce_replies(requests, bases, append_time, log_start)]
        return replies
    replies: list = []
    done: list = []  # consecutive successes answered now: (requests, base offsets), encoded together
    done_offsets: list = []
    for request, outcome in zip(requests, outcomes):
        acks = request.acks
        reply = None  # an answer other than a success answered now (None also for acks=0)
        if outcome.__class__ is not tuple:
            if acks != 0:
                reply = _single_partition_reply(request, _append_error(request.index, outcome, plog))
        elif acks == -1:
            code = replicas.produce_outcome(led, outcome[1])
            if code is None:
                reply = _await_single_replication(state, request, led, (outcome[0], append_time, log_start),
                                                  outcome[1])
            elif code != NONE:
                reply = _single_partition_reply(request, _produce_error(request.index, code))
        if reply is None and acks != 0 and outcome.__class__ is tuple:
            if not done:
                first = len(replies)
            done.append(request)
            done_offsets.append(outcome[0])
            replies.append(None)
            continue
        if done:
            replies[first] = [encode_produce_replies(done, done_offsets, append_time, log_start)]
            done, done_offsets = [], []
        replies.append(reply)
    if done:
        replies[first] = [encode_produce_replies(done, done_offsets, append_time, log_start)]
    return replies


def _await_single_replication(state, request: SinglePartitionProduce, led, appended: tuple, required: int):
    """_await_replication for the fast path's one partition: the same wake-ups, timeout and answers. The
    coroutine holds no bytes of the request (pipeline.py Rule 3): its record set and frame are views of the
    read they came in (frame.py Rule 3), which must not stay alive while the write waits."""
    return _wait_single_replication(state, request._replace(records=None, frame=None), led, appended, required)


async def _wait_single_replication(state, request: SinglePartitionProduce, led, appended: tuple,
                                   required: int) -> list:
    replicas = state.replicas
    settled = [None]

    def check() -> bool:
        settled[0] = replicas.produce_outcome(led, required)
        return settled[0] is not None

    replicas.hasten_visibility(led)
    deadline = asyncio.get_running_loop().time() + max(0, request.timeout_ms) / 1000
    if await state.waiters.wait_until([led.plog], check, deadline) and settled[0] == NONE:
        return [encode_single_partition_response(request, *appended)]
    if settled[0] is None:
        return _single_partition_reply(request, _produce_error(request.index, REQUEST_TIMED_OUT, NOT_REPLICATED))
    return _single_partition_reply(request, _produce_error(request.index, settled[0]))


def _single_partition_reply(request: SinglePartitionProduce, part: PartitionProduceResponse) -> list:
    """The fast path's answer for an error (rare): encoded by the general encoder."""
    header = RequestHeader(ApiKey.PRODUCE, request.api_version, request.correlation_id)
    return encode_response(header, ProduceResponse(responses=[TopicProduceResponse(
        name=request.topic, partition_responses=[part])], throttle_time_ms=0))


def _append(led, index: int, records, state) -> PartitionProduceResponse:
    outcome = _append_outcome(led, index, records)
    if outcome.__class__ is tuple:
        return PartitionProduceResponse(index=index, error_code=NONE, base_offset=outcome[0],
                                        log_append_time_ms=outcome[1], log_start_offset=led.plog.log_start_offset)
    return outcome


def _append_outcome(led, index: int, records) -> tuple[int, int] | PartitionProduceResponse:
    """(base offset, LogAppendTime or -1) of the appended record set, or the partition's error response."""
    plog = led.plog
    if records is None or not len(records):
        return _produce_error(index, INVALID_RECORD, "no record batch in the request")
    append_time = time.time_ns() // 1_000_000 if plog.stamps_append_time else NO_TIMESTAMP  # LogAppendTime
    try:
        base = plog.append_as_leader(records, led.leader_epoch, append_time if append_time != NO_TIMESTAMP else None)
    except Exception as exc:  # noqa: BLE001 - _append_error re-raises what it does not answer
        return _append_error(index, exc, plog)
    return base, append_time


def _append_error(index: int, exc: Exception, plog) -> PartitionProduceResponse:
    """The partition's error response for what an append raised (a broker bug is raised again)."""
    try:
        raise exc
    except CorruptRecordError as exc:
        return _produce_error(index, CORRUPT_MESSAGE, str(exc))
    except RecordBatchTooLarge as exc:
        return _produce_error(index, MESSAGE_TOO_LARGE, str(exc))
    except InvalidTimestampError as exc:
        return _produce_error(index, INVALID_TIMESTAMP, str(exc))
    except InvalidRecordError as exc:  # a null key in a compacted topic, a control batch, malformed records
        return _produce_error(index, INVALID_RECORD, str(exc))
    except TransactionRefusedError as exc:
        return _produce_error(index, INVALID_TXN_STATE, str(exc))
    except LogClosedError:
        return _produce_error(index, NOT_LEADER_OR_FOLLOWER)
    except (OutOfOrderSequence, InvalidProducerEpoch, DuplicateSequence) as exc:
        return _produce_error(index, PRODUCER_STATE_ERRORS[type(exc)], str(exc))
    except (OSError, StorageError) as exc:
        log.error("append to %s failed: %s", plog, exc)
        return _produce_error(index, KAFKA_STORAGE_ERROR, str(exc))


def _produce_error(index: int, code: int, message: str | None = None) -> PartitionProduceResponse:
    return PartitionProduceResponse(index=index, error_code=code, base_offset=NO_OFFSET, log_append_time_ms=-1,
                                    log_start_offset=NO_OFFSET, error_message=message)


def _led_or_error(state, snapshot, topic: str, partition: int, current_leader_epoch: int):
    """(the led partition, NONE), or (None, why it is not served: not led here, or a stale/unknown epoch)."""
    led = state.replicas.leader_of(snapshot, (topic, partition))
    if led is None:
        return None, _not_led_error(snapshot, topic, partition)
    if led.fenced:
        return None, NOT_LEADER_OR_FOLLOWER  # its state moved on: it waits for the new one (replica_manager)
    code = state.replicas.epoch_error(led, current_leader_epoch)
    return (led, NONE) if code == NONE else (None, code)


def _not_led_error(snapshot, topic: str, partition: int) -> int:
    """Why this broker does not serve (topic, partition): unknown, illegal name, or led elsewhere."""
    meta = snapshot.topics.get(topic)
    if meta is None:
        try:
            validate_topic(topic)
        except ValueError:
            return INVALID_TOPIC_EXCEPTION
        return UNKNOWN_TOPIC_OR_PARTITION
    if partition not in meta.partitions:
        return UNKNOWN_TOPIC_OR_PARTITION
    return NOT_LEADER_OR_FOLLOWER


# ---------------------------------------------------------------------------------------------------------
# Fetch


def handle_fetch(request, state):
    """Every requested partition, records as FileSlices; long-polls when fewer than min_bytes are ready.

    A follower's fetch (replica_id >= 0) reads up to the log end offset, not the HW, and its fetch offsets
    are the follower's LEOs, recorded first: they move the HW and the ISR (replica_manager.py)."""
    body = request.body
    if body.replica_id >= 0:
        _record_follower_fetch(body, state)
    verifications = _unverified_reads(body, state)
    if verifications:
        return _verified_first(state, verifications, functools.partial(_fetch_now, body, state))
    return _fetch_now(body, state)


def _fetch_now(body, state):
    response, ready, plogs, failed = _fetch_once(body, state)
    if ready >= body.min_bytes or body.max_wait_ms <= 0 or failed or not plogs:
        return response
    return _fetch_long_poll(body, state, plogs)


def _unverified_reads(body, state) -> list:
    """A verification for each read that would first replay a loaded segment (storage log.py Rule 5)."""
    snapshot, calls = state.partitions.snapshot, []
    for topic in body.topics:
        for part in topic.partitions:
            led = state.replicas.leader_of(snapshot, (topic.topic, part.partition))
            if led is not None and led.plog.needs_verification(part.fetch_offset):
                calls.append(functools.partial(led.plog.verify_at, part.fetch_offset))
    return calls


async def _verified_first(state, verifications: list, then):
    """Replay segments on the executor, so the event loop answers everyone else meanwhile (a loaded
    segment of a GiB takes a while), then answer with `then()` as usual."""
    loop = asyncio.get_running_loop()
    for verify in verifications:
        try:
            await loop.run_in_executor(state.executor, verify)
        except StorageError:
            pass  # closed or moved meanwhile: the answer itself carries the partition's error
    response = then()
    return await response if asyncio.iscoroutine(response) else response


def _record_follower_fetch(body, state) -> None:
    snapshot, replicas = state.partitions.snapshot, state.replicas
    for topic in body.topics:
        for part in topic.partitions:
            led = replicas.leader_of(snapshot, (topic.topic, part.partition))
            if led is not None and replicas.epoch_error(led, part.current_leader_epoch) == NONE:
                replicas.record_follower_fetch(led, body.replica_id, part.fetch_offset)


async def _fetch_long_poll(body, state, plogs) -> FetchResponse:
    loop = asyncio.get_running_loop()
    state.counters["fetch_waits"] += 1
    last = []

    def enough() -> bool:
        response, ready, _, failed = _fetch_once(body, state)
        last[:] = [response]
        return ready >= body.min_bytes or failed

    await state.waiters.wait_until(plogs, enough, loop.time() + body.max_wait_ms / 1000.0)
    return last[0]


def _fetch_once(body, state):
    """(response, bytes ready, logs read, whether any partition failed) for one pass over the request."""
    snapshot = state.partitions.snapshot
    replica_id = body.replica_id
    budget = min(body.max_bytes, state.config.fetch_max_bytes)
    min_one = True  # KIP-74 (Kafka's minOneMessage): the first batch read is served whatever the budget
    ready = 0
    failed = False
    plogs = []
    responses = []
    for topic in body.topics:
        name = topic.topic
        parts = []
        for part in topic.partitions:
            index = part.partition
            led, code = _led_or_error(state, snapshot, name, index, part.current_leader_epoch)
            if led is None:
                failed = True
                parts.append(_fetch_error(index, code))
                continue
            plog = led.plog
            if _fenced_here_whole_elsewhere(led, part.fetch_offset):
                failed = True
                parts.append(_fetch_error(index, NOT_LEADER_OR_FOLLOWER))
                continue
            plogs.append(plog)
            high_watermark = plog.high_watermark
            log_start = plog.log_start_offset
            records = b""
            error = NONE
            stable, aborted = high_watermark, None
            if budget > 0 or min_one:
                try:
                    size = max(0, min(part.partition_max_bytes, budget))
                    # Past the HW only for a follower of this partition; any other replica_id reads as a consumer.
                    if replica_id in led.state.followers:
                        records = plog.read_replica(part.fetch_offset, size)
                    elif body.isolation_level == read_committed.READ_COMMITTED:
                        records, stable, aborted = read_committed.fetch(plog, part.fetch_offset, size)
                    else:
                        records = plog.read(part.fetch_offset, size)
                except OffsetOutOfRange:
                    error = OFFSET_OUT_OF_RANGE
                    failed = True
                except LogClosedError:
                    error = NOT_LEADER_OR_FOLLOWER
                    failed = True
                except StorageError as exc:  # CorruptSegmentError: damage not yet fenced; clients retry
                    log.error("fetch from %s failed: %s", plog, exc)
                    error = KAFKA_STORAGE_ERROR
                    failed = True
                else:
                    size = len(records)
                    min_one = min_one and not size
                    ready += size
                    budget -= size
            elif not log_start <= part.fetch_offset <= plog.log_end_offset:
                error = OFFSET_OUT_OF_RANGE
                failed = True
            parts.append(PartitionData(partition_index=index, error_code=error, high_watermark=high_watermark,
                                       last_stable_offset=stable, log_start_offset=log_start,
                                       aborted_transactions=aborted, preferred_read_replica=-1, records=records))
        responses.append(FetchableTopicResponse(topic=name, partitions=parts))
    response = FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=responses)
    return response, ready, plogs, failed


def _fenced_here_whole_elsewhere(led, offset: int) -> bool:
    """Rule 4: would serving `offset` step over a fence that another in-sync replica can serve whole?"""
    return len(led.state.isr) > 1 and any(start <= offset < end for start, end in led.plog.fenced_ranges())


def handle_single_partition_fetch(request: SinglePartitionFetch, state):
    """A consumer's Fetch of one partition led here, answered as handle_fetch answers it when records are
    ready, without building request or response objects: [the response head, the FileSlice]. NOT_SERVED_FAST,
    having done nothing but a read, for everything else (the caller runs the general path, which answers
    the same bytes or the error, or long-polls): a follower's fetch (replica_id >= 0, which moves the HW),
    a partition not led here or a stale epoch, a segment still to verify, a fenced range (Rule 4), a read
    that raises, fewer than min_bytes ready with max_wait_ms > 0, no byte of budget, or a read_committed
    fetch with something unstable or aborted to answer (read_committed.fast_limit)."""
    if request.replica_id >= 0:
        return NOT_SERVED_FAST
    budget = min(request.max_bytes, state.config.fetch_max_bytes, request.partition_max_bytes)
    if budget <= 0:
        return NOT_SERVED_FAST
    replicas = state.replicas
    led = replicas.leader_of(state.partitions.snapshot, (request.topic, request.partition))
    if led is None or led.fenced or replicas.epoch_error(led, request.current_leader_epoch) != NONE:
        return NOT_SERVED_FAST
    plog = led.plog
    offset = request.fetch_offset
    if plog.needs_verification(offset) or _fenced_here_whole_elsewhere(led, offset):
        return NOT_SERVED_FAST
    high_watermark = plog.high_watermark  # read before the slice, as _fetch_once does
    log_start = plog.log_start_offset
    limit = None
    if request.isolation_level == read_committed.READ_COMMITTED:
        limit = read_committed.fast_limit(plog, offset, high_watermark)
        if limit is None:
            return NOT_SERVED_FAST
    try:
        records = plog.read(offset, budget, limit)
    except StorageError:  # OffsetOutOfRange, LogClosedError, CorruptSegmentError: the general path's errors
        return NOT_SERVED_FAST
    size = len(records)
    if size < request.min_bytes and request.max_wait_ms > 0:
        return NOT_SERVED_FAST
    head = encode_single_partition_fetch_head(request, high_watermark, log_start, size)
    return [head, records] if size else [head]


def _fetch_error(index: int, code: int) -> PartitionData:
    return PartitionData(partition_index=index, error_code=code, high_watermark=NO_OFFSET,
                         last_stable_offset=NO_OFFSET, log_start_offset=NO_OFFSET, aborted_transactions=None,
                         preferred_read_replica=-1, records=b"")


# ---------------------------------------------------------------------------------------------------------
# ListOffsets


def handle_list_offsets(request, state):
    """Offsets by time look at every segment's timestamps: loaded segments are verified off the loop first."""
    snapshot, verifications = state.partitions.snapshot, []
    for topic in request.body.topics:
        for part in topic.partitions:
            led = state.replicas.leader_of(snapshot, (topic.name, part.partition_index))
            if led is not None and (part.timestamp >= 0 or part.timestamp == MAX_TIMESTAMP) and \
                    led.plog.has_unverified_segments():
                verifications.append(led.plog.verify_for_time_lookup)
    if verifications:
        return _verified_first(state, verifications, functools.partial(_list_offsets, request, state))
    return _list_offsets(request, state)


def _list_offsets(request, state) -> ListOffsetsResponse:
    """Kafka's answers: a partition named twice in the request is INVALID_REQUEST (each time); a special
    (negative) timestamp the request's version does not define is UNSUPPORTED_VERSION (`_timestamp_error`)."""
    snapshot, version = state.partitions.snapshot, request.api_version
    asked = [(topic.name, part.partition_index) for topic in request.body.topics for part in topic.partitions]
    repeated = _repeated(asked) if len(asked) > 1 else ()
    topics = []
    for topic in request.body.topics:
        parts = []
        for part in topic.partitions:
            code = INVALID_REQUEST if (topic.name, part.partition_index) in repeated else \
                _timestamp_error(part.timestamp, version)
            led = None
            if code == NONE:
                led, code = _led_or_error(state, snapshot, topic.name, part.partition_index,
                                          part.current_leader_epoch)
            if led is None:
                parts.append(ListOffsetsPartitionResponse(partition_index=part.partition_index, error_code=code))
                continue
            timestamp, offset = _offset_for(led.plog, part.timestamp)
            if request.body.isolation_level == read_committed.READ_COMMITTED:
                timestamp, offset = read_committed.list_offset(led.plog, part.timestamp, (timestamp, offset))
            if _lagging_new_leader(led, part.timestamp, offset):
                code = OFFSET_NOT_AVAILABLE if request.header.api_version >= 5 else LEADER_NOT_AVAILABLE
                parts.append(ListOffsetsPartitionResponse(partition_index=part.partition_index, error_code=code))
                continue
            parts.append(ListOffsetsPartitionResponse(  # nothing found (offset -1): no epoch, as Kafka answers
                partition_index=part.partition_index, error_code=NONE, timestamp=timestamp, offset=offset,
                leader_epoch=NO_LEADER_EPOCH if offset == NO_OFFSET else led.leader_epoch))
        topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _repeated(items) -> set:
    seen, repeated = set(), set()
    for item in items:
        (repeated if item in seen else seen).add(item)
    return repeated


def _timestamp_error(timestamp: int, version: int) -> int:
    """UNSUPPORTED_VERSION for a negative timestamp Kafka does not define at this version (its
    `isListOffsetsTimestampUnsupported`), except MAX_TIMESTAMP (-3): defined from v7, but answered at any
    version, as Kafka's brokers before 4.0 did and as librdkafka asks brokers that offer no v7."""
    if timestamp >= 0 or timestamp == MAX_TIMESTAMP:
        return NONE
    first = TIMESTAMP_MIN_VERSION.get(timestamp)
    return NONE if first is not None and version >= first else UNSUPPORTED_VERSION


# ---------------------------------------------------------------------------------------------------------
# OffsetForLeaderEpoch


def handle_offset_for_leader_epoch(request, state) -> OffsetForLeaderEpochResponse:
    """Where each asked leader epoch ends in this leader's log (KIP-101/279), from its epoch cache."""
    snapshot = state.partitions.snapshot
    topics = []
    for topic in request.body.topics:
        parts = []
        for part in topic.partitions:
            led, code = _led_or_error(state, snapshot, topic.topic, part.partition, part.current_leader_epoch)
            if led is None:
                parts.append(EpochEndOffset(error_code=code, partition=part.partition))
                continue
            found = led.plog.leader_epochs.end_offset_for(part.leader_epoch, led.plog.log_end_offset)
            parts.append(EpochEndOffset(error_code=NONE, partition=part.partition, leader_epoch=found.epoch,
                                        end_offset=found.end_offset))
        topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def _lagging_new_leader(led, timestamp: int, offset: int) -> bool:
    """KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): while a replicated partition's HW is below the offset
    its leader epoch started at (a new leader learns the HW from its followers' fetches; after a restart it
    starts at the log start), the latest offset, or a time lookup that found nothing visible, would be lower
    than what the previous leader answered: the log end would go back (a consumer reset to latest re-reads
    the log, a stream sees data loss). Its askers get a retriable error instead."""
    if not led.replicated or led.plog.high_watermark >= led.state.epoch_start_offset:
        return False
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
        return False  # the log start, or nothing tiered: not behind what the previous leader answered
    return timestamp == LATEST_TIMESTAMP or offset == NO_OFFSET


def _offset_for(plog, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset): latest is the high watermark (what a consumer may read), earliest the log start,
    max (-3) the first record with the largest timestamp. sparklog has no tiered storage, so, as Kafka answers
    for a topic without remote storage, earliest-local (-4) is the log start too and latest-tiered (-5) is
    offset -1 (nothing tiered)."""
    if timestamp == LATEST_TIMESTAMP:
        return NO_TIMESTAMP, plog.high_watermark
    if timestamp == EARLIEST_TIMESTAMP or timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return NO_TIMESTAMP, plog.log_start_offset
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return NO_TIMESTAMP, NO_OFFSET
    found = plog.offset_of_max_timestamp() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    if found is None:
        return NO_TIMESTAMP, NO_OFFSET
    return found.timestamp, found.offset


# ---------------------------------------------------------------------------------------------------------
# Metadata


def handle_metadata(request, state):
    """Brokers and topics from the ZooKeeper-fed snapshot; auto-creates missing topics when allowed."""
    body = request.body
    snapshot = state.partitions.snapshot
    if body.topics is None or (not body.topics and request.api_version == 0):  # v0: empty means every topic
        return _metadata_response(snapshot, state, list(snapshot.topics), {})
    names = list(dict.fromkeys(t.name for t in body.topics if t.name is not None))
    missing = [n for n in names if n not in snapshot.topics]
    allow = state.config.auto_create_topics_enable and body.allow_auto_topic_creation
    creatable = []
    errors_by_name = {}
    for name in missing:
        try:
            validate_topic(name)
        except ValueError:
            errors_by_name[name] = INVALID_TOPIC_EXCEPTION
            continue
        if allow:
            creatable.append(name)
        else:
            errors_by_name[name] = UNKNOWN_TOPIC_OR_PARTITION
    if not creatable:
        return _metadata_response(snapshot, state, names, errors_by_name)
    return _metadata_after_create(state, names, creatable, errors_by_name)


async def _metadata_after_create(state, names, creatable, errors_by_name) -> MetadataResponse:
    cfg = state.config
    for name in creatable:
        if name == OFFSETS_TOPIC:  # created as the coordinator needs it, never with a user topic's defaults
            code = NONE if await ensure_offsets_topic(state) else LEADER_NOT_AVAILABLE
        else:
            code, _ = await _create_topic(state, name, cfg.num_partitions, cfg.default_replication_factor, {})
        if code not in (NONE, TOPIC_ALREADY_EXISTS):
            errors_by_name[name] = code
        elif code == TOPIC_ALREADY_EXISTS and name not in state.partitions.snapshot.topics:
            errors_by_name[name] = LEADER_NOT_AVAILABLE  # created elsewhere; our watch has not seen it yet
    return _metadata_response(state.partitions.snapshot, state, names, errors_by_name)


def _metadata_response(snapshot, state, names, errors_by_name) -> MetadataResponse:
    live = snapshot.brokers
    brokers = [MetadataResponseBroker(node_id=b.id, host=b.host, port=b.port, rack=b.rack)
               for _, b in sorted(live.items())]
    topics = []
    for name in names:
        meta = snapshot.topics.get(name)
        if meta is None:
            code = errors_by_name.get(name, UNKNOWN_TOPIC_OR_PARTITION)
            topics.append(MetadataResponseTopic(error_code=code, name=name, is_internal=offsets_topic.is_internal(name),
                                                partitions=[]))
            continue
        partitions = [_partition_metadata(p, live) for _, p in sorted(meta.partitions.items())]
        topics.append(MetadataResponseTopic(error_code=errors_by_name.get(name, NONE), name=name,
                                            is_internal=offsets_topic.is_internal(name), partitions=partitions))
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=state.cluster_id,
                            controller_id=_controller_id(snapshot, state), topics=topics)


def _controller_id(snapshot, state) -> int:
    """The elected controller when it is known and live; else any live broker (every one can create topics)."""
    elected = state.controller.controller_id if state.controller is not None else -1
    return elected if elected in snapshot.brokers else snapshot.controller_id


def _partition_metadata(p, live) -> MetadataResponsePartition:
    leader_alive = p.leader in live
    return MetadataResponsePartition(
        error_code=NONE if leader_alive else LEADER_NOT_AVAILABLE,
        partition_index=p.partition,
        leader_id=p.leader if leader_alive else -1,
        leader_epoch=p.leader_epoch if leader_alive else NO_LEADER_EPOCH,
        replica_nodes=list(p.replicas),
        isr_nodes=[b for b in p.isr if b in live],
        offline_replicas=[b for b in p.replicas if b not in live],
    )


# ---------------------------------------------------------------------------------------------------------
# CreateTopics, DeleteTopics


def handle_create_topics(request, state):
    return _create_topics(request.body, state)


async def _create_topics(body, state) -> CreateTopicsResponse:
    seen: dict[str, int] = {}
    for topic in body.topics:
        seen[topic.name] = seen.get(topic.name, 0) + 1
    too_many = partition_limits.request_problem(
        state.config, [_requested_partitions(state.config, topic) for topic in body.topics])
    results = []
    for topic in body.topics:
        if too_many:
            code, message = too_many
        elif seen[topic.name] > 1:
            code, message = INVALID_REQUEST, "the topic appears more than once in the request"
        else:
            code, message = await _create_one(state, topic, body.validate_only)
        results.append(CreatableTopicResult(name=topic.name, error_code=code, error_message=message))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def _create_one(state, topic, validate_only: bool) -> tuple[int, str | None]:
    cfg = state.config
    if offsets_topic.is_internal(topic.name):  # offsets_topic.py Rule 2: its shape is the coordinator's
        if topic.name in state.partitions.snapshot.topics:
            return TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
        return INVALID_REQUEST, (f"{topic.name} is created by the brokers on the first FindCoordinator, with "
                                 "offsets.topic.num.partitions partitions (the group coordinator's mapping)")
    partitions = _requested_partitions(cfg, topic)
    replication = cfg.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    assignment = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return INVALID_REQUEST, "give either num_partitions and replication_factor or assignments, not both"
        assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        if len(assignment) != len(topic.assignments):
            return INVALID_REPLICA_ASSIGNMENT, "a partition is assigned more than once"
        partitions, replication = len(assignment), len(next(iter(assignment.values())))
    overrides = {c.name: c.value for c in topic.configs if c.value is not None}
    problem = _check_topic_config(overrides)
    if problem:
        return INVALID_CONFIG, problem
    return await _create_topic(state, topic.name, partitions, replication, overrides, validate_only, assignment)


def _requested_partitions(cfg, topic) -> int:
    return cfg.num_partitions if topic.num_partitions == -1 else topic.num_partitions


def _check_topic_config(overrides: dict) -> str | None:
    """The storage's typed table (storage/config.py) knows every topic config, the controller's included."""
    unknown = sorted(set(overrides) - set(LOG_CONFIG_KEYS))
    if unknown:
        return f"unknown topic config {', '.join(unknown)}; known: {', '.join(sorted(LOG_CONFIG_KEYS))}"
    try:
        LogConfig.from_dict(overrides)
    except ValueError as exc:
        return str(exc)
    return None


async def _create_topic(state, name, partitions, replication, overrides, validate_only=False, assignment=None):
    """(error code, message) of creating one topic through ZooKeeper; notes it in the snapshot at once."""
    try:
        validate_topic(name)
    except ValueError as exc:
        return INVALID_TOPIC_EXCEPTION, str(exc)
    if partitions < 1:
        return INVALID_PARTITIONS, f"number of partitions must be at least 1, not {partitions}"
    if replication < 1:
        return INVALID_REPLICATION_FACTOR, f"replication factor must be at least 1, not {replication}"
    live = {b.id: b.rack for _, b in sorted(state.partitions.snapshot.brokers.items())}
    if replication > len(live):
        return INVALID_REPLICATION_FACTOR, (
            f"replication factor {replication} is larger than the number of live brokers ({len(live)})")
    if assignment is not None:
        try:
            topic_registry.validate_assignment(assignment, live)
        except topic_registry.InvalidReplicaAssignment as exc:
            return INVALID_REPLICA_ASSIGNMENT, str(exc)
    over_limit = partition_limits.topic_problem(state.config, state.partitions.snapshot.topics, list(live),
                                                partitions, replication)
    if over_limit:
        return over_limit
    if partitions > topic_registry.MAX_PARTITIONS:  # one ZooKeeper transaction creates the topic
        return INVALID_PARTITIONS, (
            f"number of partitions must be between 1 and {topic_registry.MAX_PARTITIONS}, not {partitions}")
    if validate_only:
        if name in state.partitions.snapshot.topics:
            return TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        other = topic_registry.colliding_topic(name, state.partitions.snapshot.topics)
        if other is not None:
            return INVALID_TOPIC_EXCEPTION, f"topic {name!r} collides with existing topic {other!r}"
        return NONE, None
    try:
        created = await state.blocking(topic_registry.create_topic, state.zk, name, partitions, replication,
                                       overrides, live, assignment)
    except topic_registry.TopicExists as exc:
        return TOPIC_ALREADY_EXISTS, str(exc)
    except topic_registry.InvalidTopicName as exc:
        return INVALID_TOPIC_EXCEPTION, str(exc)
    except topic_registry.InvalidPartitions as exc:
        return INVALID_PARTITIONS, str(exc)
    except topic_registry.InvalidReplicationFactor as exc:
        return INVALID_REPLICATION_FACTOR, str(exc)
    except topic_registry.InvalidReplicaAssignment as exc:
        return INVALID_REPLICA_ASSIGNMENT, str(exc)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: the client may retry
        log.warning("creating topic %s failed: %s", name, exc)
        return REQUEST_TIMED_OUT, f"ZooKeeper: {exc}"
    await state.blocking(state.partitions.note_topic, created)
    return NONE, None


def handle_delete_topics(request, state):
    return _delete_topics(request.body, state)


async def _delete_topics(body, state) -> DeleteTopicsResponse:
    results = []
    for name in body.topic_names:
        results.append(DeletableTopicResult(name=name, error_code=await _delete_one(state, name)))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _delete_one(state, name: str) -> int:
    if not state.config.delete_topic_enable:
        return TOPIC_DELETION_DISABLED
    if offsets_topic.is_internal(name):
        return INVALID_REQUEST
    try:
        validate_topic(name)
        await state.blocking(topic_registry.delete_topic, state.zk, name)
    except ValueError:
        return INVALID_TOPIC_EXCEPTION
    except topic_registry.UnknownTopic:
        return UNKNOWN_TOPIC_OR_PARTITION
    except Exception as exc:  # noqa: BLE001
        log.warning("deleting topic %s failed: %s", name, exc)
        return REQUEST_TIMED_OUT
    await state.blocking(state.partitions.forget_topic, name)
    return NONE


# ---------------------------------------------------------------------------------------------------------
# InitProducerId, FindCoordinator


def handle_init_producer_id(request, state):
    if request.body.transactional_id is not None:
        return transaction_handlers.handle_init_producer_id(request, state)
    return _init_producer_id(state)


async def _init_producer_id(state) -> InitProducerIdResponse:
    try:
        producer_id = await state.blocking(state.producer_ids.next_id)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: retriable for the client
        log.warning("allocating a producer id failed: %s", exc)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                                      producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=NONE, producer_id=producer_id, producer_epoch=0)


def handle_find_coordinator(request, state):
    """A group's coordinator is the leader of its `__consumer_offsets` partition (offset_store.py), the topic
    created first if it does not exist (Kafka's way; offsets_topic.py); a transaction's is the transaction
    coordinator's answer (coordinator/transaction/handlers.py)."""
    body = request.body
    if body.key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=INVALID_REQUEST,
                                       error_message=f"unknown key type {body.key_type}", node_id=-1, host="",
                                       port=-1)
    if body.key_type == KEY_TYPE_TRANSACTION:
        return transaction_handlers.find_coordinator(body, state)
    if body.key_type == KEY_TYPE_GROUP and OFFSETS_TOPIC not in state.partitions.snapshot.topics:
        return _find_coordinator_after_create(body, state)
    return _find_coordinator(body, state)


async def _find_coordinator_after_create(body, state) -> FindCoordinatorResponse:
    await ensure_offsets_topic(state)
    return _find_coordinator(body, state)


def _find_coordinator(body, state) -> FindCoordinatorResponse:
    snapshot = state.partitions.snapshot
    node = state.broker_id
    if body.key_type == KEY_TYPE_GROUP:
        node = state.offsets.coordinator_for(body.key, snapshot)
    coordinator = snapshot.brokers.get(node)
    if coordinator is None or state.broker_id not in snapshot.brokers:
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE, node_id=-1,
                                       host="", port=-1)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=NONE, node_id=coordinator.id,
                                   host=coordinator.host, port=coordinator.port)


async def ensure_offsets_topic(state) -> bool:
    """Create `__consumer_offsets` (offsets_topic.py Rule 1) unless it exists; one creation at a time, shared
    by every request that waits for it. True once it is in this broker's metadata."""
    if OFFSETS_TOPIC in state.partitions.snapshot.topics:
        return True
    if state.offsets_topic_creation is None or state.offsets_topic_creation.done():
        state.offsets_topic_creation = asyncio.ensure_future(_create_offsets_topic(state))
    await asyncio.shield(state.offsets_topic_creation)
    return OFFSETS_TOPIC in state.partitions.snapshot.topics


async def _create_offsets_topic(state) -> None:
    config = state.offsets.config
    replication = offsets_topic.replication_factor(config, len(state.partitions.snapshot.brokers))
    try:
        code, message = await _create_topic(state, OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                            replication, offsets_topic.topic_config(config, replication))
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away while noting it: the caller answers "not available"
        code, message = REQUEST_TIMED_OUT, str(exc)
    if code == NONE:
        log.info("created %s: %d partitions, replication factor %d", OFFSETS_TOPIC,
                 config.offsets_topic_num_partitions, replication)
    elif code != TOPIC_ALREADY_EXISTS:  # another broker's creation won: its watch brings it here
        log.warning("creating %s failed: %s (%s)", OFFSETS_TOPIC, errors.for_code(code).__name__, message)


# ---------------------------------------------------------------------------------------------------------
# OffsetCommit, OffsetFetch: through the offset store


def handle_offset_commit(request, state):
    """A partition the cluster lacks gets UNKNOWN_TOPIC_OR_PARTITION and is not stored, whatever the group's
    state (Kafka's KafkaApis checks the metadata cache before asking the coordinator, at every version)."""
    body = request.body
    unknown = _unknown_commit_partitions(body, state.partitions.snapshot)
    code = group_handlers.group_error(state, body.group_id)
    if code == NONE:
        code = _commit_membership_error(body, state)
    if code != NONE:
        return _offset_commit_response(body, lambda t, p: unknown.get((t, p), code))
    return _offset_commit(body, state, unknown)


def _unknown_commit_partitions(body, snapshot) -> dict[tuple[str, int], int]:
    """{(topic, partition): error} of the partitions that are not in the cluster's metadata."""
    unknown = {}
    for topic in body.topics:
        for part in topic.partitions:
            meta = snapshot.topics.get(topic.name)
            if meta is None or part.partition_index not in meta.partitions:
                valid = _valid_topic(topic.name) and part.partition_index >= 0
                unknown[(topic.name, part.partition_index)] = UNKNOWN_TOPIC_OR_PARTITION if valid else (
                    INVALID_TOPIC_EXCEPTION)
    return unknown


async def _offset_commit(body, state, unknown) -> OffsetCommitResponse:
    offsets, codes = {}, dict(unknown)
    for topic in body.topics:
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            metadata = part.committed_metadata or ""
            if key in unknown:
                continue
            if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                codes[key] = OFFSET_METADATA_TOO_LARGE
            else:
                offsets[key] = offset_registry.OffsetAndMetadata(part.committed_offset, metadata)
    if offsets:
        codes.update(await state.offsets.commit(body.group_id, offsets))
    return _offset_commit_response(body, lambda t, p: codes.get((t, p), NONE))


def _commit_membership_error(body, state) -> int:
    """A member's commit is checked by its coordinator (generation, member id, group state); a member-less
    commit (generation -1, no member id) of a group without members here goes straight to the store."""
    generation, member_id = body.generation_id_or_member_epoch, body.member_id
    if generation < 0 and not member_id and body.group_id not in state.groups.groups:
        return NONE
    return state.groups.check_commit(body.group_id, member_id, body.group_instance_id, generation)


def _offset_commit_response(body, code_of) -> OffsetCommitResponse:
    topics = [OffsetCommitResponseTopic(name=t.name, partitions=[
        OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code_of(t.name, p.partition_index))
        for p in t.partitions]) for t in body.topics]
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def handle_offset_fetch(request, state):
    """A partition the cluster lacks (no such topic or partition, or an illegal name) is answered -1 with no
    error, and an offset stored for it before it went away is not handed out: Kafka answers v1+ from its
    coordinator alone, which deleted the offsets of a deleted topic with it (only v0, which sparklog does not
    serve, checked the metadata: UNKNOWN_TOPIC_OR_PARTITION). The store deletes them too once it sees the
    topic gone (offset_store.py, "Deleted topics"), so a topic created again under that name has none."""
    body = request.body
    code = group_handlers.group_error(state, body.group_id)
    if code != NONE:
        return _offset_fetch_error(body, code)
    return _offset_fetch(body, state)


async def _offset_fetch(body, state) -> OffsetFetchResponse:
    snapshot = state.partitions.snapshot
    wanted = None
    if body.topics is not None:
        wanted = [(t.name, p) for t in body.topics for p in t.partition_indexes]
        known = [tp for tp in wanted if _in_cluster(snapshot, *tp)]
    try:
        found = await state.offsets.fetch(body.group_id, known if wanted is not None else None)
    except OffsetStoreError as exc:
        return _offset_fetch_error(body, exc.code)
    if wanted is None:
        wanted = sorted(tp for tp in found if _in_cluster(snapshot, *tp))
    by_topic: dict[str, list] = {}
    for topic, partition in wanted:
        value = found.get((topic, partition))
        by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
            partition_index=partition,
            committed_offset=NO_OFFSET if value is None else value.offset,
            committed_leader_epoch=-1,
            metadata="" if value is None else value.metadata,
            error_code=NONE))
    topics = [OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=NONE)


def _offset_fetch_error(body, code: int) -> OffsetFetchResponse:
    """The group's error, top-level (v2+) and on every partition asked for (v1 has only those)."""
    topics = [OffsetFetchResponseTopic(name=t.name, partitions=[OffsetFetchResponsePartition(
        partition_index=p, committed_offset=NO_OFFSET, committed_leader_epoch=-1, metadata="", error_code=code)
        for p in t.partition_indexes]) for t in body.topics or ()]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=code)


def _in_cluster(snapshot, topic: str, partition: int) -> bool:
    meta = snapshot.topics.get(topic)
    return meta is not None and partition in meta.partitions


def _valid_topic(name: str) -> bool:
    try:
        validate_topic(name)
    except ValueError:
        return False
    return True


HANDLERS = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    **group_handlers.HANDLERS,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}
