"""The broker's authorizer (broker/authorization.py over acl_table.TABLE): every API the dispatcher serves is in
the table, each is refused without its ACL and served with it, and the Produce/Fetch fast paths are covered.

A hand-made metadata snapshot and real logs in a temp dir, as in test_produce_fast_path.py; the ACLs are a
fixed snapshot (the ZooKeeper cache is tested in tests/unit/coordination/test_acl_store.py)."""

from __future__ import annotations

import logging

import pytest

from sparklog.broker import handlers
from sparklog.broker.acl_table import TABLE
from sparklog.broker.authorization import DENIAL_LOG_PER_S, Authorization
from sparklog.broker.config import BrokerConfig
from sparklog.broker.network.dispatch import HANDLERS, Dispatcher
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.acl import (CLUSTER_NAME, AccessControlEntry, AclSnapshot, Authorizer, Operation,
                                       Permission, ResourcePattern, ResourceType)
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import ApiKey, ApiVersionsRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.registry import ALL_VERSIONS, REQUESTS, decode_response, encode_request
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

from support.acl_requests import AUTHORIZATION_CODES as AUTH_CODES
from support.acl_requests import codes, filled
from unit.broker.handlers.test_handlers import FakePartitions

ME = 1
ANONYMOUS = "User:ANONYMOUS"
METADATA_V = ALL_VERSIONS[ApiKey.METADATA][1]


class StaticAcls:
    def __init__(self, snapshot=None):
        self.snapshot = snapshot or AclSnapshot()


def allow_all(principal=ANONYMOUS, operation=Operation.ALL, permission=Permission.ALLOW):
    entry = AccessControlEntry(principal, "*", operation, permission)
    return AclSnapshot({ResourcePattern(t, CLUSTER_NAME if t is ResourceType.CLUSTER else "*"): {entry}
                        for t in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                  ResourceType.TRANSACTIONAL_ID)})


@pytest.fixture
def dispatcher(tmp_path):
    logs = LogManager([str(tmp_path)], {"flush.visibility": "appended"})
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": str(tmp_path),
                                           "zookeeper.connect": "unused:1", "auto.create.topics.enable": "false",
                                           "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    leading = {("t", 0): logs.get_or_create("t", 0)}
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,))}),
              "secret": TopicMeta("secret", {0: PartitionMeta(0, 2, 0, (2,), (2,))})}
    state = handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs, partitions=FakePartitions(
        MetadataSnapshot(topics, {ME: BrokerInfo(ME, "127.0.0.1", 9092)}, leading)))
    state.authorization = Authorization(StaticAcls(), Authorizer())
    yield Dispatcher(state)
    logs.close()


def call(dispatcher, api_key, version, body=None, session=None):
    body = body if body is not None else filled(REQUESTS[api_key], version)
    frame = encode_request(api_key, version, 7, "c", body)
    reply = dispatcher.handle_frame(memoryview(frame)[4:], session)
    if reply.__class__.__name__ == "Parked":
        reply = reply.reply if hasattr(reply, "reply") else reply
    if hasattr(reply, "__await__"):
        import asyncio
        reply = asyncio.run(reply)
    raw = b"".join(c.read_bytes() if hasattr(c, "read_bytes") else bytes(c) for c in reply)
    return decode_response(api_key, version, memoryview(raw)[4:])[1]


# APIs answered by leaving things out rather than by an error code (authorization.py Rule 2 and 3)
FILTERING = {ApiKey.API_VERSIONS, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_CLUSTER, ApiKey.LIST_TRANSACTIONS,
             ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}  # the SASL APIs authenticate: no principal to check yet


def test_every_api_served_is_in_the_table():
    assert set(HANDLERS) <= set(TABLE)


@pytest.mark.parametrize("api_key", sorted(set(HANDLERS) - FILTERING))
def test_every_api_is_refused_without_its_acl(dispatcher, api_key):
    version = 3 if api_key == ApiKey.ADD_PARTITIONS_TO_TXN else ALL_VERSIONS[api_key][1]
    response = call(dispatcher, api_key, version)
    assert codes(response) & AUTH_CODES, f"{ApiKey(api_key).name}: {response}"


