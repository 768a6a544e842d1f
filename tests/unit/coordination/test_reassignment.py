"""Partition reassignment steps as pure functions, the plan format, and a hypothesis walk to completion."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination.reassignment import InvalidPlan, next_step, parse_plan, plan_json, validate_plan
from sparklog.coordination.topics import PartitionState

CE = 4


def state(leader, isr, epoch=2):
    return PartitionState(leader, tuple(isr), epoch, 1, zk_version=3)


def test_a_move_starts_by_adding_the_new_replicas():
    step = next_step((3, 2), (1, 2), (), (), state(1, (1, 2)), {1, 2, 3}, CE)
    assert (step.replicas, step.adding, step.removing, step.state, step.done) == ((3, 2, 1), (3,), (1,), None, False)


def test_it_waits_until_the_new_replicas_are_in_sync():
    assert next_step((3, 2), (3, 2, 1), (3,), (1,), state(1, (1, 2)), {1, 2, 3}, CE) is None


def test_once_caught_up_leadership_moves_into_the_target_and_the_old_replicas_go():
    step = next_step((3, 2), (3, 2, 1), (3,), (1,), state(1, (1, 2, 3)), {1, 2, 3}, CE)
    assert (step.replicas, step.adding, step.removing, step.done) == ((3, 2), (), (), True)
    assert (step.state.leader, step.state.isr, step.state.leader_epoch, step.state.controller_epoch) == (
        3, (3, 2), 3, CE)


def test_a_leader_inside_the_target_keeps_leading():
    step = next_step((1, 2), (1, 2, 3), (), (), state(1, (1, 2, 3)), {1, 2, 3}, CE)
    assert (step.state.leader, step.state.isr, step.state.leader_epoch) == (1, (1, 2), 2)


def test_a_finished_partition_is_done_with_nothing_to_write():
    step = next_step((1, 2), (1, 2), (), (), state(1, (1, 2)), {1, 2}, CE)
    assert step.done and step.state is None


def test_plans_are_parsed_and_checked():
    plan = parse_plan(plan_json({("t", 0): (1, 2)}))
    assert plan == {("t", 0): (1, 2)}
    for bad in ("{}", "[]", '{"partitions": []}', '{"partitions": [{"topic": "t"}]}',
                '{"partitions": [{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}'):
        with pytest.raises(InvalidPlan):
            parse_plan(bad)
    assignments = {"t": {0: (1,)}}
    for plan, why in [({("u", 0): (1,)}, "unknown partition"), ({("t", 0): (1, 1)}, "distinct"),
                      ({("t", 0): (7,)}, "unknown broker")]:
        with pytest.raises(InvalidPlan, match=why):
            validate_plan(plan, assignments, {1, 2})


@given(st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True),
       st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True))
def test_a_reassignment_always_completes_once_the_new_replicas_catch_up(original, target):
    """Walk the steps, letting every replica of the assignment join the ISR (as followers catching up do)."""
    replicas, adding, removing = tuple(original), (), ()
    s = state(original[0], original)
    live = set(range(1, 7))
    for _ in range(6):
        step = next_step(target, replicas, adding, removing, s, live, CE)
        if step is None:
            s = PartitionState(s.leader, tuple(dict.fromkeys(s.isr + replicas)), s.leader_epoch, s.controller_epoch)
            continue
        replicas, adding, removing = step.replicas, step.adding, step.removing
        s = step.state or s
        if step.done:
            break
    assert replicas == tuple(target) and not adding and not removing
    assert s.leader in target and set(s.isr) <= set(target)
    assert s.leader_epoch == 2 + (original[0] not in target)
