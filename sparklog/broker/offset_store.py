"""Where a Kafka group is coordinated and where its committed offsets are kept: the one authority for both.

Placement (Kafka's `GroupMetadataManager.partitionFor`): a group belongs to partition
`abs(java_hash(group)) % offsets.topic.num.partitions` of the `__consumer_offsets` topic, and its coordinator
is that partition's leader. Until that topic exists (replication and compaction are being built), the
partition is mapped onto the sorted live broker ids (`ids[partition % len(ids)]`), so every broker computes
the same coordinator from the same metadata, and a coordinator that dies hands its groups to a live broker
(the members rejoin there; their offsets are in ZooKeeper, which survives it).

Offsets are kept in the paper's ZooKeeper registry (`/consumers/<group>/offsets/...`, coordination/offsets.py),
which is also where the ZooKeeper groups and the Spark source keep theirs, so either kind of group can be read
by the same tools.

How `__consumer_offsets` slots in: `coordinator_for` already prefers the leader of the group's partition when
the topic is in the metadata. A `TopicOffsetStore` with the same three methods would append each commit as a
compacted record keyed (group, topic, partition), answer `fetch` from an in-memory cache rebuilt by reading
its partitions when this broker becomes their leader (COORDINATOR_LOAD_IN_PROGRESS meanwhile), and the
broker would construct it instead of this class; the handlers do not change.

Rule: `commit` and `fetch` block (ZooKeeper): handlers run them on the executor.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from sparklog.coordination import offsets as offset_registry

OFFSETS_TOPIC = "__consumer_offsets"
NO_COORDINATOR = -1

TopicPartition = tuple[str, int]


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units, 32-bit signed), which Kafka partitions groups by."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions` (`Utils.abs` masks the sign)."""
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


class ZooKeeperOffsetStore:
    """Coordinator placement over the live brokers; offsets in the ZooKeeper registry."""

    def __init__(self, zk, num_partitions: int) -> None:
        self.zk = zk
        self.num_partitions = num_partitions

    def coordinator_for(self, group: str, snapshot) -> int:
        """The broker id that coordinates `group` under this metadata snapshot, or NO_COORDINATOR."""
        partition = offsets_partition(group, self.num_partitions)
        topic = snapshot.topics.get(OFFSETS_TOPIC)
        if topic is not None and partition in topic.partitions:
            leader = topic.partitions[partition].leader
            return leader if leader in snapshot.brokers else NO_COORDINATOR
        live = sorted(snapshot.brokers)
        return live[partition % len(live)] if live else NO_COORDINATOR

    def commit(self, group: str, offsets: Mapping[TopicPartition, offset_registry.OffsetAndMetadata]
               ) -> dict[TopicPartition, str]:
        """Store the offsets; returns {partition: owner} of those refused because a ZooKeeper-group member owns
        them (offsets.py's fencing rule; an older registry refuses nothing and returns None)."""
        return offset_registry.commit_offsets(self.zk, group, offsets) or {}

    def fetch(self, group: str, partitions: Iterable[TopicPartition] | None
              ) -> dict[TopicPartition, offset_registry.OffsetAndMetadata]:
        """The committed offsets of `partitions` (all the group's when None); absent when never committed."""
        return offset_registry.fetch_offsets(self.zk, group, partitions)

    def delete(self, group: str) -> None:
        """Forget the group's offsets; raises offsets.UnknownGroup, or GroupNotEmpty while a ZooKeeper group of
        that name has consumers."""
        offset_registry.delete_group(self.zk, group)
