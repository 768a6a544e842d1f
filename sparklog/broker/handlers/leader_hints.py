"""Leader discovery in Produce and Fetch answers (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER (or, in
a Fetch, FENCED_LEADER_EPOCH) names its current leader and leader epoch (CurrentLeader), and the answer lists the
endpoints of those leaders (NodeEndpoints), so a client moves to the new leader without a Metadata round trip.

Rule: hints-from-snapshot: the leader and epoch are the current metadata snapshot's; a partition whose leader is
unknown there (no such topic, no leader) gets no CurrentLeader (the field keeps its default and is not sent).
Rule: endpoints-on-listener: NodeEndpoints are the hinted leaders' host and port on the listener the request came
in on (coordination/brokers.for_listener, as Metadata answers them), each leader once, in id order; a leader
without that listener is left out.
Rule: versions: Fetch from v12 (CurrentLeader) and v16 (NodeEndpoints), Produce from v10 (both), as Kafka's
specs add them; older versions are answered as before.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sparklog.broker.authorization import then
from sparklog.broker.handlers.error_codes import NOT_LEADER_OR_FOLLOWER
from sparklog.coordination import brokers as broker_registry
from sparklog.protocol import errors, fetch, produce

__all__ = ["FETCH", "PRODUCE", "Hints", "hinted"]


class Hints(NamedTuple):
    """Where an API's answer holds its partitions and hints (Rule: versions)."""

    name: str  # a topic's name field
    partitions: str  # a topic's partitions field
    index: str  # a partition's index field
    leader_cls: Any  # the CurrentLeader struct
    endpoint_cls: Any  # the NodeEndpoints element struct
    first_version: int
    endpoints_version: int
    errors: frozenset[int]  # the error codes hinted


FETCH = Hints("topic", "partitions", "partition_index", fetch.LeaderIdAndEpoch, fetch.NodeEndpoint, 12, 16,
              frozenset((NOT_LEADER_OR_FOLLOWER, errors.FencedLeaderEpochError.errno)))
PRODUCE = Hints("name", "partition_responses", "index", produce.LeaderIdAndEpoch, produce.NodeEndpoint, 10, 10,
                frozenset((NOT_LEADER_OR_FOLLOWER,)))


class _Leader(NamedTuple):
    id: int
    epoch: int


def hinted(result, request, state, hints: Hints):
    """A handler's `result` (a response, None, or a coroutine of one) with the hints of its partitions from
    `hints.first_version` on (module docstring)."""
    if request.api_version < hints.first_version:
        return result
    return then(result, lambda response: _hinted(response, request, state, hints))


def _hinted(response, request, state, hints: Hints):
    snapshot, leaders = state.partitions.snapshot, set()
    for topic in response.responses:
        for part in getattr(topic, hints.partitions):
            if part.error_code in hints.errors:
                leader = _leader(snapshot, getattr(topic, hints.name), getattr(part, hints.index))
                if leader is not None:
                    part.current_leader = hints.leader_cls(leader_id=leader.id, leader_epoch=leader.epoch)
                    leaders.add(leader.id)
    if leaders and request.api_version >= hints.endpoints_version:
        live = broker_registry.for_listener(snapshot.brokers, request.listener)
        response.node_endpoints = [hints.endpoint_cls(node_id=b.id, host=b.host, port=b.port, rack=b.rack)
                                   for broker_id, b in sorted(live.items()) if broker_id in leaders]
    return response


def _leader(snapshot, topic: str, index: int) -> _Leader | None:
    """Rule: hints-from-snapshot."""
    meta = snapshot.topics.get(topic)
    partition = None if meta is None else meta.partitions.get(index)
    if partition is None or partition.leader < 0:
        return None
    return _Leader(partition.leader, partition.leader_epoch)
