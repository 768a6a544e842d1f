"""One consumer group of the consumer group protocol (KIP-848) as a sans-IO state machine, beside the classic
`Group` (group.py): no sockets, no timers, every call takes `now_ms`; partitions are (topic name, index) pairs
(the handler maps topic ids). Kafka's `ConsumerGroup`, `CurrentAssignmentBuilder` and the heartbeat half of
`GroupMetadataManager`.

Epochs: the group epoch grows by one whenever what the assignment depends on changes (a member joins or
leaves or changes its subscription, a subscribed topic gains partitions or appears); the target assignment is
then computed by the group's assignor (assignors.py) and stamped with the group epoch (the assignment epoch).
Each member has a member epoch, the assignment epoch it has reconciled to.

Member states (the reconciliation, Kafka's `MemberState`):

    (join, epoch 0) --> the member takes its target's partitions that nobody else holds, member epoch =
        assignment epoch: STABLE, or UNRELEASED_PARTITIONS while some of its target is still held
    STABLE / UNRELEASED_PARTITIONS --new target, some owned partitions not in it--> UNREVOKED_PARTITIONS
        (told to keep only the rest; its epoch stays)
    UNREVOKED_PARTITIONS --a heartbeat whose owned partitions no longer hold any revoked one--> as at join
    UNRELEASED_PARTITIONS --another member released one of its target's partitions--> takes it
    any --leave (epoch -1), session expiry, or no revocation within its rebalance timeout--> removed (its
        partitions become free; group epoch + 1)
    any --static leave (epoch -2)--> kept, holding its partitions, until its instance id rejoins (with a new
        member id, epoch and partitions carried over, no new group epoch) or its session expires

Rule 1 (no partition has two owners): a partition is given to a member only when no other member holds it,
assigned or being revoked; a member stops holding a revoked partition only when its heartbeat's owned
partitions leave it out (or the member is removed).
Rule 2 (fencing): a heartbeat with an epoch above the member's, or below it but not its previous epoch with
owned partitions within its assignment (a lost response), gets FENCED_MEMBER_EPOCH; an unknown member id with
an epoch above 0 gets UNKNOWN_MEMBER_ID; an instance id held by an active member UNRELEASED_INSTANCE_ID.
Rule 3: a member's epoch never goes down while it is in the group; the group epoch never goes down.
Rule 4: a commit (OffsetCommit) from a member must carry its current member epoch (STALE_MEMBER_EPOCH
otherwise) and, unless it is transactional, come at OffsetCommit v9 or above (UNSUPPORTED_VERSION: the
versions that carry a member epoch); a commit of epoch -1 (no member: an admin client, or a consumer that
assign()s, with or without a member id) is accepted while the group is empty, and otherwise checked as the
member it names (UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH for a member of the group). An offset fetch naming
a member (a member id, or an epoch of 0 or more) is checked as that member's commit is, versions aside; one
naming none (an admin client) is not. As Kafka's `ConsumerGroup.validateOffsetCommit` / `validateOffsetFetch`.
Rule 5: the response carries the member's assignment when it joins, when the assignment changed since the
last response, or when the member's owned partitions differ from it; null otherwise (unchanged).
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from sparklog.broker.coordinator.group.assignors import ASSIGNORS, TopicPartition
from sparklog.protocol import errors

NONE = 0
UNKNOWN_MEMBER_ID = errors.UnknownMemberIdError.errno
FENCED_MEMBER_EPOCH = errors.FencedMemberEpochError.errno
UNRELEASED_INSTANCE_ID = errors.UnreleasedInstanceIdError.errno
UNSUPPORTED_ASSIGNOR = errors.UnsupportedAssignorError.errno
STALE_MEMBER_EPOCH = errors.StaleMemberEpochError.errno
UNSUPPORTED_VERSION = errors.UnsupportedVersionError.errno
MEMBER_EPOCH_COMMIT_VERSION = 9  # the first OffsetCommit version a consumer-protocol member may use (Rule 4)
INVALID_REQUEST = errors.InvalidRequestError.errno
INVALID_REGULAR_EXPRESSION = errors.InvalidRegularExpressionError.errno
GROUP_MAX_SIZE_REACHED = errors.GroupMaxSizeReachedError.errno

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class ConsumerGroupSettings:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignors: tuple[str, ...]
    max_size: int


@dataclass(frozen=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat in names; None means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatResult:
    error: int
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: frozenset[TopicPartition] | None = None
    error_message: str | None = None


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    assigned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()
    revoke_deadline_ms: int | None = None
    last_sent: frozenset[TopicPartition] | None = None
    left_static: bool = False  # static leave (epoch -2): kept for its instance id
    state: MemberState = MemberState.STABLE

    def holds(self) -> frozenset[TopicPartition]:
        return self.assigned | self.revoking


def random_member_id() -> str:
    return str(uuid.uuid4())


@dataclass
class ConsumerGroup:
    """See the module docstring. Not thread-safe: the coordinator calls it from the event loop only."""

    group_id: str
    settings: ConsumerGroupSettings
    new_member_id: Callable[[], str] = random_member_id
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    subscribed_metadata: dict[str, int] = field(default_factory=dict)  # topic -> partitions, at the last target
    assignor: str = ""

    def __post_init__(self) -> None:
        self.assignor = self.settings.assignors[0]

    # ---- the heartbeat

    def heartbeat(self, now_ms: int, req: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; `topics` is the cluster's topics (name -> partition count) now."""
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now_ms, req, topics)
        invalid = self._invalid(req)
        if invalid is not None:
            return invalid
        if req.member_epoch == JOIN_EPOCH:
            member_or_error = self._join(now_ms, req)
        else:
            member_or_error = self._known(req)
        if isinstance(member_or_error, HeartbeatResult):
            return member_or_error
        member = member_or_error
        member.deadline_ms = now_ms + self.settings.session_timeout_ms
        joined = member.epoch == JOIN_EPOCH  # new (a static member coming back keeps its epoch)
        if self._update_subscription(member, req) | self._metadata_changed(topics) | joined:
            self.group_epoch += 1
        self._maybe_assign(topics)
        self._reconcile(now_ms, member, req.owned)
        return self._response(member, req)

    def _invalid(self, req: HeartbeatRequest) -> HeartbeatResult | None:
        if req.server_assignor is not None and req.server_assignor not in self.settings.assignors:
            return HeartbeatResult(UNSUPPORTED_ASSIGNOR, error_message=f"assignor {req.server_assignor!r} is not "
                                   f"one of group.consumer.assignors {list(self.settings.assignors)}")
        if req.subscribed_topic_regex is not None:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as exc:
                return HeartbeatResult(INVALID_REGULAR_EXPRESSION, error_message=f"bad regex: {exc}")
        if req.member_epoch == JOIN_EPOCH and req.subscribed_topic_names is None and \
                req.subscribed_topic_regex is None:
            return HeartbeatResult(INVALID_REQUEST, error_message="a joining member must subscribe")
        if req.member_epoch > JOIN_EPOCH and not req.member_id:
            return HeartbeatResult(INVALID_REQUEST, error_message="member id is empty")
        return None

    def _join(self, now_ms: int, req: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        if req.instance_id is not None and req.instance_id in self.static:
            return self._rejoin_static(now_ms, req)
        member_id = req.member_id or self.new_member_id()
        if member_id in self.members:  # a member that lost its place (fenced) rejoins under its id
            self._remove(member_id)
        if len(self.members) >= self.settings.max_size:
            return HeartbeatResult(GROUP_MAX_SIZE_REACHED, error_message="group.consumer.max.size reached")
        member = ConsumerMember(member_id, req.instance_id, req.client_id, req.client_host,
                                now_ms + self.settings.session_timeout_ms)
        self.members[member_id] = member
        if req.instance_id is not None:
            self.static[req.instance_id] = member_id
        return member

    def _rejoin_static(self, now_ms: int, req: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        old = self.members[self.static[req.instance_id]]
        if not old.left_static and old.member_id != req.member_id:
            return HeartbeatResult(UNRELEASED_INSTANCE_ID, error_message=f"instance id {req.instance_id} is held "
                                   f"by member {old.member_id}")
        member_id, old_id = req.member_id or self.new_member_id(), old.member_id
        del self.members[old_id]
        old.member_id, old.left_static, old.last_sent = member_id, False, None
        old.client_id, old.client_host = req.client_id, req.client_host
        self.members[member_id] = old
        self.static[req.instance_id] = member_id
        self.target[member_id] = self.target.pop(old_id, frozenset())
        return old

    def _known(self, req: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None or member.left_static:
            return HeartbeatResult(UNKNOWN_MEMBER_ID, error_message=f"member {req.member_id} is not in the group")
        if req.member_epoch == member.epoch:
            return member
        lost_response = req.member_epoch == member.previous_epoch and req.owned is not None and \
            req.owned <= member.assigned
        if req.member_epoch > member.epoch or not lost_response:
            return HeartbeatResult(FENCED_MEMBER_EPOCH, error_message=f"epoch {req.member_epoch} is fenced: the "
                                   f"member's epoch is {member.epoch}")
        return member

    def _update_subscription(self, member: ConsumerMember, req: HeartbeatRequest) -> bool:
        """True when what the assignment depends on changed."""
        changed = False
        if req.subscribed_topic_names is not None and tuple(sorted(req.subscribed_topic_names)) != \
                member.subscribed_topic_names:
            member.subscribed_topic_names, changed = tuple(sorted(req.subscribed_topic_names)), True
        regex = req.subscribed_topic_regex or None  # librdkafka sends "" for "no regex"
        if req.subscribed_topic_regex is not None and regex != member.subscribed_topic_regex:
            member.subscribed_topic_regex, changed = regex, True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor, changed = req.server_assignor, True
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        return changed

    def _metadata_changed(self, topics: Mapping[str, int]) -> bool:
        """A subscribed topic appeared, went away or changed its partition count since the last target."""
        return self._subscribed_metadata(topics) != self.subscribed_metadata

    def _subscribed_metadata(self, topics: Mapping[str, int]) -> dict[str, int]:
        wanted = set().union(*(self.subscription(m, topics) for m in self.members.values())) if self.members \
            else set()
        return {t: topics[t] for t in sorted(wanted) if t in topics}

    def subscription(self, member: ConsumerMember, topics: Mapping[str, int]) -> frozenset[str]:
        """The member's topics: its names, and the topics its regex matches whole (internal ones excepted)."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = re.compile(member.subscribed_topic_regex)
            names.update(t for t in topics if not t.startswith("__") and pattern.fullmatch(t))
        return frozenset(names)

    def subscribed_topics(self) -> set[str]:
        """Every topic a member subscribes to by name, and those its regex matched at the last assignment."""
        return {t for m in self.members.values() for t in m.subscribed_topic_names} | set(self.subscribed_metadata)

    def _maybe_assign(self, topics: Mapping[str, int]) -> None:
        if self.group_epoch <= self.assignment_epoch:
            return
        self.assignor = self.chosen_assignor()
        active = {m.member_id: self.subscription(m, topics) for m in self.members.values()}
        self.subscribed_metadata = self._subscribed_metadata(topics)
        self.target = ASSIGNORS[self.assignor](active, self.subscribed_metadata, self.target)
        self.assignment_epoch = self.group_epoch

    def chosen_assignor(self) -> str:
        """Kafka's rule: the assignor most members ask for (ties: the first offered), else the default."""
        asked = [m.server_assignor for m in self.members.values() if m.server_assignor]
        if not asked:
            return self.settings.assignors[0]
        return max(self.settings.assignors, key=lambda a: (asked.count(a), -self.settings.assignors.index(a)))

    # ---- the reconciliation

    def _reconcile(self, now_ms: int, member: ConsumerMember, owned: frozenset[TopicPartition] | None) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # still revoking (`expire` removes it past its rebalance timeout)
            member.revoking, member.revoke_deadline_ms = frozenset(), None
        target = self.target.get(member.member_id, frozenset())
        if member.epoch != self.assignment_epoch:
            revoke = member.assigned - target
            if revoke:
                member.assigned, member.revoking = member.assigned & target, revoke
                member.state = MemberState.UNREVOKED_PARTITIONS
                member.revoke_deadline_ms = now_ms + member.rebalance_timeout_ms
                return
            self._advance(member, self.assignment_epoch)
        self._take_free(member, target)

    def _advance(self, member: ConsumerMember, epoch: int) -> None:
        if epoch != member.epoch:
            member.previous_epoch, member.epoch = member.epoch, epoch

    def _take_free(self, member: ConsumerMember, target: frozenset[TopicPartition]) -> None:
        """Rule 1: take the target's partitions nobody else holds."""
        held = set().union(*(m.holds() for m in self.members.values() if m is not member))
        member.assigned = member.assigned | frozenset(tp for tp in target if tp not in held)
        member.assigned &= target
        member.state = MemberState.STABLE if member.assigned == target else MemberState.UNRELEASED_PARTITIONS

    def _response(self, member: ConsumerMember, req: HeartbeatRequest) -> HeartbeatResult:
        """Rule 5."""
        send = req.member_epoch == JOIN_EPOCH or member.last_sent != member.assigned or (
            req.owned is not None and req.owned != member.assigned)
        if send:
            member.last_sent = member.assigned
        return HeartbeatResult(NONE, member.member_id, member.epoch, self.settings.heartbeat_interval_ms,
                               member.assigned if send else None)

    # ---- leaving, expiry, commits

    def _leave(self, now_ms: int, req: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None:
            return HeartbeatResult(UNKNOWN_MEMBER_ID, error_message=f"member {req.member_id} is not in the group")
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.left_static = True
            member.deadline_ms = now_ms + self.settings.session_timeout_ms
        else:
            self._remove(member.member_id)
            self._maybe_assign(topics)
        return HeartbeatResult(NONE, req.member_id, req.member_epoch, self.settings.heartbeat_interval_ms)

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self.group_epoch += 1

    def expire(self, now_ms: int, topics: Mapping[str, int]) -> list[str]:
        """Remove the members whose session ran out or who did not revoke in time; their ids."""
        gone = [m.member_id for m in self.members.values() if now_ms >= m.deadline_ms or (
            m.revoke_deadline_ms is not None and now_ms >= m.revoke_deadline_ms)]
        for member_id in gone:
            self._remove(member_id)
        if gone:
            self._maybe_assign(topics)
        return gone

    def next_deadline(self) -> int | None:
        deadlines = [m.deadline_ms for m in self.members.values()]
        deadlines += [m.revoke_deadline_ms for m in self.members.values() if m.revoke_deadline_ms is not None]
        return min(deadlines, default=None)

    def check_commit(self, member_id: str, member_epoch: int, api_version: int | None = None) -> int:
        """Rule 4 for a commit; `api_version` None for a transactional one (TxnOffsetCommit)."""
        if member_epoch < 0 and not self.members:
            return NONE
        if member_id in self.members and api_version is not None and api_version < MEMBER_EPOCH_COMMIT_VERSION:
            return UNSUPPORTED_VERSION
        return self._check_member_epoch(member_id, member_epoch)

    def check_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """Rule 4 for an offset fetch."""
        if member_id is None and member_epoch < 0:
            return NONE
        return self._check_member_epoch(member_id or "", member_epoch)

    def _check_member_epoch(self, member_id: str, member_epoch: int) -> int:
        """Rule 4's member check, shared by commits and fetches: a member of the group, at its epoch."""
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return NONE if member_epoch == member.epoch else STALE_MEMBER_EPOCH

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE
