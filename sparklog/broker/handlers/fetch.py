"""Fetch: the general path (followers, long polls, errors) and a consumer's one-partition fast path."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from sparklog.protocol.fetch import (FIRST_TOPIC_ID_VERSION, FetchableTopicResponse, FetchResponse, FetchTopic,
                                     PartitionData, SinglePartitionFetch, single_partition_end,
                                     encode_single_partition_head as encode_single_partition_fetch_head)
from sparklog.protocol.api_keys import ApiKey
from sparklog.storage.errors import StorageError
from sparklog.broker.handlers.error_codes import (NONE, NOT_LEADER_OR_FOLLOWER, NOT_SERVED_FAST, NO_OFFSET,
                                                  OFFSET_OUT_OF_RANGE, STORAGE_FAULTS, storage_error_code)
from sparklog.broker.handlers import fetch_divergence, fetch_topic_ids, follower_reads, leader_hints, read_committed
from sparklog.broker.handlers.fetch_sessions import topic_key
from sparklog.broker.handlers.leadership import fenced_here_whole_elsewhere, leader_in_epoch, verified_first

log = logging.getLogger(__name__)
_FETCH = int(ApiKey.FETCH)


def fetch_target(state, snapshot, topic: str, partition: int, current_leader_epoch: int, offset: int,
                 rack_id: str = ""):
    """Rule 6, the one place a Fetch of (topic, partition) at `offset` is admitted, for every entry point (the
    general path and its long polls, the one-partition fast path, whose FileSlice the server sends with
    sendfile): not led here, led in a state that moved on, a stale or unknown leader epoch (Rule 3,
    leadership.leader_in_epoch), unless a follower serves a consumer naming `rack_id` (follower_reads.py
    Rule 2: a FollowedPartition, read as a led partition is), an offset in a fenced range another in-sync
    replica holds whole (Rule 4). A segment still to verify is replayed before the read, off the event loop
    (`_unverified_reads`; the fast path leaves such a read to the general path). The led partition, or, as an
    int, the partition's error code (no pair to build: the fast path pays for every call)."""
    led = leader_in_epoch(state.replicas, snapshot, topic, partition, current_leader_epoch)
    if rack_id and led.__class__ is int:
        return follower_reads.follower_target(state, snapshot, topic, partition, current_leader_epoch, rack_id, led)
    if led.__class__ is not int and fenced_here_whole_elsewhere(led, offset):
        return NOT_LEADER_OR_FOLLOWER
    return led


def read_records(led, offset: int, size: int, replica_id: int, isolation: int = 0):
    """(records, last stable offset, aborted transactions) of the partition from `offset`, up to `size` bytes:
    past the HW only for a follower of this partition (up to its log end); a read_committed consumer up to the
    LSO with the aborted transactions of the range (read_committed.py Rule 1); any other reads to the HW.
    Raises what the log raises."""
    plog = led.plog
    if replica_id in led.state.followers:
        return plog.read_replica(offset, size), plog.high_watermark, None
    if isolation == read_committed.READ_COMMITTED:
        return read_committed.fetch(plog, offset, size)
    return plog.read(offset, size), plog.high_watermark, None


def _read_error(plog, exc: StorageError) -> int:
    """The partition's error code for what a read raised (error_codes Rule 1); a broker bug is raised again."""
    code = storage_error_code(exc)
    if code is None:
        raise exc
    if code in STORAGE_FAULTS:  # CorruptSegmentError: damage not yet fenced; clients retry
        log.error("fetch from %s failed: %s", plog, exc)
    return code


def handle_fetch(request, state):
    """`_handle_fetch`, its answer from v12 on naming the current leader of a partition it does not serve
    (leader_hints.py)."""
    return leader_hints.hinted(_handle_fetch(request, state), request, state, leader_hints.FETCH)


