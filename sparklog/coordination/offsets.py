"""The offset registry (paper 3.2): a consumer group's committed offsets, one persistent znode per partition,
and the one authority on who may write them.

    /consumers/<group>/offsets/<topic>/<partition>   {"version":1,"offset":42,"metadata":"..."}
    /consumers/<group>/owners/<topic>/<partition>    ephemeral: the owning consumer's id (group_registry)

The paper's Kafka (and Kafka up to 0.8) stored the offset alone as decimal text; OffsetCommit also carries a
metadata string, so we store JSON. Reading accepts the old decimal text too (metadata "").
The offset is that of the next message to consume, as OffsetCommit defines it.

Every write of an offset node goes through this module, under one of two rules (the fencing rule):
Rule 1 (owned): a group member owns a partition by creating its ephemeral owner node; `claim` does that and,
in the same transaction, bumps the offset node's version (creating it with offset -1, "none committed", if
the group never committed) and keeps that version as its token. `commit_owned` is one transaction:
`check(owner node, version)` + `set_data(offset node, version=token)`. Whoever claimed after us changed the
version, so a consumer whose session expired can never overwrite the new owner's offsets, even from a fresh
session: it gets `CommitFenced`.
Rule 2 (member-less): a writer that owns nothing (the broker's OffsetCommit with generation -1, the Spark
source's progress, `sparklog groups reset-offsets`) writes a partition only while nobody owns it: the
write's transaction also creates and deletes the owner node, which fails while an owner node exists
(ZooKeeper has no "check absent"; create + delete in one multi is one). `commit_offsets` returns the
partitions it refused, with their owner; the others are written. So a member-less write can neither
overwrite an owner's progress nor invalidate its token.
Rule 3: every call is retried (`connection.retrying`) and idempotent: a create that meets our own node (an
earlier attempt landed before the connection dropped) is success; last write wins among member-less writers.

Transitions per partition: ABSENT --member-less commit--> COMMITTED --member-less commit--> COMMITTED;
ABSENT|COMMITTED --claim--> OWNED(token) --commit_owned--> OWNED(token+1) --release or session expiry-->
COMMITTED; OWNED --another's claim after our expiry--> FENCED (our commits fail); any --delete_group--> ABSENT.
Commits of several partitions are not atomic together, as in Kafka's ZooKeeper offset storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, NotEmptyError
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import check_results, commit, decode, encode, retrying

OFFSET_JSON_VERSION = 1
NO_OFFSET = -1  # the offset node of a partition the group never committed (OffsetFetch's "none" value)

TopicPartition = tuple[str, int]


class UnknownGroup(Exception):
    """Kafka error GROUP_ID_NOT_FOUND."""


class GroupNotEmpty(Exception):
    """Kafka error NON_EMPTY_GROUP: the group still has registered consumers."""


class OwnershipConflict(Exception):
    """Another consumer still owns a partition we were assigned (its rebalance lags ours)."""

    def __init__(self, topic: str, partition: int, owner: str) -> None:
        super().__init__(f"{topic}-{partition} is owned by {owner}")
        self.topic = topic
        self.partition = partition
        self.owner = owner


class CommitFenced(Exception):
    """An owned commit was refused: another consumer owns the partition now (Rule 1)."""


@dataclass
class Claim:
    """Our ownership of one partition: what `commit_owned` must present (Rule 1)."""

    topic: str
    partition: int
    owner_version: int
    offset_version: int  # the fencing token: the offset node's version after our last write
    committed: int | None  # the committed offset when claimed; None if the group never committed


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1  # the committed leader epoch (KIP-320), kept by the broker's offset store only


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
) -> dict[TopicPartition, str]:
    """Member-less commit (Rule 2) of each partition's offset (an int, an `(offset, metadata)` pair or an
    OffsetAndMetadata); returns `{partition: owner}` of the partitions refused because a member owns them.

    Fast path: one transaction per partition that sets an existing offset node (every commit after a group's
    first), all sent at once, so a commit costs one ZooKeeper round trip. A partition whose transaction did
    not simply succeed (node or parent missing, owned, connection trouble) takes the slow path, retried."""
    pending = {}
    for (topic, partition), value in offsets.items():
        owner_path, offset_path = paths.owner(group, topic, partition), paths.offset(group, topic, partition)
        data = encode_offset(_normalise(value))
        pending[(topic, partition)] = (owner_path, offset_path, data,
                                       _unowned_write(zk, owner_path, offset_path, data, exists=True).commit_async())
    refused = {}
    for tp, (owner_path, offset_path, data, result) in pending.items():
        try:
            check_results(result.get())
            continue
        except Exception:  # noqa: BLE001 - whatever went wrong, the slow path decides, with retries
            pass
        for parent in (owner_path, offset_path):
            retrying(zk, zk.ensure_path, parent.rsplit("/", 1)[0])
        owner = retrying(zk, _inner_commit_unowned, zk, owner_path, offset_path, data)
        if owner is not None:
            refused[tp] = owner
    return refused


def _unowned_write(zk: KazooClient, owner_path: str, offset_path: str, data: bytes, exists: bool):
    """Rule 2's transaction: create + delete the owner node (fails while one exists), then write the offset."""
    tx = zk.transaction()
    tx.create(owner_path, b"")  # Rule 2: fails while an owner node exists ...
    tx.delete(owner_path)  # ... and leaves none behind
    if exists:
        tx.set_data(offset_path, data)
    else:
        tx.create(offset_path, data)
    return tx


