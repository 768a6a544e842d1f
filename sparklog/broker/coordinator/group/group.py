"""One broker-coordinated consumer group as a sans-IO state machine (Kafka's `GroupMetadata` and the
join/sync/heartbeat half of `GroupCoordinator`): no sockets, no timers; every call takes `now_ms`.

States and transitions (`generation` grows by one on every completed join):

    EMPTY --join--> PREPARING_REBALANCE
        (the first join waits `initial_delay_ms`, extended by each newcomer, up to the rebalance timeout)
    PREPARING_REBALANCE --every member rejoined (or the rebalance timeout passed: the others are removed)-->
        COMPLETING_REBALANCE (generation+1; the leader receives every member's metadata)
        or EMPTY (generation+1) when nobody is left
    COMPLETING_REBALANCE --the leader's SyncGroup--> STABLE (each waiting member gets its assignment)
    COMPLETING_REBALANCE --join with new protocols, leave, session or sync timeout--> PREPARING_REBALANCE
    STABLE --join by a new member, by the leader, or with new protocols; leave; session expiry-->
        PREPARING_REBALANCE
    EMPTY --delete--> DEAD (terminal: the coordinator forgets the group)

Rule 1 (KIP-394): a dynamic member joining with an empty member id at JoinGroup v4+ is given an id and
MEMBER_ID_REQUIRED; it becomes a member when it rejoins with that id within its session timeout.
Rule 2 (KIP-345): a static member (`group.instance.id`) that rejoins with an empty member id replaces its
old member id; in STABLE with unchanged protocols it gets the current generation and keeps its assignment
(no rebalance). The old member id is fenced: requests naming the instance with another id get
FENCED_INSTANCE_ID. When that member was the leader (KIP-814, Kafka's `updateStaticMemberAndRebalance`), at
JoinGroup v9+ it is told every member with `skip_assignment` (it may watch their metadata, it must not assign);
below v9 it gets no members and the old leader id, so it takes itself for a follower.
Rule 3 (fencing): a request naming a member id the group does not have gets UNKNOWN_MEMBER_ID; a
generation other than the current one ILLEGAL_GENERATION; a heartbeat or sync while the group is
rebalancing REBALANCE_IN_PROGRESS (the member must rejoin); a SyncGroup (v5+) naming a protocol type or name
other than the group's INCONSISTENT_GROUP_PROTOCOL (after the member checks, as Kafka orders them). A commit is refused so only in
COMPLETING_REBALANCE: while the group prepares one, members of the current generation still own their
partitions and may commit them (Kafka's rule since KIP-429: a cooperative member keeps committing what it
keeps, an eager one commits in its revoke callback before rejoining).
Rule 4: members waiting for their JoinGroup or SyncGroup response do not expire by session (the rebalance
timeout bounds them); every other member expires `session_timeout_ms` after its last request.
Rule 5: a delayed response is not returned (`Delayed(member id)` is) but queued in `outbox` as
(member id, JoinResult | SyncResult); the caller drains it after every call and after `tick(now_ms)`, which
it calls at `next_deadline()`.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

from sparklog.protocol import errors

NONE = 0
UNKNOWN_MEMBER_ID = errors.UnknownMemberIdError.errno
ILLEGAL_GENERATION = errors.IllegalGenerationError.errno
REBALANCE_IN_PROGRESS = errors.RebalanceInProgressError.errno
INCONSISTENT_GROUP_PROTOCOL = errors.InconsistentGroupProtocolError.errno
MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.errno
FENCED_INSTANCE_ID = errors.FencedInstanceIdError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
GROUP_MAX_SIZE_REACHED = errors.GroupMaxSizeReachedError.errno

NO_GENERATION = -1
# JoinGroup v4 introduced KIP-394's MEMBER_ID_REQUIRED round trip, v9 KIP-814's skip_assignment.
MEMBER_ID_REQUIRED_VERSION = 4
SKIP_ASSIGNMENT_VERSION = 9


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    """The broker's group.* settings this class needs (Kafka defaults in coordinator/group/config.py)."""

    initial_delay_ms: int
    max_size: int


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference
    api_version: int = MEMBER_ID_REQUIRED_VERSION


@dataclass(frozen=True)
class JoinResult:
    error: int
    generation: int = NO_GENERATION
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata) for the leader
    protocol_type: str | None = None
    skip_assignment: bool = False  # Rule 2's static leader at v9+


@dataclass(frozen=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    # the group's, answered at SyncGroup v5+ (not compared: they say nothing of the member's outcome)
    protocol_type: str | None = field(default=None, compare=False)
    protocol_name: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Delayed:
    """The response to this member comes later, through the outbox (Rule 5)."""

    member_id: str


@dataclass
class Member:
    member_id: str
    join: JoinRequest
    deadline_ms: int  # session expiry (Rule 4)
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.join.protocols if name == protocol), b"")