def _handle_fetch(request, state):
    """Every partition the fetch session names (fetch_sessions.py: the request's own for a full fetch), records
    as FileSlices; long-polls when fewer than min_bytes are ready; the answer filtered by the session.

    A follower's fetch (replica_id >= 0) reads up to the log end offset, not the HW, and its fetch offsets
    are the follower's LEOs, recorded first (those a session remembers too): they move the HW and the ISR
    (replica_manager.py)."""
    fetch_topic_ids.adopt_replica_state(request.body)
    context = state.fetch_sessions.begin(request.body, int(time.monotonic() * 1000), _generation(state))
    if context.__class__ is int:
        state.request_meters.error(_FETCH, context)
        return FetchResponse(throttle_time_ms=0, error_code=context, session_id=0, responses=[])
    if request.api_version >= FIRST_TOPIC_ID_VERSION:
        fetch_topic_ids.named(context, state.partitions)
    body = context.fetch
    if body.replica_id >= 0:
        _record_follower_fetch(context.whole, state)
    verifications = _unverified_reads(body, state)
    if verifications:
        return verified_first(state, verifications, functools.partial(_fetch_now, body, state, context))
    return _fetch_now(body, state, context)


def _fetch_now(body, state, context):
    response, ready, plogs, failed = _fetch_pass(body, state, context)
    if ready >= body.min_bytes or body.max_wait_ms <= 0 or failed or not (plogs or context.session):
        return _metered(context.finish(response), body.replica_id, state)
    return _fetch_long_poll(body, state, plogs, context)


def _metered(response: FetchResponse, replica_id: int, state) -> FetchResponse:
    """Count the answer's partitions in the metrics (broker/meters.py Rule 1): bytes a consumer reads, and
    every partition's error; a follower's reads are replication, not bytes out."""
    if replica_id >= 0:
        _record_throttled(response, state)
    topics, requests = state.topic_meters, state.request_meters
    for topic in response.responses:
        name = topic.topic
        for part in topic.partitions:
            if part.error_code != NONE:
                topics.failed_fetch(name)
                requests.error(_FETCH, part.error_code)
            elif replica_id < 0 and part.records:
                topics.fetched(name, len(part.records))
    return response


def _leader_holds_back(state, led, partition: int, replica_id: int) -> bool:
    """quota/replication.py Rule: in-sync-exempt and Rule: replication-rate, the leader's side."""
    throttles = state.replicas.throttles
    return (replica_id not in led.state.isr and throttles.leader_throttled(led.plog, partition)
            and throttles.leader.exceeded())


def _partition_bytes(state, led, partition: int, replica_id: int, part, budget: int) -> int:
    """What one partition may take of the response; a throttled out-of-sync follower's at most the leader's
    fetch_cap (quota/replication.py Rule: replication-rate)."""
    size = max(0, min(part.partition_max_bytes, budget))
    throttles = state.replicas.throttles if replica_id >= 0 else None
    if (throttles is not None and replica_id not in led.state.isr
            and throttles.leader_throttled(led.plog, partition)):
        size = min(size, throttles.leader.fetch_cap())
    return size


def _record_throttled(response: FetchResponse, state) -> None:
    """The bytes a follower's fetch takes of leader-throttled partitions count against the leader's quota."""
    throttles = state.replicas.throttles
    if throttles.leader.unbounded:
        return
    snapshot, replicas = state.partitions.snapshot, state.replicas
    for topic in response.responses:
        for part in topic.partitions:
            if part.records:
                led = replicas.leader_of(snapshot, (topic.topic, part.partition_index))
                if led is not None and throttles.leader_throttled(led.plog, part.partition_index):
                    throttles.leader.record(len(part.records))


def _unverified_reads(body, state) -> list:
    """A verification for each read that would first replay a loaded segment (storage log.py Rule 5)."""
    snapshot, calls = state.partitions.snapshot, []
    for topic in body.topics:
        for part in topic.partitions:
            led = state.replicas.leader_of(snapshot, (topic.topic, part.partition))
            if led is not None and led.plog.needs_verification(part.fetch_offset):
                calls.append(functools.partial(led.plog.verify_at, part.fetch_offset))
    return calls


def _record_follower_fetch(body, state) -> None:
    snapshot, replicas = state.partitions.snapshot, state.replicas
    for topic in body.topics:
        for part in topic.partitions:
            led = replicas.leader_of(snapshot, (topic.topic, part.partition))
            if led is not None and replicas.epoch_error(led, part.current_leader_epoch) == NONE:
                replicas.record_follower_fetch(led, body.replica_id, part.fetch_offset)


