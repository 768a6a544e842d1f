"""The group state machine (broker/group.py) with a hand-driven clock: the transitions of its docstring one by
one, then a hypothesis model that drives any sequence of requests and clock moves and checks the invariants."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.broker.coordinator.group.group import (FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
                                   MEMBER_ID_REQUIRED, NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, Delayed,
                                   Group, GroupSettings, GroupState, JoinRequest, JoinResult, SyncResult)

SESSION, REBALANCE, DELAY = 1000, 3000, 100
RANGE = (("range", b"r"),)


def new_group(delay=DELAY):
    counter = itertools.count()
    return Group("g", GroupSettings(initial_delay_ms=delay, max_size=100), lambda p: f"{p}-{next(counter)}")


def req(member_id="", instance=None, client="c", protocols=RANGE, version=5):
    return JoinRequest(member_id, instance, client, "/h", SESSION, REBALANCE, "consumer", protocols, version)


def drain(group):
    out = list(group.outbox)
    group.outbox.clear()
    return dict(out)


def join_new(group, now, client="c", protocols=RANGE):
    """KIP-394's two round trips; returns the member id (its join is Delayed)."""
    first = group.join(now, req(client=client, protocols=protocols))
    assert first.error == MEMBER_ID_REQUIRED
    assert group.join(now, req(first.member_id, client=client, protocols=protocols)) == Delayed(first.member_id)
    return first.member_id


def stable_pair():
    g = new_group()
    a, b = join_new(g, 0, "a"), join_new(g, 0, "b")
    g.tick(DELAY)
    joined = drain(g)
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == 1
    assert g.sync(DELAY, b, None, 1, {}) == Delayed(b)
    g.sync(DELAY, g.leader, None, 1, {a: b"A", b: b"B"})
    assert g.state is GroupState.STABLE
    synced = drain(g)
    assert synced[b] == SyncResult(NONE, b"B") and synced[g.leader].assignment == (b"A" if g.leader == a else b"B")
    return g, a, b, joined


def test_first_join_waits_for_the_initial_delay_then_the_leader_gets_every_member():
    g, a, b, joined = stable_pair()
    leader = joined[g.leader]
    assert {m for m, _, _ in leader.members} == {a, b} and leader.protocol == "range"
    other = b if g.leader == a else a
    assert joined[other].members == () and joined[other].generation == 1
    assert g.sync(DELAY, other, None, 1, {}).assignment == (b"B" if other == b else b"A")  # Stable: at once


def test_heartbeats_fence_generations_and_rebalances():
    g, a, b, _ = stable_pair()
    assert g.heartbeat(DELAY, a, None, 1) == NONE
    assert g.heartbeat(DELAY, a, None, 0) == ILLEGAL_GENERATION
    assert g.heartbeat(DELAY, "nobody", None, 1) == UNKNOWN_MEMBER_ID
    join_new(g, DELAY, "c")  # a newcomer: PreparingRebalance, the others must rejoin
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(DELAY, a, None, 1) == REBALANCE_IN_PROGRESS
    assert g.sync(DELAY, a, None, 1, {}) == SyncResult(REBALANCE_IN_PROGRESS)


def test_members_keep_committing_while_the_group_prepares_a_rebalance_but_not_while_it_completes():
    """Kafka's rule (KIP-429): until the new generation exists a member of the current one may commit, so a
    cooperative member keeps committing the partitions it keeps and an eager one commits in its revoke callback."""
    g, a, b, _ = stable_pair()
    join_new(g, DELAY, "c")
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.check_commit(a, None, 1) == NONE
    assert g.check_commit(a, None, 0) == ILLEGAL_GENERATION and g.check_commit("x", None, 1) == UNKNOWN_MEMBER_ID
    assert g.join(DELAY, req(a, client="a")) == Delayed(a)  # a rejoined: still of generation 1 until it completes
    assert g.check_commit(a, None, 1) == NONE
    g.join(DELAY, req(b, client="b"))
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == 2
    assert g.check_commit(a, None, 2) == REBALANCE_IN_PROGRESS  # the assignment is not out yet


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout():
    g, a, b, _ = stable_pair()
    g.heartbeat(DELAY, a, None, 1)
    g.join(DELAY, req(a, client="a"))  # a rejoins (as leader or with a metadata change): rebalance
    assert g.state is GroupState.PREPARING_REBALANCE
    g.tick(DELAY + REBALANCE)
    assert list(g.members) == [a] and g.state is GroupState.COMPLETING_REBALANCE and g.generation == 2
    assert drain(g)[a].error == NONE


def test_session_expiry_removes_a_silent_member():
    g, a, b, _ = stable_pair()
    g.heartbeat(DELAY + SESSION - 1, a, None, 1)
    g.tick(DELAY + SESSION)
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE


def test_leaving_last_member_empties_the_group():
    g, a, b, _ = stable_pair()
    assert g.leave(DELAY, a, None) == NONE
    assert g.leave(DELAY, b, None) == NONE
    g.tick(DELAY)
    assert g.state is GroupState.EMPTY and not g.members
    assert g.leave(DELAY, a, None) == UNKNOWN_MEMBER_ID
    assert g.check_commit("", None, -1) == NONE and g.delete() and g.state is GroupState.DEAD


