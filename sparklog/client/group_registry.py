"""The consumer and ownership registries of a ZooKeeper consumer group (paper 3.2).

    /consumers/<group>/ids/<consumer id>          ephemeral  {"version":1,"subscription":{"t":1},
                                                              "pattern":"static","timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<p>         ephemeral  the owner's consumer id (utf-8), as Kafka 0.8
    /consumers/<group>/offsets/<topic>/<p>        persistent sparklog.coordination.offsets' JSON

Rule 1 (one owner): a partition is owned by whoever created its ephemeral owner node; a second claim gets
`OwnershipConflict`. The node vanishes with its creator's session, so a crashed consumer frees its partitions.
Rule 2 (fencing): claims and commits follow the one rule for offset nodes, in `coordination.offsets`
(`claim`, `commit_owned`, re-exported here as `claim` and `commit_offset`): a consumer whose session expired
and whose partition another claimed can never overwrite the new owner's offsets; it gets `CommitFenced`.
Rule 3: every call is retried (`coordination.connection.retrying`) and idempotent: a create that meets our own
node (our earlier attempt landed before the connection dropped) is success.

Claim transitions per partition:  UNOWNED --claim--> OWNED(token) --commit--> OWNED(token+1)
--release (or session expiry)--> UNOWNED; OWNED --another's claim after our expiry--> FENCED (commits fail).
"""

from __future__ import annotations

import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying
from sparklog.coordination.offsets import (NO_OFFSET, Claim, CommitFenced, OwnershipConflict, claim,
                                           commit_owned as commit_offset)

__all__ = ["NO_OFFSET", "Claim", "CommitFenced", "OwnershipConflict", "claim", "commit_offset", "ConsumerIdInUse",
           "register_consumer", "unregister_consumer", "is_registered_group", "list_consumers", "get_owner",
           "list_owners", "release"]
SUBSCRIPTION_VERSION = 1


class ConsumerIdInUse(RuntimeError):
    """Another live session registered this consumer id."""


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


def is_registered_group(zk: KazooClient, group: str) -> bool:
    """Is `group` a ZooKeeper group: has a consumer ever registered in it (its `ids` node outlives them)?"""
    return retrying(zk, zk.exists, paths.group_ids(group)) is not None


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
