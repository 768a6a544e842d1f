"""The admin handlers (handlers/admin.py) over real partition logs and a real ZooKeeper, without sockets."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from sparklog.broker.handlers import admin as admin_handlers
from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination import topics as topic_registry
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import ApiKey, RequestHeader
from sparklog.protocol.consumer_offsets import FIXED_PARTITIONS
from sparklog.protocol.consumer_offsets import TOPIC as OFFSETS_TOPIC
from sparklog.protocol.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from sparklog.protocol.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from sparklog.protocol.create_topics import CreatableTopic, CreateTopicsRequest
from sparklog.protocol.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from sparklog.protocol.describe_cluster import DescribeClusterRequest
from sparklog.protocol.describe_log_dirs import DescribableLogDirTopic, DescribeLogDirsRequest
from sparklog.protocol.describe_producers import DescribeProducersRequest, DescribeProducersTopicRequest
from sparklog.protocol.elect_leaders import ElectLeadersRequest, ElectLeadersTopicPartitions
from sparklog.protocol.list_partition_reassignments import (ListPartitionReassignmentsRequest,
                                                            ListPartitionReassignmentsTopics)
from sparklog.protocol.describe_configs import (RESOURCE_BROKER, RESOURCE_TOPIC, SOURCE_DEFAULT,
                                               SOURCE_STATIC_BROKER, SOURCE_TOPIC, DescribeConfigsRequest,
                                               DescribeConfigsResource)
from sparklog.protocol.incremental_alter_configs import (OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT,
                                                         IncrementalAlterableConfig, IncrementalAlterConfigsRequest,
                                                         IncrementalAlterConfigsResource)
from sparklog.protocol.registry import Request
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

ME, OTHER = 1, 2


class Partitions:
    """The part of PartitionManager handlers use; note_topic records what the handler created."""

    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.noted = []

    def note_topic(self, assignment):
        self.noted.append(assignment)


@pytest.fixture
def logs(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.visibility": "appended"})
    yield manager
    manager.close()


@pytest.fixture
def state(logs, zk):
    config = BrokerConfig.from_properties({
        "broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "log.retention.ms": "3600000", "compression.type": "gzip"})
    topic_registry.create_topic(zk, "t", 2, 1, {"retention.ms": "1000"}, [ME])
    leading = {("t", 0): logs.get_or_create("t", 0)}
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,)),
                                   1: PartitionMeta(1, OTHER, 0, (OTHER,), (OTHER,))})}
    brokers = {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "127.0.0.1", 9093, "r2")}
    executor = concurrent.futures.ThreadPoolExecutor(2)
    yield handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=zk, logs=logs,
                                     partitions=Partitions(MetadataSnapshot(topics, brokers, leading)), executor=executor)
    executor.shutdown()


def call(handler, body, api_key, version, state):
    result = handler(Request(RequestHeader(api_key, version, 7, "test"), body), state)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def describe(state, name="t", keys=None, synonyms=True, version=4, resource_type=RESOURCE_TOPIC):
    body = DescribeConfigsRequest(resources=[DescribeConfigsResource(resource_type=resource_type,
                                                                     resource_name=name, configuration_keys=keys)],
                                  include_synonyms=synonyms, include_documentation=True)
    (result,) = call(admin_handlers.handle_describe_configs, body, ApiKey.DESCRIBE_CONFIGS, version, state).results
    return result


def incremental(state, *ops, name="t", validate_only=False, resource_type=RESOURCE_TOPIC):
    configs = [IncrementalAlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops]
    body = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=configs)], validate_only=validate_only)
    (result,) = call(admin_handlers.handle_incremental_alter_configs, body, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
                     state).responses
    return result


# -- DescribeConfigs -------------------------------------------------------------------------------------------


def test_describe_topic_reports_every_config_with_its_source_and_synonyms(state):
    result = describe(state)
    assert result.error_code == 0
    by_name = {c.name: c for c in result.configs}
    assert {"message.timestamp.type", "delete.retention.ms", "compression.type", "cleanup.policy"} <= set(by_name)
    retention = by_name["retention.ms"]
    assert (retention.value, retention.config_source) == ("1000", SOURCE_TOPIC)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", SOURCE_TOPIC), ("log.retention.ms", "3600000", SOURCE_STATIC_BROKER),
        ("log.retention.ms", "604800000", SOURCE_DEFAULT)]
    compression = by_name["compression.type"]
    assert (compression.value, compression.config_source) == ("gzip", SOURCE_STATIC_BROKER)
    policy = by_name["cleanup.policy"]
    assert (policy.value, policy.config_source, policy.config_type) == ("delete", SOURCE_DEFAULT, 7)
    assert by_name["unclean.leader.election.enable"].value == "false" and policy.documentation


def test_describe_v0_marks_defaults_and_filters_keys(state):
    result = describe(state, keys=["retention.ms", "segment.bytes", "no.such.key"], synonyms=False, version=0)
    assert [(c.name, c.is_default) for c in result.configs] == [("retention.ms", False), ("segment.bytes", True)]


def test_describe_unknown_topic_and_other_broker_are_per_resource_errors(state):
    assert describe(state, name="missing").error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(state, name="bad/name").error_code == handlers.INVALID_TOPIC_EXCEPTION
    assert describe(state, name=str(OTHER), resource_type=RESOURCE_BROKER).error_code == handlers.INVALID_REQUEST


def test_describe_answers_from_zookeeper_not_from_a_snapshot_that_lags_a_creation_or_a_deletion(state, zk):
    """A topic created through another broker a moment ago, which this broker's snapshot has not seen yet: its
    configs, as the creator would answer (it was UNKNOWN_TOPIC_OR_PARTITION); and one deleted meanwhile, still
    in the snapshot: UNKNOWN_TOPIC_OR_PARTITION (it was described with every config at its default)."""
    topic_registry.create_topic(zk, "fresh", 1, 1, {"retention.ms": "7"}, [ME])
    assert "fresh" not in state.partitions.snapshot.topics
    fresh = describe(state, name="fresh")
    assert fresh.error_code == 0
    assert {c.name: (c.value, c.config_source) for c in fresh.configs}["retention.ms"] == ("7", SOURCE_TOPIC)
    topic_registry.delete_topic(zk, "t")
    assert "t" in state.partitions.snapshot.topics
    assert describe(state, name="t").error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_broker_reports_server_properties_and_log_defaults(state):
    result = describe(state, name=str(ME), resource_type=RESOURCE_BROKER)
    by_name = {c.name: c for c in result.configs}
    assert (by_name["log.retention.ms"].value, by_name["log.retention.ms"].config_source) == (
        "3600000", SOURCE_STATIC_BROKER)
    assert (by_name["log.message.timestamp.type"].value, by_name["log.message.timestamp.type"].config_source) == (
        "CreateTime", SOURCE_DEFAULT)


# -- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------------------------------


def test_incremental_alter_sets_deletes_and_appends_in_zookeeper(state, zk):
    result = incremental(state, ("message.timestamp.type", OP_SET, "LogAppendTime"),
                         ("retention.ms", OP_DELETE, None), ("cleanup.policy", OP_APPEND, "compact"))
    assert (result.error_code, result.error_message) == (0, None)
    assert topic_registry.topic_config(zk, "t") == {"message.timestamp.type": "LogAppendTime",
                                                    "cleanup.policy": "delete,compact"}
    assert incremental(state, ("cleanup.policy", OP_SUBTRACT, "delete")).error_code == 0
    assert topic_registry.topic_config(zk, "t")["cleanup.policy"] == "compact"
    assert describe(state, keys=["cleanup.policy"]).configs[0].value == "compact"


@pytest.mark.parametrize("ops, message", [
    ([("no.such.config", OP_SET, "1")], "unknown topic config 'no.such.config'"),
    ([("retention.ms", OP_SET, "soon")], "retention.ms must be an integer"),
    ([("compression.type", OP_SET, "brotli")], "compression.type: must be one of"),
    ([("retention.ms", OP_APPEND, "5")], "retention.ms is not a list"),
    ([("remote.storage.enable", OP_SET, "true")], "tiered storage is not supported"),
])
def test_incremental_alter_refuses_bad_configs_naming_them_and_writes_nothing(state, zk, ops, message):
    result = incremental(state, ("segment.ms", OP_SET, "5"), *ops)
    assert result.error_code == handlers.INVALID_CONFIG and message in result.error_message
    assert topic_registry.topic_config(zk, "t") == {"retention.ms": "1000"}


def test_incremental_alter_validate_only_and_duplicates_write_nothing(state, zk):
    assert incremental(state, ("retention.ms", OP_SET, "5"), validate_only=True).error_code == 0
    dup = incremental(state, ("retention.ms", OP_SET, "5"), ("retention.ms", OP_DELETE, None))
    assert dup.error_code == handlers.INVALID_REQUEST
    assert incremental(state, ("retention.ms", OP_SET, "5"), name="missing").error_code == \
        handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert topic_registry.topic_config(zk, "t") == {"retention.ms": "1000"}


def test_alter_configs_replaces_every_override(state, zk):
    body = AlterConfigsRequest(resources=[AlterConfigsResource(resource_type=RESOURCE_TOPIC, resource_name="t",
                                                               configs=[AlterableConfig(name="segment.ms",
                                                                                        value="5000")])])
    (result,) = call(admin_handlers.handle_alter_configs, body, ApiKey.ALTER_CONFIGS, 1, state).responses
    assert result.error_code == 0
    assert topic_registry.topic_config(zk, "t") == {"segment.ms": "5000"}
    broker = AlterConfigsRequest(resources=[AlterConfigsResource(resource_type=RESOURCE_BROKER, resource_name="1",
                                                                 configs=[AlterableConfig(name="num.partitions",
                                                                                          value="3")])])
    (refused,) = call(admin_handlers.handle_alter_configs, broker, ApiKey.ALTER_CONFIGS, 0, state).responses
    assert refused.error_code == handlers.INVALID_REQUEST and "dynamically: num.partitions" in refused.error_message


# -- CreatePartitions ------------------------------------------------------------------------------------------


def test_create_partitions_grows_the_topic_in_zookeeper(state, zk):
    body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="t", count=4, assignments=None)])
    (result,) = call(admin_handlers.handle_create_partitions, body, ApiKey.CREATE_PARTITIONS, 3, state).results
    assert (result.error_code, result.error_message) == (0, None)
    assert sorted(topic_registry.get_topic(zk, "t").partitions) == [0, 1, 2, 3]
    assert sorted(state.partitions.noted[0].partitions) == [0, 1, 2, 3]


@pytest.mark.parametrize("topic, code", [
    (CreatePartitionsTopic(name="t", count=2, assignments=None), handlers.INVALID_PARTITIONS),
    (CreatePartitionsTopic(name="t", count=3, assignments=[]), handlers.INVALID_REPLICA_ASSIGNMENT),
    (CreatePartitionsTopic(name="nope", count=3, assignments=None), handlers.UNKNOWN_TOPIC_OR_PARTITION),
])
def test_create_partitions_refusals_change_nothing(state, zk, topic, code):
    body = CreatePartitionsRequest(topics=[topic])
    (result,) = call(admin_handlers.handle_create_partitions, body, ApiKey.CREATE_PARTITIONS, 0, state).results
    assert result.error_code == code and result.error_message
    assert sorted(topic_registry.get_topic(zk, "t").partitions) == [0, 1]


def test_create_partitions_keeps_the_offsets_topics_count(state, zk, logs):
    """offsets_topic.py Rule 2: Kafka's TopicCommand refusal, before any ZooKeeper write."""
    topic_registry.create_topic(zk, OFFSETS_TOPIC, 1, 1, {"cleanup.policy": "compact"}, [ME])
    state.partitions.snapshot.topics[OFFSETS_TOPIC] = TopicMeta(OFFSETS_TOPIC, {0: PartitionMeta(0, ME, 0, (ME,), (ME,))})
    body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=OFFSETS_TOPIC, count=3, assignments=None)])
    (result,) = call(admin_handlers.handle_create_partitions, body, ApiKey.CREATE_PARTITIONS, 3, state).results
    assert (result.error_code, result.error_message) == (handlers.INVALID_REQUEST, FIXED_PARTITIONS)
    assert sorted(topic_registry.get_topic(zk, OFFSETS_TOPIC).partitions) == [0]


