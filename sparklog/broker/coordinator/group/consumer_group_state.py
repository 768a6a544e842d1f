"""A consumer group (consumer_group.py) as its records in `__consumer_offsets` and back: what the coordinator
writes after every change of a group and what a new coordinator rebuilds the group from (Kafka's
`GroupCoordinatorRecordHelpers` and the replay of `GroupMetadataManager`). Sans-IO: bytes in, bytes out;
partitions named by topic id on the wire, by topic name here.

Records (protocol/consumer_group_records.py) of a group with members:
    one ConsumerGroupMetadata (the group epoch), one ConsumerGroupPartitionMetadata (the subscribed topics
    at the last target assignment), one ConsumerGroupTargetAssignmentMetadata (the assignment epoch); per
    member one ConsumerGroupMemberMetadata, one ConsumerGroupTargetAssignmentMember and one
    ConsumerGroupCurrentMemberAssignment.

Rule 1 (changes): `changes(written, now)` is every record whose bytes differ from what was written last,
and a tombstone for every key written before and absent now (a member gone, the whole group once empty).
Rule 2 (a static member that left, epoch -2): its current assignment record carries member epoch -2 and its
epoch as the previous epoch, as Kafka writes it; the rebuilt member is a left static member of that epoch.
Rule 3 (rebuild): a group is rebuilt only from a group metadata record; its members' session deadlines and
revocation deadlines start over at the load (as Kafka's coordinator reschedules them), and the assignment
last sent to each member is unknown, so the next heartbeat carries it (consumer_group Rule 5). A partition of
a topic id the cluster does not know (a deleted topic) is left out.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping

from sparklog.broker.coordinator.group.consumer_group import (STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerGroupSettings,
                                                              ConsumerMember, MemberState, random_member_id)
from sparklog.protocol import consumer_group_records as cgr
from sparklog.protocol.consumer_group_records import RecordKey

TopicPartition = tuple[str, int]
Records = dict[bytes, bytes]  # key -> value, encoded

_STATE_BYTES = {MemberState.STABLE: cgr.STABLE, MemberState.UNRELEASED_PARTITIONS: cgr.UNRELEASED_PARTITIONS,
                MemberState.UNREVOKED_PARTITIONS: cgr.UNREVOKED_PARTITIONS}
_STATES = {b: s for s, b in _STATE_BYTES.items()}


# ---- a group as records


def records_of(group: ConsumerGroup, ids: Mapping[str, uuid.UUID]) -> Records:
    """The group's records (module docstring); none for a group without members. `ids`: topic ids by name
    (a partition of a topic without an id cannot be named: left out)."""
    if not group.members:
        return {}
    g = group.group_id
    out = {
        _key(cgr.GROUP_METADATA, g): cgr.encode_value(cgr.GROUP_METADATA, cgr.VALUES[cgr.GROUP_METADATA](
            epoch=group.group_epoch)),
        _key(cgr.PARTITION_METADATA, g): _partition_metadata(group, ids),
        _key(cgr.TARGET_ASSIGNMENT_METADATA, g): cgr.encode_value(
            cgr.TARGET_ASSIGNMENT_METADATA, cgr.VALUES[cgr.TARGET_ASSIGNMENT_METADATA](
                assignment_epoch=group.assignment_epoch)),
    }
    for member in group.members.values():
        out.update(_member_records(group, member, ids))
    return out


def changes(written: Records, current: Records) -> list[tuple[bytes, bytes | None]]:
    """Rule 1: (key, value) to append, None values tombstones."""
    out: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in current.items() if written.get(k) != v]
    return out + [(k, None) for k in written if k not in current]


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    return cgr.encode_key(RecordKey(kind, group_id, member_id))


def _partition_metadata(group: ConsumerGroup, ids: Mapping[str, uuid.UUID]) -> bytes:
    cls = cgr.VALUES[cgr.PARTITION_METADATA]
    topics = [cls.TopicMetadata(topic_id=ids[t], topic_name=t, num_partitions=n, partition_metadata=[])
              for t, n in sorted(group.subscribed_metadata.items()) if t in ids]
    return cgr.encode_value(cgr.PARTITION_METADATA, cls(topics=topics))


def _member_records(group: ConsumerGroup, m: ConsumerMember, ids: Mapping[str, uuid.UUID]) -> Records:
    g, mid = group.group_id, m.member_id
    metadata = cgr.VALUES[cgr.MEMBER_METADATA](
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor)
    target_cls = cgr.VALUES[cgr.TARGET_ASSIGNMENT_MEMBER]
    target = target_cls(topic_partitions=_by_id(target_cls.TopicPartitions, group.target.get(mid, frozenset()), ids))
    current_cls = cgr.VALUES[cgr.CURRENT_MEMBER_ASSIGNMENT]
    epoch, previous = (STATIC_LEAVE_EPOCH, m.epoch) if m.left_static else (m.epoch, m.previous_epoch)
    current = current_cls(member_epoch=epoch, previous_member_epoch=previous, state=_STATE_BYTES[m.state],
                          assigned_partitions=_by_id(current_cls.AssignedTopicPartitions, m.assigned, ids),
                          partitions_pending_revocation=_by_id(current_cls.PendingTopicPartitions, m.revoking, ids))
    return {_key(cgr.MEMBER_METADATA, g, mid): cgr.encode_value(cgr.MEMBER_METADATA, metadata),
            _key(cgr.TARGET_ASSIGNMENT_MEMBER, g, mid): cgr.encode_value(cgr.TARGET_ASSIGNMENT_MEMBER, target),
            _key(cgr.CURRENT_MEMBER_ASSIGNMENT, g, mid): cgr.encode_value(cgr.CURRENT_MEMBER_ASSIGNMENT, current)}


def _by_id(struct: Any, partitions: frozenset[TopicPartition], ids: Mapping[str, uuid.UUID]) -> list:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        if topic in ids:
            by_topic.setdefault(topic, []).append(index)
    return [struct(topic_id=ids[t], partitions=p) for t, p in by_topic.items()]


# ---- records as a group


class GroupRecordSet:
    """The consumer group records of one `__consumer_offsets` partition as a load reads them: the last record
    of each key (a tombstone removes it), decoded, and the bytes as written (for Rule 1 after the load)."""

    def __init__(self) -> None:
        self.decoded: dict[str, dict[RecordKey, Any]] = {}
        self.raw: dict[str, Records] = {}

    def apply(self, key_bytes: bytes, value_bytes: bytes | None) -> bool:
        """Take one record; False when it is not a consumer group record. ValueError if it does not decode."""
        key = cgr.decode_key(key_bytes)
        if key is None:
            return False
        key_bytes = bytes(key_bytes)
        if value_bytes is None:
            self.decoded.get(key.group_id, {}).pop(key, None)
            self.raw.get(key.group_id, {}).pop(key_bytes, None)
            return True
        value = cgr.decode_value(key.type, value_bytes)
        self.decoded.setdefault(key.group_id, {})[key] = value
        self.raw.setdefault(key.group_id, {})[key_bytes] = bytes(value_bytes)
        return True


def rebuild(group_id: str, records: Mapping[RecordKey, Any], settings: ConsumerGroupSettings, now_ms: int,
            names: Mapping[uuid.UUID, str], new_member_id: Callable[[], str] = random_member_id
            ) -> ConsumerGroup | None:
    """Rule 3: the group of `records`, or None without a group metadata record. `names`: topic names by id."""
    metadata = records.get(RecordKey(cgr.GROUP_METADATA, group_id))
    if metadata is None:
        return None
    group = ConsumerGroup(group_id, settings, new_member_id, group_epoch=metadata.epoch)
    assignment = records.get(RecordKey(cgr.TARGET_ASSIGNMENT_METADATA, group_id))
    group.assignment_epoch = assignment.assignment_epoch if assignment is not None else 0
    subscribed = records.get(RecordKey(cgr.PARTITION_METADATA, group_id))
    if subscribed is not None:
        group.subscribed_metadata = {t.topic_name: t.num_partitions for t in subscribed.topics}
    for key, value in sorted(records.items(), key=lambda kv: kv[0]):
        if key.type == cgr.MEMBER_METADATA and key.member_id is not None:
            _rebuild_member(group, key.member_id, value, records, now_ms, names)
    group.static = {m.instance_id: m.member_id for m in group.members.values() if m.instance_id is not None}
    group.assignor = group.chosen_assignor()
    return group


def _rebuild_member(group: ConsumerGroup, member_id: str, meta: Any, records: Mapping[RecordKey, Any],
                    now_ms: int, names: Mapping[uuid.UUID, str]) -> None:
    g = group.group_id
    member = ConsumerMember(member_id, meta.instance_id, meta.client_id, meta.client_host,
                            now_ms + group.settings.session_timeout_ms, rack_id=meta.rack_id,
                            rebalance_timeout_ms=meta.rebalance_timeout_ms,
                            subscribed_topic_names=tuple(sorted(meta.subscribed_topic_names)),
                            subscribed_topic_regex=meta.subscribed_topic_regex or None,
                            server_assignor=meta.server_assignor)
    target = records.get(RecordKey(cgr.TARGET_ASSIGNMENT_MEMBER, g, member_id))
    if target is not None:
        group.target[member_id] = _by_name(target.topic_partitions, names)
    current = records.get(RecordKey(cgr.CURRENT_MEMBER_ASSIGNMENT, g, member_id))
    if current is not None:
        member.left_static = current.member_epoch == STATIC_LEAVE_EPOCH
        member.epoch, member.previous_epoch = ((current.previous_member_epoch, -1) if member.left_static else
                                               (current.member_epoch, current.previous_member_epoch))
        member.state = _STATES.get(current.state, MemberState.STABLE)
        member.assigned = _by_name(current.assigned_partitions, names)
        member.revoking = _by_name(current.partitions_pending_revocation, names)
        if member.revoking:
            member.revoke_deadline_ms = now_ms + member.rebalance_timeout_ms
    group.members[member_id] = member


def _by_name(topic_partitions: list, names: Mapping[uuid.UUID, str]) -> frozenset[TopicPartition]:
    return frozenset((names[t.topic_id], p) for t in topic_partitions if t.topic_id in names for p in t.partitions)
