"""The consumer-protocol half of the group coordinator (KIP-848): owns the `ConsumerGroup`s (consumer_group.py)
this broker coordinates and is their asyncio edge: reads the loop's clock and runs one timer per group at its
`next_deadline()` (session expiry, revocation timeout). A heartbeat is answered at once: nothing waits.

Rule 1: every call runs on the event loop; nothing here blocks or touches ZooKeeper.
Rule 2 (coexistence, Kafka's rules with online migration off): a group id is either classic or consumer. The
classic `GroupCoordinator` asks `refuses_classic` before a JoinGroup (a consumer group with members answers
INCONSISTENT_GROUP_PROTOCOL; an empty one is forgotten, converted); the heartbeat handler checks the classic
side before calling here (a classic group with members answers GROUP_ID_NOT_FOUND; an empty one converts).
Offsets are the group id's, in `__consumer_offsets`, whichever protocol commits them.
Rule 3: an empty consumer group is forgotten at once (its offsets stay in the offset store, as for classic).
Rule 4: `unload` and `close` forget groups as the classic coordinator does; their members' next heartbeat
gets NOT_COORDINATOR (from the handlers) and finds the new coordinator, which has rebuilt the group from its
records (Rule 5): they carry on with their epochs and partitions.
Rule 5 (persistence, Kafka's new group coordinator): with a `sink` (the offset store), every change of a
group is written to `__consumer_offsets` as its records (consumer_group_state.py) before the heartbeat that
made it is answered: `write_changes` takes, synchronously after the change, the records that differ from
those written last (tombstones for a member gone, and for the whole group once it is empty and forgotten),
and returns the write to await; a change by a timer (session or revocation expiry) is written the same way
without anyone waiting. A failed write answers its error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) and the
keys it touched are written again with the next change. `load` installs the groups a load of an offsets
partition rebuilt (a group left without members is tombstoned instead).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Coroutine, Mapping, Protocol

from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.consumer_group import (NONE, UNKNOWN_MEMBER_ID, ConsumerGroup,
                                                              ConsumerGroupSettings, HeartbeatRequest,
                                                              HeartbeatResult, random_member_id)
from sparklog.broker.coordinator.group.consumer_group_state import GroupRecordSet, Records, changes, rebuild, records_of

RecordWrites = list[tuple[bytes, bytes | None]]


class RecordSink(Protocol):
    """Where a consumer group's records go (the offset store): Rule 5."""

    def topic_ids(self) -> Mapping[str, uuid.UUID]: ...

    def append_records(self, group_id: str, records: RecordWrites) -> Awaitable[int]: ...


@dataclass(frozen=True)
class ConsumerGroupsStatistics:
    groups: int
    members: int
    expired_members: int