def create_topics(state, *topics, validate_only=False):
    body = CreateTopicsRequest(topics=[CreatableTopic(name=name, num_partitions=count, replication_factor=1,
                                                      assignments=[], configs=[]) for name, count in topics],
                               timeout_ms=5000, validate_only=validate_only)
    return [(t.name, t.error_code, t.error_message)
            for t in call(handlers.handle_create_topics, body, ApiKey.CREATE_TOPICS, 4, state).topics]


def test_create_topics_of_the_offsets_topic_is_refused_and_writes_nothing(state, zk):
    """A client's CreateTopics must not give __consumer_offsets a shape the group coordinator does not map
    groups onto (its partition is the group's hash modulo offsets.topic.num.partitions): one partition made
    most groups' coordinator unfindable. The brokers create it on demand (offsets_topic.py Rule 1)."""
    for validate_only in (True, False):
        ((name, code, message),) = create_topics(state, (OFFSETS_TOPIC, 1), validate_only=validate_only)
        assert code == handlers.INVALID_REQUEST and "offsets.topic.num.partitions" in message
    assert OFFSETS_TOPIC not in topic_registry.list_topics(zk)


def test_create_topics_refuses_a_name_that_collides_with_an_existing_one_through_dot_and_underscore(state, zk):
    """Kafka's rule: '.' and '_' map to the same metric name, so `a.b` and `a_b` cannot both exist."""
    assert create_topics(state, ("metrics.in", 1)) == [("metrics.in", handlers.NONE, None)]
    ((_, code, message),) = create_topics(state, ("metrics_in", 1))
    assert code == handlers.INVALID_TOPIC_EXCEPTION and "collides with existing topic 'metrics.in'" in message
    assert "metrics_in" not in topic_registry.list_topics(zk)
    assert create_topics(state, ("metrics.in", 1))[0][1] == handlers.TOPIC_ALREADY_EXISTS  # itself: not a collision


