"""The offset registry (paper 3.2): a consumer group's committed offsets, one persistent znode per partition.

    /consumers/<group>/offsets/<topic>/<partition>   {"version":1,"offset":42,"metadata":"..."}

The paper's Kafka (and Kafka up to 0.8) stored the offset alone as decimal text; OffsetCommit also carries a
metadata string, so we store JSON. Reading accepts the old decimal text too (metadata "").
The offset is that of the next message to consume, as OffsetCommit defines it.

Transitions per partition: ABSENT --commit--> COMMITTED --commit--> COMMITTED (last write wins; a retried
commit writes the same value again, so retries are idempotent) --delete_group--> ABSENT. Commits of several
partitions are not atomic together, as in Kafka's ZooKeeper offset storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError, NotEmptyError
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

OFFSET_JSON_VERSION = 1

TopicPartition = tuple[str, int]


class UnknownGroup(Exception):
    """Kafka error GROUP_ID_NOT_FOUND."""


class GroupNotEmpty(Exception):
    """Kafka error NON_EMPTY_GROUP: the group still has registered consumers."""


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""


def encode_offset(value: OffsetAndMetadata) -> bytes:
    return encode({"version": OFFSET_JSON_VERSION, "offset": value.offset, "metadata": value.metadata})


def decode_offset(data: bytes) -> OffsetAndMetadata:
    text = data.decode("utf-8").strip()
    if text.lstrip("-").isdigit():  # the paper's format: the offset as decimal text
        return OffsetAndMetadata(int(text))
    value = decode(data)
    return OffsetAndMetadata(int(value["offset"]), value.get("metadata") or "")


def commit_offsets(
    zk: KazooClient, group: str, offsets: Mapping[TopicPartition, "OffsetAndMetadata | tuple[int, str] | int"]
) -> None:
    """Store each partition's offset (an int, an `(offset, metadata)` pair or an OffsetAndMetadata)."""
    for (topic, partition), value in offsets.items():
        retrying(zk, _inner_commit, zk, paths.offset(group, topic, partition), encode_offset(_normalise(value)))


def _normalise(value: "OffsetAndMetadata | tuple[int, str] | int") -> OffsetAndMetadata:
    if isinstance(value, OffsetAndMetadata):
        return value
    if isinstance(value, int):
        return OffsetAndMetadata(value)
    offset, metadata = value
    return OffsetAndMetadata(int(offset), metadata or "")


def _inner_commit(zk: KazooClient, path: str, data: bytes) -> None:
    try:
        zk.set(path, data)
    except NoNodeError:
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            raise ForceRetryError() from None  # created in between (or by our lost attempt): set it


def fetch_offsets(
    zk: KazooClient, group: str, partitions: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets of `partitions` (all the group's when None); partitions never committed are absent."""
    if partitions is None:
        partitions = _committed_partitions(zk, group)
    result = {}
    for topic, partition in partitions:
        try:
            data, _ = retrying(zk, zk.get, paths.offset(group, topic, partition))
        except NoNodeError:
            continue
        result[(topic, partition)] = decode_offset(data)
    return result


def _committed_partitions(zk: KazooClient, group: str) -> list[TopicPartition]:
    found = []
    try:
        topics = retrying(zk, zk.get_children, paths.group_offsets(group))
    except NoNodeError:
        return []
    for topic in sorted(topics):
        try:
            children = retrying(zk, zk.get_children, paths.offsets_topic(group, topic))
        except NoNodeError:
            continue
        found.extend((topic, int(p)) for p in sorted(children, key=int) if p.isdigit())
    return found


def list_groups(zk: KazooClient) -> list[str]:
    try:
        return sorted(retrying(zk, zk.get_children, paths.CONSUMERS))
    except NoNodeError:
        return []


def delete_group(zk: KazooClient, group: str) -> None:
    """Delete the group's offsets and registry; raise UnknownGroup, or GroupNotEmpty while consumers are in it."""
    path = paths.group(group)
    try:
        members = retrying(zk, zk.get_children, paths.group_ids(group))
    except NoNodeError:
        members = []
    if members:
        raise GroupNotEmpty(f"group {group!r} has {len(members)} registered consumer(s)")
    if retrying(zk, zk.exists, path) is None:
        raise UnknownGroup(f"unknown group {group!r}")
    try:
        retrying(zk, zk.delete, path, recursive=True)
    except NotEmptyError:
        raise GroupNotEmpty(f"group {group!r} gained a consumer while being deleted") from None
