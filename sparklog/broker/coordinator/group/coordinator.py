"""The broker's group coordinator: owns every Kafka group this broker coordinates, and is the asyncio edge of
the sans-IO `Group` state machine (group.py): it reads the loop's clock, parks delayed JoinGroup and SyncGroup
responses on futures, and runs one timer per group at `Group.next_deadline()`.

Rule 1: every call runs on the event loop; nothing here blocks or touches ZooKeeper.
Rule 2: after every call into a group, its outbox is drained to the waiting futures (first come, first
served per (member, kind): a member's replaced JoinGroup is answered before its new one) and its timer is
re-armed. A waiter whose connection went away has a cancelled future, which is skipped.
Rule 3: a group that is EMPTY with no pending member and no timer is forgotten (Kafka keeps it until its
offsets expire; its offsets are in the offset store, so nothing is lost); DeleteGroups makes it DEAD first.
Rule 4: `close()` answers every waiter with COORDINATOR_NOT_AVAILABLE (the client finds the coordinator
again) and cancels the timers.
Rule 5: when this broker stops leading an offsets partition, `unload` forgets the groups placed on it (Kafka's
onResignation): their waiters are answered NOT_COORDINATOR, and every later request of theirs is answered
NOT_COORDINATOR by the handlers, so members find the new coordinator and rejoin there.
Rule 6: the consumer-protocol groups (KIP-848) live beside the classic ones in `consumer_groups`
(consumer_coordinator.py, whose Rule 2 says how the two share group ids): a JoinGroup for a consumer group
with members is INCONSISTENT_GROUP_PROTOCOL, an empty one converts; commits, lists, deletes and unloads
cover both.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Callable

from sparklog.broker.coordinator.group.group import (COORDINATOR_NOT_AVAILABLE, NONE, UNKNOWN_MEMBER_ID, Delayed, Group,
                                   GroupSettings, GroupState, JoinRequest, JoinResult, SyncResult, random_member_id)
from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.consumer_coordinator import ConsumerGroups
from sparklog.protocol import errors

INVALID_SESSION_TIMEOUT = errors.InvalidSessionTimeoutError.errno
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.errno
NON_EMPTY_GROUP = errors.NonEmptyGroupError.errno
INCONSISTENT_GROUP_PROTOCOL = errors.InconsistentGroupProtocolError.errno
CONSUMER_GROUP_TYPE = "consumer"  # ListGroups' protocol type of a consumer-protocol group (Kafka's)

_JOIN, _SYNC = "join", "sync"


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class GroupCoordinatorStatistics:
    groups: int
    members: int
    waiting_requests: int
    rebalances: int


class GroupCoordinator:
    """See the module docstring. `clock_ms` defaults to the running loop's monotonic clock."""

    def __init__(self, config: GroupConfig, clock_ms: Callable[[], int] | None = None,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        self.config = config
        self._settings = GroupSettings(initial_delay_ms=config.initial_rebalance_delay_ms, max_size=config.max_size)
        self._clock_ms = clock_ms
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self._waiting: dict[tuple[str, str, str], deque[asyncio.Future]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._rebalances = 0
        self.consumer_groups = ConsumerGroups(config, clock_ms)

    def now_ms(self) -> int:
        if self._clock_ms is not None:
            return self._clock_ms()
        return int(asyncio.get_running_loop().time() * 1000)

    # ---- the four membership calls

    async def join(self, group_id: str, req: JoinRequest) -> JoinResult:
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        if self.consumer_groups.refuses_classic(group_id):  # Rule 6
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        self.consumer_groups.unload(lambda g: g == group_id)  # an empty consumer group converts
        group = self.groups.get(group_id)
        if group is None:
            if req.member_id:  # Kafka: a member id of a group we do not know
                return JoinResult(UNKNOWN_MEMBER_ID, member_id=req.member_id)
            group = self.groups[group_id] = Group(group_id, self._settings, self._new_member_id)
        generation = group.generation
        result = await self._call(group, (group_id, req.member_id, _JOIN), lambda now: group.join(now, req))
        if group.generation != generation:
            self._rebalances += 1
        return result

    async def sync(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                   assignments: dict[str, bytes], protocol: tuple[str | None, str | None] = (None, None)
                   ) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        return await self._call(group, (group_id, member_id, _SYNC),
                                lambda now: group.sync(now, member_id, instance_id, generation, assignments, protocol))

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        code = group.heartbeat(self.now_ms(), member_id, instance_id, generation)
        self._after(group)
        return code

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        code = group.leave(self.now_ms(), member_id, instance_id)
        self._after(group)
        return code

    def check_commit(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                     api_version: int | None = None) -> int:
        """May this commit go to the offset store? A group we do not know accepts member-less commits only
        (a negative generation, whatever the member id: Kafka's "simple" group, e.g. librdkafka's consumer of
        group.protocol=consumer that assign()s, which sends its own member id); a consumer group's member
        commits with its member epoch as the generation, at OffsetCommit `api_version` (None: TxnOffsetCommit)
        (Rule 6)."""
        consumer = self.consumer_groups.check_commit(group_id, member_id, generation, api_version)
        if consumer is not None:
            return consumer
        group = self.groups.get(group_id)
        if group is None:
            return NONE if generation < 0 else UNKNOWN_MEMBER_ID
        return group.check_commit(member_id, instance_id, generation)

    # ---- reading and deleting

    def describe(self, group_id: str) -> GroupDescription | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        members = tuple(MemberDescription(m.member_id, m.join.instance_id, m.join.client_id, m.join.client_host,
                                          m.metadata(group.protocol), m.assignment)
                        for m in group.members.values())
        return GroupDescription(group_id, group.state.value, group.protocol_type or "", group.protocol or "",
                                group.generation, members)

    def list(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this coordinator knows."""
        classic = [(g, group.protocol_type or "", group.state.value) for g, group in self.groups.items()]
        consumer = [(g, CONSUMER_GROUP_TYPE, state) for g, state in self.consumer_groups.list()]
        return sorted(classic + consumer)

    def delete(self, group_id: str) -> int:
        """DeleteGroups' membership half: NON_EMPTY_GROUP while members are in it (offsets are the caller's)."""
        if self.consumer_groups.refuses_classic(group_id):
            return NON_EMPTY_GROUP
        group = self.groups.get(group_id)
        if group is None:
            return NONE
        if not group.delete():
            return NON_EMPTY_GROUP
        self._forget(group_id)
        return NONE

    def has_members(self, group_id: str) -> bool:
        """Offset expiry's question (offset_cache Rule 3): does the group have members now?"""
        return self.has_classic_members(group_id) or self.consumer_groups.refuses_classic(group_id)

    def has_classic_members(self, group_id: str) -> bool:
        """Rule 6, for a consumer heartbeat: does a classic group of this id have members (or joiners)?"""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members or group.pending)

    def forget_empty_classic(self, group_id: str) -> None:
        """Rule 6: an empty classic group converts to a consumer group (its offsets stay)."""
        group = self.groups.get(group_id)
        if group is not None and not (group.members or group.pending):
            self._forget(group_id)

    def unload(self, placed_here: Callable[[str], bool], code: int) -> int:
        """Rule 5: forget the groups `placed_here` says moved away; their waiters get `code`. How many."""
        self.consumer_groups.unload(placed_here)
        gone = [g for g in self.groups if placed_here(g)]
        for group_id in gone:
            self._answer_waiters(lambda key: key[0] == group_id, code)
            self._forget(group_id)
        return len(gone)

    def statistics(self) -> GroupCoordinatorStatistics:
        return GroupCoordinatorStatistics(
            groups=len(self.groups), members=sum(len(g.members) for g in self.groups.values()),
            waiting_requests=sum(len(q) for q in self._waiting.values()), rebalances=self._rebalances)

    def close(self) -> None:
        self.consumer_groups.close()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._answer_waiters(lambda key: True, COORDINATOR_NOT_AVAILABLE)

    def _answer_waiters(self, which: Callable[[tuple[str, str, str]], bool], code: int) -> None:
        for key in [k for k in self._waiting if which(k)]:
            _, member_id, kind = key
            for future in self._waiting.pop(key):
                if not future.done():
                    future.set_result(JoinResult(code, member_id=member_id) if kind == _JOIN else SyncResult(code))

    # ---- the edge: futures and timers

    async def _call(self, group: Group, key: tuple[str, str, str], call):
        future = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(key, deque())
        queue.append(future)
        try:
            result = call(self.now_ms())
        except BaseException:
            queue.remove(future)
            raise
        queue.remove(future)
        if isinstance(result, Delayed):  # wait under the member's id (the group may just have given it)
            self._waiting.setdefault((key[0], result.member_id, key[2]), deque()).append(future)
        else:
            future.set_result(result)
        if not queue:
            self._waiting.pop(key, None)
        self._after(group)
        return await future

    def _after(self, group: Group) -> None:
        """Rule 2: deliver the outbox, re-arm the timer, forget an idle empty group."""
        for member_id, result in group.outbox:
            kind = _JOIN if isinstance(result, JoinResult) else _SYNC
            queue = self._waiting.get((group.group_id, member_id, kind))
            while queue:
                future = queue.popleft()
                if not future.done():
                    future.set_result(result)
                    break
            if queue is not None and not queue:
                del self._waiting[(group.group_id, member_id, kind)]
        group.outbox.clear()
        self._arm(group)

    def _arm(self, group: Group) -> None:
        timer = self._timers.pop(group.group_id, None)
        if timer is not None:
            timer.cancel()
        deadline = group.next_deadline()
        if deadline is None:
            if group.state is GroupState.EMPTY and not group.pending:
                self._forget(group.group_id)
            return
        loop = asyncio.get_running_loop()
        delay_s = max(0.0, (deadline - self.now_ms()) / 1000)
        self._timers[group.group_id] = loop.call_later(delay_s, self._tick, group)

    def _tick(self, group: Group) -> None:
        self._timers.pop(group.group_id, None)
        if self.groups.get(group.group_id) is group:
            group.tick(self.now_ms())
            self._after(group)

    def _forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        timer = self._timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

