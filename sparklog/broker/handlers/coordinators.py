"""FindCoordinator, InitProducerId, OffsetCommit and OffsetFetch: the coordinators' entry points here.

Rule 1 (the batched versions): FindCoordinator v4+ (KIP-699) answers each of its coordinator_keys as a v3 request
naming that key alone is answered, in the keys' order; OffsetFetch v8+ (KIP-709) answers each of its groups as a
v7 request of that group is answered, a group's error (NOT_COORDINATOR, ...) in its own error_code with no
topics, beside the others' offsets.
Rule 2 (OffsetFetch v9, KIP-848): a group entry of a consumer-protocol group is checked by the group (its
consumer_group.py rule "Rule 4": UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH); a classic group's members are not
checked (Kafka's `ClassicGroup.validateOffsetFetch`), nor is an entry naming none (an admin client).
"""

from __future__ import annotations

import inspect
import logging

from sparklog.coordination import brokers as broker_registry
from sparklog.broker.coordinator.group import handlers as group_handlers
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, OffsetStoreError
from sparklog.broker.coordinator.transaction import handlers as transaction_handlers
from sparklog.coordination import offsets as offset_registry
from sparklog.protocol.find_coordinator import (BATCHED_VERSION, KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, Coordinator,
                                               FindCoordinatorRequest, FindCoordinatorResponse)
from sparklog.protocol.init_producer_id import InitProducerIdResponse
from sparklog.protocol.offset_commit import (OffsetCommitResponse, OffsetCommitResponsePartition,
                                             OffsetCommitResponseTopic)
from sparklog.protocol.offset_fetch import (GROUPS_VERSION, OffsetFetchRequest, OffsetFetchRequestTopic, OffsetFetchResponse,
                                            OffsetFetchResponseGroup, OffsetFetchResponsePartition,
                                            OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
                                            OffsetFetchResponseTopics)
from sparklog.storage.topic_names import validate_topic
from sparklog.broker.handlers.error_codes import (COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, INVALID_TOPIC_EXCEPTION,
                                                  NONE, NO_OFFSET, OFFSET_METADATA_TOO_LARGE,
                                                  UNKNOWN_TOPIC_OR_PARTITION, UNSTABLE_OFFSET_COMMIT)
from sparklog.broker.handlers.metadata import ensure_offsets_topic

log = logging.getLogger(__name__)


OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes: Kafka's default


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
    coordinator's answer (coordinator/transaction/handlers.py). v4+: Rule 1."""
    if request.api_version >= BATCHED_VERSION:
        return _find_coordinators(request.body, state, request.listener)
    return _find_one(request.body, state, request.listener)


async def _find_coordinators(body, state, listener: str) -> FindCoordinatorResponse:
    coordinators = []
    for key in body.coordinator_keys:
        answer = _find_one(FindCoordinatorRequest(key=key, key_type=body.key_type), state, listener)
        if inspect.isawaitable(answer):
            answer = await answer
        coordinators.append(Coordinator(key=key, node_id=answer.node_id, host=answer.host, port=answer.port,
                                        error_code=answer.error_code, error_message=answer.error_message))
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)


def _find_one(body, state, listener: str):
    """A v0-3 request's answer (a coroutine when a coordinator topic must be created first)."""
    if body.key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=INVALID_REQUEST,
                                       error_message=f"unknown key type {body.key_type}", node_id=-1, host="",
                                       port=-1)
    if body.key_type == KEY_TYPE_TRANSACTION:
        return transaction_handlers.find_coordinator(body, state, listener)
    if body.key_type == KEY_TYPE_GROUP and OFFSETS_TOPIC not in state.partitions.snapshot.topics:
        return _find_coordinator_after_create(body, state, listener)
    return _find_coordinator(body, state, listener)


async def _find_coordinator_after_create(body, state, listener: str) -> FindCoordinatorResponse:
    await ensure_offsets_topic(state)
    return _find_coordinator(body, state, listener)


def _find_coordinator(body, state, listener: str) -> FindCoordinatorResponse:
    """The coordinator's address on the listener the client came in on (broker_registry.for_listener)."""
    snapshot = state.partitions.snapshot
    node = state.broker_id
    if body.key_type == KEY_TYPE_GROUP:
        node = state.offsets.coordinator_for(body.key, snapshot)
    coordinator = broker_registry.for_listener(snapshot.brokers, listener).get(node)
    if coordinator is None or state.broker_id not in snapshot.brokers:
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE, node_id=-1,
                                       host="", port=-1)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=NONE, node_id=coordinator.id,
                                   host=coordinator.host, port=coordinator.port)