# -- DeleteRecords ---------------------------------------------------------------------------------------------


def delete_records(state, *parts):
    body = DeleteRecordsRequest(topics=[DeleteRecordsTopic(name="t", partitions=[
        DeleteRecordsPartition(partition_index=p, offset=o) for p, o in parts])])
    (topic,) = call(admin_handlers.handle_delete_records, body, ApiKey.DELETE_RECORDS, 2, state).topics
    return [(p.partition_index, p.error_code, p.low_watermark) for p in topic.partitions]


def test_delete_records_of_the_offsets_topic_is_invalid_topic_and_moves_nothing(state, logs):
    plog = logs.get_or_create(OFFSETS_TOPIC, 0)
    plog.append(build_batch([(b"k%d" % i, b"v", None, None) for i in range(3)]))
    state.partitions.snapshot.leading[(OFFSETS_TOPIC, 0)] = plog
    body = DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=OFFSETS_TOPIC, partitions=[
        DeleteRecordsPartition(partition_index=0, offset=2)])])
    (topic,) = call(admin_handlers.handle_delete_records, body, ApiKey.DELETE_RECORDS, 2, state).topics
    assert [(p.error_code, p.low_watermark) for p in topic.partitions] == [(handlers.INVALID_TOPIC_EXCEPTION, -1)]
    assert plog.log_start_offset == 0