async def _fetch_long_poll(body, state, plogs, context) -> FetchResponse:
    loop = asyncio.get_running_loop()
    state.counters["fetch_waits"] += 1
    last = []

    def enough() -> bool:
        response, ready, _, failed = _fetch_pass(body, state, context)
        last[:] = [response]
        return ready >= body.min_bytes or failed

    session = context.session  # its partitions' changes wake the poll (fetch_sessions.py Rule 5)
    await state.waiters.wait_until(plogs, enough, loop.time() + body.max_wait_ms / 1000.0,
                                   keys=() if session is None else (session,))
    return _metered(context.finish(last[0]), body.replica_id, state)


def _generation(state) -> tuple:
    """Who leads what here (fetch_sessions.py Rule 5): a new tuple of objects whenever that changes."""
    return state.partitions.snapshot, state.replicas.leaders


def _fetch_pass(body, state, context):
    """One pass of the core over the partitions worth reading: in an incremental session, those fetch_sessions.py
    Rule 5 names that are not quiet (`_quiet`), whose answer its Rule 3 would drop; the quiet ones' logs are
    still waited on, and watched (their changes mark the session)."""
    last = context.last_answers
    if last is None:
        return _fetch_once(body, state)
    body = context.refresh(_generation(state))
    snapshot, topics, quiet = state.partitions.snapshot, [], []
    rack = body.rack_id if body.replica_id < 0 else ""
    for topic in body.topics:
        name, key, parts = topic.topic, topic_key(topic), []
        for part in topic.partitions:
            led = fetch_target(state, snapshot, name, part.partition, part.current_leader_epoch, part.fetch_offset,
                               rack)
            if led.__class__ is not int:
                state.waiters.watch(led.plog)
            if led.__class__ is not int and _quiet(led, part, last.get((key, part.partition)), body):
                quiet.append(led.plog)
            else:
                parts.append(part)
        if parts:
            topics.append(FetchTopic(topic=name, topic_id=topic.topic_id, partitions=parts))
    response, ready, plogs, failed = _fetch_once(body._replace(topics=topics), state)
    return response, ready, plogs + quiet, failed


def _quiet(led, part, last, body) -> bool:
    """Would the core answer this partition exactly as last answered in the session, with no records: served
    (`fetch_target` admitted it), read_uncommitted, its fetch offset at the end it may read to (a follower's: the
    log end; a consumer's: the HW) and not below the log start (a truncation inside the batch DeleteRecords cut
    can leave the log start above the HW: such a fetch is out of range), and HW (= its LSO for these readers)
    and log start as last answered."""
    if last is None or body.isolation_level == read_committed.READ_COMMITTED:
        return False
    if part.last_fetched_epoch >= 0 and fetch_divergence.diverging(led.plog, part) is not None:
        return False  # a diverging epoch is always answered (fetch_sessions.py Rule 3)
    plog = led.plog
    high_watermark = plog.high_watermark
    end = plog.log_end_offset if body.replica_id in led.state.followers else high_watermark
    log_start = plog.log_start_offset
    return part.fetch_offset == end >= log_start and last == (high_watermark, high_watermark, log_start)


def _fetch_once(body, state):
    """(response, bytes ready, logs read, whether any partition failed) for one pass over the request."""
    snapshot = state.partitions.snapshot
    replica_id = body.replica_id
    rack = body.rack_id if replica_id < 0 else ""  # a consumer's rack (follower_reads.py)
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
            led = fetch_target(state, snapshot, name, index, part.current_leader_epoch, part.fetch_offset, rack)
            if led.__class__ is int:
                failed = True
                parts.append(_fetch_error(index, led))
                continue
            preferred = follower_reads.preferred_replica(state, led, rack, part.fetch_offset) if rack else -1
            if preferred >= 0:  # answered at once, with no records (follower_reads.py Rule 1)
                failed = True
                parts.append(follower_reads.redirect(index, led, preferred, body.isolation_level))
                continue
            plog = led.plog
            plogs.append(plog)
            high_watermark = plog.high_watermark
            log_start = plog.log_start_offset
            if part.last_fetched_epoch >= 0:  # Fetch v12+ (KIP-320): a log that diverged is not read
                diverging = fetch_divergence.diverging(plog, part)
                if diverging is not None:
                    parts.append(fetch_divergence.diverged(index, diverging, high_watermark, log_start))
                    continue
            records = b""
            error = NONE
            stable, aborted = high_watermark, None
            if replica_id >= 0 and _leader_holds_back(state, led, index, replica_id):
                pass  # replication-throttled: no records this time (quota/replication.py Rule: replication-rate)
            elif budget > 0 or min_one:
                try:
                    records, stable, aborted = read_records(
                        led, part.fetch_offset, _partition_bytes(state, led, index, replica_id, part, budget),
                        replica_id, body.isolation_level)
                except StorageError as exc:
                    error = follower_reads.follower_error(state, led, part.fetch_offset, _read_error(plog, exc))
                    failed = True
                else:
                    size = len(records)
                    min_one = min_one and not size
                    ready += size
                    budget -= size
            elif not log_start <= part.fetch_offset <= plog.log_end_offset:
                error = follower_reads.follower_error(state, led, part.fetch_offset, OFFSET_OUT_OF_RANGE)
                failed = True
            parts.append(PartitionData(partition_index=index, error_code=error, high_watermark=high_watermark,
                                       last_stable_offset=min(stable, high_watermark), log_start_offset=log_start,
                                       aborted_transactions=aborted, preferred_read_replica=-1, records=records))
        responses.append(FetchableTopicResponse(topic=name, topic_id=topic.topic_id, partitions=parts))
    response = FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=responses)
    return response, ready, plogs, failed


