"""ApiVersions, Metadata, CreateTopics and DeleteTopics: what the broker serves and the topics it knows."""

from __future__ import annotations

import asyncio
import logging
import uuid

from sparklog.coordination import brokers as broker_registry
from sparklog.broker.coordinator.group import offsets_topic
from sparklog.broker.replication import partition_limits
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC
from sparklog.coordination import topic_ids
from sparklog.coordination import topics as topic_registry
from sparklog.protocol import errors
from sparklog.protocol.api_versions import ApiVersionsResponse
from sparklog.protocol.create_topics import CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse
from sparklog.protocol.delete_topics import DeletableTopicResult, DeleteTopicsResponse
from sparklog.protocol.metadata import (MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
                                        MetadataResponseTopic)
from sparklog.protocol.registry import advertised_api_versions
from sparklog.storage.config import KEYS as LOG_CONFIG_KEYS
from sparklog.storage.config import DEFINITIONS, LogConfig
from sparklog.storage.topic_names import validate_topic
from sparklog.broker.handlers.admin import topic_sources
from sparklog.broker.handlers.error_codes import (INVALID_CONFIG, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
                                                  INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST, INVALID_TOPIC_EXCEPTION,
                                                  LEADER_NOT_AVAILABLE, NONE, NO_LEADER_EPOCH, REQUEST_TIMED_OUT,
                                                  TOPIC_ALREADY_EXISTS, TOPIC_DELETION_DISABLED,
                                                  UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION)

log = logging.getLogger(__name__)


def api_versions_body() -> ApiVersionsResponse:
    """Exactly the versions the codec advertises (issue 3's table); the group apis are left out."""
    return ApiVersionsResponse(error_code=NONE, api_keys=advertised_api_versions(), throttle_time_ms=0)


_API_VERSIONS = api_versions_body()


def handle_api_versions(request, state) -> ApiVersionsResponse:
    return _API_VERSIONS


def handle_metadata(request, state):
    """Brokers and topics from the ZooKeeper-fed snapshot; auto-creates missing topics when allowed. A topic
    asked by id (v10+, null name) is answered by its name and id, or UNKNOWN_TOPIC_ID (never created)."""
    body = request.body
    snapshot = state.partitions.snapshot
    if body.topics is None or (not body.topics and request.api_version == 0):  # v0: empty means every topic
        return _metadata_response(snapshot, state, list(snapshot.topics), {}, request.listener)
    by_id = [(t.topic_id, snapshot.topic_named_by_id(t.topic_id)) for t in body.topics if t.name is None]
    unknown_ids = [topic_id for topic_id, name in by_id if name is None]
    names = list(dict.fromkeys([t.name for t in body.topics if t.name is not None] +
                               [name for _, name in by_id if name is not None]))
    if unknown_ids:
        return _with_unknown_ids(_metadata_by_name(request, state, names), unknown_ids, request.api_version)
    return _metadata_by_name(request, state, names)


def _with_unknown_ids(result, unknown_ids, version: int):
    def add(response: MetadataResponse) -> MetadataResponse:
        unnamed = unnamed_topic(version)
        response.topics += [MetadataResponseTopic(error_code=UNKNOWN_TOPIC_ID, name=unnamed, topic_id=topic_id)
                            for topic_id in dict.fromkeys(unknown_ids)]
        return response
    if asyncio.iscoroutine(result):
        async def later() -> MetadataResponse:
            return add(await result)
        return later()
    return add(result)


def unnamed_topic(version: int) -> str | None:
    """The name of a Metadata answer for a topic asked by an id it does not reveal: null from v12, "" before."""
    return None if version >= 12 else ""


def _metadata_by_name(request, state, names: list[str]):
    body = request.body
    snapshot = state.partitions.snapshot
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
        return _metadata_response(snapshot, state, names, errors_by_name, request.listener)
    return _metadata_after_create(state, names, creatable, errors_by_name, request.listener)


async def _metadata_after_create(state, names, creatable, errors_by_name, listener) -> MetadataResponse:
    cfg = state.config
    for name in creatable:
        if name == OFFSETS_TOPIC:  # created as the coordinator needs it, never with a user topic's defaults
            code = NONE if await ensure_offsets_topic(state) else LEADER_NOT_AVAILABLE
        else:
            code, _ = await create_topic(state, name, cfg.num_partitions, cfg.default_replication_factor, {})
        if code not in (NONE, TOPIC_ALREADY_EXISTS):
            errors_by_name[name] = code
        elif code == TOPIC_ALREADY_EXISTS and name not in state.partitions.snapshot.topics:
            errors_by_name[name] = LEADER_NOT_AVAILABLE  # created elsewhere; our watch has not seen it yet
    return _metadata_response(state.partitions.snapshot, state, names, errors_by_name, listener)