def test_delete_records_moves_the_log_start(state, logs):
    plog = logs.get("t", 0)
    plog.append(build_batch([(None, b"v%d" % i, None, None) for i in range(5)]))
    assert delete_records(state, (0, 2)) == [(0, 0, 2)]
    assert plog.log_start_offset == 2
    assert delete_records(state, (0, -1)) == [(0, 0, 5)]  # -1: up to the high watermark
    assert delete_records(state, (0, 6), (1, 0), (9, 0)) == [
        (0, handlers.OFFSET_OUT_OF_RANGE, -1), (1, handlers.NOT_LEADER_OR_FOLLOWER, -1),
        (9, handlers.UNKNOWN_TOPIC_OR_PARTITION, -1)]


# -- DescribeLogDirs and DescribeProducers (Rule 6) -----------------------------------------------------------


def test_describe_log_dirs_lists_this_broker_s_partitions_with_their_size(state, logs, tmp_path):
    plog = logs.get("t", 0)
    plog.append(build_batch([(None, b"v%d" % i, None, None) for i in range(5)]))
    logs.get_or_create("u", 3)
    response = call(admin_handlers.handle_describe_log_dirs, DescribeLogDirsRequest(topics=None),
                    ApiKey.DESCRIBE_LOG_DIRS, 4, state)
    (result,) = response.results
    assert (response.error_code, result.error_code, result.log_dir) == (0, 0, str(tmp_path / "logs"))
    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
             for t in result.topics for p in t.partitions}
    assert sizes == {("t", 0): (plog.size_bytes, 0, False), ("u", 3): (0, 0, False)} and plog.size_bytes > 0
    asked = DescribeLogDirsRequest(topics=[DescribableLogDirTopic(topic="u", partitions=[3, 4]),
                                           DescribableLogDirTopic(topic="nosuch", partitions=[0])])
    (result,) = call(admin_handlers.handle_describe_log_dirs, asked, ApiKey.DESCRIBE_LOG_DIRS, 1, state).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [("u", [3])]