def _normalise(value: "OffsetAndMetadata | tuple[int, str] | int") -> OffsetAndMetadata:
    if isinstance(value, OffsetAndMetadata):
        return value
    if isinstance(value, int):
        return OffsetAndMetadata(value)
    offset, metadata = value
    return OffsetAndMetadata(int(offset), metadata or "")


def _inner_commit_unowned(zk: KazooClient, owner_path: str, offset_path: str, data: bytes) -> str | None:
    """Write unless owned; returns the owner if owned (then nothing is written)."""
    exists = zk.exists(offset_path) is not None
    try:
        commit(_unowned_write(zk, owner_path, offset_path, data, exists))
    except NodeExistsError:
        try:
            owner, _ = zk.get(owner_path)
        except NoNodeError:
            raise ForceRetryError() from None  # the offset node appeared meanwhile: set it
        return owner.decode("utf-8", "replace")
    except NoNodeError:
        raise ForceRetryError() from None  # deleted meanwhile: create it
    return None


def claim(zk: KazooClient, group: str, consumer_id: str, topic: str, partition: int) -> Claim:
    """Become the owner of `topic`-`partition` and take a fencing token (Rule 1); raise OwnershipConflict."""
    owner_path = paths.owner(group, topic, partition)
    offset_path = paths.offset(group, topic, partition)
    retrying(zk, zk.ensure_path, owner_path.rsplit("/", 1)[0])
    retrying(zk, zk.ensure_path, offset_path.rsplit("/", 1)[0])
    return retrying(zk, _inner_claim, zk, consumer_id, topic, partition, owner_path, offset_path)


def _inner_claim(zk: KazooClient, me: str, topic: str, partition: int, owner_path: str, offset_path: str) -> Claim:
    try:
        data, stat = zk.get(offset_path)
    except NoNodeError:
        data, stat = None, None
    tx = zk.transaction()
    tx.create(owner_path, me.encode("utf-8"), ephemeral=True)
    if stat is None:
        tx.create(offset_path, encode_offset(OffsetAndMetadata(NO_OFFSET)))
    else:
        tx.set_data(offset_path, data, version=stat.version)
    try:
        commit(tx)
    except NodeExistsError:
        return _claimed_already(zk, me, topic, partition, owner_path, offset_path)
    except (BadVersionError, NoNodeError):
        raise ForceRetryError() from None  # the offset node changed under us: read it again
    committed = NO_OFFSET if data is None else decode_offset(data).offset
    return Claim(topic, partition, 0, 0 if stat is None else stat.version + 1,
                 None if committed < 0 else committed)


def _claimed_already(zk: KazooClient, me: str, topic: str, partition: int, owner_path: str,
                     offset_path: str) -> Claim:
    try:
        owner, owner_stat = zk.get(owner_path)
    except NoNodeError:
        raise ForceRetryError() from None  # it was the offset node that appeared meanwhile
    if owner.decode("utf-8") != me or owner_stat.ephemeralOwner != zk.client_id[0]:
        raise OwnershipConflict(topic, partition, owner.decode("utf-8", "replace"))
    # Our own earlier attempt landed before the connection dropped: the offset node's version is our token.
    data, stat = zk.get(offset_path)
    committed = decode_offset(data).offset
    return Claim(topic, partition, owner_stat.version, stat.version, None if committed < 0 else committed)


def commit_owned(zk: KazooClient, group: str, c: Claim, offset: int, metadata: str = "") -> None:
    """Store `offset` (the next to consume) for a partition we own (Rule 1); raise CommitFenced if we no
    longer do."""
    owner_path = paths.owner(group, c.topic, c.partition)
    offset_path = paths.offset(group, c.topic, c.partition)
    data = encode_offset(OffsetAndMetadata(offset, metadata))
    c.offset_version = retrying(zk, _inner_commit_owned, zk, c, owner_path, offset_path, data)


def _inner_commit_owned(zk: KazooClient, c: Claim, owner_path: str, offset_path: str, data: bytes) -> int:
    tx = zk.transaction()
    tx.check(owner_path, c.owner_version)
    tx.set_data(offset_path, data, version=c.offset_version)
    try:
        results = commit(tx)
    except (BadVersionError, NoNodeError):
        # Either we are fenced, or our own write landed before the connection dropped: then the node holds
        # our data one version after our token and the owner node is still our session's.
        try:
            current, stat = zk.get(offset_path)
            _, owner_stat = zk.get(owner_path)
        except NoNodeError:
            current = stat = owner_stat = None
        if (stat is not None and current == data and stat.version == c.offset_version + 1
                and owner_stat.ephemeralOwner == zk.client_id[0]):
            return stat.version
        raise CommitFenced(f"{c.topic}-{c.partition}: another consumer owns it now") from None
    return results[1].version


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
