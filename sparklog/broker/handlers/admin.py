"""The admin APIs Kafka's admin clients use: CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DeleteRecords, DescribeCluster, DescribeLogDirs, DescribeProducers, ElectLeaders and
ListPartitionReassignments; `handle_x(request, state) -> response`, with the
Rules of the handlers package (a per-resource problem is that resource's error code, never an exception).

Rule 1: topic configs have one authority, `/config/topics/<t>` in ZooKeeper: the alter calls validate the
whole resulting set of overrides against the storage's `LogConfig` (over the broker's log.* defaults) and
write it there in one set; every broker's PartitionManager applies it to its open logs (live reconfigure).
A config that is unknown or cannot work is INVALID_CONFIG with a message naming it; nothing is written.
Rule 2: DescribeConfigs reads the topic and its overrides from ZooKeeper (so a describe right after an alter
sees it, and one right after a creation through another broker sees the topic and its configs, never
UNKNOWN_TOPIC_OR_PARTITION because this broker's metadata lags) and reports every topic config: the override
(source DYNAMIC_TOPIC_CONFIG), else the broker's server.properties value of its `log.` synonym
(STATIC_BROKER_CONFIG), else Kafka's default (DEFAULT_CONFIG); with synonyms when asked, in that order, as
Kafka's brokers list them.
Rule 3: broker resources (dynamic broker configs) are described and altered as broker_configs.py says; a
topic's broker-level sources include the dynamic ones (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG)
before server.properties.
Rule 4: CreatePartitions obeys CreateTopics' partition limits (partition_limits.py) before any ZooKeeper write:
the new total against max.partitions.per.topic, the partitions added against max.broker.partitions and, over
the whole request, max.partitions.per.request. The internal `__consumer_offsets` keeps its partition count
(INVALID_REQUEST; offsets_topic.py Rule 2). Its `assignments` place the new partitions as given, once Kafka's
checks pass (one per new partition, the topic's replication factor, distinct live brokers), else
INVALID_REPLICA_ASSIGNMENT naming what is wrong.
Rule 5: DeleteRecords is served by each partition's leader and moves its log start offset
(`PartitionLog.delete_records_before`); -1 means the high watermark; beyond it is OFFSET_OUT_OF_RANGE. An
internal topic's records are not deleted (INVALID_TOPIC_EXCEPTION, as Kafka; offsets_topic.py Rule 2).
Rule 6: DescribeLogDirs reports this broker's own log dirs and the partitions in each (a client asks every
broker): size on disk, offset lag max(0, high watermark - log end) as Kafka computes it for a current replica,
and the file system's total and usable bytes. DescribeProducers is answered by a partition's leader, from the
producer state its log keeps (no transactions: coordinator epoch and transaction start -1); elsewhere
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION for what the cluster lacks.
Rule 7: ElectLeaders (preferred) is served by any broker, through the controller's ZooKeeper request
(`/admin/preferred_replica_election`, as `sparklog topics elect-leaders`), and answered once ZooKeeper shows
each partition led by its preferred (first) replica, or at the request's timeout (REQUEST_TIMED_OUT), as
Kafka's DelayedElectLeader. Partitions, leaders, ISRs and live brokers are read from ZooKeeper, not from this
broker's metadata, which may lag. Checked first, per partition, as Kafka's controller does:
UNKNOWN_TOPIC_OR_PARTITION; ELECTION_NOT_NEEDED when the preferred replica leads already;
PREFERRED_LEADER_NOT_AVAILABLE when it is not alive or not in the ISR. An unclean election (type 1) is
ELECTION_NOT_NEEDED for a partition with a live leader; for one without, ELIGIBLE_LEADERS_NOT_AVAILABLE: the
controller elects outside the ISR only for a topic that sets unclean.leader.election.enable.
Rule 8: ListPartitionReassignments lists, from ZooKeeper, the partitions a reassignment is moving now (their
topic znode names replicas being added or removed), as Kafka's controller lists its ongoing ones; the others
are left out. AlterPartitionReassignments is served by reassignments.py (merged into the pending plan, with
cancellation).
"""

