"""DescribeTopicPartitions (KIP-966, key 75) on a real broker in a subprocess with a real ZooKeeper: raw v0
requests page through a topic of 7 partitions and another of 3 with ResponsePartitionLimit 3 (the cursor, the
next cursor, the topic ids Metadata answers), and kafka-python's admin client (which sends it) pages through the
same; ApiVersions advertises v0."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.protocol import ApiKey
from sparklog.protocol.api_versions import ApiVersionsRequest
from sparklog.protocol.describe_topic_partitions import DescribeTopicPartitionsRequest, RequestCursor, TopicRequest
from support import wire
from support.cluster import started_cluster

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
SIZES = {"dtp-a": 7, "dtp-b": 3}


@pytest.fixture(scope="module")
def broker(request, zookeeper, tmp_path_factory):
    cluster = started_cluster(request, f"{zookeeper.connect_string}/dtp-{uuid.uuid4().hex}",
                              tmp_path_factory.mktemp("dtp"), 1, 6000, **{"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name, result in admin.create_topics([NewTopic(n, p, 1) for n, p in SIZES.items()]).items():
        result.result(TIMEOUT_S)
    return cluster.brokers[1]


def ask(broker, names, limit, cursor=None):
    host, port = broker.address.rsplit(":", 1)
    body = DescribeTopicPartitionsRequest(topics=[TopicRequest(name=n) for n in names], response_partition_limit=limit,
                                          cursor=None if cursor is None else RequestCursor(topic_name=cursor[0],
                                                                                           partition_index=cursor[1]))
    return wire.request(host, int(port), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)


def test_raw_v0_pages_through_every_partition_with_the_cursor(broker):
    names, seen, cursor, pages = sorted(SIZES), [], None, 0
    while True:
        answer = ask(broker, names + ["dtp-missing"], 3, cursor)
        pages += 1
        for topic in answer.topics:
            if topic.name == "dtp-missing":
                assert (topic.error_code, topic.partitions) == (3, [])  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            assert topic.error_code == 0 and topic.topic_id != uuid.UUID(int=0)
            seen += [(topic.name, p.partition_index, p.leader_id, p.isr_nodes) for p in topic.partitions]
        if answer.next_cursor is None:
            break
        cursor = (answer.next_cursor.topic_name, answer.next_cursor.partition_index)
    assert [(n, i) for n, i, _, _ in seen] == [(n, i) for n in names for i in range(SIZES[n])]
    assert all(leader == 1 and isr == [1] for _, _, leader, isr in seen)
    assert pages == 4  # 3 + 3 + (1 + 2) + 1 partitions


def test_api_versions_advertises_v0(broker):
    host, port = broker.address.rsplit(":", 1)
    answer = wire.request(host, int(port), ApiKey.API_VERSIONS, 3,
                          ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert [(k.min_version, k.max_version) for k in answer.api_keys if k.api_key == 75] == [(0, 0)]


def test_kafka_python_describe_topic_partitions_pages(broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        seen, cursor = [], None
        while True:
            page = admin.describe_topic_partitions(sorted(SIZES), response_partition_limit=4, cursor=cursor)
            seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    finally:
        admin.close()
    assert seen == [(n, i) for n in sorted(SIZES) for i in range(SIZES[n])]
