"""Which replica a consumer should read from (KIP-392, Kafka's ReplicaSelector): `replica.selector.class`.

Rule 1 (the selectors): empty or Kafka's `org.apache.kafka.common.replica.LeaderSelector` is the leader
selector: every consumer reads from the leader, as before KIP-392. Kafka's
`org.apache.kafka.common.replica.RackAwareReplicaSelector` is the rack-aware selector. Any other name is refused
at start with one line (`check_replica_selector_class`, the setting's rule).
Rule 2 (rack-aware choice, `select`): a client that names no rack reads from the leader. Otherwise, of the
candidates in the client's rack: the leader if it is one of them; else the one with the highest log end
offset, a tie going to the one caught up most recently; no candidate in the rack: the leader.
Rule 3 (candidates, the caller's: handlers/follower_reads.py): the leader, and each follower that holds the
fetch offset, has been caught up within replica.lag.time.max.ms, is in the ISR and is a live broker.
"""

from __future__ import annotations

from typing import NamedTuple

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTOR_CLASSES = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)


class ReplicaView(NamedTuple):
    """One candidate replica (Kafka's ReplicaView): its broker, rack, log end offset, last caught-up time."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    caught_up_ms: int


def check_replica_selector_class(value: str | None) -> str | None:
    """`replica.selector.class`'s rule (Rule 1): empty or one of Kafka's two selectors."""
    if not value or value in SELECTOR_CLASSES:
        return None
    return f"{value!r} is not a replica selector sparklog has (one of {', '.join(SELECTOR_CLASSES)}, or empty)"


def is_rack_aware(selector_class: str) -> bool:
    """Whether `selector_class` may send a consumer to a follower (Rule 1)."""
    return selector_class == RACK_AWARE_SELECTOR


def select(selector_class: str, client_rack: str, leader: ReplicaView, followers: list[ReplicaView]) -> int:
    """The broker `client_rack`'s consumer should read from (Rules 1 and 2)."""
    if not client_rack or not is_rack_aware(selector_class):
        return leader.broker_id
    if leader.rack == client_rack:
        return leader.broker_id
    local = [view for view in followers if view.rack == client_rack]
    if not local:
        return leader.broker_id
    return max(local, key=lambda view: (view.log_end_offset, view.caught_up_ms)).broker_id