from __future__ import annotations

import asyncio
import logging
import os

from sparklog.broker.coordinator.group import offsets_topic
from sparklog.broker.replication import partition_limits
from sparklog.broker.config import BROKER, topic_defaults
from sparklog.broker.dynamic_config import unknown_message
from sparklog.broker.handlers import broker_configs
from sparklog.broker.handlers.error_codes import (INVALID_CONFIG, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
                                                  INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, NONE, REQUEST_TIMED_OUT,
                                                  UNKNOWN_TOPIC_OR_PARTITION)
from sparklog.broker.handlers.error_codes import STORAGE_FAULTS, storage_error_code
from sparklog.broker.handlers.leadership import led_or_error, not_led_error
from sparklog.coordination import brokers as broker_registry
from sparklog.coordination import controller_requests, reassignment
from sparklog.coordination import topics as topic_registry
from sparklog.protocol.alter_configs import AlterConfigsResourceResponse, AlterConfigsResponse
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.consumer_offsets import FIXED_PARTITIONS
from sparklog.protocol.create_partitions import CreatePartitionsResponse, CreatePartitionsTopicResult
from sparklog.protocol.delete_records import (HIGH_WATERMARK, DeleteRecordsPartitionResult, DeleteRecordsResponse,
                                              DeleteRecordsTopicResult)
from sparklog.protocol.describe_cluster import ENDPOINT_BROKERS, DescribeClusterBroker, DescribeClusterResponse
from sparklog.protocol.describe_log_dirs import (DescribeLogDirsPartition, DescribeLogDirsResponse,
                                                 DescribeLogDirsResult, DescribeLogDirsTopic)
from sparklog.protocol.describe_producers import (DescribeProducersPartitionResponse, DescribeProducersResponse,
                                                  DescribeProducersTopicResponse, ProducerState)
from sparklog.protocol.list_partition_reassignments import (ListPartitionReassignmentsResponse,
                                                            OngoingPartitionReassignment, OngoingTopicReassignment)
from sparklog.protocol.elect_leaders import (ELECTION_PREFERRED, ELECTION_UNCLEAN, ElectLeadersPartitionResult,
                                             ElectLeadersResponse, ReplicaElectionResult)
from sparklog.protocol.errors import (EligibleLeadersNotAvailableError, ElectionNotNeededError,
                                      PreferredLeaderNotAvailableError)
from sparklog.protocol.describe_configs import (RESOURCE_BROKER, RESOURCE_TOPIC, SOURCE_DEFAULT, SOURCE_STATIC_BROKER,
                                                SOURCE_TOPIC, DescribeConfigsResourceResult, DescribeConfigsResponse,
                                                DescribeConfigsResult, DescribeConfigsSynonym)
from sparklog.protocol.incremental_alter_configs import (OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT,
                                                         IncrementalAlterConfigsResourceResponse,
                                                         IncrementalAlterConfigsResponse)
from sparklog.storage.config import DEFINITIONS, LogConfig
from sparklog.storage.errors import StorageError
from sparklog.storage.topic_names import validate_topic

log = logging.getLogger(__name__)

ELECTION_NOT_NEEDED = ElectionNotNeededError.errno
ELIGIBLE_LEADERS_NOT_AVAILABLE = EligibleLeadersNotAvailableError.errno
PREFERRED_LEADER_NOT_AVAILABLE = PreferredLeaderNotAvailableError.errno
ELECTION_POLL_S = 0.1  # how often a waiting ElectLeaders reads the partitions from ZooKeeper again (Rule 7)
ELECTION_PENDING_RETRY_S = 0.1  # how soon it asks again while another election request is pending
MISMATCHED_ENDPOINT_TYPE = 114  # Kafka's error for DescribeCluster asking a broker for controllers (KIP-919)

# Broker settings reported for a broker resource besides the log defaults, with their declared defaults.
_BROKER_DEFAULTS = tuple((key, BROKER[key].format(BROKER[key].default)) for key in (
    "num.partitions", "default.replication.factor", "auto.create.topics.enable", "delete.topic.enable"))


