"""LeaderState: what the leader of one partition knows of its followers (Kafka's Partition.scala), pure.

Rule 1: a follower's log end offset (LEO) is the offset it fetches from; it is unknown until its first
fetch in this leader epoch.
Rule 2: the high watermark (HW) is the minimum LEO over the ISR, the leader's own included, and never goes
backwards: while an ISR member's LEO is unknown, the HW stays where it is.
Rule 3: a follower is caught up at time t if it fetched at t from an offset >= the leader's LEO then, or
from an offset >= the LEO of its previous fetch (it has since read everything that was there, Kafka's
lastCaughtUpTimeMs). An ISR member not caught up for `replica.lag.time.max.ms` is proposed for removal;
a replica outside the ISR whose LEO reaches the HW (and the start of this leader epoch) is proposed for
joining; a replica that leaves the ISR (by this leader's shrink or the controller's write) has its LEO
unknown again, so only a fetch made after it left can bring it back (a broker in controlled shutdown has
stopped fetching, and a cut-off follower's last fetch says nothing of now). The proposals are written to ZooKeeper by the caller (version-checked, replica_manager.py);
`set_isr` applies what was written.

Times are monotonic milliseconds passed in by the caller, so every rule is testable without a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1


@dataclass
class FollowerState:
    leo: int = UNKNOWN_OFFSET
    caught_up_ms: int = 0  # the last time this follower was caught up (Rule 3)
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET  # the leader's LEO at this follower's previous fetch


class LeaderState:
    """One led partition's followers, ISR and HW (module docstring)."""

    def __init__(self, leader: int, replicas, isr, leader_epoch: int, epoch_start_offset: int,
                 high_watermark: int, now_ms: int) -> None:
        self.leader = leader
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr) | {leader}
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        # A follower in the ISR gets a full lag period from now before it can be dropped.
        self.followers = {r: FollowerState(caught_up_ms=now_ms) for r in self.replicas if r != leader}

    def update_follower(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A fetch from `replica` at `fetch_offset` (Rules 1 and 3)."""
        state = self.followers.get(replica)
        if state is None:
            return
        if fetch_offset >= leader_leo:
            state.caught_up_ms = now_ms
        elif state.last_fetch_leader_leo != UNKNOWN_OFFSET and fetch_offset >= state.last_fetch_leader_leo:
            state.caught_up_ms = max(state.caught_up_ms, state.last_fetch_ms)
        state.leo = fetch_offset
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_leo = leader_leo

    def compute_high_watermark(self, leader_leo: int) -> int:
        """Rule 2: the new HW (also stored in `high_watermark`)."""
        candidate = leader_leo
        for replica in self.isr:
            if replica == self.leader:
                continue
            state = self.followers.get(replica)
            if state is None or state.leo == UNKNOWN_OFFSET:
                return self.high_watermark
            candidate = min(candidate, state.leo)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
        return self.high_watermark

    def to_shrink(self, now_ms: int, lag_time_max_ms: int) -> frozenset[int]:
        """ISR members that have not been caught up for `lag_time_max_ms` (Rule 3)."""
        return frozenset(r for r in self.isr if r != self.leader and r in self.followers
                         and now_ms - self.followers[r].caught_up_ms > lag_time_max_ms)

    def to_expand(self, leader_leo: int) -> frozenset[int]:
        """Replicas outside the ISR that have caught up with the HW and this epoch's start (Rule 3)."""
        floor = max(self.high_watermark, self.epoch_start_offset)
        return frozenset(r for r, s in self.followers.items()
                         if r not in self.isr and s.leo != UNKNOWN_OFFSET and s.leo >= min(floor, leader_leo))

    def set_isr(self, isr, now_ms: int) -> None:
        """The ISR as now written in ZooKeeper; newcomers get a full lag period from now, leavers an unknown
        LEO (Rule 3)."""
        isr = frozenset(isr) | {self.leader}
        for replica in self.isr - isr:
            state = self.followers.get(replica)
            if state is not None:
                state.leo = UNKNOWN_OFFSET
        for replica in isr - self.isr:
            state = self.followers.get(replica)
            if state is not None:
                state.caught_up_ms = max(state.caught_up_ms, now_ms)
        self.isr = isr