# WriteTxnMarkers needs the brokers' transaction state; CreateAcls and DeleteAcls write to ZooKeeper (both are
# served with their ACL in tests/integration/test_acls.py)
@pytest.mark.parametrize("api_key", sorted(set(HANDLERS) - FILTERING - {ApiKey.WRITE_TXN_MARKERS, ApiKey.CREATE_ACLS,
                                                                          ApiKey.DELETE_ACLS}))
def test_every_api_passes_the_authorizer_with_its_acl(dispatcher, api_key):
    dispatcher.state.authorization.cache.snapshot = allow_all()
    version = 3 if api_key == ApiKey.ADD_PARTITIONS_TO_TXN else ALL_VERSIONS[api_key][1]
    response = call(dispatcher, api_key, version)
    assert not codes(response) & AUTH_CODES, f"{ApiKey(api_key).name}: {response}"


def test_deny_beats_allow_all(dispatcher):
    deny = AccessControlEntry(ANONYMOUS, "*", Operation.WRITE, Permission.DENY)
    dispatcher.state.authorization.cache.snapshot = allow_all().with_entries(
        ResourcePattern(ResourceType.TOPIC, "t"), [deny])
    response = call(dispatcher, ApiKey.PRODUCE, 8)
    assert codes(response) == {29}


def identified(dispatcher):
    session = dispatcher.new_session()
    dispatcher.handle_frame(memoryview(encode_request(ApiKey.API_VERSIONS, 3, 0, "c", ApiVersionsRequest(
        client_software_name="test", client_software_version="1")))[4:], session)
    return session


def test_the_fast_paths_are_checked(dispatcher):
    """A one-partition Produce and Fetch from an identified session (dispatch Rules 4 and 6) are refused."""
    session = identified(dispatcher)
    body = ProduceRequest(acks=1, timeout_ms=0, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, b"v", None, None)]))])])
    assert codes(call(dispatcher, ApiKey.PRODUCE, 8, body, session)) == {29}
    assert dispatcher.state.partitions.snapshot.leading[("t", 0)].log_end_offset == 0
    fetch = filled(REQUESTS[ApiKey.FETCH], 11)
    fetch.topics[0].partitions[0].partition = 0
    assert codes(call(dispatcher, ApiKey.FETCH, 11, fetch, session)) == {0, 29}  # the top level's 0, the partition's 29
    dispatcher.state.authorization.cache.snapshot = allow_all()
    assert codes(call(dispatcher, ApiKey.PRODUCE, 8, body, session)) == {0}
    assert dispatcher.state.partitions.snapshot.leading[("t", 0)].log_end_offset == 1


def test_a_fetch_refused_per_partition_answers_kafkas_error_partition_with_empty_records(dispatcher):
    """The denied partition of a Fetch is answered as Kafka answers an error partition: no high watermark (-1)
    and empty records, not null records, which librdkafka cannot parse ("invalid MessageSetSize -1": its
    0119_consumer_auth saw no TOPIC_AUTHORIZATION_FAILED at all)."""
    fetch = filled(REQUESTS[ApiKey.FETCH], 11)
    fetch.topics[0].topic, fetch.topics[0].partitions[0].partition = "t", 0
    answer = call(dispatcher, ApiKey.FETCH, 11, fetch, identified(dispatcher))
    part = answer.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (29, -1, -1, -1)
    assert (part.preferred_read_replica, bytes(part.records)) == (-1, b"")


