"""Produce: the general path, the one-partition fast path and a read's group of them.

Rule 6 (transactional batches, KIP-890 part 1): a record set whose first batch is transactional and which the
leader must verify first (coordinator/transaction/verifier.py Rule 1) is left by the fast paths
(NOT_SERVED_FAST) to the general path, which verifies it with the transaction coordinator before it appends
(verifier.py Rule 3): a partition refused is answered with the verifier's error and nothing is appended to
it; the other partitions of the request are appended as usual.
Rule 7 (legacy message sets): Produce v0-v2 may carry magic 0 or 1 message sets (records/legacy.py); each is
up-converted to one RecordBatch v2 before the append, as Kafka's LogValidator does, and a set that cannot be read
(CRC mismatch, truncated, a size past its bytes) is that partition's CORRUPT_MESSAGE with the one-line reason,
nothing appended. They are never transactional (Rule 6 looks at v3+ only).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from types import CoroutineType

from sparklog.broker.coordinator.group import offsets_topic
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.produce import (BatchIndexAndErrorMessage, PartitionProduceResponse, ProduceResponse,
                                       SinglePartitionProduce, TopicProduceResponse,
                                       encode_single_partition_response)
from sparklog.protocol.produce_run import encode_produce_replies
from sparklog.protocol.registry import encode_response
from sparklog.broker.handlers.error_codes import (CORRUPT_MESSAGE, INVALID_RECORD, INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION, NONE,
                                                  NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, NOT_SERVED_FAST,
                                                  NO_OFFSET, NO_TIMESTAMP, REQUEST_TIMED_OUT, STORAGE_FAULTS,
                                                  storage_error_code)
from sparklog.broker.handlers import leader_hints
from sparklog.broker.handlers.leadership import not_led_error
from sparklog.broker.coordinator.transaction.verifier import Wanted
from sparklog.records import legacy
from sparklog.records.batch import ATTRIBUTES_OFFSET, LAST_OFFSET_DELTA_OFFSET, TRANSACTIONAL_MASK

log = logging.getLogger(__name__)
_PRODUCE = int(ApiKey.PRODUCE)


NOT_REPLICATED = "not replicated to the in-sync replicas within the request's timeout"
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the attributes' low byte: its transactional bit
_PRODUCER_AND_EPOCH = struct.Struct(">qh")  # producerId, producerEpoch, after delta and two timestamps
_PRODUCER_ID_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iqq")
LEGACY_PRODUCE_VERSIONS = range(0, 3)  # Produce v0-v2: legacy message sets allowed (Rule 7)


def produce_target(replicas, snapshot, topic: str, index: int, acks: int):
    """Rule 5, the one place a Produce to (topic, index) is admitted, for every entry point (the general path,
    the one-partition fast path, a read's group): the partition this broker leads, or why not, as (error
    code, message): an acks value other than 0, 1 or all; an internal topic (offsets_topic.py Rule 2); a
    partition not led here (unknown, illegal name, led elsewhere) or led in a state that moved on (fenced:
    replica_manager.py); for acks=all, fewer in-sync replicas than the partition's min.insync.replicas
    (checked again when the write completes: ReplicaManager.produce_outcome). Leader epochs: the append
    stamps the leader's own epoch (a Produce names none)."""
    if acks != 1 and acks != -1 and acks != 0:
        return INVALID_REQUIRED_ACKS, None
    if offsets_topic.is_internal(topic):
        return INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic}"
    led = replicas.leader_of(snapshot, (topic, index))
    if led is None:
        return not_led_error(snapshot, topic, index), None
    if led.fenced:
        return NOT_LEADER_OR_FOLLOWER, None
    if acks == -1 and led.below_min_insync:
        return NOT_ENOUGH_REPLICAS, f"{len(led.state.isr)} in-sync replicas, min.insync.replicas is {led.min_insync}"
    return led