class ConsumerGroups:
    """See the module docstring. `clock_ms` defaults to the running loop's monotonic clock."""

    def __init__(self, config: GroupConfig, clock_ms: Callable[[], int] | None = None,
                 new_member_id: Callable[[], str] = random_member_id) -> None:
        self.settings = ConsumerGroupSettings(
            session_timeout_ms=config.consumer_session_timeout_ms,
            heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
            assignors=tuple(config.consumer_assignors.split(",")), max_size=config.consumer_max_size)
        self._clock_ms = clock_ms
        self._new_member_id = new_member_id
        self.groups: dict[str, ConsumerGroup] = {}
        self._topics: dict[str, Mapping[str, int]] = {}  # the topics each group last saw, for its timer
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._expired = 0
        self.sink: RecordSink | None = None
        self._written: dict[str, Records] = {}  # Rule 5: each group's records as last written
        self._writes: set[asyncio.Task] = set()  # the timers' writes in flight

    def now_ms(self) -> int:
        if self._clock_ms is not None:
            return self._clock_ms()
        return int(asyncio.get_running_loop().time() * 1000)

    def heartbeat(self, group_id: str, req: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None:
            if req.member_epoch != 0:
                return HeartbeatResult(UNKNOWN_MEMBER_ID, error_message=f"member {req.member_id} is not in group "
                                       f"{group_id}")
            group = self.groups[group_id] = ConsumerGroup(group_id, self.settings, self._new_member_id)
        self._topics[group_id] = topics
        result = group.heartbeat(self.now_ms(), req, topics)
        self._after(group)
        return result

    def write_changes(self, group_id: str) -> Coroutine[None, None, int] | None:
        """Rule 5: the write of the group's records changed since the last write, or None when none changed.
        Call right after the change (the records are taken now); await the result for the write's error code."""
        if self.sink is None:
            return None
        group = self.groups.get(group_id)
        current = records_of(group, self.sink.topic_ids()) if group is not None else {}
        written = self._written.pop(group_id, {})
        if current:
            self._written[group_id] = current
        pending = changes(written, current)
        return self._write(group_id, pending) if pending else None

    async def _write(self, group_id: str, pending: RecordWrites) -> int:
        assert self.sink is not None
        code = await self.sink.append_records(group_id, pending)
        if code != NONE:  # perhaps in the log, perhaps not: written again with the next change
            unsure = self._written.setdefault(group_id, {})
            unsure.update((key, b"") for key, _ in pending)  # b"": no record's bytes, so rewritten
        return code

    def _write_soon(self, group_id: str) -> None:
        write = self.write_changes(group_id)
        if write is None:
            return
        task = asyncio.get_running_loop().create_task(write, name=f"consumer-group-records-{group_id}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def load(self, loaded: GroupRecordSet, names: Mapping[uuid.UUID, str], topics: Mapping[str, int]) -> int:
        """Rule 5: install the groups rebuilt from an offsets partition's records; the number installed.
        `names` are the cluster's topic names by id, `topics` its partition counts by name."""
        installed = 0
        for group_id, records in loaded.decoded.items():
            group = rebuild(group_id, records, self.settings, self.now_ms(), names, self._new_member_id)
            self._written[group_id] = dict(loaded.raw.get(group_id, {}))
            if group is None or not group.members:
                self._write_soon(group_id)  # what is left of a group without members: tombstoned
                continue
            self._forget(group_id)
            self.groups[group_id] = group
            self._topics[group_id] = topics
            self._after(group)
            installed += 1
        return installed

    def refuses_classic(self, group_id: str) -> bool:
        """Rule 2, for a classic JoinGroup: True while the consumer group has members."""
        return group_id in self.groups and bool(self.groups[group_id].members)

    def check_commit(self, group_id: str, member_id: str, member_epoch: int,
                     api_version: int | None = None) -> int | None:
        """The consumer group's answer to a commit (`api_version` None: a transactional one), or None when the
        group is not a consumer group here."""
        group = self.groups.get(group_id)
        return None if group is None else group.check_commit(member_id, member_epoch, api_version)

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int | None:
        """The consumer group's answer to an offset fetch naming a member, or None when it is not one here."""
        group = self.groups.get(group_id)
        return None if group is None else group.check_fetch(member_id, member_epoch)

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def list(self) -> list[tuple[str, str]]:
        """(group id, state) of every consumer group here."""
        return sorted((g, group.state.value) for g, group in self.groups.items())

    def unload(self, placed_here: Callable[[str], bool]) -> int:
        gone = [g for g in self.groups if placed_here(g)]
        for group_id in gone:
            self._forget(group_id)
        for group_id in [g for g in self._written if placed_here(g)]:
            del self._written[group_id]  # the next coordinator reads what was written
        return len(gone)

    def close(self) -> None:
        for group_id in list(self.groups):
            self._forget(group_id)
        self._written.clear()

    def statistics(self) -> ConsumerGroupsStatistics:
        return ConsumerGroupsStatistics(groups=len(self.groups),
                                        members=sum(len(g.members) for g in self.groups.values()),
                                        expired_members=self._expired)

    def _after(self, group: ConsumerGroup) -> None:
        """Re-arm the group's timer; forget it when empty (Rule 3)."""
        timer = self._timers.pop(group.group_id, None)
        if timer is not None:
            timer.cancel()
        deadline = group.next_deadline()
        if deadline is None:
            self._forget(group.group_id)
            return
        delay_s = max(0.0, (deadline - self.now_ms()) / 1000)
        self._timers[group.group_id] = asyncio.get_running_loop().call_later(delay_s, self._tick, group)

    def _tick(self, group: ConsumerGroup) -> None:
        self._timers.pop(group.group_id, None)
        if self.groups.get(group.group_id) is group:
            self._expired += len(group.expire(self.now_ms(), self._topics.get(group.group_id, {})))
            self._after(group)
            self._write_soon(group.group_id)

    def _forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self._topics.pop(group_id, None)
        timer = self._timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()


__all__ = ["ConsumerGroups", "ConsumerGroupsStatistics", "NONE"]
