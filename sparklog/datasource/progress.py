"""What a streaming query keeps in ZooKeeper: its resolved initial offsets and its committed progress.

Rule 1: the initial offsets of a query are resolved once. The first `initialOffset()` to finish creates
`/sparklog/queries/<sha1 of key>/initial_offsets`; every later call (Spark calls it again when a query dies
before its first batch commits) reads that node back, so "latest" or a timestamp is never re-resolved and
a restart never gets a start past its end. Creating is idempotent: NodeExistsError means another attempt
won, and its value is returned.
Rule 2: committed progress goes to the consumer-group offset registry (`/consumers/<group>/offsets/...`) so
`sparklog groups describe` shows the query's lag; it is informational. Spark's checkpoint stays the source
of truth for where the query resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.coordination.connection import retrying
from sparklog.coordination.offsets import commit_offsets

logger = logging.getLogger(__name__)

QUERIES = "/sparklog/queries"
INITIAL_OFFSETS_VERSION = 1


def query_path(key: str) -> str:
    """A znode per query key (a checkpoint path or id may hold any characters, so it is hashed)."""
    return f"{QUERIES}/{hashlib.sha1(key.encode('utf-8')).hexdigest()}"


def load_initial_offsets(zk: KazooClient, key: str) -> dict | None:
    try:
        data, _ = retrying(zk, zk.get, f"{query_path(key)}/initial_offsets")
    except NoNodeError:
        return None
    return json.loads(data.decode("utf-8"))["offsets"]


def store_initial_offsets(zk: KazooClient, key: str, offsets: Mapping) -> dict:
    """Store `offsets` unless the query already has initial offsets; return the ones that count (Rule 1)."""
    data = json.dumps({"version": INITIAL_OFFSETS_VERSION, "key": key, "offsets": offsets}).encode("utf-8")
    try:
        retrying(zk, zk.create, f"{query_path(key)}/initial_offsets", data, makepath=True)
    except NodeExistsError:
        stored = load_initial_offsets(zk, key)
        if stored is not None:
            return stored
    return dict(offsets)


def commit_progress(zk: KazooClient, group: str, offsets: Mapping[tuple[str, int], int], metadata: str) -> None:
    """Record the next offset to read per partition under `group` (Rule 2); a partition that a member of a
    ZooKeeper consumer group of that name owns is left to its owner (coordination.offsets, Rule 2)."""
    refused = commit_offsets(zk, group, {tp: (offset, metadata) for tp, offset in offsets.items()})
    if refused:
        logger.warning("progress of group %s not recorded for partitions owned by its members: %s", group,
                       ", ".join(f"{t}-{p} ({owner})" for (t, p), owner in sorted(refused.items())))