def test_metadata_hides_what_may_not_be_described(dispatcher):
    read_t = AccessControlEntry(ANONYMOUS, "*", Operation.READ, Permission.ALLOW)
    dispatcher.state.authorization.cache.snapshot = AclSnapshot({ResourcePattern(ResourceType.TOPIC, "t"): {read_t}})
    everything = REQUESTS[ApiKey.METADATA](topics=None, include_topic_authorized_operations=True)
    response = call(dispatcher, ApiKey.METADATA, METADATA_V, everything)
    assert [t.name for t in response.topics] == ["t"]
    assert response.topics[0].topic_authorized_operations == (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    named = filled(REQUESTS[ApiKey.METADATA], METADATA_V)
    named.topics = [type(named.topics[0])(name="secret"), type(named.topics[0])(name="t")]
    response = call(dispatcher, ApiKey.METADATA, METADATA_V, named)
    assert {(t.name, t.error_code) for t in response.topics} == {("t", 0), ("secret", 29)}


def test_describe_topic_partitions_of_every_topic_pages_only_what_may_be_described(dispatcher):
    """KIP-966's all-topics mode (no topic named) lists and pages only the topics the principal may DESCRIBE, as
    Kafka's handler filters before it pages: a denied topic is neither answered nor named by a cursor."""
    from sparklog.protocol.describe_topic_partitions import DescribeTopicPartitionsRequest, RequestCursor as Cursor

    read_t = AccessControlEntry(ANONYMOUS, "*", Operation.READ, Permission.ALLOW)
    dispatcher.state.authorization.cache.snapshot = AclSnapshot({ResourcePattern(ResourceType.TOPIC, "t"): {read_t}})

    def listed(cursor=None, limit=2000):
        body = DescribeTopicPartitionsRequest(topics=[], response_partition_limit=limit, cursor=cursor)
        response = call(dispatcher, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)
        cursor = response.next_cursor
        return [t.name for t in response.topics], None if cursor is None else (cursor.topic_name,
                                                                              cursor.partition_index)

    assert listed() == (["t"], None)
    assert listed(limit=1) == (["t"], None)  # "secret" sorts before "t": not a page of its own
    assert listed(Cursor(topic_name="secret", partition_index=0)) == (["t"], None)  # a cursor cannot reveal it
    dispatcher.state.authorization.cache.snapshot = AclSnapshot()
    assert listed() == ([], None)


def with_topic_ids(dispatcher) -> dict[str, str]:
    """Give every topic of the dispatcher's metadata an id; {name: id}."""
    import dataclasses

    from sparklog.coordination import topic_ids

    snapshot = dispatcher.state.partitions.snapshot
    ids = {name: topic_ids.new_topic_id() for name in snapshot.topics}
    dispatcher.state.partitions.snapshot = dataclasses.replace(snapshot, topics={
        name: dataclasses.replace(meta, topic_id=ids[name]) for name, meta in snapshot.topics.items()})
    return ids


def test_metadata_by_id_is_checked_under_the_topics_name_and_a_denied_one_is_not_named(dispatcher):
    """KIP-516: a topic asked by id (v12) needs DESCRIBE on the topic it names; denied, the answer keeps its
    name null (the id alone does not reveal it); an unknown id is UNKNOWN_TOPIC_ID."""
    import uuid

    from sparklog.coordination import topic_ids

    ids = with_topic_ids(dispatcher)
    read_t = AccessControlEntry(ANONYMOUS, "*", Operation.READ, Permission.ALLOW)
    dispatcher.state.authorization.cache.snapshot = AclSnapshot({ResourcePattern(ResourceType.TOPIC, "t"): {read_t}})
    unknown = uuid.uuid4()
    asked = REQUESTS[ApiKey.METADATA](topics=[
        type(filled(REQUESTS[ApiKey.METADATA], 12).topics[0])(name=None, topic_id=topic_ids.to_uuid(ids[name]))
        for name in ("secret", "t")])
    asked.topics.append(type(asked.topics[0])(name=None, topic_id=unknown))
    response = call(dispatcher, ApiKey.METADATA, 12, asked)
    assert {(t.name, topic_ids.to_string(t.topic_id), t.error_code) for t in response.topics} == {
        ("t", ids["t"], 0), (None, ids["secret"], 29), (None, topic_ids.to_string(unknown), 100)}


def test_denials_are_logged_at_a_bounded_rate(dispatcher, caplog):
    with caplog.at_level(logging.WARNING, logger="sparklog.broker.authorization"):
        for _ in range(3 * DENIAL_LOG_PER_S):
            call(dispatcher, ApiKey.HEARTBEAT, ALL_VERSIONS[ApiKey.HEARTBEAT][1])
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= len(lines) <= 2 * DENIAL_LOG_PER_S
    assert "Principal = User:ANONYMOUS is Denied Operation = READ from host =  on resource = GROUP:t" in lines[0]


def test_an_unknown_authorizer_is_refused_in_one_line():
    from sparklog.broker.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "z:1",
                                      "authorizer.class.name": "org.example.OpaAuthorizer"})
    assert "\n" not in str(refused.value) and "org.example.OpaAuthorizer" in str(refused.value)
    for name in ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer", ""):
        assert BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "z:1",
                                             "authorizer.class.name": name}).authorizer_class_name == name


