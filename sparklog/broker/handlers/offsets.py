"""ListOffsets and OffsetForLeaderEpoch: offsets by time and by leader epoch, from the leader."""

from __future__ import annotations

import functools

from sparklog.protocol.list_offsets import (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
                                            LATEST_TIMESTAMP, MAX_TIMESTAMP, TIMESTAMP_MIN_VERSION,
                                            ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse)
from sparklog.protocol.offset_for_leader_epoch import (EpochEndOffset, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderTopicResult)
from sparklog.broker.handlers.error_codes import (INVALID_REQUEST, LEADER_NOT_AVAILABLE, NONE, NO_LEADER_EPOCH,
                                                  NO_OFFSET, NO_TIMESTAMP, OFFSET_NOT_AVAILABLE, UNSUPPORTED_VERSION)
from sparklog.broker.handlers import read_committed
from sparklog.storage import legacy_offsets
from sparklog.broker.handlers.leadership import (led_or_error, verified_first)


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
        return verified_first(state, verifications, functools.partial(_list_offsets, request, state))
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
                led, code = led_or_error(state, snapshot, topic.name, part.partition_index,
                                          part.current_leader_epoch)
            if led is None:
                parts.append(ListOffsetsPartitionResponse(partition_index=part.partition_index, error_code=code))
                continue
            if version == 0:
                parts.append(_legacy_answer(led, part, request.body.replica_id))
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


def _legacy_answer(led, part, replica_id: int) -> ListOffsetsPartitionResponse:
    """v0: offsets at segment boundaries (storage/legacy_offsets.py), the high watermark's cap for consumers."""
    offsets = legacy_offsets.offsets_before(legacy_offsets.segment_points(led.plog), part.timestamp,
                                            part.max_num_offsets)
    if replica_id < 0:
        offsets = legacy_offsets.visible_to_consumer(offsets, led.plog.high_watermark)
    return ListOffsetsPartitionResponse(partition_index=part.partition_index, error_code=NONE,
                                        old_style_offsets=offsets)


def _repeated(items) -> set:
    seen, repeated = set(), set()
    for item in items:
        (repeated if item in seen else seen).add(item)
    return repeated


def _timestamp_error(timestamp: int, version: int) -> int:
    """UNSUPPORTED_VERSION for a negative timestamp Kafka does not define at this version (its
    `isListOffsetsTimestampUnsupported`), except MAX_TIMESTAMP (-3): defined from v7, but answered at any
    version, as Kafka's brokers before 4.0 did and as librdkafka asks brokers that offer no v7. v0's legacy
    answer takes any timestamp (one below every segment's time finds no offsets)."""
    if timestamp >= 0 or timestamp == MAX_TIMESTAMP or version == 0:
        return NONE
    first = TIMESTAMP_MIN_VERSION.get(timestamp)
    return NONE if first is not None and version >= first else UNSUPPORTED_VERSION


def handle_offset_for_leader_epoch(request, state) -> OffsetForLeaderEpochResponse:
    """Where each asked leader epoch ends in this leader's log (KIP-101/279), from its epoch cache."""
    snapshot = state.partitions.snapshot
    topics = []
    for topic in request.body.topics:
        parts = []
        for part in topic.partitions:
            led, code = led_or_error(state, snapshot, topic.topic, part.partition, part.current_leader_epoch)
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