def _metadata_response(snapshot, state, names, errors_by_name, listener: str) -> MetadataResponse:
    """The brokers' addresses on the listener the client came in on (broker_registry.for_listener)."""
    live = snapshot.brokers
    brokers = [MetadataResponseBroker(node_id=b.id, host=b.host, port=b.port, rack=b.rack)
               for _, b in sorted(broker_registry.for_listener(live, listener).items())]
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
                                            topic_id=wire_topic_id(meta.topic_id),
                                            is_internal=offsets_topic.is_internal(name), partitions=partitions))
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=state.cluster_id,
                            controller_id=_controller_id(snapshot, state), topics=topics)


def wire_topic_id(topic_id: str | None) -> uuid.UUID:
    """A topic id as the protocol carries it (the all-zero id while it is not known yet)."""
    return topic_ids.ZERO if topic_id is None else topic_ids.to_uuid(topic_id)


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
        result = CreatableTopicResult(name=topic.name, error_code=code, error_message=message)
        if code == NONE:
            _describe_created(result, topic, state, body.validate_only)
        results.append(result)
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _describe_created(result, topic, state, validate_only: bool) -> None:
    """What CreateTopics v5+ answers for a topic it created or validated (KIP-525: its counts and configs),
    and v7+ (KIP-516) its id: the all-zero id for validate_only, which creates nothing."""
    meta = None if validate_only else state.partitions.snapshot.topics.get(topic.name)
    if meta is None:
        result.num_partitions, result.replication_factor = _requested_shape(state.config, topic)
        overrides = {c.name: c.value for c in topic.configs if c.value is not None}
    else:
        result.topic_id = wire_topic_id(meta.topic_id)
        result.num_partitions = len(meta.partitions)
        result.replication_factor = len(next(iter(meta.assignment.values()), ()))
        overrides = dict(meta.config)
    effective = {name: topic_sources(name, overrides, state)[0] for name in sorted(DEFINITIONS)}
    result.configs = [CreatableTopicConfigs(name=name, value=value, read_only=False, config_source=source,
                                            is_sensitive=False) for name, (_, value, source) in effective.items()]


def _requested_shape(cfg, topic) -> tuple[int, int]:
    """(partitions, replication factor) a CreatableTopic asks for: from its assignments when it has them."""
    if topic.assignments:
        return len(topic.assignments), len(topic.assignments[0].broker_ids)
    replication = cfg.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    return _requested_partitions(cfg, topic), replication


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
    return await create_topic(state, topic.name, partitions, replication, overrides, validate_only, assignment)


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


async def create_topic(state, name, partitions, replication, overrides, validate_only=False, assignment=None):
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
    if request.api_version >= 6:
        return _delete_topics_v6(request.body, state)
    return _delete_topics(request.body, state)


async def _delete_topics(body, state) -> DeleteTopicsResponse:
    results = []
    for name in body.topic_names:
        results.append(DeletableTopicResult(name=name, error_code=await _delete_one(state, name)))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _delete_topics_v6(body, state) -> DeleteTopicsResponse:
    """v6 (KIP-516): each topic named by name or by id (an id this broker's metadata does not know is
    UNKNOWN_TOPIC_ID; both at once INVALID_REQUEST, as Kafka); each result carries the topic's id."""
    results = []
    for topic in body.topics:
        results.append(await _delete_named_or_by_id(state, topic.name, topic.topic_id))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _delete_named_or_by_id(state, name: str | None, topic_id: uuid.UUID) -> DeletableTopicResult:
    snapshot = state.partitions.snapshot
    if name is not None and topic_id != topic_ids.ZERO:
        return DeletableTopicResult(name=name, topic_id=topic_id, error_code=INVALID_REQUEST,
                                    error_message="You may not specify both topic name and topic id.")
    if name is None:
        name = snapshot.topic_named_by_id(topic_id)
        if name is None:
            return DeletableTopicResult(name=None, topic_id=topic_id, error_code=UNKNOWN_TOPIC_ID,
                                        error_message=f"no topic has id {topic_ids.to_string(topic_id)}")
    else:
        topic_id = wire_topic_id(snapshot.topics[name].topic_id) if name in snapshot.topics else topic_ids.ZERO
    return DeletableTopicResult(name=name, topic_id=topic_id, error_code=await _delete_one(state, name))


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
        code, message = await create_topic(state, OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                            replication, offsets_topic.topic_config(config, replication))
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away while noting it: the caller answers "not available"
        code, message = REQUEST_TIMED_OUT, str(exc)
    if code == NONE:
        log.info("created %s: %d partitions, replication factor %d", OFFSETS_TOPIC,
                 config.offsets_topic_num_partitions, replication)
    elif code != TOPIC_ALREADY_EXISTS:  # another broker's creation won: its watch brings it here
        log.warning("creating %s failed: %s (%s)", OFFSETS_TOPIC, errors.for_code(code).__name__, message)
