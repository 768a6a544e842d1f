"""Fetch v12-v16 and Produce v9-v11 against real brokers (two broker processes, a real ZooKeeper), the exact
bytes sent with support.wire: a Produce v11 read back by a Fetch v16 by topic id; a follower's answer names the
leader and its endpoint (KIP-951); a fetch by the old id of a deleted and re-created topic is told
UNKNOWN_TOPIC_ID while the new id is served; after a leader change a fetcher whose last fetched epoch ended
earlier on the new leader gets DivergingEpoch with that epoch's end offset (KIP-320)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.coordination import topic_ids
from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic, MetadataRequest, MetadataRequestTopic
from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch, iter_records
from support.cluster import started_cluster, wait_until
from support.wire import request

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID = 6, 100


@pytest.fixture(scope="module")
def two(request, zookeeper, tmp_path_factory):
    return started_cluster(request, f"{zookeeper.connect_string}/fetch-flexible-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("fetch-flexible"), 2, 6000, **{"log.flush.interval.ms": "20"})


def running(cluster):
    return [b for b in cluster.brokers.values() if b.running]


def partition_state(cluster, topic: str):
    """(topic id, leader id, leader epoch) of partition 0 as a running broker's Metadata v12 answers it."""
    b = running(cluster)[0]
    body = MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    answer = request(b.host, b.port, ApiKey.METADATA, 12, body).topics[0]
    part = answer.partitions[0] if answer.partitions else None
    return answer.topic_id, (-1 if part is None else part.leader_id), (-1 if part is None else part.leader_epoch)


def create(cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: partition_state(cluster, topic)[1] >= 0, f"{topic} has a leader", TIMEOUT_S)


def produce(broker, version: int, topic: str, values: list[bytes]):
    body = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, v, None, None) for v in values]))])])
    return request(broker.host, broker.port, ApiKey.PRODUCE, version, body, timeout=30).responses[0]


def fetch(broker, version: int, topic: str, topic_id, offset: int, last_fetched_epoch: int = -1):
    body = FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic=topic, topic_id=topic_id, partitions=[
        FetchPartition(partition=0, fetch_offset=offset, last_fetched_epoch=last_fetched_epoch,
                       partition_max_bytes=1 << 20)])])
    return request(broker.host, broker.port, ApiKey.FETCH, version, body, timeout=30)


def values(response, offset: int = 0) -> list[bytes]:
    """The values from `offset` on (a fetch answers whole batches: the consumer skips what precedes it)."""
    records = iter_records(bytes(response.responses[0].partitions[0].records or b""))
    return [r.value for r in records if r.offset >= offset]


def produced(broker, topic: str, values: list[bytes]):
    """A Produce v11 of `values`, tried until the leader has opened the partition (its snapshot may lag the one
    Metadata answered from)."""
    answers = []
    wait_until(lambda: answers.append(produce(broker, 11, topic, values).partition_responses[0])
               or answers[-1].error_code == 0, f"a produce to {topic} accepted", TIMEOUT_S)
    return answers[-1]


def test_produce_v11_fetch_v16_by_id_leader_hints_and_a_recreated_topic(two):
    create(two, "flex")
    topic_id, leader_id, epoch = partition_state(two, "flex")
    leader = two.brokers[leader_id]
    follower = next(b for b in running(two) if b.broker_id != leader_id)
    first = produced(leader, "flex", [b"a", b"b", b"c"])
    assert (first.error_code, first.base_offset) == (0, 0)
    assert values(fetch(leader, 16, "", topic_id, 0)) == [b"a", b"b", b"c"]
    assert values(fetch(leader, 12, "flex", topic_ids.ZERO, 1), 1) == [b"b", b"c"]

    told = fetch(follower, 16, "", topic_id, 0)
    part = told.responses[0].partitions[0]
    assert part.error_code == NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader_id, epoch)
    assert [(e.node_id, e.port) for e in told.node_endpoints] == [(leader_id, leader.port)]
    refused = produce(follower, 10, "flex", [b"x"])
    assert refused.partition_responses[0].current_leader.leader_id == leader_id

    admin = AdminClient({"bootstrap.servers": two.bootstrap})
    admin.delete_topics(["flex"])["flex"].result(timeout=TIMEOUT_S)
    wait_until(lambda: partition_state(two, "flex")[1] < 0, "flex deleted", TIMEOUT_S)
    create(two, "flex")
    new_id, new_leader_id, _ = partition_state(two, "flex")
    assert new_id != topic_id
    new_leader = two.brokers[new_leader_id]
    wait_until(lambda: fetch(new_leader, 16, "", new_id, 0).responses[0].partitions[0].error_code == 0,
               "the re-created topic served by its new id", TIMEOUT_S)
    old = fetch(new_leader, 16, "", topic_id, 0)
    assert [(t.topic_id, p.error_code) for t in old.responses for p in t.partitions] == [(topic_id, UNKNOWN_TOPIC_ID)]


def test_a_fetcher_behind_a_leader_change_gets_the_diverging_epoch(two):
    """Epoch E0 writes offsets 0-4 on the first leader; it stops; the other leads in E1 > E0 and writes 5-7. A
    fetcher at offset 7 that last fetched E0 (it had 5 and 6 from E0, which the new leader never got) is told
    E0 ends at 5; one at offset 5 in E0 is served the new leader's records."""
    create(two, "diverge")
    _, first_id, first_epoch = partition_state(two, "diverge")
    first = two.brokers[first_id]
    assert produced(first, "diverge", [b"%d" % i for i in range(5)]).base_offset == 0
    first.stop()
    try:
        wait_until(lambda: partition_state(two, "diverge")[1] not in (-1, first_id), "a new leader", TIMEOUT_S)
        _, second_id, second_epoch = partition_state(two, "diverge")
        assert second_epoch > first_epoch
        second = two.brokers[second_id]
        assert produced(second, "diverge", [b"5", b"6", b"7"]).base_offset == 5
        part = fetch(second, 12, "diverge", topic_ids.ZERO, 7, last_fetched_epoch=first_epoch).responses[0].partitions[0]
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (first_epoch, 5)
        assert not part.records
        in_step = fetch(second, 12, "diverge", topic_ids.ZERO, 5, last_fetched_epoch=first_epoch)
        assert in_step.responses[0].partitions[0].diverging_epoch is None
        assert values(in_step, 5) == [b"5", b"6", b"7"]
    finally:
        first.start()
