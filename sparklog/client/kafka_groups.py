"""Broker-coordinated (Kafka) consumer groups seen from the command line: ListGroups at every broker,
DescribeGroups and DeleteGroups at the group's coordinator (found with FindCoordinator).

Rule: "could not reach it" is an exception, never an empty answer: a broker that does not answer ListGroups
raises, so `sparklog groups list` cannot claim that a group does not exist.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sparklog.client.admin import AdminClient
from sparklog.client.metadata import METADATA_VERSION
from sparklog.protocol import ApiKey, MetadataRequest, for_code
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, FindCoordinatorRequest
from sparklog.protocol.group_admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest

FIND_COORDINATOR_VERSION = 2
LIST_GROUPS_VERSION = 2
DESCRIBE_GROUPS_VERSION = 4
DELETE_GROUPS_VERSION = 1
DEAD = "Dead"  # DescribeGroups' state of a group the coordinator does not have


@dataclass(frozen=True)
class KafkaMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class KafkaGroup:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[KafkaMember, ...]


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The consumer protocol's Assignment (any version: v0's fields lead): (topic, partition) pairs."""
    if not data:
        return ()
    pos = 2  # int16 version
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    pairs = []
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2:pos + 2 + length].decode("utf-8")
        pos += 2 + length
        (count,) = struct.unpack_from(">i", data, pos)
        partitions = struct.unpack_from(f">{count}i", data, pos + 4)
        pos += 4 + 4 * count
        pairs.extend((topic, p) for p in partitions)
    return tuple(sorted(pairs))


class KafkaGroupAdmin(AdminClient):
    """See the module docstring."""

    def brokers(self) -> list[int]:
        response = self._call(ApiKey.METADATA, METADATA_VERSION, MetadataRequest(topics=[]))
        self._client.set_nodes({b.node_id: (b.host, b.port) for b in response.brokers})
        return sorted(b.node_id for b in response.brokers)

    def list_groups(self) -> dict[str, str]:
        """{group: protocol type} over every live broker."""
        found = {}
        for node in self.brokers():
            response = self._client.submit(node, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                           ListGroupsRequest()).wait(self.timeout)
            if response.error_code:
                raise for_code(response.error_code)(f"ListGroups at broker {node}")
            found.update({g.group_id: g.protocol_type for g in response.groups})
        return found

    def coordinator(self, group: str) -> int:
        self.brokers()
        response = self._call(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                              FindCoordinatorRequest(key=group, key_type=KEY_TYPE_GROUP))
        if response.error_code:
            raise for_code(response.error_code)(f"coordinator of group {group!r}: {response.error_message or ''}")
        return response.node_id

    def describe_group(self, group: str) -> KafkaGroup | None:
        """The group as its coordinator sees it; None when the coordinator has no such group."""
        node = self.coordinator(group)
        response = self._client.submit(node, ApiKey.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION,
                                       DescribeGroupsRequest(groups=[group])).wait(self.timeout)
        found = response.groups[0]
        if found.error_code:
            raise for_code(found.error_code)(f"DescribeGroups {group!r}")
        if found.group_state == DEAD:
            return None
        members = tuple(KafkaMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    _assignment_or_empty(m.member_assignment)) for m in found.members)
        return KafkaGroup(group, found.group_state, found.protocol_type, found.protocol_data, members)

    def delete_group(self, group: str) -> None:
        node = self.coordinator(group)
        response = self._client.submit(node, ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION,
                                       DeleteGroupsRequest(groups_names=[group])).wait(self.timeout)
        code = response.results[0].error_code
        if code:
            raise for_code(code)(f"group {group!r}")


def _assignment_or_empty(data: bytes) -> tuple[tuple[str, int], ...]:
    try:
        return decode_assignment(data)
    except (struct.error, UnicodeDecodeError):  # a non-consumer protocol: its assignment is opaque
        return ()
