"""Fetch v12-v16 and Produce v9-v11 through the dispatcher (real partition logs, a hand-made snapshot as in
test_fetch_fast_path.py): topics by id resolved per fetch (fetch_topic_ids.py), a re-created topic is another
topic to a fetch or a session by the old id, sessions keyed by id, the diverging epoch (fetch_divergence.py),
the leader hints (leader_hints.py), the v15 replica_state, a fetch by id behind the authorizer."""

from __future__ import annotations

import dataclasses
import tempfile
import uuid

import pytest

from sparklog.broker.authorization import Authorization
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.replication.partitions import MetadataSnapshot
from sparklog.coordination import topic_ids
from sparklog.coordination.acl import (AccessControlEntry, AclSnapshot, Authorizer, Operation, Permission,
                                       ResourcePattern, ResourceType)
from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
from sparklog.protocol.fetch import ForgottenTopic, ReplicaState
from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch

from unit.broker.handlers.test_fetch_fast_path import BATCHES, filled, materialised
from unit.broker.test_authorization import StaticAcls
from unit.broker.handlers.test_produce_fast_path import ME, OTHER, T_ID, identified_session

NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID = 6, 100
T = topic_ids.to_uuid(T_ID)
LEO = BATCHES * 3  # t-0's log end: BATCHES batches of 3 records


@pytest.fixture
def broker():
    with tempfile.TemporaryDirectory() as log_dir:
        dispatcher = filled(log_dir)
        try:
            yield dispatcher, identified_session(dispatcher)
        finally:
            dispatcher.state.logs.close()


def ask(broker, api_key: int, version: int, body):
    dispatcher, session = broker
    reply = dispatcher.handle_frame(memoryview(encode_request(api_key, version, 5, "c", body))[4:], session)
    return decode_response(api_key, version, materialised(reply)[4:])[1]


def fetch(topic_id=T, partitions=(0,), offset=0,  # t-0's offset; t-1 is empty (offset 0)
           session=(0, -1), last_fetched_epoch=-1, forgotten=(), **settings):
    return FetchRequest(max_wait_ms=0, min_bytes=1, session_id=session[0], session_epoch=session[1], **settings,
                        topics=[FetchTopic(topic="t", topic_id=topic_id, partitions=[FetchPartition(
                            partition=p, fetch_offset=offset if p == 0 else 0, last_fetched_epoch=last_fetched_epoch,
                            partition_max_bytes=1 << 20) for p in partitions])] if partitions else [],
                        forgotten_topics_data=[ForgottenTopic(topic="t", topic_id=topic_id, partitions=list(forgotten))]
                        if forgotten else [])


def answers(response) -> dict:
    """{(topic id, partition): (error, records length)}"""
    return {(t.topic_id, p.partition_index): (p.error_code, len(p.records or b"")) for t in response.responses
            for p in t.partitions}


def recreate(broker) -> uuid.UUID:
    """t deleted and created again: the same name and partitions, a new id (the logs are the test's)."""
    dispatcher, _ = broker
    old = dispatcher.state.partitions.snapshot
    new_id = topic_ids.new_topic_id()
    topics = {**old.topics, "t": dataclasses.replace(old.topics["t"], topic_id=new_id)}
    dispatcher.state.partitions.snapshot = MetadataSnapshot(topics, old.brokers, old.leading, old.following)
    return topic_ids.to_uuid(new_id)


@pytest.mark.parametrize("version", [13, 14, 15, 16])
def test_a_topic_is_fetched_by_its_id_and_an_unknown_id_is_told(broker, version):
    served = ask(broker, ApiKey.FETCH, version, fetch())
    assert [t.topic_id for t in served.responses] == [T]
    assert answers(served)[(T, 0)][0] == 0 and answers(served)[(T, 0)][1] > 0
    stranger = uuid.uuid4()
    assert answers(ask(broker, ApiKey.FETCH, version, fetch(topic_id=stranger))) == {(stranger, 0): (UNKNOWN_TOPIC_ID, 0)}
    assert answers(ask(broker, ApiKey.FETCH, version, fetch(topic_id=topic_ids.ZERO)))[(topic_ids.ZERO, 0)][0] == (
        UNKNOWN_TOPIC_ID)


