"""The cluster id: created once at `/cluster/id`, then read by every broker (design notes 5.5, "Cluster Id").

Value, as Kafka's ZK mode writes it: `{"version":"1","id":"<22 URL-safe base64 chars>"}` (a random UUID,
base64url without padding: 16 bytes -> 22 characters).

Transitions: ABSENT --first caller creates--> PRESENT. Concurrent callers race on `create`; the losers get
NodeExistsError and read the winner's id, so everyone returns the same id. The node is never changed.
"""

from __future__ import annotations

import base64
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

CLUSTER_ID_VERSION = "1"


def new_cluster_id() -> str:
    """22 characters from `[a-zA-Z0-9_-]`, like Kafka's `Uuid.randomUuid().toString()`."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def get_cluster_id(zk: KazooClient) -> str | None:
    """The cluster id, or None before any broker started."""
    stat = retrying(zk, zk.exists, paths.CLUSTER_ID)
    if stat is None:
        return None
    data, _ = retrying(zk, zk.get, paths.CLUSTER_ID)
    return decode(data)["id"]


def get_or_create_cluster_id(zk: KazooClient) -> str:
    """Return the cluster id, creating it first if there is none; concurrent callers agree."""
    return retrying(zk, _get_or_create, zk)


def _get_or_create(zk: KazooClient) -> str:
    # Inside the retry: after a connection loss our own create may have succeeded, and then the
    # NodeExistsError branch reads back our own id.
    existing = get_cluster_id(zk)
    if existing is not None:
        return existing
    candidate = new_cluster_id()
    try:
        zk.create(paths.CLUSTER_ID, encode({"version": CLUSTER_ID_VERSION, "id": candidate}), makepath=True)
        return candidate
    except NodeExistsError:
        data, _ = zk.get(paths.CLUSTER_ID)
        return decode(data)["id"]