def _not_found(name: str) -> tuple[int, str]:
    try:
        validate_topic(name)
    except ValueError as exc:
        return INVALID_TOPIC_EXCEPTION, str(exc)
    return UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"


def _repeated(names) -> set:
    seen, repeated = set(), set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return repeated


# ---------------------------------------------------------------------------------------------------------
# CreatePartitions


def handle_create_partitions(request, state):
    return _create_partitions(request.body, state)


async def _create_partitions(body, state) -> CreatePartitionsResponse:
    repeated = _repeated(t.name for t in body.topics)
    too_many = partition_limits.request_problem(state.config, [_added(state, t) for t in body.topics])
    results = []
    for topic in body.topics:
        if too_many:
            code, message = too_many  # the request as a whole is over max.partitions.per.request: none grows
        elif topic.name in repeated:
            code, message = INVALID_REQUEST, "the topic appears more than once in the request"
        else:
            code, message = await _grow(state, topic, body.validate_only)
        results.append(CreatePartitionsTopicResult(name=topic.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def _added(state, topic) -> int:
    """How many partitions a CreatePartitions topic asks to add (0 for an unknown topic or a shrink)."""
    meta = state.partitions.snapshot.topics.get(topic.name)
    return 0 if meta is None else max(0, topic.count - len(meta.partitions))


async def _grow(state, topic, validate_only: bool) -> tuple[int, str | None]:
    meta = state.partitions.snapshot.topics.get(topic.name)
    if meta is None:
        return _not_found(topic.name)
    if offsets_topic.is_internal(topic.name):
        return INVALID_REQUEST, FIXED_PARTITIONS
    current = len(meta.partitions)
    if topic.count <= current:
        return INVALID_PARTITIONS, (f"topic {topic.name!r} has {current} partitions; the new count must be "
                                    f"larger, not {topic.count}")
    assignment = None if topic.assignments is None else {
        current + i: tuple(a.broker_ids) for i, a in enumerate(topic.assignments)}
    limit = state.config.max_partitions_per_topic
    if topic.count > limit:
        return INVALID_PARTITIONS, f"{topic.count} partitions is more than max.partitions.per.topic={limit}"
    live = sorted(state.partitions.snapshot.brokers)
    replication = max((len(replicas) for replicas in meta.assignment.values()), default=1)
    over_limit = partition_limits.topic_problem(state.config, state.partitions.snapshot.topics, live,
                                                topic.count - current, replication)
    if over_limit:
        return over_limit
    if assignment is not None:  # checked here too, so that validate_only answers as the write would
        try:
            topic_registry.validate_added_assignment(assignment, topic.count - current, live, current, replication)
        except topic_registry.InvalidReplicaAssignment as exc:
            return INVALID_REPLICA_ASSIGNMENT, str(exc)
    if validate_only:
        return NONE, None
    try:
        grown = await state.blocking(topic_registry.add_partitions, state.zk, topic.name, topic.count, live,
                                     assignment)
    except topic_registry.UnknownTopic as exc:
        return UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    except topic_registry.InvalidReplicaAssignment as exc:
        return INVALID_REPLICA_ASSIGNMENT, str(exc)
    except (topic_registry.InvalidPartitions, topic_registry.InvalidReplicationFactor) as exc:
        return INVALID_PARTITIONS, str(exc)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: the client may retry
        log.warning("adding partitions to %s failed: %s", topic.name, exc)
        return REQUEST_TIMED_OUT, f"ZooKeeper: {exc}"
    await state.blocking(state.partitions.note_topic, grown)
    return NONE, None


# ---------------------------------------------------------------------------------------------------------
# DescribeConfigs


def handle_describe_configs(request, state):
    return _describe_configs(request.body, request.api_version, state)


async def _describe_configs(body, version: int, state) -> DescribeConfigsResponse:
    results = []
    for resource in body.resources:
        try:
            configs = await _resource_configs(resource, state)
        except _ResourceError as exc:
            results.append(DescribeConfigsResult(error_code=exc.code, error_message=exc.message, configs=[],
                                                 resource_type=resource.resource_type,
                                                 resource_name=resource.resource_name))
            continue
        wanted = resource.configuration_keys
        entries = [_entry(name, sources, body, resource.resource_type) for name, sources in configs.items()
                   if wanted is None or name in wanted]
        results.append(DescribeConfigsResult(error_code=NONE, resource_type=resource.resource_type,
                                             resource_name=resource.resource_name, configs=entries))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


class _ResourceError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


async def _resource_configs(resource, state) -> dict[str, list[tuple[str, str, int]]]:
    """{config name: its sources, strongest first, as (name, value, source)}; the first one is in effect."""
    try:
        if resource.resource_type == RESOURCE_BROKER:
            broker_configs.entity(resource.resource_name, state.broker_id)
        default, own = await broker_configs.read_dynamic(state)
    except broker_configs.BrokerResourceError as exc:
        raise _ResourceError(exc.code, exc.message) from None
    if resource.resource_type == RESOURCE_TOPIC:
        overrides = await _topic_overrides(state, resource.resource_name)
        return {name: topic_sources(name, overrides, state, default, own) for name in sorted(DEFINITIONS)}
    if resource.resource_type == RESOURCE_BROKER and not resource.resource_name:
        return broker_configs.default_resource(default)
    if resource.resource_type == RESOURCE_BROKER:
        return broker_configs.with_dynamic(_broker_configs(state), default, own)
    raise _ResourceError(INVALID_REQUEST, f"resource type {resource.resource_type} is not supported (topics "
                                          f"are {RESOURCE_TOPIC}, brokers {RESOURCE_BROKER})")


async def _topic_overrides(state, name: str) -> dict[str, str]:
    """Rule 2: from ZooKeeper, whether the topic exists included (not this broker's snapshot, which may not
    have seen a creation made through another broker a moment ago)."""
    try:
        validate_topic(name)
    except ValueError as exc:
        raise _ResourceError(INVALID_TOPIC_EXCEPTION, str(exc)) from None
    try:
        overrides = await state.blocking(topic_registry.existing_topic_config, state.zk, name)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away: say so, never answer with defaults
        log.warning("reading the config of topic %s failed: %s", name, exc)
        raise _ResourceError(REQUEST_TIMED_OUT, f"ZooKeeper: {exc}") from None
    if overrides is None:
        raise _ResourceError(*_not_found(name))
    return overrides


def topic_sources(name: str, overrides: dict, state, default: dict | None = None,
                  own: dict | None = None) -> list[tuple[str, str, int]]:
    definition = DEFINITIONS[name]
    sources = []
    if name in overrides:
        sources.append((name, str(overrides[name]), SOURCE_TOPIC))
    broker_key = definition.synonym
    if broker_key is not None:
        sources += broker_configs.dynamic_sources(broker_key, default or {}, own or {})
    static = topic_defaults(state.config.raw)
    if broker_key is not None and name in static:  # log.retention.hours counts, in ms
        sources.append((broker_key, str(static[name]), SOURCE_STATIC_BROKER))
    sources.append((broker_key or name, definition.format(definition.default), SOURCE_DEFAULT))
    return sources


def _broker_configs(state) -> dict[str, list[tuple[str, str, int]]]:
    raw = state.config.raw
    defaults = {d.synonym: d.format(d.default) for d in DEFINITIONS.values() if d.synonym}
    defaults.update(_BROKER_DEFAULTS)
    configs = {}
    for key in sorted(set(raw) | set(defaults)):
        sources = [(key, raw[key], SOURCE_STATIC_BROKER)] if key in raw else []
        if key in defaults:
            sources.append((key, defaults[key], SOURCE_DEFAULT))
        configs[key] = sources
    return configs


def _entry(name: str, sources, body, resource_type: int) -> DescribeConfigsResourceResult:
    _, value, source = sources[0]
    definition = DEFINITIONS.get(name)
    synonyms = [DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in sources] \
        if body.include_synonyms else []
    return DescribeConfigsResourceResult(
        name=name, value=value, read_only=resource_type == RESOURCE_BROKER and broker_configs.read_only(name),
        config_source=source, is_default=source == SOURCE_DEFAULT,
        is_sensitive=False, synonyms=synonyms, config_type=definition.type_code if definition else 0,
        documentation=definition.doc if definition and body.include_documentation else None)


# ---------------------------------------------------------------------------------------------------------
# AlterConfigs and IncrementalAlterConfigs


def handle_alter_configs(request, state):
    return _alter_configs(request.body, state, incremental=False)


def handle_incremental_alter_configs(request, state):
    return _alter_configs(request.body, state, incremental=True)


async def _alter_configs(body, state, incremental: bool):
    repeated = _repeated((r.resource_type, r.resource_name) for r in body.resources)
    responses = []
    for resource in body.resources:
        key = (resource.resource_type, resource.resource_name)
        if key in repeated:
            code, message = INVALID_REQUEST, "the resource appears more than once in the request"
        else:
            code, message = await _alter_one(resource, state, incremental, body.validate_only)
        responses.append((code, message, resource))
    if incremental:
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
            IncrementalAlterConfigsResourceResponse(error_code=c, error_message=m, resource_type=r.resource_type,
                                                    resource_name=r.resource_name) for c, m, r in responses])
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=c, error_message=m, resource_type=r.resource_type,
                                     resource_name=r.resource_name) for c, m, r in responses])