def test_describe_producers_lists_the_leader_s_idempotent_producers(state, logs):
    plog = logs.get("t", 0)
    plog.append(build_batch([(None, b"plain", None, 1)]))
    plog.append(build_batch([(None, b"a", None, 1000), (None, b"b", None, 2000)], producer_id=7, producer_epoch=2,
                            base_sequence=0))
    plog.append(build_batch([(None, b"c", None, 3000)], producer_id=7, producer_epoch=2, base_sequence=2))
    plog.append(build_batch([(None, b"d", None, 500)], producer_id=9, producer_epoch=0, base_sequence=0))
    body = DescribeProducersRequest(topics=[DescribeProducersTopicRequest(name="t", partition_indexes=[0, 1, 5]),
                                            DescribeProducersTopicRequest(name="nosuch", partition_indexes=[0])])
    t, nosuch = call(admin_handlers.handle_describe_producers, body, ApiKey.DESCRIBE_PRODUCERS, 0, state).topics
    led, follower, missing = t.partitions
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
             p.current_txn_start_offset) for p in led.active_producers] == [(7, 2, 2, 3000, -1, -1),
                                                                           (9, 0, 0, 500, -1, -1)]
    assert (follower.error_code, follower.active_producers) == (handlers.NOT_LEADER_OR_FOLLOWER, [])
    assert missing.error_code == nosuch.partitions[0].error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_producers_gives_the_first_offset_of_an_open_transaction(state, logs):
    plog = logs.get("t", 0)
    plog.append(build_batch([(None, b"a", None, 1000)]))
    plog.append(build_batch([(None, b"t", None, 2000)], producer_id=7, producer_epoch=0, base_sequence=0,
                            is_transactional=True))
    body = DescribeProducersRequest(topics=[DescribeProducersTopicRequest(name="t", partition_indexes=[0])])
    (t,) = call(admin_handlers.handle_describe_producers, body, ApiKey.DESCRIBE_PRODUCERS, 0, state).topics
    assert [(p.producer_id, p.current_txn_start_offset) for p in t.partitions[0].active_producers] == [(7, 1)]
    plog.append_control_batch(7, 0, True, 1, 0)
    (t,) = call(admin_handlers.handle_describe_producers, body, ApiKey.DESCRIBE_PRODUCERS, 0, state).topics
    assert [(p.producer_id, p.current_txn_start_offset) for p in t.partitions[0].active_producers] == [(7, -1)]


# -- ElectLeaders (Rule 7) --------------------------------------------------------------------------------------


def elect(state, asked, election_type=0, timeout_ms=5000, version=2):
    """{(topic, partition): (error code, message)} of an ElectLeaders request (asked: {topic: [partitions]})."""
    body = ElectLeadersRequest(election_type=election_type, timeout_ms=timeout_ms, topic_partitions=None if asked is None
                               else [ElectLeadersTopicPartitions(topic=t, partitions=ps) for t, ps in asked.items()])
    response = call(admin_handlers.handle_elect_leaders, body, ApiKey.ELECT_LEADERS, version, state)
    assert response.error_code == 0
    return {(r.topic, p.partition_id): (p.error_code, p.error_message) for r in response.replica_election_results
            for p in r.partition_result}