def is_transactional(records) -> bool:
    """Whether a record set's first batch has the transactional bit (Rule 6's first test, one byte)."""
    return len(records) > _ATTRIBUTES_LOW and records[_ATTRIBUTES_LOW] & TRANSACTIONAL_MASK != 0


def transactional_producer(records) -> tuple[int, int] | None:
    """(producer id, epoch) of a record set whose first batch is transactional, else None (Rule 6)."""
    if records is None or len(records) <= _PRODUCER_ID_OFFSET + _PRODUCER_AND_EPOCH.size or \
            not records[_ATTRIBUTES_LOW] & TRANSACTIONAL_MASK:
        return None
    return _PRODUCER_AND_EPOCH.unpack_from(records, _PRODUCER_ID_OFFSET)


def _needs_verification(led, topic: str, index: int, records, state) -> bool:
    """Rule 6 for one partition's record set."""
    producer = transactional_producer(records)
    return producer is not None and state.transactions.verifier.needs(led.plog, (topic, index), *producer)


def handle_produce(request, state):
    """`_handle_produce`, its answer from v10 on naming the current leader of a partition not led here
    (leader_hints.py)."""
    return leader_hints.hinted(_handle_produce(request, state), request, state, leader_hints.PRODUCE)


def _handle_produce(request, state):
    """Append each partition's record set in one call; acks=0 gets no response (None); acks=all waits in
    the purgatory until the HW passes each batch (a coroutine then), or answers at once when it already has.
    Transactional record sets the leader must verify first make it a coroutine that verifies, then appends
    (Rule 6)."""
    wanted = _transactional(request.body, state) if request.api_version not in LEGACY_PRODUCE_VERSIONS else []
    if wanted:
        return _verify_then_produce(request, state, wanted)
    return _produce(request, state, {})


def _transactional(body, state) -> list[Wanted]:
    """Rule 6: the request's transactional record sets, if any of them needs verifying (else [])."""
    snapshot, replicas = state.partitions.snapshot, state.replicas
    wanted, needed = [], False
    for topic in body.topic_data:
        for part in topic.partition_data:
            producer = transactional_producer(part.records)
            led = None if producer is None else replicas.leader_of(snapshot, (topic.name, part.index))
            if led is not None:
                needed = needed or state.transactions.verifier.needs(led.plog, (topic.name, part.index), *producer)
                wanted.append(Wanted((topic.name, part.index), led.plog, *producer))
    return wanted if needed else []


async def _verify_then_produce(request, state, wanted: list[Wanted]):
    async with state.transactions.verifier.verified(request.body.transactional_id, wanted) as refused:
        response = _produce(request, state, refused)  # in the same step as the answer (verifier.py Rule 3)
    if response.__class__ is CoroutineType:
        return await response
    return response


def _produce(request, state, refused: dict):
    """handle_produce's appends, the partitions in `refused` ({(topic, index): (code, message)}) answered with
    their error and not appended."""
    body = request.body
    acks = body.acks
    snapshot = state.partitions.snapshot
    replicas = state.replicas
    responses = []
    delayed = []  # (parts, position, led, offset the HW must reach)
    for topic in body.topic_data:
        name = topic.name
        parts = []
        for part in topic.partition_data:
            index = part.index
            led = produce_target(replicas, snapshot, name, index, acks)
            if led.__class__ is tuple:
                parts.append(_metered_error(state, name, _produce_error(index, *led)))
                continue
            if refused and (name, index) in refused:
                parts.append(_produce_error(index, *refused[(name, index)]))
                continue
            records = part.records
            if request.api_version in LEGACY_PRODUCE_VERSIONS and legacy.is_legacy(records):
                records = _up_converted(records)
                if records.__class__ is str:
                    parts.append(_metered_error(state, name, _produce_error(index, CORRUPT_MESSAGE, records)))
                    continue
            result = _append(led, index, records)
            parts.append(result)
            if result.error_code != NONE:
                _metered_error(state, name, result)
            else:
                state.topic_meters.produced(name, len(part.records), led.plog.log_end_offset - result.base_offset)
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