def test_acl_apis_answer_security_disabled_without_an_authorizer(dispatcher):
    dispatcher.state.authorization = None
    plain = Dispatcher(dispatcher.state)
    for api_key in (ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS):
        assert codes(call(plain, api_key, 1)) == {54}


def test_delete_topics_v6_by_id_is_checked_under_the_topics_name_and_a_denied_one_is_not_named(dispatcher):
    """KIP-516: DeleteTopics v6 names topics by id too; the id is checked as the DELETE of the topic it names
    (denied: answered without the name), an unknown id is left to the handler (UNKNOWN_TOPIC_ID)."""
    import uuid

    from sparklog.coordination import topic_ids

    ids = with_topic_ids(dispatcher)
    delete_t = AccessControlEntry(ANONYMOUS, "*", Operation.DELETE, Permission.ALLOW)
    dispatcher.state.authorization.cache.snapshot = AclSnapshot({ResourcePattern(ResourceType.TOPIC, "t"): {delete_t}})
    state_cls = type(filled(REQUESTS[ApiKey.DELETE_TOPICS], 6).topics[0])
    unknown = uuid.uuid4()
    asked = REQUESTS[ApiKey.DELETE_TOPICS](timeout_ms=100, topics=[
        *(state_cls(name=None, topic_id=topic_ids.to_uuid(ids[name])) for name in ("secret", "t")),
        state_cls(name=None, topic_id=unknown)])
    response = call(dispatcher, ApiKey.DELETE_TOPICS, 6, asked)
    found = {topic_ids.to_string(t.topic_id): (t.name, t.error_code) for t in response.responses}
    assert found[ids["secret"]] == (None, 29) and found[topic_ids.to_string(unknown)] == (None, 100)
    assert found[ids["t"]][0] == "t" and found[ids["t"]][1] != 29  # allowed: the handler's answer, by name


def test_batched_find_coordinator_and_offset_fetch_are_checked_key_by_key_and_group_by_group(dispatcher):
    """FindCoordinator v4's keys and OffsetFetch v8's groups (and each group's topics) are checked one by one, as
    Kafka does: a denied key or group is answered GROUP_AUTHORIZATION_FAILED in its own entry, a denied topic
    TOPIC_AUTHORIZATION_FAILED per partition, beside the allowed ones' answers."""
    from sparklog.protocol.find_coordinator import FindCoordinatorRequest
    from sparklog.protocol.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
    from unit.broker.coordinator.group.test_group_handlers import MemoryOffsets, group_on

    shut, opened = group_on(ME, "shut"), group_on(ME, "open")
    describe = AccessControlEntry(ANONYMOUS, "*", Operation.DESCRIBE, Permission.ALLOW)
    dispatcher.state.authorization.cache.snapshot = AclSnapshot({ResourcePattern(ResourceType.GROUP, opened): {describe},
                                                                 ResourcePattern(ResourceType.TOPIC, "t"): {describe}})
    found = call(dispatcher, ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(coordinator_keys=[shut, opened]))
    assert sorted((c.key, c.error_code == 30) for c in found.coordinators) == [(opened, False), (shut, True)]
    dispatcher.state.offsets = MemoryOffsets()  # places both groups here
    topics = [OffsetFetchRequestTopics(name=n, partition_indexes=[0, 1]) for n in ("t", "secret")]
    fetched = call(dispatcher, ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=[
        OffsetFetchRequestGroup(group_id=shut, topics=None), OffsetFetchRequestGroup(group_id=opened, topics=topics)]))
    answers = {g.group_id: g for g in fetched.groups}
    assert (answers[shut].error_code, answers[shut].topics) == (30, [])
    assert answers[opened].error_code == 0
    assert sorted((t.name, p.partition_index, p.committed_offset, p.error_code) for t in answers[opened].topics
                  for p in t.partitions) == [("secret", 0, -1, 29), ("secret", 1, -1, 29), ("t", 0, -1, 0), ("t", 1, -1, 0)]