@pytest.fixture
def electable(zk):
    """Topic "el" in ZooKeeper, brokers ME and OTHER registered live: partition 0 led by its preferred replica,
    1 with the preferred replica out of the ISR, 2 led by the other in-sync replica."""
    import json

    for broker_id, port in ((ME, 9092), (OTHER, 9093)):
        zk.create(f"/brokers/ids/{broker_id}", json.dumps({"version": 4, "host": "127.0.0.1", "port": port,
                                                            "endpoints": [f"PLAINTEXT://127.0.0.1:{port}"]}).encode(),
                  ephemeral=True, makepath=True)
    topic_registry.create_topic(zk, "el", 3, 2, live_broker_ids=[ME, OTHER],
                                assignment={0: (ME, OTHER), 1: (ME, OTHER), 2: (ME, OTHER)})
    lead(zk, 1, OTHER, (OTHER,))
    lead(zk, 2, OTHER, (ME, OTHER))
    return zk


def lead(zk, partition: int, leader: int, isr: tuple) -> None:
    """Write partition `partition` of "el" led by `leader`, as the controller would."""
    old = topic_registry.partition_state(zk, "el", partition)
    topic_registry.set_partition_state(zk, "el", partition, topic_registry.PartitionState(
        leader, isr, old.leader_epoch + 1, old.controller_epoch), old.zk_version)


def test_elect_leaders_checks_each_partition_before_asking_the_controller(state, electable):
    """From ZooKeeper, not this broker's snapshot (which does not even have "el")."""
    codes = {tp: code for tp, (code, _) in elect(state, {"el": [0, 1, 7], "nosuch": [0]}).items()}
    assert codes == {("el", 0): admin_handlers.ELECTION_NOT_NEEDED,
                     ("el", 1): admin_handlers.PREFERRED_LEADER_NOT_AVAILABLE,
                     ("el", 7): handlers.UNKNOWN_TOPIC_OR_PARTITION, ("nosuch", 0): handlers.UNKNOWN_TOPIC_OR_PARTITION}
    assert elect(state, {"el": [2]}, election_type=1)[("el", 2)][0] == admin_handlers.ELECTION_NOT_NEEDED
    assert electable.exists("/admin/preferred_replica_election") is None  # nothing to elect: no request made


def test_elect_leaders_asks_the_controller_and_answers_once_zookeeper_shows_the_preferred_leader(state, electable):
    """The controller's part (reading the request, electing) is played here by a thread that waits for the
    request, deletes it and writes the new leader, as the controller does."""
    import threading

    from sparklog.coordination.controller_requests import parse_preferred_election

    zk, seen = electable, []

    def controller():
        deadline = time.monotonic() + 10
        while zk.exists("/admin/preferred_replica_election") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(zk.get("/admin/preferred_replica_election")[0])
        zk.delete("/admin/preferred_replica_election")
        lead(zk, 2, ME, (ME, OTHER))

    thread = threading.Thread(target=controller)
    thread.start()
    try:
        every = elect(state, None)  # null: every partition of every topic
    finally:
        thread.join()
    assert parse_preferred_election(seen[0]) == {("el", 2)}  # only what needed an election
    assert {tp: code for tp, (code, _) in every.items() if tp[0] == "el"} == {
        ("el", 0): admin_handlers.ELECTION_NOT_NEEDED, ("el", 1): admin_handlers.PREFERRED_LEADER_NOT_AVAILABLE,
        ("el", 2): 0}
    lead(zk, 2, OTHER, (ME, OTHER))  # and this time nobody elects
    started = time.monotonic()
    assert elect(state, {"el": [2]}, timeout_ms=300)[("el", 2)][0] == handlers.REQUEST_TIMED_OUT
    assert time.monotonic() - started >= 0.3


# -- ListPartitionReassignments (Rule 8) ------------------------------------------------------------------------


