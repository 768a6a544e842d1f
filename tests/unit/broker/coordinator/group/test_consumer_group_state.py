"""A consumer group as its `__consumer_offsets` records and back (KIP-848, consumer_group_state.py): the hypothesis
model of clients of test_consumer_group.py, whose group's changed records are written after every step (as the
coordinator writes them) and which fails over at any step to the group rebuilt from the records written so far
(the last record of each key, tombstones deleting): the rebuilt group equals the old one in everything but its
timers, and the model's invariants (no partition with two owners, epochs never down) and its stable end hold
across failovers."""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis.stateful import invariant, precondition, rule

from sparklog.broker.coordinator.group.consumer_group import ConsumerGroup
from sparklog.broker.coordinator.group.consumer_group_state import GroupRecordSet, changes, rebuild, records_of

from unit.broker.coordinator.group.test_consumer_group import Clients, beat, join, new_group

IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in "ab"}
NAMES = {topic_id: name for name, topic_id in IDS.items()}


def essentials(group: ConsumerGroup) -> dict:
    """Everything a group's records carry (not its timers, nor the assignment last sent)."""
    members = {m.member_id: (m.instance_id, m.client_id, m.client_host, m.rack_id, m.rebalance_timeout_ms,
                             m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor, m.epoch,
                             None if m.left_static else m.previous_epoch, m.left_static, m.state, m.assigned,
                             m.revoking, m.revoke_deadline_ms is not None) for m in group.members.values()}
    return {"epochs": (group.group_epoch, group.assignment_epoch), "target": group.target, "members": members,
            "subscribed": group.subscribed_metadata, "static": group.static, "assignor": group.assignor}


def replay(log: list[tuple[bytes, bytes | None]]) -> GroupRecordSet:
    loaded = GroupRecordSet()
    for key, value in log:
        assert loaded.apply(key, value)
    return loaded


class FailingOver(Clients):
    def __init__(self):
        super().__init__()
        self.log: list[tuple[bytes, bytes | None]] = []  # what the coordinator appended, in order
        self.written: dict[bytes, bytes] = {}
        self.failovers = 0

    @invariant()
    def the_changes_are_written(self):
        current = records_of(self.group, IDS)
        self.log.extend(changes(self.written, current))
        self.written = current

    @precondition(lambda self: self.group.members)
    @rule()
    def fail_over(self):
        loaded = replay(self.log)
        rebuilt = rebuild("g", loaded.decoded["g"], self.group.settings, self.now, NAMES,
                          self.group.new_member_id)
        assert rebuilt is not None and essentials(rebuilt) == essentials(self.group)
        assert loaded.raw["g"] == self.written
        self.group = rebuilt
        self.failovers += 1


TestFailingOver = FailingOver.TestCase
TestFailingOver.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


def test_a_member_gone_and_an_empty_group_leave_only_tombstones():
    group = new_group()
    join(group, "x")
    join(group, "y")
    written = records_of(group, IDS)
    log = list(written.items())
    beat(group, "y", -1, ())
    log += changes(written, records_of(group, IDS))
    assert set(replay(log).decoded["g"]) == set(replay(list(records_of(group, IDS).items())).decoded["g"])
    written = records_of(group, IDS)
    beat(group, "x", -1, ())
    assert records_of(group, IDS) == {}
    log += changes(written, {})
    assert replay(log).decoded["g"] == {}


def test_a_static_member_that_left_is_rebuilt_as_one():
    group = new_group()
    join(group, "s", instance="i1")
    result = beat(group, "s", group.members["s"].epoch, group.members["s"].assigned)
    beat(group, "s", -2, result.assignment or ())
    loaded = replay(list(records_of(group, IDS).items()))
    rebuilt = rebuild("g", loaded.decoded["g"], group.settings, 0, NAMES)
    assert rebuilt is not None and essentials(rebuilt) == essentials(group)
    assert rebuilt.members["s"].left_static and rebuilt.static == {"i1": "s"}


def test_a_partition_of_a_deleted_topic_is_left_out():
    group = new_group()
    join(group, "x", topics=("a", "b"))
    loaded = replay(list(records_of(group, IDS).items()))
    rebuilt = rebuild("g", loaded.decoded["g"], group.settings, 0, {IDS["a"]: "a"})
    assert rebuilt is not None
    assert {t for t, _ in rebuilt.members["x"].assigned} == {"a"}