async def _alter_one(resource, state, incremental: bool, validate_only: bool) -> tuple[int, str | None]:
    if resource.resource_type == RESOURCE_BROKER:
        return await broker_configs.alter(resource, state, incremental, validate_only, _broker_ops)
    if resource.resource_type != RESOURCE_TOPIC:
        return INVALID_REQUEST, f"resource type {resource.resource_type} cannot be altered"
    name = resource.resource_name
    repeated = _repeated(c.name for c in resource.configs)
    if repeated and incremental:  # Kafka's "duplicate config keys"; the legacy API takes the last value, as Kafka
        return INVALID_REQUEST, f"config {', '.join(sorted(repeated))} appears more than once"
    try:
        current = await _topic_overrides(state, name)
    except _ResourceError as exc:
        return exc.code, exc.message
    try:
        wanted = apply_config_ops(current, resource.configs, incremental)
        check_topic_overrides(wanted, state.config.log_defaults)
    except ValueError as exc:
        return INVALID_CONFIG, str(exc)
    if validate_only:
        return NONE, None
    try:
        await state.blocking(topic_registry.set_topic_config, state.zk, name, wanted)
    except topic_registry.UnknownTopic as exc:
        return UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: the client may retry
        log.warning("altering the config of topic %s failed: %s", name, exc)
        return REQUEST_TIMED_OUT, f"ZooKeeper: {exc}"
    return NONE, None


