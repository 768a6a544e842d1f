"""DeleteTopics v6 (KIP-516) on a real broker: a topic deleted by its id, an id no topic has (never created, or a
deleted topic's after the name was re-created) refused with UNKNOWN_TOPIC_ID without touching the topic of that
name, a name and an id at once refused with Kafka's INVALID_REQUEST, and a deletion by name answered with the id."""

from __future__ import annotations

import uuid

import pytest

from sparklog.coordination import topic_ids
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.delete_topics import DeleteTopicsRequest, DeleteTopicState
from sparklog.protocol.metadata import MetadataRequest, MetadataRequestTopic

TIMEOUT_S = 30.0
UNKNOWN_TOPIC_ID, INVALID_REQUEST = 100, 42

SESSION_TIMEOUT_MS = 18000  # Kafka's default


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import started_cluster

    return started_cluster(request, f"{zookeeper.connect_string}/delid-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("delid"), 1, SESSION_TIMEOUT_MS, **{"auto.create.topics.enable": "false"})


def call(cluster, api_key, version, body):
    from support.wire import request

    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return request(host, int(port), api_key, version, body, timeout=TIMEOUT_S)


def created(cluster, name: str) -> uuid.UUID:
    """Create `name` and return its id once the broker's metadata names it with one."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from support.cluster import wait_until

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)
    return wait_until(lambda: topic_id(cluster, name), f"topic {name} with an id in the metadata", TIMEOUT_S)


def topic_id(cluster, name: str) -> uuid.UUID | None:
    body = MetadataRequest(topics=[MetadataRequestTopic(name=name, topic_id=topic_ids.ZERO)],
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    (topic,) = call(cluster, ApiKey.METADATA, 12, body).topics
    return topic.topic_id if topic.error_code == 0 and topic.topic_id != topic_ids.ZERO else None


def delete(cluster, *topics: tuple[str | None, uuid.UUID]) -> list[tuple]:
    body = DeleteTopicsRequest(timeout_ms=10_000, topics=[DeleteTopicState(name=n, topic_id=i) for n, i in topics])
    return [(r.name, r.topic_id, r.error_code) for r in call(cluster, ApiKey.DELETE_TOPICS, 6, body).responses]


def gone(cluster, name: str) -> None:
    from support.cluster import wait_until

    wait_until(lambda: topic_id(cluster, name) is None, f"topic {name} gone from the metadata", TIMEOUT_S)


def test_delete_by_id_and_an_old_id_after_a_re_creation_is_unknown(cluster):
    name = f"byid-{uuid.uuid4().hex[:8]}"
    first = created(cluster, name)
    assert delete(cluster, (None, first)) == [(name, first, 0)]
    gone(cluster, name)
    assert delete(cluster, (None, first)) == [(None, first, UNKNOWN_TOPIC_ID)]
    second = created(cluster, name)
    assert second != first
    assert delete(cluster, (None, first)) == [(None, first, UNKNOWN_TOPIC_ID)]
    assert topic_id(cluster, name) == second  # the re-created topic is untouched
    assert delete(cluster, (name, topic_ids.ZERO)) == [(name, second, 0)]  # by name: answered with its id
    gone(cluster, name)


def test_a_name_and_an_id_at_once_is_refused_and_deletes_nothing(cluster):
    name = f"both-{uuid.uuid4().hex[:8]}"
    its_id = created(cluster, name)
    body = DeleteTopicsRequest(timeout_ms=10_000, topics=[DeleteTopicState(name=name, topic_id=its_id)])
    (result,) = call(cluster, ApiKey.DELETE_TOPICS, 6, body).responses
    assert (result.error_code, result.error_message) == (INVALID_REQUEST,
                                                         "You may not specify both topic name and topic id.")
    assert topic_id(cluster, name) == its_id


def test_kafka_python_deletes_a_topic_by_its_uuid(cluster):
    """kafka-python's admin client deletes by a uuid.UUID through DeleteTopics v6 (the version it takes now)."""
    from kafka.admin import KafkaAdminClient

    name = f"kp-{uuid.uuid4().hex[:8]}"
    its_id = created(cluster, name)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.delete_topics([its_id], timeout_ms=10_000)
    finally:
        admin.close()
    gone(cluster, name)
