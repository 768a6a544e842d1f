"""The consumer and ownership registries of a ZooKeeper consumer group (paper 3.2), and fenced offset commits.

    /consumers/<group>/ids/<consumer id>          ephemeral  {"version":1,"subscription":{"t":1},
                                                              "pattern":"static","timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<p>         ephemeral  the owner's consumer id (utf-8), as Kafka 0.8
    /consumers/<group>/offsets/<topic>/<p>        persistent sparklog.coordination.offsets' JSON

Rule 1 (one owner): a partition is owned by whoever created its ephemeral owner node; a second claim gets
`OwnershipConflict`. The node vanishes with its creator's session, so a crashed consumer frees its partitions.
Rule 2 (fencing): a claim bumps the version of the partition's offset node in the same transaction that
creates the owner node (creating the offset node with offset -1, "none committed", if the group never
committed), and remembers that version as its token. A commit is one transaction: `check(owner node,
version)` + `set_data(offset node, version=token)`. Whoever claimed the partition after us changed the offset
node's version, so a consumer whose session expired (and whose owner node was re-created by another) can never
overwrite the new owner's offsets, even from a fresh session: it gets `CommitFenced`.
Rule 3: every call is retried (`coordination.connection.retrying`) and idempotent: a create that meets our own
node (our earlier attempt landed before the connection dropped) is success.

Claim transitions per partition:  UNOWNED --claim--> OWNED(token) --commit--> OWNED(token+1)
--release (or session expiry)--> UNOWNED; OWNED --another's claim after our expiry--> FENCED (commits fail).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from sparklog.client.errors import CommitFenced
from sparklog.coordination import paths
from sparklog.coordination.connection import commit, decode, encode, retrying
from sparklog.coordination.offsets import OffsetAndMetadata, decode_offset, encode_offset

SUBSCRIPTION_VERSION = 1
NO_OFFSET = -1  # the offset node of a partition the group never committed (OffsetFetch's "none" value)


class OwnershipConflict(Exception):
    """Another consumer still owns a partition we were assigned (its rebalance lags ours)."""

    def __init__(self, topic: str, partition: int, owner: str) -> None:
        super().__init__(f"{topic}-{partition} is owned by {owner}")
        self.topic = topic
        self.partition = partition
        self.owner = owner


class ConsumerIdInUse(RuntimeError):
    """Another live session registered this consumer id."""


@dataclass
class Claim:
    """Our ownership of one partition: what a commit must present."""

    topic: str
    partition: int
    owner_version: int
    offset_version: int  # the fencing token: the offset node's version after our last write
    committed: int | None  # the committed offset when claimed; None if the group never committed


# -- consumer registry ----------------------------------------------------------------------------------


def subscription_json(topics: dict[str, int]) -> bytes:
    return encode({"version": SUBSCRIPTION_VERSION, "subscription": dict(topics), "pattern": "static",
                   "timestamp": str(int(time.time() * 1000))})


def register_consumer(zk: KazooClient, group: str, consumer_id: str, topics: dict[str, int]) -> None:
    """Create our ephemeral registration; raise ConsumerIdInUse if another session holds the id."""
    retrying(zk, _inner_register, zk, paths.consumer(group, consumer_id), subscription_json(topics))


def _inner_register(zk: KazooClient, path: str, data: bytes) -> None:
    try:
        zk.create(path, data, ephemeral=True, makepath=True)
    except NodeExistsError:
        try:
            _, stat = zk.get(path)
        except NoNodeError:
            raise ForceRetryError() from None
        if stat.ephemeralOwner != zk.client_id[0]:
            raise ConsumerIdInUse(f"consumer id at {path} is registered by another session") from None


def unregister_consumer(zk: KazooClient, group: str, consumer_id: str) -> None:
    _delete_if_ours(zk, paths.consumer(group, consumer_id))


def list_consumers(zk: KazooClient, group: str) -> dict[str, dict[str, int]]:
    """{consumer id: subscription}; a consumer that leaves while we read is left out."""
    try:
        children = retrying(zk, zk.get_children, paths.group_ids(group))
    except NoNodeError:
        return {}
    consumers = {}
    for child in sorted(children):
        try:
            data, _ = retrying(zk, zk.get, f"{paths.group_ids(group)}/{child}")
        except NoNodeError:
            continue
        try:
            consumers[child] = {t: int(n) for t, n in decode(data).get("subscription", {}).items()}
        except (ValueError, AttributeError):
            consumers[child] = {}
    return consumers


# -- ownership registry ----------------------------------------------------------------------------------


def get_owner(zk: KazooClient, group: str, topic: str, partition: int) -> str | None:
    try:
        data, _ = retrying(zk, zk.get, paths.owner(group, topic, partition))
    except NoNodeError:
        return None
    return data.decode("utf-8")


def list_owners(zk: KazooClient, group: str) -> dict[tuple[str, int], str]:
    """{(topic, partition): owner id} of every owned partition of the group."""
    owners = {}
    try:
        topics = retrying(zk, zk.get_children, paths.group_owners(group))
    except NoNodeError:
        return {}
    for topic in sorted(topics):
        try:
            children = retrying(zk, zk.get_children, f"{paths.group_owners(group)}/{topic}")
        except NoNodeError:
            continue
        for child in sorted(children, key=lambda c: int(c) if c.isdigit() else -1):
            if child.isdigit():
                owner = get_owner(zk, group, topic, int(child))
                if owner is not None:
                    owners[(topic, int(child))] = owner
    return owners


def claim(zk: KazooClient, group: str, consumer_id: str, topic: str, partition: int) -> Claim:
    """Become the owner of `topic`-`partition` and take a fencing token; raise OwnershipConflict."""
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


def release(zk: KazooClient, group: str, claims) -> None:
    """Give up ownership of each claimed partition (only nodes our session created are deleted)."""
    for c in claims:
        _delete_if_ours(zk, paths.owner(group, c.topic, c.partition))


def _delete_if_ours(zk: KazooClient, path: str) -> None:
    def inner() -> None:
        try:
            _, stat = zk.get(path)
            if stat.ephemeralOwner == zk.client_id[0]:
                zk.delete(path, version=stat.version)
        except NoNodeError:
            pass

    retrying(zk, inner)


# -- fenced commits ---------------------------------------------------------------------------------------


def commit_offset(zk: KazooClient, group: str, c: Claim, offset: int, metadata: str = "") -> None:
    """Store `offset` (the next to consume) for a partition we own; raise CommitFenced if we no longer do."""
    owner_path = paths.owner(group, c.topic, c.partition)
    offset_path = paths.offset(group, c.topic, c.partition)
    data = encode_offset(OffsetAndMetadata(offset, metadata))
    c.offset_version = retrying(zk, _inner_commit, zk, c, owner_path, offset_path, data)


def _inner_commit(zk: KazooClient, c: Claim, owner_path: str, offset_path: str, data: bytes) -> int:
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
