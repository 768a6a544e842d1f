"""Leader election as pure functions: (replicas, partition state, who may lead) -> the next partition state.

No ZooKeeper, no clocks: the controller (`sparklog.broker.replication.controller`) reads states, calls these, and writes
what they return with version-checked, controller-epoch-fenced multis.

Rule 1 (clean election, Kafka's `OfflinePartitionLeaderElectionStrategy`): a partition whose leader is not
live gets the first replica, in assignment order, that is live, eligible and in the ISR; the ISR becomes its
live members. The leader epoch is bumped whenever the leader changes (to -1 too), so a deposed or zombie
leader's requests are fenced by epoch.
Rule 2 (offline): with no live ISR member the leader becomes NO_LEADER and the ISR is kept as it was: those
replicas hold every committed message, and the first of them to come back is elected (Kafka keeps the last
ISR member for the same reason). The ISR is never empty.
Rule 3 (unclean, `unclean.leader.election.enable`): only when Rule 2 would leave the partition offline, the
first live eligible replica leads with ISR = [itself]; `Election.unclean` is set so the controller logs that
acknowledged data may have been lost.
Rule 4 (a live leader keeps its partition): dead ISR members are removed, keeping the leader epoch (an ISR
change is not a leader change; the zk version orders it). Controlled shutdown is Rule 1 with the shutting
broker not eligible: its leaderships move to another ISR member, and it leaves every ISR it is in — unless no
other ISR member could take over (RF 1): then nothing moves and the partition goes offline when it exits.
Rule 6 (damaged replicas, issue 14): a replica whose log has fenced ranges (bit rot, reported in
`/log_faults/<id>`) is treated as shutting down for that partition — it hands leadership to another ISR member
and leaves the ISR, to re-copy the range as a follower — but only while an undamaged live ISR member exists
(`damaged_excluded`): a damaged copy with every valid batch still leads rather than leave the partition
offline, serving around its fence.
Rule 5 (preferred leader): when the first assigned replica is live, in the ISR and not the leader, it becomes
leader (epoch bumped), ISR unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import AbstractSet, Sequence

from sparklog.coordination.topics import NO_LEADER, PartitionState


@dataclass(frozen=True)
class Election:
    """A state to write, and why."""

    state: PartitionState
    unclean: bool = False  # the new leader was not in the ISR: acknowledged writes may be lost
    leader_changed: bool = True  # False for an ISR-only change (Rule 4)


def elect(replicas: Sequence[int], state: PartitionState, live: AbstractSet[int], controller_epoch: int,
          unclean: bool = False, shutting_down: AbstractSet[int] = frozenset()) -> Election | None:
    """The next state of one partition (Rules 1-4), or None when nothing changes.

    `live` are the registered brokers; `shutting_down` are live brokers that must shed leadership and
    leave the ISR (controlled shutdown).
    """
    eligible = set(live) - set(shutting_down)
    live_isr = tuple(b for b in state.isr if b in eligible)
    if state.leader in eligible:
        isr = live_isr if state.leader in live_isr else (state.leader, *live_isr)
        if isr == state.isr:
            return None
        return Election(replace(state, isr=isr, controller_epoch=controller_epoch), leader_changed=False)
    if state.leader in live and not live_isr:
        return None  # a shutting broker nobody can relieve keeps leading until it exits (Rule 4)
    leader = next((r for r in replicas if r in live_isr), None)
    if leader is not None:
        isr = (leader, *(b for b in live_isr if b != leader))
        return Election(_new_leader(state, leader, isr, controller_epoch))
    candidate = next((r for r in replicas if r in eligible), None)
    if unclean and candidate is not None:
        return Election(_new_leader(state, candidate, (candidate,), controller_epoch), unclean=True)
    if state.leader == NO_LEADER:
        return None
    return Election(_new_leader(state, NO_LEADER, state.isr, controller_epoch))


def damaged_excluded(state: PartitionState, live: AbstractSet[int], shutting_down: AbstractSet[int],
                     damaged: AbstractSet[int]) -> AbstractSet[int]:
    """Rule 6: the brokers `elect` must treat as shutting down, given those with a damaged copy."""
    eligible = set(live) - set(shutting_down)
    if any(b in eligible and b not in damaged for b in state.isr):
        return set(shutting_down) | set(damaged)
    return set(shutting_down)


def elect_preferred(replicas: Sequence[int], state: PartitionState, live: AbstractSet[int],
                    controller_epoch: int) -> Election | None:
    """Rule 5: move leadership to the preferred (first assigned) replica when it can take it."""
    if not replicas:
        return None
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return Election(_new_leader(state, preferred, state.isr, controller_epoch))


def _new_leader(state: PartitionState, leader: int, isr: tuple[int, ...], controller_epoch: int) -> PartitionState:
    return replace(state, leader=leader, isr=tuple(isr), leader_epoch=state.leader_epoch + 1,
                   controller_epoch=controller_epoch)