def handle_single_partition_fetch(request: SinglePartitionFetch, state):
    """A consumer's Fetch of one partition led here, answered as handle_fetch answers it when records are
    ready, without building request or response objects: [the response head, the FileSlice]. NOT_SERVED_FAST,
    having done nothing but a read, for everything else (the caller runs the general path, which answers
    the same bytes or the error, or long-polls): a follower's fetch (replica_id >= 0, which moves the HW),
    a Fetch v11+ to a broker whose replica selector may redirect it (follower_reads.py Rule 1),
    a partition not led here or a stale epoch, a segment still to verify, a fenced range (Rule 4), a read
    that raises, fewer than min_bytes ready with max_wait_ms > 0, no byte of budget, or a read_committed
    fetch with something unstable or aborted to answer (read_committed.fast_limit), a v12+ fetch with a last fetched
    epoch (the general path checks it for divergence), a v13+ topic id not known here."""
    if request.replica_id >= 0 or request.last_fetched_epoch >= 0:
        return NOT_SERVED_FAST
    if request.api_version >= 11 and follower_reads.redirects(state):  # the rack_id is not decoded here
        return NOT_SERVED_FAST
    budget = min(request.max_bytes, state.config.fetch_max_bytes, request.partition_max_bytes)
    if budget <= 0:
        return NOT_SERVED_FAST
    offset = request.fetch_offset
    snapshot, topic = state.partitions.snapshot, request.topic
    if request.topic_id is not None:  # v13+
        topic = snapshot.names_by_topic_id.get(request.topic_id)
        if topic is None:
            return NOT_SERVED_FAST
    led = fetch_target(state, snapshot, topic, request.partition, request.current_leader_epoch, offset)
    if led.__class__ is int:
        return NOT_SERVED_FAST
    plog = led.plog
    if plog.needs_verification(offset):
        return NOT_SERVED_FAST
    high_watermark = plog.high_watermark  # read before the slice, as _fetch_once does
    log_start = plog.log_start_offset
    limit = None
    if request.isolation_level == read_committed.READ_COMMITTED:
        limit = read_committed.fast_limit(plog, offset, high_watermark)
        if limit is None:
            return NOT_SERVED_FAST
    try:
        records = plog.read(offset, budget, limit)  # a consumer's read: replica_id < 0 here
    except StorageError:  # OffsetOutOfRange, LogClosedError, CorruptSegmentError: the general path's errors
        return NOT_SERVED_FAST
    size = len(records)
    if size < request.min_bytes and request.max_wait_ms > 0:
        return NOT_SERVED_FAST
    head = encode_single_partition_fetch_head(request, high_watermark, log_start, size)
    end = single_partition_end(request.api_version)  # v12+: the tags after the records
    if size:
        state.topic_meters.fetched(topic, size)
        return [head, records, end] if end else [head, records]
    return [head + end]


def _fetch_error(index: int, code: int) -> PartitionData:
    return PartitionData(partition_index=index, error_code=code, high_watermark=NO_OFFSET,
                         last_stable_offset=NO_OFFSET, log_start_offset=NO_OFFSET, aborted_transactions=None,
                         preferred_read_replica=-1, records=b"")
