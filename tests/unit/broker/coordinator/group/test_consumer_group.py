"""The consumer group state machine (KIP-848, coordinator/group/consumer_group.py) and its assignors with a
hand-driven clock: the transitions of its docstring one by one, then a hypothesis model of real clients (each
owns what its last applied response said, drops revoked partitions at once, may lose a response or die) that
checks the invariants named in the docstring after every step and the stable end state."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.broker.coordinator.group.assignors import ASSIGNORS, range_, uniform
from sparklog.broker.coordinator.group.consumer_group import (FENCED_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION,
                                                              NONE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
                                                              UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR,
                                                              UNSUPPORTED_VERSION,
                                                              ConsumerGroup, ConsumerGroupSettings,
                                                              ConsumerGroupState, HeartbeatRequest, MemberState)

SESSION, INTERVAL, REBALANCE = 1000, 100, 500
TOPICS = {"a": 4, "b": 2}


def new_group(assignors=("uniform", "range")):
    counter = itertools.count()
    return ConsumerGroup("g", ConsumerGroupSettings(SESSION, INTERVAL, assignors, 100), lambda: f"m{next(counter)}")


def join(group, member_id, now=0, topics=("a",), instance=None, assignor=None, regex=None, meta=TOPICS):
    return group.heartbeat(now, HeartbeatRequest(member_id, 0, instance_id=instance, rebalance_timeout_ms=REBALANCE,
                                                 subscribed_topic_names=list(topics), server_assignor=assignor,
                                                 subscribed_topic_regex=regex, owned=frozenset()), meta)


def beat(group, member_id, epoch, owned, now=0, meta=TOPICS):
    return group.heartbeat(now, HeartbeatRequest(member_id, epoch, owned=frozenset(owned)), meta)


def tps(topic, *indexes):
    return {(topic, i) for i in indexes}


# ---- the assignors


def test_uniform_balances_and_keeps_what_it_can():
    subs = {"x": frozenset("a"), "y": frozenset("a")}
    first = uniform(subs, {"a": 4}, {})
    assert sorted(len(v) for v in first.values()) == [2, 2]
    third = uniform({**subs, "z": frozenset("a")}, {"a": 4}, first)
    assert sorted(len(v) for v in third.values()) == [1, 1, 2]
    for member in ("x", "y"):  # sticky: the old members keep a subset of what they had
        assert third[member] <= first[member]


def test_uniform_gives_a_partition_only_to_a_subscriber():
    result = uniform({"x": frozenset("a"), "y": frozenset("b")}, {"a": 3, "b": 1}, {})
    assert result == {"x": frozenset(tps("a", 0, 1, 2)), "y": frozenset(tps("b", 0))}


def test_range_gives_contiguous_ranges_in_member_order():
    result = range_({"y": frozenset("a"), "x": frozenset("a")}, {"a": 5}, {})
    assert result == {"x": frozenset(tps("a", 0, 1, 2)), "y": frozenset(tps("a", 3, 4))}


@st.composite
def assignor_cases(draw):
    members = draw(st.lists(st.sampled_from("pqrstu"), min_size=1, max_size=5, unique=True))
    subs = {m: frozenset(draw(st.lists(st.sampled_from("abc"), max_size=3))) for m in members}
    counts = {t: draw(st.integers(0, 6)) for t in "abc"}
    return draw(st.sampled_from(sorted(ASSIGNORS))), subs, counts


@settings(max_examples=300, deadline=None)
@given(assignor_cases())
def test_assignors_cover_every_subscribed_partition_once(case):
    name, subs, counts = case
    result = ASSIGNORS[name](subs, counts, {})
    owners: dict = {}
    for member, parts in result.items():
        for tp in parts:
            assert tp[0] in subs[member]  # assignors Rule 1
            assert tp not in owners
            owners[tp] = member
    wanted = {(t, i) for s in subs.values() for t in s for i in range(counts[t])}
    assert set(owners) == wanted  # assignors Rule 2
    assert ASSIGNORS[name](subs, counts, {}) == result  # assignors Rule 3
    if name == "uniform":  # no member could take one more from a member with two more than it
        for tp, member in owners.items():
            for other in subs:
                if tp[0] in subs[other]:
                    assert len(result[other]) + 1 >= len(result[member])


# ---- the transitions


def test_a_lone_member_joins_and_gets_every_partition():
    group = new_group()
    result = join(group, "m")
    assert (result.error, result.member_id, result.member_epoch) == (NONE, "m", 1)
    assert result.assignment == frozenset(tps("a", 0, 1, 2, 3))
    assert result.heartbeat_interval_ms == INTERVAL
    assert group.state is ConsumerGroupState.STABLE


def test_an_empty_member_id_is_given_one():
    assert join(new_group(), "").member_id == "m0"


def test_a_partition_moves_only_after_its_owner_revokes_it():
    group = new_group()
    join(group, "x")
    second = join(group, "y")
    assert second.member_epoch == 2 and second.assignment == frozenset()  # x still holds everything
    assert group.members["y"].state is MemberState.UNRELEASED_PARTITIONS
    told = beat(group, "x", 1, tps("a", 0, 1, 2, 3))
    keep = told.assignment
    assert len(keep) == 2 and told.member_epoch == 1  # revoke first, epoch unchanged
    assert group.members["x"].state is MemberState.UNREVOKED_PARTITIONS
    assert beat(group, "y", 2, set()).assignment is None  # not yet released
    acked = beat(group, "x", 1, keep)
    assert acked.member_epoch == 2
    given = beat(group, "y", 2, set()).assignment
    assert given == frozenset(tps("a", 0, 1, 2, 3)) - keep
    assert group.state is ConsumerGroupState.STABLE


def test_a_member_that_does_not_revoke_in_time_is_removed():
    group = new_group()
    join(group, "x")
    join(group, "y")
    beat(group, "x", 1, tps("a", 0, 1, 2, 3))
    assert group.expire(REBALANCE - 1, TOPICS) == []
    assert group.expire(REBALANCE, TOPICS) == ["x"]


def test_session_expiry_frees_the_partitions():
    group = new_group()
    join(group, "x")
    join(group, "y", now=SESSION // 2)
    assert group.expire(SESSION, TOPICS) == ["x"]
    result = beat(group, "y", 2, set(), now=SESSION)
    assert result.assignment == frozenset(tps("a", 0, 1, 2, 3)) and result.member_epoch == 3


def test_leave_frees_the_partitions_and_bumps_the_group_epoch():
    group = new_group()
    join(group, "x")
    join(group, "y")
    epoch = group.group_epoch
    assert beat(group, "x", -1, set()).error == NONE
    assert group.group_epoch == epoch + 1 and "x" not in group.members


def test_fencing():
    group = new_group()
    join(group, "x")
    assert beat(group, "x", 5, set()).error == FENCED_MEMBER_EPOCH
    assert beat(group, "nobody", 1, set()).error == UNKNOWN_MEMBER_ID
    join(group, "y")
    beat(group, "x", 1, tps("a", 0, 1, 2, 3))
    beat(group, "x", 1, group.members["x"].assigned)  # now at epoch 2, previous 1
    assert beat(group, "x", 1, group.members["x"].assigned).error == NONE  # a lost response: previous epoch
    assert beat(group, "x", 1, tps("a", 0, 1, 2, 3)).error == FENCED_MEMBER_EPOCH  # owns more than it may


def test_commits_carry_the_member_epoch():
    group = new_group()
    join(group, "x")
    assert group.check_commit("x", 1) == NONE
    assert group.check_commit("x", 0) == STALE_MEMBER_EPOCH
    assert group.check_commit("y", 1) == UNKNOWN_MEMBER_ID
    assert group.check_commit("", -1) == UNKNOWN_MEMBER_ID  # a simple commit while members are in it
    assert group.check_commit("x", -1) == STALE_MEMBER_EPOCH  # a member named with no epoch
    assert group.check_commit("x", 1, api_version=8) == UNSUPPORTED_VERSION  # below the member-epoch versions
    assert group.check_commit("x", 0, api_version=None) == STALE_MEMBER_EPOCH  # transactional: no version check
    assert (group.check_fetch(None, -1), group.check_fetch("x", 1), group.check_fetch("x", -1),
            group.check_fetch("y", 1), group.check_fetch(None, 1)) == (
        NONE, NONE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID)


def test_a_static_member_leaves_and_comes_back_with_its_partitions():
    group = new_group()
    first = join(group, "x", instance="i")
    join(group, "y")
    beat(group, "x", 1, first.assignment)
    kept = group.members["x"].assigned
    assert join(group, "z", instance="i").error == UNRELEASED_INSTANCE_ID
    assert beat(group, "x", -2, kept).error == NONE
    epoch = group.group_epoch
    back = join(group, "x2", instance="i")
    assert back.error == NONE and back.assignment == kept and group.group_epoch == epoch
    assert "x" not in group.members


def test_the_server_assignor_and_bad_requests():
    group = new_group()
    assert join(group, "x", assignor="sticky").error == UNSUPPORTED_ASSIGNOR
    assert join(group, "x", regex="(").error == INVALID_REGULAR_EXPRESSION
    join(group, "x", topics=("a", "b"), assignor="range")
    assert group.assignor == "range"


def test_an_empty_regex_is_no_regex():
    group = new_group()
    result = join(group, "x", regex="")
    again = group.heartbeat(0, HeartbeatRequest("x", result.member_epoch, subscribed_topic_regex=""), TOPICS)
    assert again.member_epoch == result.member_epoch == group.group_epoch == 1


def test_a_regex_subscription_follows_new_topics():
    group = new_group()
    result = join(group, "x", topics=(), regex="a|c")
    assert result.assignment == frozenset(tps("a", 0, 1, 2, 3))
    later = beat(group, "x", result.member_epoch, result.assignment, meta={**TOPICS, "c": 1})
    assert later.assignment == frozenset(tps("a", 0, 1, 2, 3) | tps("c", 0))
    assert later.member_epoch == result.member_epoch + 1


# ---- the model


class Clients(RuleBasedStateMachine):
    """Live clients heartbeat, join, leave, lose responses, die; the topics grow. After every step no
    partition is owned by two live clients nor held by two members, and epochs never go down; at the end,
    heartbeats alone bring the group to Stable with every subscribed partition owned by its target."""

    def __init__(self):
        super().__init__()
        self.group = new_group()
        self.now = 0
        self.meta = dict(TOPICS)
        self.owned: dict[str, set] = {}  # client -> what it owns (its last applied assignment)
        self.epoch: dict[str, int] = {}
        self.subs: dict[str, tuple] = {}
        self.seen_epochs: dict[str, int] = {}
        self.group_epoch = 0
        self.ids = itertools.count()

    def _apply(self, client, result):
        if result.error == FENCED_MEMBER_EPOCH or result.error == UNKNOWN_MEMBER_ID:
            self.owned[client] = set()  # the client abandons its partitions and rejoins
            self.epoch[client] = 0
            return
        assert result.error == NONE, result
        self.epoch[client] = result.member_epoch
        if result.assignment is not None:
            self.owned[client] = set(result.assignment)

    @rule(topics=st.sampled_from([("a",), ("b",), ("a", "b")]))
    def join(self, topics):
        client = f"c{next(self.ids)}"
        self.owned[client], self.subs[client] = set(), topics
        self._apply(client, join(self.group, client, self.now, topics, meta=self.meta))

    @precondition(lambda self: self.owned)
    @rule(data=st.data(), lose=st.booleans())
    def heartbeat(self, data, lose):
        client = data.draw(st.sampled_from(sorted(self.owned)))
        if self.epoch[client] == 0:
            result = join(self.group, client, self.now, self.subs[client], meta=self.meta)
        else:
            result = beat(self.group, client, self.epoch[client], self.owned[client], self.now, self.meta)
        if not lose or result.error != NONE:
            self._apply(client, result)

    @precondition(lambda self: self.owned)
    @rule(data=st.data())
    def leave(self, data):
        client = data.draw(st.sampled_from(sorted(self.owned)))
        beat(self.group, client, -1, self.owned[client], self.now, self.meta)
        del self.owned[client], self.epoch[client], self.subs[client]

    @precondition(lambda self: self.owned)
    @rule(data=st.data())
    def die(self, data):
        """SIGKILL: the client is gone; the others keep heartbeating until its session ends."""
        client = data.draw(st.sampled_from(sorted(self.owned)))
        del self.owned[client], self.epoch[client], self.subs[client]
        for _ in range(SESSION // INTERVAL + 1):
            self.now += INTERVAL
            for other in sorted(self.owned):
                self._apply(other, self._beat(other))
            self.group.expire(self.now, self.meta)
        assert client not in self.group.members

    @rule(topic=st.sampled_from("ab"))
    def grow(self, topic):
        self.meta[topic] += 1

    def _beat(self, client):
        if self.epoch[client] == 0:
            return join(self.group, client, self.now, self.subs[client], meta=self.meta)
        return beat(self.group, client, self.epoch[client], self.owned[client], self.now, self.meta)

    @invariant()
    def no_partition_has_two_owners(self):
        seen: dict = {}
        for client, parts in self.owned.items():
            for tp in parts:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {client}"
                seen[tp] = client
        held: dict = {}
        for member in self.group.members.values():
            for tp in member.holds():
                assert tp not in held, f"{tp} held by {held[tp]} and {member.member_id}"
                held[tp] = member.member_id

    @invariant()
    def epochs_never_go_down(self):
        assert self.group.group_epoch >= self.group_epoch
        self.group_epoch = self.group.group_epoch
        for member_id, member in self.group.members.items():
            assert member.epoch >= self.seen_epochs.get(member_id, 0) or member.epoch == 0
            self.seen_epochs[member_id] = member.epoch

    def teardown(self):
        for _ in range(6):  # a few rounds of heartbeats settle every reconciliation
            for client in sorted(self.owned):
                self._apply(client, self._beat(client))
        if not self.owned:
            return
        assert self.group.state is ConsumerGroupState.STABLE
        wanted = {(t, i) for s in self.subs.values() for t in s for i in range(self.meta[t])}
        assert set().union(*self.owned.values()) == wanted
        for client, parts in self.owned.items():
            assert parts == set(self.group.target[client])


TestClients = Clients.TestCase
TestClients.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