def test_protocol_choice_and_inconsistent_protocols():
    g = new_group()
    join_new(g, 0, "a", (("cooperative-sticky", b""), ("range", b"")))
    join_new(g, 0, "b", (("range", b""), ("cooperative-sticky", b"")))
    join_new(g, 0, "c", (("cooperative-sticky", b""),))
    assert g.join(0, req(protocols=(("roundrobin", b""),))).error == INCONSISTENT_GROUP_PROTOCOL
    g.tick(DELAY)
    assert g.protocol == "cooperative-sticky"


def test_static_member_restart_keeps_generation_and_assignment_and_fences_the_old_id():
    g = new_group()
    first = g.join(0, req(instance="i1", client="a"))
    assert isinstance(first, Delayed)
    g.tick(DELAY)
    g.sync(DELAY, first.member_id, "i1", 1, {first.member_id: b"A"})
    assert g.state is GroupState.STABLE
    again = g.join(DELAY + 10, req(instance="i1", client="a"))  # restarted: no member id
    assert isinstance(again, JoinResult) and again.error == NONE and again.generation == 1
    assert again.member_id != first.member_id and g.state is GroupState.STABLE
    assert g.sync(DELAY + 10, again.member_id, "i1", 1, {}) == SyncResult(NONE, b"A")
    assert g.heartbeat(DELAY + 10, first.member_id, "i1", 1) == FENCED_INSTANCE_ID
    assert g.join(DELAY + 10, req(first.member_id, instance="i1")).error == FENCED_INSTANCE_ID


def test_a_pending_member_id_expires():
    g = new_group()
    first = g.join(0, req())
    g.tick(SESSION)
    assert g.join(SESSION, req(first.member_id)).error == UNKNOWN_MEMBER_ID


# ---- the model


CLIENTS = ["a", "b", "c"]
INSTANCES = [None, None, "i1", "i2"]
PROTOCOLS = [RANGE, (("roundrobin", b""), ("range", b"")), (("roundrobin", b""),)]


class GroupMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.group = new_group()
        self.now = 0
        self.known: list[tuple[str, str | None]] = []  # (member id, instance) ever handed out
        self.waiting: Counter = Counter()  # (member id, kind) delayed and not yet answered
        self.generation = 0

    def _record(self, result, kind):
        if isinstance(result, Delayed):
            self.waiting[(result.member_id, kind)] += 1

    @rule(client=st.sampled_from(CLIENTS), instance=st.sampled_from(INSTANCES),
          protocols=st.sampled_from(PROTOCOLS), version=st.sampled_from([3, 5]))
    def join_new(self, client, instance, protocols, version):
        result = self.group.join(self.now, req(client=client, instance=instance, protocols=protocols,
                                               version=version))
        if isinstance(result, JoinResult):
            if result.member_id:
                self.known.append((result.member_id, instance))
        else:
            self.known.append((result.member_id, instance))
            self._record(result, "join")

    @precondition(lambda self: self.known)
    @rule(data=st.data(), protocols=st.sampled_from(PROTOCOLS))
    def rejoin(self, data, protocols):
        member, instance = data.draw(st.sampled_from(self.known))
        self._record(self.group.join(self.now, req(member, instance=instance, protocols=protocols)), "join")

    @precondition(lambda self: self.known)
    @rule(data=st.data(), stale=st.booleans())
    def sync(self, data, stale):
        member, instance = data.draw(st.sampled_from(self.known))
        assignments = {m: m.encode() for m in self.group.members}
        result = self.group.sync(self.now, member, instance, self.group.generation - stale, assignments)
        self._record(result, "sync")

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def heartbeat(self, data):
        member, instance = data.draw(st.sampled_from(self.known))
        code = self.group.heartbeat(self.now, member, instance, self.group.generation)
        if member not in self.group.members:
            assert code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def leave(self, data):
        member, instance = data.draw(st.sampled_from(self.known))
        self.group.leave(self.now, member, instance)

    @rule(ms=st.sampled_from([1, 50, DELAY, SESSION, REBALANCE]))
    def advance(self, ms):
        self.now += ms
        self.group.tick(self.now)

    def teardown(self):
        pass

    @invariant()
    def outbox_answers_only_waiting_requests(self):
        for member, result in self.group.outbox:
            kind = "join" if isinstance(result, JoinResult) else "sync"
            assert self.waiting[(member, kind)] > 0, (member, result)
            self.waiting[(member, kind)] -= 1
        self.group.outbox.clear()

    @invariant()
    def state_is_consistent(self):
        g = self.group
        assert (g.state is GroupState.EMPTY) == (not g.members)
        assert g.generation >= self.generation
        self.generation = g.generation
        if g.members:
            assert g.protocol_type == "consumer" and (g.leader is None or g.leader in g.members)
        if g.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert g.leader in g.members
        for instance, member in g.static.items():
            assert g.members[member].join.instance_id == instance
        assert not set(g.pending) & set(g.members)
        if g.state is GroupState.STABLE:
            assert not any(m.awaiting_join or m.awaiting_sync for m in g.members.values())
        if g.state is GroupState.COMPLETING_REBALANCE:
            assert g.protocol in {n for m in g.members.values() for n, _ in m.join.protocols}
        waiting_now = {(m.member_id, "join") for m in g.members.values() if m.awaiting_join}
        waiting_now |= {(m.member_id, "sync") for m in g.members.values() if m.awaiting_sync}
        assert waiting_now == {k for k, n in self.waiting.items() if n}  # each delayed request answered once
        assert all(n <= 1 for n in self.waiting.values())

    @invariant()
    def something_is_due_while_anything_waits(self):
        if self.group.members or self.group.pending:
            assert self.group.next_deadline() is not None


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