def random_member_id(prefix: str) -> str:
    """Kafka's form: the client id (or instance id) and a UUID."""
    return f"{prefix}-{uuid.uuid4()}"


class Group:
    """See the module docstring. Not thread-safe: the coordinator calls it from the event loop only."""

    def __init__(self, group_id: str, settings: GroupSettings,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        self.group_id = group_id
        self.settings = settings
        self._new_member_id = new_member_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, int] = {}  # KIP-394 member id -> deadline to rejoin with it
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.outbox: list[tuple[str, JoinResult | SyncResult]] = []
        self._join_deadline_ms: int | None = None
        self._join_limit_ms: int | None = None  # the initial delay never extends past this
        self._sync_deadline_ms: int | None = None

    # ---- JoinGroup

    def join(self, now_ms: int, req: JoinRequest) -> JoinResult | Delayed:
        """The response now, or Delayed(the member's id) until the end of the rebalance (Rule 5)."""
        if self.state is GroupState.DEAD:
            return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=req.member_id)
        if not self._protocols_fit(req):
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if req.member_id == "":
            return self._join_unknown(now_ms, req)
        if req.instance_id is not None and self.static.get(req.instance_id, req.member_id) != req.member_id:
            return JoinResult(FENCED_INSTANCE_ID, member_id=req.member_id)
        if req.member_id in self.pending:
            del self.pending[req.member_id]
            return self._add_and_rebalance(now_ms, req.member_id, req)
        member = self.members.get(req.member_id)
        if member is None:
            return JoinResult(UNKNOWN_MEMBER_ID, member_id=req.member_id)
        return self._join_known(now_ms, member, req)

    def _protocols_fit(self, req: JoinRequest) -> bool:
        if not req.protocol_type or not req.protocols:
            return False
        if not self.members:
            return True
        return req.protocol_type == self.protocol_type and bool(self._candidates() & {n for n, _ in req.protocols})

    def _join_unknown(self, now_ms: int, req: JoinRequest) -> JoinResult | Delayed:
        member_id = self._new_member_id(req.instance_id or req.client_id)
        if req.instance_id is not None and req.instance_id in self.static:
            return self._replace_static(now_ms, member_id, req)
        if req.instance_id is None and req.api_version >= MEMBER_ID_REQUIRED_VERSION:
            self.pending[member_id] = now_ms + req.session_timeout_ms
            return JoinResult(MEMBER_ID_REQUIRED, member_id=member_id)
        return self._add_and_rebalance(now_ms, member_id, req)

    def _replace_static(self, now_ms: int, member_id: str, req: JoinRequest) -> JoinResult | Delayed:
        """Rule 2: the restarted static member takes over its old id's place (and assignment)."""
        old = self.members.pop(self.static[req.instance_id])
        if old.awaiting_join:
            self.outbox.append((old.member_id, JoinResult(FENCED_INSTANCE_ID, member_id=old.member_id)))
        if old.awaiting_sync:
            self.outbox.append((old.member_id, SyncResult(FENCED_INSTANCE_ID)))
        member = Member(member_id, req, now_ms + req.session_timeout_ms, assignment=old.assignment)
        self.members[member_id] = member
        self.static[req.instance_id] = member_id
        was_leader = self.leader == old.member_id
        if was_leader:
            self.leader = member_id
        unchanged = old.join.protocols == req.protocols
        if self.state is GroupState.STABLE and unchanged:
            return self._static_leader_result(member, old.member_id) if was_leader else (
                self._join_result(member, with_members=False))
        return self._rebalance_with(now_ms, member)

    def _static_leader_result(self, member: Member, old_member_id: str) -> JoinResult:
        """Rule 2's leader in a stable group: the members and skip_assignment at v9+, else the old leader id."""
        if member.join.api_version >= SKIP_ASSIGNMENT_VERSION:
            return replace(self._join_result(member, with_members=True), skip_assignment=True)
        return replace(self._join_result(member, with_members=False), leader=old_member_id)

    def _add_and_rebalance(self, now_ms: int, member_id: str, req: JoinRequest) -> JoinResult | Delayed:
        if len(self.members) >= self.settings.max_size:
            return JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member_id)
        member = Member(member_id, req, now_ms + req.session_timeout_ms)
        self.members[member_id] = member
        if req.instance_id is not None:
            self.static[req.instance_id] = member_id
        if self.protocol_type is None:
            self.protocol_type = req.protocol_type
        if self.state is GroupState.PREPARING_REBALANCE and self._join_limit_ms is not None:
            self._join_deadline_ms = min(now_ms + self.settings.initial_delay_ms, self._join_limit_ms)
        return self._rebalance_with(now_ms, member)

    def _join_known(self, now_ms: int, member: Member, req: JoinRequest) -> JoinResult | Delayed:
        changed = member.join.protocols != req.protocols
        member.join = req
        member.deadline_ms = now_ms + req.session_timeout_ms
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(member, with_members=member.member_id == self.leader)
        if self.state is GroupState.STABLE and not changed and member.member_id != self.leader:
            return self._join_result(member, with_members=False)
        return self._rebalance_with(now_ms, member)

    def _rebalance_with(self, now_ms: int, member: Member) -> JoinResult | Delayed:
        """`member` waits for the end of a (possibly new) rebalance."""
        if member.awaiting_join:  # a second JoinGroup replaces the first: answer the first at once
            self.outbox.append((member.member_id, JoinResult(REBALANCE_IN_PROGRESS, member_id=member.member_id)))
        member.awaiting_join = True
        self._prepare_rebalance(now_ms)
        self._maybe_complete_join(now_ms)
        return Delayed(member.member_id)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state is GroupState.PREPARING_REBALANCE:
            return
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(REBALANCE_IN_PROGRESS)
        rebalance_ms = max((m.join.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state is GroupState.EMPTY:
            self._join_limit_ms = now_ms + rebalance_ms
            self._join_deadline_ms = min(now_ms + self.settings.initial_delay_ms, self._join_limit_ms)
        else:
            self._join_limit_ms = None
            self._join_deadline_ms = now_ms + rebalance_ms
        self._sync_deadline_ms = None
        self.state = GroupState.PREPARING_REBALANCE

    def _maybe_complete_join(self, now_ms: int) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        delaying = self._join_limit_ms is not None and now_ms < (self._join_deadline_ms or 0)
        if all(m.awaiting_join for m in self.members.values()) and not delaying:
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            self._remove(member)
        self.generation += 1
        self._join_deadline_ms = self._join_limit_ms = None
        if not self.members:
            self.state, self.protocol, self.protocol_type, self.leader = GroupState.EMPTY, None, None, None
            return
        self.state = GroupState.COMPLETING_REBALANCE
        self.protocol = self._select_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._sync_deadline_ms = now_ms + max(m.join.rebalance_timeout_ms for m in self.members.values())
        for member in self.members.values():
            member.awaiting_join = False
            member.assignment = b""
            member.deadline_ms = now_ms + member.join.session_timeout_ms
            self.outbox.append((member.member_id, self._join_result(member, member.member_id == self.leader)))

    def _candidates(self) -> set[str]:
        names = [{n for n, _ in m.join.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def _select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that every member supports."""
        candidates = self._candidates()
        votes = Counter(next(n for n, _ in m.join.protocols if n in candidates) for m in self.members.values())
        return max(sorted(votes), key=lambda name: votes[name])

    def _join_result(self, member: Member, with_members: bool) -> JoinResult:
        members = tuple((m.member_id, m.join.instance_id, m.metadata(self.protocol))
                        for m in self.members.values()) if with_members else ()
        return JoinResult(NONE, self.generation, self.protocol, self.leader or "", member.member_id, members,
                          self.protocol_type)

    # ---- SyncGroup, Heartbeat, LeaveGroup, OffsetCommit

    def check_member(self, member_id: str, instance_id: str | None, generation: int) -> int:
        """Rule 3's checks shared by sync, heartbeat and commit (the state is checked by each)."""
        if instance_id is not None and self.static.get(instance_id, member_id) != member_id:
            return FENCED_INSTANCE_ID
        if self.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ILLEGAL_GENERATION
        return NONE

    def sync(self, now_ms: int, member_id: str, instance_id: str | None, generation: int,
             assignments: dict[str, bytes], protocol: tuple[str | None, str | None] = (None, None)
             ) -> SyncResult | Delayed:
        """``protocol``: SyncGroup v5's (protocol type, protocol name), each None when not given (Rule 3)."""
        code = self.check_member(member_id, instance_id, generation)
        if code == NONE and not self._protocol_matches(*protocol):
            code = INCONSISTENT_GROUP_PROTOCOL
        if code != NONE:
            return SyncResult(code)
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(REBALANCE_IN_PROGRESS)
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.join.session_timeout_ms
        if self.state is GroupState.STABLE:
            return self._synced(member)
        if member.awaiting_sync:  # a second SyncGroup replaces the first: answer the first at once
            self.outbox.append((member_id, SyncResult(REBALANCE_IN_PROGRESS)))
        member.awaiting_sync = True
        if member_id == self.leader:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.state, self._sync_deadline_ms = GroupState.STABLE, None
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    m.deadline_ms = now_ms + m.join.session_timeout_ms
                    self.outbox.append((m.member_id, self._synced(m)))
        return Delayed(member_id)

    def _protocol_matches(self, protocol_type: str | None, protocol_name: str | None) -> bool:
        return (protocol_type is None or protocol_type == self.protocol_type) and (
            protocol_name is None or protocol_name == self.protocol)

    def _synced(self, member: Member) -> SyncResult:
        return SyncResult(NONE, member.assignment, self.protocol_type, self.protocol)

    def heartbeat(self, now_ms: int, member_id: str, instance_id: str | None, generation: int) -> int:
        code = self.check_member(member_id, instance_id, generation)
        if code != NONE:
            return code
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.join.session_timeout_ms
        return REBALANCE_IN_PROGRESS if self.state is GroupState.PREPARING_REBALANCE else NONE

    def check_commit(self, member_id: str, instance_id: str | None, generation: int) -> int:
        """May this member commit offsets now? Member-less commits (generation -1, whatever the member id, as
        Kafka's `ClassicGroup.validateOffsetCommit`) only to an empty group."""
        if generation < 0 and self.state is GroupState.EMPTY:
            return NONE
        code = self.check_member(member_id, instance_id, generation)
        if code == NONE and self.state is GroupState.COMPLETING_REBALANCE:  # Rule 3
            return REBALANCE_IN_PROGRESS
        return code

    def leave(self, now_ms: int, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None and self.static.get(instance_id, member_id) != member_id:
            return FENCED_INSTANCE_ID
        if member_id in self.pending:
            del self.pending[member_id]
            return NONE
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        self._remove(member)
        self._member_gone(now_ms)
        return NONE

    def _remove(self, member: Member) -> None:
        del self.members[member.member_id]
        if member.join.instance_id is not None and self.static.get(member.join.instance_id) == member.member_id:
            del self.static[member.join.instance_id]
        if member.awaiting_join:
            self.outbox.append((member.member_id, JoinResult(UNKNOWN_MEMBER_ID, member_id=member.member_id)))
        if member.awaiting_sync:
            self.outbox.append((member.member_id, SyncResult(UNKNOWN_MEMBER_ID)))

    def _member_gone(self, now_ms: int) -> None:
        if self.leader is not None and self.leader not in self.members:
            self.leader = next(iter(self.members), None)
        if not self.members:
            self._become_empty()
        elif self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        self._maybe_complete_join(now_ms)

    def _become_empty(self) -> None:
        self.generation += 1
        self.state, self.protocol, self.protocol_type, self.leader = GroupState.EMPTY, None, None, None
        self._join_deadline_ms = self._join_limit_ms = self._sync_deadline_ms = None

    def _fail_syncs(self, code: int) -> None:
        for m in self.members.values():
            if m.awaiting_sync:
                m.awaiting_sync = False
                self.outbox.append((m.member_id, SyncResult(code)))

    # ---- time, deletion

    def next_deadline(self) -> int | None:
        """When `tick` next has something to do, or None."""
        times = [d for d in (self._join_deadline_ms, self._sync_deadline_ms) if d is not None]
        times += [m.deadline_ms for m in self.members.values() if not (m.awaiting_join or m.awaiting_sync)]
        times += self.pending.values()
        return min(times, default=None)

    def tick(self, now_ms: int) -> None:
        """Expire sessions (Rule 4), KIP-394 pending ids, and the join and sync deadlines."""
        for member_id, deadline in list(self.pending.items()):
            if deadline <= now_ms:
                del self.pending[member_id]
        expired = [m for m in self.members.values()
                   if m.deadline_ms <= now_ms and not (m.awaiting_join or m.awaiting_sync)]
        if self.state is GroupState.COMPLETING_REBALANCE and _due(self._sync_deadline_ms, now_ms):
            expired += [m for m in self.members.values() if not m.awaiting_sync and m not in expired]
        for member in expired:
            self._remove(member)
        if expired:
            self._member_gone(now_ms)
        if self.state is GroupState.PREPARING_REBALANCE and _due(self._join_deadline_ms, now_ms):
            self._complete_join(now_ms)  # whoever has not rejoined is removed

    def delete(self) -> bool:
        """EMPTY -> DEAD; False (Kafka's NON_EMPTY_GROUP) in any other state."""
        if self.state is not GroupState.EMPTY:
            return False
        self.state = GroupState.DEAD
        self.pending.clear()
        return True


def _due(deadline_ms: int | None, now_ms: int) -> bool:
    return deadline_ms is not None and deadline_ms <= now_ms