def handle_offset_commit(request, state):
    """A partition the cluster lacks gets UNKNOWN_TOPIC_OR_PARTITION and is not stored, whatever the group's
    state (Kafka's KafkaApis checks the metadata cache before asking the coordinator, at every version)."""
    body = request.body
    unknown = _unknown_commit_partitions(body, state.partitions.snapshot)
    code = group_handlers.group_error(state, body.group_id)
    if code == NONE:
        code = _commit_membership_error(body, state, request.api_version)
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
                offsets[key] = offset_registry.OffsetAndMetadata(part.committed_offset, metadata,
                                                                 part.committed_leader_epoch)
    if offsets:
        codes.update(await state.offsets.commit(body.group_id, offsets))
    return _offset_commit_response(body, lambda t, p: codes.get((t, p), NONE))


def _commit_membership_error(body, state, api_version: int) -> int:
    """A member's commit is checked by its coordinator (generation, member id, group state); a member-less
    commit (generation -1, no member id) of a group without members here goes straight to the store."""
    generation, member_id = body.generation_id_or_member_epoch, body.member_id
    if generation < 0 and not member_id and body.group_id not in state.groups.groups and \
            state.groups.consumer_groups.describe(body.group_id) is None:
        return NONE
    return state.groups.check_commit(body.group_id, member_id, body.group_instance_id, generation, api_version)


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
    topic gone (offset_store.py, "Deleted topics"), so a topic created again under that name has none.
    v8+: Rules 1 and 2."""
    body = request.body
    if request.api_version >= GROUPS_VERSION:
        return _offset_fetch_groups(body, state)
    code = group_handlers.group_error(state, body.group_id)
    if code != NONE:
        return _offset_fetch_error(body, code)
    return _offset_fetch(body, state)


async def _offset_fetch_groups(body, state) -> OffsetFetchResponse:
    groups = []
    for group in body.groups:
        code = group_handlers.group_error(state, group.group_id)
        if code == NONE:
            code = _fetch_membership_error(group, state)
        if code != NONE:
            groups.append(OffsetFetchResponseGroup(group_id=group.group_id, topics=[], error_code=code))
            continue
        topics = None if group.topics is None else [
            OffsetFetchRequestTopic(name=t.name, partition_indexes=t.partition_indexes) for t in group.topics]
        answer = await _offset_fetch(OffsetFetchRequest(group_id=group.group_id, topics=topics,
                                                        require_stable=body.require_stable), state)
        groups.append(OffsetFetchResponseGroup(group_id=group.group_id, error_code=answer.error_code, topics=[
            OffsetFetchResponseTopics(name=t.name, partitions=[OffsetFetchResponsePartitions(
                partition_index=p.partition_index, committed_offset=p.committed_offset,
                committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata, error_code=p.error_code)
                for p in t.partitions]) for t in answer.topics]))
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)


def _fetch_membership_error(group, state) -> int:
    """Rule 2 (a v8 entry has neither: member_id None, member_epoch -1)."""
    code = state.groups.consumer_groups.check_fetch(group.group_id, group.member_id, group.member_epoch)
    return NONE if code is None else code


async def _offset_fetch(body, state) -> OffsetFetchResponse:
    snapshot = state.partitions.snapshot
    wanted = None
    if body.topics is not None:
        wanted = [(t.name, p) for t in body.topics for p in t.partition_indexes]
        known = [tp for tp in wanted if _in_cluster(snapshot, *tp)]
    try:  # the pending set first: a marker that lands during the fetch's await cannot then hide an old offset
        unstable = _unstable(body, state, known if wanted is not None else None)
        found = await state.offsets.fetch(body.group_id, known if wanted is not None else None)
    except OffsetStoreError as exc:
        return _offset_fetch_error(body, exc.code)
    if wanted is None:
        wanted = sorted(tp for tp in {*found, *unstable} if _in_cluster(snapshot, *tp))
    by_topic: dict[str, list] = {}
    for topic, partition in wanted:
        value = None if (topic, partition) in unstable else found.get((topic, partition))
        by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
            partition_index=partition,
            committed_offset=NO_OFFSET if value is None else value.offset,
            committed_leader_epoch=-1 if value is None else value.leader_epoch,
            metadata="" if value is None else value.metadata,
            error_code=UNSTABLE_OFFSET_COMMIT if (topic, partition) in unstable else NONE))
    topics = [OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=NONE)


def _unstable(body, state, partitions) -> set:
    """v7 require_stable (KIP-447): the partitions with transactional offsets still pending (offset_store.py,
    "Transactional offsets"), answered UNSTABLE_OFFSET_COMMIT with no offset; the client retries."""
    if not body.require_stable:
        return set()
    if partitions is None:
        return state.offsets.pending_partitions(body.group_id)
    return state.offsets.unstable(body.group_id, partitions)


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