def test_v12_still_names_topics(broker):
    assert answers(ask(broker, ApiKey.FETCH, 12, fetch(topic_id=topic_ids.ZERO)))[(topic_ids.ZERO, 0)][0] == 0


def test_a_fetch_by_the_old_id_of_a_recreated_topic_is_told_and_the_new_id_is_served(broker):
    recreated = recreate(broker)
    assert answers(ask(broker, ApiKey.FETCH, 16, fetch())) == {(T, 0): (UNKNOWN_TOPIC_ID, 0)}
    fresh = answers(ask(broker, ApiKey.FETCH, 16, fetch(topic_id=recreated)))
    assert fresh[(recreated, 0)][0] == 0 and fresh[(recreated, 0)][1] > 0


def test_a_session_of_the_old_id_is_told_when_the_topic_is_recreated(broker):
    """The session holds t by id (Kafka's sessions do): its next incremental fetch, which names nothing, reads
    the old id's partitions and answers them UNKNOWN_TOPIC_ID, never the new topic's records."""
    first = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(0, 1), offset=LEO, session=(0, 0)))
    assert first.session_id != 0 and first.error_code == 0
    quiet = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(), session=(first.session_id, 1)))
    assert quiet.error_code == 0 and answers(quiet) == {}  # nothing new on either partition
    recreate(broker)
    told = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(), session=(first.session_id, 2)))
    assert answers(told) == {(T, 0): (UNKNOWN_TOPIC_ID, 0), (T, 1): (UNKNOWN_TOPIC_ID, 0)}
    forgotten = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(), session=(first.session_id, 3), forgotten=(1,)))
    assert answers(forgotten) == {(T, 0): (UNKNOWN_TOPIC_ID, 0)}  # forgotten by id


def test_a_session_by_id_holds_each_partition_once(broker):
    dispatcher, _ = broker
    first = ask(broker, ApiKey.FETCH, 13, fetch(partitions=(0, 1), offset=LEO, session=(0, 0)))
    ask(broker, ApiKey.FETCH, 13, fetch(partitions=(1,), offset=0, session=(first.session_id, 1)))
    held = dispatcher.state.fetch_sessions.sessions[first.session_id]
    assert set(held.answered) == {(T, 0), (T, 1)}


def diverged(response):
    part = response.responses[0].partitions[0]
    epoch = part.diverging_epoch
    return None if epoch is None else (epoch.epoch, epoch.end_offset, len(part.records or b""))


def test_a_last_fetched_epoch_the_leader_no_longer_has_gets_the_diverging_epoch(broker):
    """Epoch 0 wrote offsets 0-44 here and epoch 3 the rest: a fetcher that last fetched epoch 1 or 2 (written
    elsewhere, lost here) is told epoch 0 ends at 45; one past 45 in epoch 0 likewise; one in step is served."""
    dispatcher, _ = broker
    epochs = dispatcher.state.partitions.snapshot.leading[("t", 0)].leader_epochs
    epochs.assign(0, 0)
    epochs.assign(3, 45)
    for version in (12, 16):
        topic_id = T if version >= 13 else topic_ids.ZERO
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=60, last_fetched_epoch=1))) == (
            0, 45, 0)
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=51, last_fetched_epoch=0))) == (
            0, 45, 0)
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=45, last_fetched_epoch=0))) is None
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=60, last_fetched_epoch=3))) is None
        # above every epoch here: Kafka's undefined answer, (-1, -1), is its EpochEndOffset's default, which
        # Kafka's FetchResponseData writer leaves off the wire (a tagged field is sent only when not its default)
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=60, last_fetched_epoch=7))) is None
        assert diverged(ask(broker, ApiKey.FETCH, version, fetch(topic_id, offset=60))) is None  # -1: not checked


def test_a_diverging_epoch_is_answered_in_a_session_even_when_nothing_else_moved(broker):
    dispatcher, _ = broker
    epochs = dispatcher.state.partitions.snapshot.leading[("t", 0)].leader_epochs
    epochs.assign(0, 0)
    epochs.assign(3, 45)
    first = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(0, 1), offset=LEO, session=(0, 0), last_fetched_epoch=3))
    assert first.session_id != 0
    moved = ask(broker, ApiKey.FETCH, 16, fetch(offset=LEO, session=(first.session_id, 1), last_fetched_epoch=1))
    assert diverged(moved) == (0, 45, 0)