def test_list_partition_reassignments_lists_the_partitions_a_reassignment_is_moving(state, zk):
    """Partition 1 of "t" moving from [1] to [2] (the controller's STARTED step written in its topic znode, as
    coordination/reassignment.py writes it); partition 0 is not moving and is left out."""
    import json

    from sparklog.coordination import reassignment

    value, version = reassignment.read_topic_znode(zk, "t")
    moved = reassignment.with_step(value, 1, reassignment.Step((OTHER, ME), (OTHER,), (ME,)))
    zk.set("/brokers/topics/t", json.dumps(moved).encode(), version=version)

    def listed(topics):
        body = ListPartitionReassignmentsRequest(topics=topics)
        response = call(admin_handlers.handle_list_partition_reassignments, body,
                        ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, state)
        assert response.error_code == 0
        return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
                for t in response.topics for p in t.partitions}

    assert listed(None) == {("t", 1): ([OTHER, ME], [OTHER], [ME])}
    assert listed([ListPartitionReassignmentsTopics(name="t", partition_indexes=[0, 1])]) == listed(None)
    assert listed([ListPartitionReassignmentsTopics(name="t", partition_indexes=[0]),
                   ListPartitionReassignmentsTopics(name="nosuch", partition_indexes=[0])]) == {}


# -- DescribeCluster ---------------------------------------------------------------------------------------------


def test_describe_cluster_lists_live_brokers(state):
    response = call(admin_handlers.handle_describe_cluster, DescribeClusterRequest(), ApiKey.DESCRIBE_CLUSTER, 0,
                    state)
    assert (response.error_code, response.cluster_id, response.controller_id) == (0, "c" * 22, ME)
    assert [(b.broker_id, b.port, b.rack) for b in response.brokers] == [(ME, 9092, None), (OTHER, 9093, "r2")]
    controllers = call(admin_handlers.handle_describe_cluster, DescribeClusterRequest(endpoint_type=2),
                       ApiKey.DESCRIBE_CLUSTER, 1, state)
    assert controllers.error_code == admin_handlers.MISMATCHED_ENDPOINT_TYPE and not controllers.brokers


# -- Produce under the new topic configs -------------------------------------------------------------------------


def test_produce_outside_the_timestamp_bounds_is_invalid_timestamp(state, logs):
    from sparklog.protocol import PartitionProduceData, ProduceRequest, TopicProduceData

    plog = logs.get("t", 0)
    plog.reconfigure(plog.config.with_overrides({"message.timestamp.after.max.ms": 1000}))
    body = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, b"x", None, 2**60)]))])])
    response = handlers.handle_produce(Request(RequestHeader(0, 8, 7, "test"), body), state)
    (part,) = response.responses[0].partition_responses
    assert part.error_code == handlers.INVALID_TIMESTAMP and "after.max.ms=1000" in part.error_message
    assert plog.log_end_offset == 0


def test_produce_to_a_log_append_time_topic_reports_the_stamped_time(state, logs):
    import time

    from sparklog.protocol import PartitionProduceData, ProduceRequest, TopicProduceData
    from sparklog.records.batch import iter_batches

    plog = logs.get("t", 0)
    plog.reconfigure(plog.config.with_overrides({"message.timestamp.type": "LogAppendTime"}))
    body = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, b"x", None, 5)]))])])
    before = time.time_ns() // 1_000_000
    response = handlers.handle_produce(Request(RequestHeader(0, 8, 7, "test"), body), state)
    (part,) = response.responses[0].partition_responses
    assert part.error_code == 0 and before <= part.log_append_time_ms <= time.time_ns() // 1_000_000
    (stored,) = iter_batches(b"".join(s.read_bytes() for s in plog.iter_slices()))
    assert stored.max_timestamp == part.log_append_time_ms


@pytest.mark.parametrize("limits, count, code, message", [
    (dict(max_partitions_per_topic=3), 4, handlers.INVALID_PARTITIONS, "max.partitions.per.topic=3"),
    (dict(max_partitions_per_request=1), 4, admin_handlers.partition_limits.POLICY_VIOLATION,
     "max.partitions.per.request=1"),
    (dict(max_broker_partitions=0), 3, admin_handlers.partition_limits.POLICY_VIOLATION, "max.broker.partitions=0"),
])
def test_create_partitions_obeys_the_partition_limits_before_writing(state, zk, limits, count, code, message):
    import dataclasses

    state.config = dataclasses.replace(state.config, **limits)
    body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="t", count=count, assignments=None)])
    (result,) = call(admin_handlers.handle_create_partitions, body, ApiKey.CREATE_PARTITIONS, 3, state).results
    assert result.error_code == code and message in result.error_message
    assert sorted(topic_registry.get_topic(zk, "t").partitions) == [0, 1]