def apply_config_ops(current: dict[str, str], configs, incremental: bool, definitions=DEFINITIONS,
                     unknown=None) -> dict[str, str]:
    """The topic's overrides after the request's operations (AlterConfigs: exactly the configs given, a null
    value meaning "no override", a config given twice taking its last value as in Kafka's Properties). Raises
    ValueError naming a config that is unknown (`unknown(name)` says so; the topic configs by default) or
    misused. A broker's dynamic configs pass `definitions=BROKER`."""
    wanted = dict(current) if incremental else {}
    for config in configs:
        definition = definitions.get(config.name)
        if definition is None:
            raise ValueError(unknown(config.name) if unknown else
                             f"unknown topic config {config.name!r}; known: {', '.join(sorted(DEFINITIONS))}")
        operation = config.config_operation if incremental else OP_SET
        if operation == OP_DELETE or (operation == OP_SET and config.value is None):
            wanted.pop(config.name, None)
        elif operation == OP_SET:
            wanted[config.name] = config.value
        elif operation in (OP_APPEND, OP_SUBTRACT):
            wanted[config.name] = _list_op(definition, wanted, config, operation)
        else:
            raise ValueError(f"unknown config operation {operation} for {config.name!r}")
    return wanted


def _broker_ops(current: dict[str, str], configs, incremental: bool) -> dict[str, str]:
    return apply_config_ops(current, configs, incremental, BROKER, unknown_message)