def test_not_leader_names_the_current_leader_and_its_endpoint(broker):
    fenced = ask(broker, ApiKey.FETCH, 16, fetch(partitions=(2,)))
    part = fenced.responses[0].partitions[0]
    assert part.error_code == NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (OTHER, 0)
    assert [(e.node_id, e.host, e.port) for e in fenced.node_endpoints] == [(OTHER, "127.0.0.1", 9093)]
    v12 = ask(broker, ApiKey.FETCH, 12, fetch(topic_id=topic_ids.ZERO, partitions=(2,)))
    assert v12.responses[0].partitions[0].current_leader.leader_id == OTHER and v12.node_endpoints == []
    v11 = ask(broker, ApiKey.FETCH, 11, fetch(topic_id=topic_ids.ZERO, partitions=(2,)))
    assert v11.responses[0].partitions[0].current_leader is None  # not in v11: never sent


@pytest.mark.parametrize("version", [9, 10, 11])
def test_a_produce_to_a_partition_led_elsewhere_names_its_leader_from_v10(broker, version):
    body = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=2, records=build_batch([(None, b"v", None, None)])),
        PartitionProduceData(index=0, records=build_batch([(None, b"v", None, None)]))])])
    response = ask(broker, ApiKey.PRODUCE, version, body)
    elsewhere, here = response.responses[0].partition_responses
    assert (elsewhere.error_code, here.error_code, here.base_offset) == (NOT_LEADER_OR_FOLLOWER, 0, LEO)
    assert here.current_leader is None
    if version >= 10:
        assert (elsewhere.current_leader.leader_id, elsewhere.current_leader.leader_epoch) == (OTHER, 0)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(OTHER, 9093)]
    else:
        assert elsewhere.current_leader is None and response.node_endpoints == []


def test_a_v15_follower_is_named_by_its_replica_state(broker):
    """r-0 is replicated to OTHER: a follower reads past the high watermark, a consumer up to it."""
    dispatcher, _ = broker
    r_id = topic_ids.new_topic_id()
    old = dispatcher.state.partitions.snapshot
    topics = {**old.topics, "r": dataclasses.replace(old.topics["r"], topic_id=r_id)}
    dispatcher.state.partitions.snapshot = MetadataSnapshot(topics, old.brokers, old.leading, old.following)
    dispatcher.state.partitions.snapshot.leading[("r", 0)].append(build_batch([(None, b"v", None, None)]))

    def read(replica_state):
        body = fetch(topic_id=topic_ids.to_uuid(r_id), replica_state=replica_state)
        return answers(ask(broker, ApiKey.FETCH, 15, body))[(topic_ids.to_uuid(r_id), 0)]
    assert read(None) == (0, 0)
    error, size = read(ReplicaState(replica_id=OTHER, replica_epoch=-1))
    assert error == 0 and size > 0
    assert ME != OTHER


def test_behind_an_authorizer_a_fetch_by_id_is_checked_by_the_topics_name(broker):
    """ACLs name topics: a v16 fetch of t by id passes an ACL on "t"; an unknown id, which no ACL can name, is
    refused, and answered under its id."""
    dispatcher, _ = broker
    state = dispatcher.state
    anyone = AccessControlEntry("User:ANONYMOUS", "*", Operation.ALL, Permission.ALLOW)
    state.authorization = Authorization(StaticAcls(AclSnapshot({ResourcePattern(ResourceType.TOPIC, "t"): {anyone}})),
                                        Authorizer())
    guarded = (Dispatcher(state), dispatcher.new_session())
    served = answers(ask(guarded, ApiKey.FETCH, 16, fetch()))
    assert served[(T, 0)][0] == 0 and served[(T, 0)][1] > 0
    stranger = uuid.uuid4()
    assert answers(ask(guarded, ApiKey.FETCH, 16, fetch(topic_id=stranger))) == {(stranger, 0): (29, 0)}