def _up_converted(records) -> bytes | str:
    """Rule 7: the legacy set as one RecordBatch v2, or why it cannot be read."""
    try:
        return legacy.up_convert(records)
    except legacy.CorruptMessageSet as exc:
        return f"legacy message set: {exc}"


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
    replicas = state.replicas
    led = produce_target(replicas, state.partitions.snapshot, request.topic, request.index, acks)
    if led.__class__ is tuple:
        return NOT_SERVED_FAST
    records = request.records
    if is_transactional(records) and _needs_verification(led, request.topic, request.index, records, state):
        return NOT_SERVED_FAST  # Rule 6
    outcome = _append_outcome(led, request.index, records)
    if outcome.__class__ is not tuple:
        _metered_error(state, request.topic, outcome)
        return None if acks == 0 else _single_partition_reply(request, outcome)
    state.topic_meters.produced(request.topic, len(request.records), led.plog.log_end_offset - outcome[0])
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
    handle_single_partition_produce would leave it to the general path (NOT_SERVED_FAST). No side effects but
    installing a log's transaction verifier (verifier.py Rule 1)."""
    led = produce_target(state.replicas, state.partitions.snapshot, request.topic, request.index, request.acks)
    if led.__class__ is tuple:
        return None
    records = request.records
    if is_transactional(records) and _needs_verification(led, request.topic, request.index, records, state):
        return None  # Rule 6
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
    end_before = plog.log_end_offset
    outcomes = plog.append_group_as_leader([r.records for r in requests],
                                           led.leader_epoch, append_time if append_time != NO_TIMESTAMP else None)
    _meter_group(state, requests, outcomes, plog.log_end_offset - end_before)
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


def _meter_group(state, requests: list, outcomes: list, messages: int) -> None:
    """One update of the metrics for a group append (broker/meters.py Rule 1)."""
    appended = 0
    topic = requests[0].topic
    for request, outcome in zip(requests, outcomes):
        if outcome.__class__ is tuple:
            appended += len(request.records)
        else:  # what the append raised: answered by the one table (_append_error)
            _count_failure(state, topic, storage_error_code(outcome))
    state.topic_meters.produced(topic, appended, messages)


def _metered_error(state, topic: str, part: PartitionProduceResponse) -> PartitionProduceResponse:
    """Count a partition's failed produce in the metrics (per topic, and per error code); returns `part`."""
    _count_failure(state, topic, part.error_code)
    return part


def _count_failure(state, topic: str, code: int | None) -> None:
    state.topic_meters.failed_produce(topic)
    if code is not None:
        state.request_meters.error(_PRODUCE, code)


def _single_partition_reply(request: SinglePartitionProduce, part: PartitionProduceResponse) -> list:
    """The fast path's answer for an error (rare): encoded by the general encoder."""
    header = RequestHeader(ApiKey.PRODUCE, request.api_version, request.correlation_id)
    return encode_response(header, ProduceResponse(responses=[TopicProduceResponse(
        name=request.topic, partition_responses=[part])], throttle_time_ms=0))


def _append(led, index: int, records) -> PartitionProduceResponse:
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
    """The partition's error response for what an append raised, by the one table (error_codes Rule 1); a
    broker bug is raised again."""
    code = storage_error_code(exc)
    if code is None:
        raise exc
    if code in STORAGE_FAULTS:
        log.error("append to %s failed: %s", plog, exc)
    part = _produce_error(index, code, None if code == NOT_LEADER_OR_FOLLOWER else str(exc))
    part.record_errors = [BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=message)
                          for i, message in getattr(exc, "record_errors", ())]  # KIP-467, v8+
    return part


def _produce_error(index: int, code: int, message: str | None = None) -> PartitionProduceResponse:
    return PartitionProduceResponse(index=index, error_code=code, base_offset=NO_OFFSET, log_append_time_ms=-1,
                                    log_start_offset=NO_OFFSET, error_message=message)