def _list_op(definition, wanted: dict, config, operation: int) -> str:
    if definition.type != "list":
        raise ValueError(f"{config.name} is not a list: APPEND and SUBTRACT apply only to list configs")
    old = wanted.get(config.name, definition.format(definition.default))
    items = [item for item in old.split(",") if item]
    change = [item.strip() for item in (config.value or "").split(",") if item.strip()]
    if operation == OP_APPEND:
        return ",".join(items + [item for item in change if item not in items])
    return ",".join(item for item in items if item not in change)


def check_topic_overrides(overrides: dict[str, str], broker_defaults) -> None:
    """Raise ValueError (InvalidConfigError) if the overrides, laid over the broker's defaults, are not a
    valid LogConfig: what the alter calls check before writing (so the brokers can apply what they read)."""
    LogConfig.from_dict({**broker_defaults, **overrides})


# ---------------------------------------------------------------------------------------------------------
# DeleteRecords


def handle_delete_records(request, state):
    return _delete_records(request.body, state)


async def _delete_records(body, state) -> DeleteRecordsResponse:
    loop = asyncio.get_running_loop()
    snapshot = state.partitions.snapshot
    topics = []
    for topic in body.topics:
        parts = []
        for part in topic.partitions:
            if offsets_topic.is_internal(topic.name):  # offsets_topic.py Rule 2
                parts.append(DeleteRecordsPartitionResult(partition_index=part.partition_index, low_watermark=-1,
                                                          error_code=INVALID_TOPIC_EXCEPTION))
                continue
            plog = snapshot.leading.get((topic.name, part.partition_index))
            if plog is None:
                code = not_led_error(snapshot, topic.name, part.partition_index)
                parts.append(DeleteRecordsPartitionResult(partition_index=part.partition_index, error_code=code))
                continue
            code, low = await loop.run_in_executor(state.executor, _delete_before, plog, part.offset)
            parts.append(DeleteRecordsPartitionResult(partition_index=part.partition_index, low_watermark=low,
                                                      error_code=code))
        topics.append(DeleteRecordsTopicResult(name=topic.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def _delete_before(plog, offset: int) -> tuple[int, int]:
    """(error code, log start offset afterwards); blocking: the new start is checkpointed with an fsync."""
    try:
        target = plog.high_watermark if offset == HIGH_WATERMARK else offset
        return NONE, plog.delete_records_before(target)
    except (OSError, StorageError) as exc:  # OffsetOutOfRange, LogClosedError, a disk's refusal
        code = storage_error_code(exc)
        if code in STORAGE_FAULTS:
            log.error("deleting records of %s failed: %s", plog, exc)
        return code, -1


# ---------------------------------------------------------------------------------------------------------
# DescribeCluster


def handle_describe_cluster(request, state) -> DescribeClusterResponse:
    body = request.body
    snapshot = state.partitions.snapshot
    if body.endpoint_type != ENDPOINT_BROKERS:
        return DescribeClusterResponse(throttle_time_ms=0, error_code=MISMATCHED_ENDPOINT_TYPE,
                                       error_message="sparklog has no controller quorum: ask for brokers",
                                       endpoint_type=body.endpoint_type, cluster_id=state.cluster_id, brokers=[])
    brokers = [DescribeClusterBroker(broker_id=b.id, host=b.host, port=b.port, rack=b.rack)
               for _, b in sorted(broker_registry.for_listener(snapshot.brokers, request.listener).items())]
    return DescribeClusterResponse(throttle_time_ms=0, error_code=NONE, endpoint_type=ENDPOINT_BROKERS,
                                   cluster_id=state.cluster_id, controller_id=snapshot.controller_id,
                                   brokers=brokers)


# ---------------------------------------------------------------------------------------------------------
# DescribeLogDirs and DescribeProducers (Rule 6)


def handle_describe_log_dirs(request, state) -> DescribeLogDirsResponse:
    asked = request.body.topics
    wanted = None if asked is None else {(t.topic, p) for t in asked for p in t.partitions}
    by_dir: dict[str, dict[str, list]] = {os.path.abspath(d): {} for d in state.logs.log_dirs}
    for plog in state.logs.logs():
        if wanted is not None and (plog.topic, plog.partition) not in wanted:
            continue
        topics = by_dir.setdefault(os.path.abspath(os.path.dirname(plog.directory)), {})
        topics.setdefault(plog.topic, []).append(DescribeLogDirsPartition(
            partition_index=plog.partition, partition_size=plog.size_bytes,
            offset_lag=max(0, plog.high_watermark - plog.log_end_offset), is_future_key=False))
    results = []
    for log_dir, topics in by_dir.items():
        total, usable = _disk_bytes(log_dir)
        results.append(DescribeLogDirsResult(error_code=NONE, log_dir=log_dir, total_bytes=total, usable_bytes=usable,
                                             topics=[DescribeLogDirsTopic(name=t, partitions=sorted(
                                                 ps, key=lambda p: p.partition_index))
                                                 for t, ps in sorted(topics.items())]))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=NONE, results=results)


def _disk_bytes(log_dir: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `log_dir`; (-1, -1) when it cannot be asked."""
    try:
        st = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def handle_describe_producers(request, state) -> DescribeProducersResponse:
    snapshot = state.partitions.snapshot
    topics = []
    for topic in request.body.topics:
        parts = []
        for index in topic.partition_indexes:
            led, code = led_or_error(state, snapshot, topic.name, index, -1)
            producers = [] if led is None else [ProducerState(
                producer_id=pid, producer_epoch=epoch, last_sequence=seq, last_timestamp=ts, coordinator_epoch=-1,
                current_txn_start_offset=txn) for pid, epoch, seq, ts, txn in led.plog.active_producers()]
            parts.append(DescribeProducersPartitionResponse(partition_index=index, error_code=code,
                                                            active_producers=producers))
        topics.append(DescribeProducersTopicResponse(name=topic.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


# ---------------------------------------------------------------------------------------------------------
# ElectLeaders (Rule 7)


def handle_elect_leaders(request, state):
    return _elect_leaders(request.body, state)


async def _elect_leaders(body, state) -> ElectLeadersResponse:
    names = None if body.topic_partitions is None else sorted({t.topic for t in body.topic_partitions})
    try:
        topics, live = await state.blocking(_election_view, state.zk, names)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away: nothing was asked of the controller
        log.warning("reading the partitions to elect failed: %s", exc)
        return ElectLeadersResponse(throttle_time_ms=0, error_code=REQUEST_TIMED_OUT, replica_election_results=[])
    if body.topic_partitions is None:
        asked = [(t, p) for t, found in sorted(topics.items()) for p in sorted(found.partitions)]
    else:
        asked = list(dict.fromkeys((t.topic, p) for t in body.topic_partitions for p in t.partitions))
    outcome = {tp: _election_check(topics, live, tp, body.election_type) for tp in asked}
    waiting = [tp for tp, (code, _) in outcome.items() if code is None]
    if waiting:
        await _elect_preferred(state, outcome, waiting, body.timeout_ms)
    return _election_response(outcome, waiting, "not elected within the request's timeout")


def _election_view(zk, names):
    """(the topics as ZooKeeper has them, the live broker ids): what the controller elects from. Not this
    broker's snapshot, which may lag (a broker back in an ISR a moment ago), as Kafka answers from its
    controller."""
    return topic_registry.get_topics(zk, names), set(broker_registry.live_brokers(zk))


def _election_check(topics, live, tp, election_type: int) -> tuple[int | None, str | None]:
    """(None, None) for a partition to elect, else its (error code, message) now."""
    found = topics.get(tp[0])
    replicas = found.partitions.get(tp[1]) if found is not None else None
    if replicas is None:
        return _not_found(tp[0]) if found is None else (UNKNOWN_TOPIC_OR_PARTITION, f"no partition {tp[1]}")
    state = found.states.get(tp[1])
    live_leader = state is not None and state.leader in live
    if election_type == ELECTION_UNCLEAN:
        if live_leader:
            return ELECTION_NOT_NEEDED, "the partition has a live leader"
        return ELIGIBLE_LEADERS_NOT_AVAILABLE, ("no live in-sync replica; the controller elects outside the ISR "
                                                "only for a topic that sets unclean.leader.election.enable")
    if election_type != ELECTION_PREFERRED:
        return INVALID_REQUEST, f"unknown election type {election_type}"
    preferred = replicas[0] if replicas else None
    if live_leader and state.leader == preferred:
        return ELECTION_NOT_NEEDED, None
    if preferred not in live or state is None or preferred not in state.isr:
        return PREFERRED_LEADER_NOT_AVAILABLE, f"preferred replica {preferred} is not alive or not in the ISR"
    return None, None


async def _elect_preferred(state, outcome: dict, waiting: list, timeout_ms: int) -> None:
    """Ask the controller, then follow ZooKeeper until each of `waiting` is settled (removed from it, its
    outcome set) or the timeout passes (those left in `waiting` timed out)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, timeout_ms) / 1000
    while True:
        try:
            await state.blocking(controller_requests.request_preferred_election, state.zk, list(waiting))
            break
        except controller_requests.ElectionPending:
            if loop.time() >= deadline:
                return
            await asyncio.sleep(ELECTION_PENDING_RETRY_S)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the request was not made
            log.warning("requesting a preferred leader election failed: %s", exc)
            return
    while waiting and loop.time() < deadline:
        await asyncio.sleep(ELECTION_POLL_S)
        try:
            topics, live = await state.blocking(_election_view, state.zk, sorted({t for t, _ in waiting}))
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: look again until the deadline
            log.warning("reading the partitions being elected failed: %s", exc)
            continue
        for tp in list(waiting):
            code, message = _election_check(topics, live, tp, ELECTION_PREFERRED)
            if code is not None:  # elected (the preferred replica leads: done) or no longer possible
                outcome[tp] = (NONE, None) if code == ELECTION_NOT_NEEDED else (code, message)
                waiting.remove(tp)


def _election_response(outcome: dict, timed_out, why: str) -> ElectLeadersResponse:
    by_topic: dict[str, list] = {}
    for (topic, partition), (code, message) in outcome.items():
        if (topic, partition) in timed_out:
            code, message = REQUEST_TIMED_OUT, why
        by_topic.setdefault(topic, []).append(ElectLeadersPartitionResult(partition_id=partition, error_code=code,
                                                                          error_message=message))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=NONE, replica_election_results=[
        ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()])


# ---------------------------------------------------------------------------------------------------------
# ListPartitionReassignments (Rule 8)


def handle_list_partition_reassignments(request, state):
    return _list_reassignments(request.body, state)


async def _list_reassignments(body, state) -> ListPartitionReassignmentsResponse:
    names = None if body.topics is None else sorted({t.name for t in body.topics})
    wanted = None if body.topics is None else {(t.name, p) for t in body.topics for p in t.partition_indexes}
    try:
        ongoing = await state.blocking(reassignment.ongoing_reassignments, state.zk, names)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away: never "nothing is moving"
        log.warning("reading the ongoing reassignments failed: %s", exc)
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=REQUEST_TIMED_OUT,
                                                  error_message=f"ZooKeeper: {exc}", topics=[])
    by_topic: dict[str, list] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        if wanted is None or (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append(OngoingPartitionReassignment(
                partition_index=partition, replicas=list(replicas), adding_replicas=list(adding),
                removing_replicas=list(removing)))
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=NONE, topics=[
        OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])


ADMIN_HANDLERS = {
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
