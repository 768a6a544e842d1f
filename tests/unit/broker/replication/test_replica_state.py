"""LeaderState's rules (replica_state.py): HW = min LEO over the ISR, never backwards; caught-up time; which
replicas leave and join the ISR. Checked on examples and, with hypothesis, against the rules themselves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.replication.replica_state import LeaderState

LAG = 30_000


def leader(isr=(1, 2, 3), hw=0, start=0):
    return LeaderState(1, (1, 2, 3), isr, leader_epoch=4, epoch_start_offset=start, high_watermark=hw, now_ms=0)


def test_hw_waits_for_every_isr_member_then_is_their_minimum():
    state = leader()
    state.update_follower(2, 10, leader_leo=20, now_ms=1)
    assert state.compute_high_watermark(20) == 0  # replica 3 has not fetched in this epoch
    state.update_follower(3, 7, leader_leo=20, now_ms=1)
    assert state.compute_high_watermark(20) == 7
    state.update_follower(3, 4, leader_leo=20, now_ms=2)  # a follower that truncated
    assert state.compute_high_watermark(20) == 7  # never backwards


def test_hw_of_an_isr_of_one_is_the_leader_leo():
    assert leader(isr=(1,)).compute_high_watermark(42) == 42


def test_a_follower_behind_for_the_lag_time_leaves_and_a_caught_up_one_stays():
    state = leader()
    state.update_follower(2, 100, leader_leo=100, now_ms=LAG)  # caught up
    state.update_follower(3, 50, leader_leo=100, now_ms=LAG)  # behind
    assert state.to_shrink(LAG + 1, LAG) == {3}
    assert state.to_shrink(LAG, LAG) == frozenset()


def test_reading_what_was_there_at_the_previous_fetch_counts_as_caught_up_then():
    state = leader()
    state.update_follower(3, 50, leader_leo=100, now_ms=10_000)
    state.update_follower(3, 100, leader_leo=150, now_ms=20_000)  # it read everything there at 10 s
    assert state.followers[3].caught_up_ms == 10_000


def test_out_of_sync_replica_joins_once_at_the_hw_and_the_epoch_start():
    state = leader(isr=(1, 2), hw=0, start=30)
    state.update_follower(2, 40, leader_leo=40, now_ms=1)
    state.compute_high_watermark(40)
    state.update_follower(3, 20, leader_leo=40, now_ms=1)
    assert state.to_expand(40) == frozenset()
    state.update_follower(3, 40, leader_leo=40, now_ms=2)
    assert state.to_expand(40) == {3}
    state.set_isr((1, 2, 3), now_ms=2)
    assert state.isr == {1, 2, 3} and state.to_expand(40) == frozenset()


def test_a_replica_taken_out_of_the_isr_rejoins_only_after_a_new_fetch():
    """The controller drops a broker that is shutting down (it has stopped fetching) from the ISR: its last
    fetch was caught up, but that must not bring it back, or its controlled shutdown never completes and a
    cut-off follower flaps in and out. Kafka expands the ISR on a follower's fetch only."""
    state = leader()
    state.update_follower(2, 40, leader_leo=40, now_ms=1)
    state.update_follower(3, 40, leader_leo=40, now_ms=1)
    state.compute_high_watermark(40)
    state.set_isr((1, 3), now_ms=2)  # written by the controller
    assert state.to_expand(40) == frozenset()
    state.update_follower(2, 40, leader_leo=40, now_ms=3)  # it fetches again, caught up
    assert state.to_expand(40) == {2}


@settings(max_examples=200, deadline=None)
@given(fetches=st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 100), st.integers(0, 60_000)),
                        max_size=30), isr=st.sampled_from([(1,), (1, 2), (1, 2, 3)]))
def test_hw_is_the_running_maximum_of_the_isr_minimum(fetches, isr):
    state = leader(isr=isr)
    leo, now, expected = 100, 0, 0
    for replica, offset, dt in fetches + [(2, 0, 0)]:
        now += dt
        state.update_follower(replica, offset, leo, now)
        known = [state.followers[r].leo for r in isr if r != 1]
        if -1 not in known:
            expected = max(expected, min(known + [leo]))
        assert state.compute_high_watermark(leo) == expected
        shrink = state.to_shrink(now, LAG)
        assert all(now - state.followers[r].caught_up_ms > LAG for r in shrink)
