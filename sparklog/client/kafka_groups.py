"""Broker-coordinated (Kafka) consumer groups seen by an admin, over the Kafka protocol only: ListGroups at
every broker; DescribeGroups, OffsetFetch, OffsetCommit and DeleteGroups at the group's coordinator (found
with FindCoordinator), OffsetDelete there too; ListOffsets at each partition's leader for the log end. What `sparklog groups` and
Kafka's `kafka-consumer-groups.sh` show. Where the coordinator keeps the offsets (ZooKeeper, or the
`__consumer_offsets` topic) is the broker's business: nothing here reads them anywhere else.

Rule 1: "could not reach it" is an exception, never an empty answer: a broker that does not answer ListGroups
raises, so `sparklog groups list` cannot claim that a group does not exist.
Rule 2: a coordinator that answers NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS
(it moved, or is loading its offsets partition) is found again and asked again, with the client's backoff,
until the request timeout; every other error is raised as its Kafka error class.
Rule 3: offsets are committed member-less (generation -1, member id "", Kafka's admin commit), which the
coordinator accepts only while the group has no members; `commit_offsets` is for an inactive group.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.client.admin import AdminClient
from sparklog.client.backoff import Retry
from sparklog.client.errors import COORDINATOR_MOVED_ERRORS
from sparklog.client.metadata import METADATA_VERSION
from sparklog.protocol import (ApiKey, MetadataRequest, OffsetCommitRequest, OffsetCommitRequestPartition,
                               OffsetCommitRequestTopic, OffsetFetchRequest, for_code)
from sparklog.protocol.consumer_group import ConsumerGroupDescribeRequest
from sparklog.protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE, MalformedConsumerProtocol, assigned_partitions
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, FindCoordinatorRequest
from sparklog.protocol.group_admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from sparklog.protocol.offset_delete import (OffsetDeleteRequest, OffsetDeleteRequestPartition,
                                             OffsetDeleteRequestTopic)

FIND_COORDINATOR_VERSION = 2
LIST_GROUPS_VERSION = 2
DESCRIBE_GROUPS_VERSION = 4
CONSUMER_GROUP_DESCRIBE_VERSION = 0
GROUP_ID_NOT_FOUND = 69  # DescribeGroups' answer for a consumer-protocol group (KIP-848): ask ConsumerGroupDescribe
CLASSIC, CONSUMER = "classic", "consumer"  # a Kafka group's protocol: JoinGroup's, or KIP-848's heartbeat
DELETE_GROUPS_VERSION = 1
OFFSET_DELETE_VERSION = 0
OFFSET_FETCH_VERSION = 5
OFFSET_COMMIT_VERSION = 7
NO_GENERATION = -1  # a member-less (admin) commit, Rule 3
NO_OFFSET = -1  # OffsetFetch's "never committed"
DEAD = "Dead"  # DescribeGroups' state of a group the coordinator does not have
EMPTY = "Empty"
COORDINATOR_MOVED = COORDINATOR_MOVED_ERRORS  # Rule 2

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class GroupMember:
    """A member of either kind of group (a ZooKeeper group's consumers have no instance, client id or host)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class KafkaGroup:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]
    coordinator: int = -1
    group_type: str = CLASSIC


class CoordinatorMoved(Exception):
    """Rule 2: ask again at the coordinator found anew."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class KafkaGroupAdmin(AdminClient):
    """See the module docstring."""

    def brokers(self) -> dict[int, tuple[str, int]]:
        response = self._call(ApiKey.METADATA, METADATA_VERSION, MetadataRequest(topics=[]))
        nodes = {b.node_id: (b.host, b.port) for b in response.brokers}
        self._client.set_nodes(nodes)
        return nodes

    def list_groups(self) -> dict[str, str]:
        """{group: protocol type} over every live broker (Rule 1)."""
        found = {}
        for node, (host, port) in sorted(self.brokers().items()):
            try:
                response = self._client.submit(node, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                               ListGroupsRequest()).wait(self.timeout)
            except (ConnectionError, TimeoutError) as exc:
                raise TimeoutError(f"broker {node} at {host}:{port} did not answer ListGroups: {exc}") from None
            if response.error_code:
                raise for_code(response.error_code)(f"ListGroups at broker {node}")
            found.update({g.group_id: g.protocol_type for g in response.groups})
        return found

    def coordinator(self, group: str) -> int:
        self.brokers()
        response = self._call(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                              FindCoordinatorRequest(key=group, key_type=KEY_TYPE_GROUP))
        if response.error_code in COORDINATOR_MOVED:
            raise CoordinatorMoved(response.error_code)
        if response.error_code:
            raise for_code(response.error_code)(f"coordinator of group {group!r}: {response.error_message or ''}")
        return response.node_id

    def _at_coordinator(self, group: str, api_key: int, version: int, request, answer):
        """`answer(response, node)` at the group's coordinator, found again while it moves (Rule 2)."""
        retry = Retry(self._backoff, self.timeout)
        while True:
            try:
                node = self.coordinator(group)
                response = self._client.submit(node, api_key, version, request).wait(max(0.01, retry.remaining()))
                return answer(response, node)
            except CoordinatorMoved as moved:
                if retry.expired():
                    raise for_code(moved.code)(f"coordinator of group {group!r}") from None
            except ConnectionError:
                if retry.expired():
                    raise
            retry.sleep()

    def describe_group(self, group: str) -> KafkaGroup | None:
        """The group as its coordinator sees it; None when the coordinator has no such group."""
        def answer(response, node):
            found = response.groups[0]
            if found.error_code == GROUP_ID_NOT_FOUND:
                return self._describe_consumer_group(group)
            _check(found.error_code, f"DescribeGroups {group!r}")
            if found.group_state == DEAD:
                return None
            members = tuple(GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                        _assignment(found.protocol_type, m.member_assignment))
                            for m in found.members)
            return KafkaGroup(group, found.group_state, found.protocol_type, found.protocol_data, members, node)

        return self._at_coordinator(group, ApiKey.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION,
                                    DescribeGroupsRequest(groups=[group]), answer)

    def _describe_consumer_group(self, group: str) -> KafkaGroup | None:
        """A KIP-848 group: its assignor as the protocol, members with their current assignments."""
        def answer(response, node):
            found = response.groups[0]
            if found.error_code == GROUP_ID_NOT_FOUND:
                return None
            _check(found.error_code, f"ConsumerGroupDescribe {group!r}")
            members = tuple(GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, tuple(
                (t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
                for m in found.members)
            return KafkaGroup(group, found.group_state, CONSUMER_PROTOCOL_TYPE, found.assignor_name, members, node,
                              CONSUMER)

        return self._at_coordinator(group, ApiKey.CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_DESCRIBE_VERSION,
                                    ConsumerGroupDescribeRequest(group_ids=[group]), answer)

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """{(topic, partition): committed offset} of every partition the group committed (OffsetFetch, all)."""
        def answer(response, node):
            _check(response.error_code, f"OffsetFetch {group!r}")
            found = {}
            for topic in response.topics:
                for part in topic.partitions:
                    _check(part.error_code, f"OffsetFetch {group!r} {topic.name}-{part.partition_index}")
                    if part.committed_offset != NO_OFFSET:
                        found[(topic.name, part.partition_index)] = part.committed_offset
            return found

        return self._at_coordinator(group, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION,
                                    OffsetFetchRequest(group_id=group, topics=None), answer)

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """Rule 3: a member-less commit of `offsets`; the first refused partition raises its Kafka error."""
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=NO_GENERATION, member_id="",
                                      topics=[OffsetCommitRequestTopic(name=t, partitions=p)
                                              for t, p in topics.items()])

        def answer(response, node):
            for topic in response.topics:
                for part in topic.partitions:
                    _check(part.error_code, f"OffsetCommit {group!r} {topic.name}-{part.partition_index}")

        self._at_coordinator(group, ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, request, answer)

    def log_ends(self, partitions, at_time: int | None = None) -> dict[TopicPartition, tuple]:
        """{(topic, partition): (log start, log end)} asked of each leader, and with `at_time` the offset of
        the first record at or after it (-1: none); partitions whose leader does not answer (or that do not
        exist) are left out, and the caller shows them as unknown."""
        found = {}
        for topic in sorted({t for t, _ in partitions}):
            leaders = self.describe([topic]).get(topic, {})
            wanted = {p: leaders[p] for t, p in partitions if t == topic and p in leaders}
            found.update({(topic, p): ends for p, ends in self.log_offsets(topic, wanted, at_time).items()})
        return found

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        leaders = self.describe([topic]).get(topic)
        if not leaders:
            raise for_code(3)(f"topic {topic!r}")  # UNKNOWN_TOPIC_OR_PARTITION
        return [(topic, p) for p in sorted(leaders)]

    def delete_offsets(self, group: str, partitions) -> dict[TopicPartition, int]:
        """OffsetDelete of the group's committed offsets of `partitions`: {(topic, partition): Kafka error code}
        (0: deleted). The group's own refusal (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) raises its error."""
        topics: dict[str, list] = {}
        for topic, partition in sorted(set(partitions)):
            topics.setdefault(topic, []).append(OffsetDeleteRequestPartition(partition_index=partition))
        request = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequestTopic(name=t, partitions=p)
                                                              for t, p in topics.items()])

        def answer(response, node):
            _check(response.error_code, f"OffsetDelete {group!r}")
            return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

        return self._at_coordinator(group, ApiKey.OFFSET_DELETE, OFFSET_DELETE_VERSION, request, answer)

    def delete_group(self, group: str) -> None:
        def answer(response, node):
            _check(response.results[0].error_code, f"group {group!r}")

        self._at_coordinator(group, ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION,
                             DeleteGroupsRequest(groups_names=[group]), answer)


def _check(code: int, what: str) -> None:
    if code in COORDINATOR_MOVED:
        raise CoordinatorMoved(code)
    if code:
        raise for_code(code)(what)


def _assignment(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    """A consumer-protocol member's partitions; another protocol's assignment is opaque to us."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return ()
    try:
        return assigned_partitions(data)
    except MalformedConsumerProtocol:
        return ()

