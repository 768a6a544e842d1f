"""The znodes through which brokers and tools ask the controller to act (Kafka's ZK-mode admin paths).

    /controlled_shutdown/<id>            ephemeral, empty: broker <id> is stopping; move its leaderships away
    /admin/preferred_replica_election    {"version":1,"partitions":[{"topic":"t","partition":0},...]}

Rule 1: a request is one create, retried and idempotent: a shutdown request found already there is ours
(the broker's id is its own); a second preferred election while one is pending raises `ElectionPending`, as
Kafka's tool refuses ("Preferred replica leader election currently in progress").
Rule 2: the controller deletes a preferred election request once it has acted on it; a shutdown request goes
with the stopping broker's session.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

PREFERRED_ELECTION_JSON_VERSION = 1  # Kafka's PreferredReplicaElectionZNode


class ElectionPending(RuntimeError):
    """An earlier preferred leader election request has not been acted on yet."""


def request_controlled_shutdown(zk: KazooClient, broker_id: int) -> None:
    retrying(zk, zk.ensure_path, paths.CONTROLLED_SHUTDOWN)
    try:
        retrying(zk, zk.create, paths.controlled_shutdown(broker_id), b"", ephemeral=True)
    except NodeExistsError:
        pass  # our own earlier request (a retried create)


def stopping_brokers(zk: KazooClient) -> set[int]:
    """The brokers that have asked for a controlled shutdown."""
    try:
        children = retrying(zk, zk.get_children, paths.CONTROLLED_SHUTDOWN)
    except NoNodeError:
        return set()
    return {int(c) for c in children if c.isdigit()}


def request_preferred_election(zk: KazooClient, partitions: list[tuple[str, int]]) -> None:
    """Ask the controller to move leadership of `partitions` to their preferred (first) replicas."""
    value = {"version": PREFERRED_ELECTION_JSON_VERSION,
             "partitions": [{"topic": t, "partition": p} for t, p in sorted(partitions)]}
    retrying(zk, zk.ensure_path, paths.PREFERRED_REPLICA_ELECTION.rsplit("/", 1)[0])
    try:
        retrying(zk, zk.create, paths.PREFERRED_REPLICA_ELECTION, encode(value))
    except NodeExistsError:
        raise ElectionPending("a preferred leader election is already in progress; try again shortly") from None


def parse_preferred_election(data: bytes) -> set[tuple[str, int]]:
    """The partitions a request names; raises ValueError for a malformed one."""
    try:
        return {(str(item["topic"]), int(item["partition"])) for item in decode(data)["partitions"]}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed preferred replica election request: {exc}") from None


def finish_preferred_election(zk: KazooClient) -> None:
    try:
        retrying(zk, zk.delete, paths.PREFERRED_REPLICA_ELECTION)
    except NoNodeError:
        pass
