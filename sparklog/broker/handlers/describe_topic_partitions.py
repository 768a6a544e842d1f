"""DescribeTopicPartitions (KIP-966): topics and their partitions from the ZooKeeper-fed snapshot, a page at a time.

Rule 1 (which topics): the request's topics, each once, in name order; none named: every topic the snapshot
knows, in name order. A named topic the broker does not know is answered UNKNOWN_TOPIC_OR_PARTITION (an illegal
name: INVALID_TOPIC_EXCEPTION) with no partitions, and counts nothing against the limit.
Rule 2 (the cursor): with a cursor, the topics named before its topic_name are left out and its topic starts at
its partition_index. A cursor naming a topic the request does not name is answered INVALID_REQUEST for every
topic named, with no partitions and no next cursor (Kafka: "the cursor topic must be included in the topic
list").
Rule 3 (the limit): a page holds at most min(response_partition_limit, max.request.partition.size.limit)
partitions. A topic the limit cuts ends the page, whose next_cursor names that topic and its first partition
left out; when the limit is used up before a topic, next_cursor names that topic and the partition it would have
started at (after the last page of a topic: the next topic, partition 0). A page that holds everything left
answers next_cursor null. The client asks again with next_cursor until it is null (Kafka's paging).
Rule 4 (a partition): as Metadata answers it (handlers/metadata.py): leader and leader epoch while the leader is
live, else LEADER_NOT_AVAILABLE with leader -1; its replicas, the live members of its ISR, its offline replicas;
empty eligible-leader-replica lists (ZooKeeper mode keeps no ELR). The topic id and is_internal as Metadata v10+.
"""

from __future__ import annotations

from sparklog.broker.coordinator.group import offsets_topic
from sparklog.broker.handlers.error_codes import (INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, NONE,
                                                  UNKNOWN_TOPIC_OR_PARTITION)
from sparklog.broker.handlers.metadata import _partition_metadata, wire_topic_id
from sparklog.protocol.describe_topic_partitions import (DescribeTopicPartitionsResponse, ResponseCursor,
                                                         ResponsePartition, ResponseTopic)
from sparklog.storage.topic_names import validate_topic


def handle_describe_topic_partitions(request, state) -> DescribeTopicPartitionsResponse:
    body = request.body
    snapshot = state.partitions.snapshot
    named = sorted({topic.name for topic in body.topics})
    cursor = body.cursor
    if cursor is not None and named and cursor.topic_name not in named:  # Rule 2
        return DescribeTopicPartitionsResponse(throttle_time_ms=0, next_cursor=None, topics=[
            ResponseTopic(error_code=INVALID_REQUEST, name=name, partitions=[]) for name in named])
    names = named or sorted(snapshot.topics)
    if cursor is not None:
        names = [name for name in names if name >= cursor.topic_name]
    limit = min(body.response_partition_limit, state.config.max_request_partition_size_limit)
    return _page(snapshot, names, cursor, limit)


def _page(snapshot, names: list[str], cursor, limit: int) -> DescribeTopicPartitionsResponse:
    """Rules 1 and 3: the topics of `names` from the cursor on, up to `limit` partitions."""
    topics, next_cursor, live = [], None, snapshot.brokers
    for name in names:
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        meta = snapshot.topics.get(name)
        if meta is None:
            topics.append(ResponseTopic(error_code=_unknown(name), name=name, is_internal=offsets_topic.is_internal(name),
                                        partitions=[]))
            continue
        indexes = [index for index in sorted(meta.partitions) if index >= start]
        if limit <= 0 and indexes:
            next_cursor = ResponseCursor(topic_name=name, partition_index=indexes[0])
            break
        taken = indexes[:limit]
        limit -= len(taken)
        topics.append(ResponseTopic(error_code=NONE, name=name, topic_id=wire_topic_id(meta.topic_id),
                                    is_internal=offsets_topic.is_internal(name),
                                    partitions=[_partition(meta.partitions[index], live) for index in taken]))
        if len(taken) < len(indexes):
            next_cursor = ResponseCursor(topic_name=name, partition_index=indexes[len(taken)])
            break
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def _unknown(name: str) -> int:
    try:
        validate_topic(name)
    except ValueError:
        return INVALID_TOPIC_EXCEPTION
    return UNKNOWN_TOPIC_OR_PARTITION


def _partition(p, live) -> ResponsePartition:
    """Rule 4: Metadata's answer for the partition (its one authority), without ELR."""
    m = _partition_metadata(p, live)
    return ResponsePartition(error_code=m.error_code, partition_index=m.partition_index, leader_id=m.leader_id,
                             leader_epoch=m.leader_epoch, replica_nodes=m.replica_nodes, isr_nodes=m.isr_nodes,
                             eligible_leader_replicas=[], last_known_elr=[], offline_replicas=m.offline_replicas)
