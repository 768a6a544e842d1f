"""Leader election as pure functions: the rules by example, then hypothesis over random states."""

from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination.leader_election import damaged_excluded, elect, elect_preferred
from sparklog.coordination.topics import NO_LEADER, PartitionState

CE = 7  # the controller epoch the elections write


def state(leader, isr, epoch=3):
    return PartitionState(leader=leader, isr=tuple(isr), leader_epoch=epoch, controller_epoch=1, zk_version=5)


def test_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    got = elect((1, 2, 3), state(1, (1, 3, 2)), live={2, 3}, controller_epoch=CE)
    assert got.state.leader == 2 and got.state.isr == (2, 3)
    assert got.state.leader_epoch == 4 and got.state.controller_epoch == CE and not got.unclean
    assert got.state.zk_version == 5  # the version read: the write is conditional on it


def test_a_live_leader_keeps_its_epoch_and_loses_only_dead_followers():
    got = elect((1, 2, 3), state(1, (1, 2, 3)), live={1, 3}, controller_epoch=CE)
    assert (got.state.leader, got.state.isr, got.state.leader_epoch) == (1, (1, 3), 3)


def test_nothing_to_do_is_none():
    assert elect((1, 2, 3), state(1, (1, 2, 3)), live={1, 2, 3}, controller_epoch=CE) is None


def test_no_live_isr_member_leaves_the_partition_offline_and_keeps_the_isr():
    got = elect((1, 2, 3), state(1, (1,)), live={2, 3}, controller_epoch=CE)
    assert (got.state.leader, got.state.isr, got.state.leader_epoch) == (NO_LEADER, (1,), 4)
    assert elect((1, 2, 3), got.state, live={2, 3}, controller_epoch=CE) is None  # stays offline


def test_the_isr_member_that_returns_is_elected():
    offline = state(NO_LEADER, (1,), epoch=4)
    got = elect((1, 2, 3), offline, live={1, 2}, controller_epoch=CE)
    assert (got.state.leader, got.state.isr, got.state.leader_epoch) == (1, (1,), 5)


def test_unclean_election_picks_the_first_live_replica_and_says_so():
    got = elect((3, 2, 1), state(1, (1,)), live={2, 3}, controller_epoch=CE, unclean=True)
    assert (got.state.leader, got.state.isr) == (3, (3,)) and got.unclean
    clean = elect((3, 2, 1), state(1, (1, 2)), live={2, 3}, controller_epoch=CE, unclean=True)
    assert clean.state.leader == 2 and not clean.unclean  # unclean only when no ISR member is live


def test_controlled_shutdown_moves_leadership_and_leaves_the_isr():
    led = elect((1, 2, 3), state(1, (1, 2, 3)), live={1, 2, 3}, controller_epoch=CE, shutting_down={1})
    assert (led.state.leader, led.state.isr, led.state.leader_epoch) == (2, (2, 3), 4)
    followed = elect((2, 1, 3), state(2, (2, 1, 3)), live={1, 2, 3}, controller_epoch=CE, shutting_down={1})
    assert (followed.state.leader, followed.state.isr, followed.state.leader_epoch) == (2, (2, 3), 3)


def test_controlled_shutdown_of_the_only_isr_member_moves_nothing():
    assert elect((1,), state(1, (1,)), live={1, 2}, controller_epoch=CE, shutting_down={1}) is None
    assert elect((1, 2), state(1, (1,)), live={1, 2}, controller_epoch=CE, shutting_down={1}) is None


def test_preferred_leader_election():
    got = elect_preferred((1, 2, 3), state(2, (2, 3, 1)), live={1, 2, 3}, controller_epoch=CE)
    assert (got.state.leader, got.state.isr, got.state.leader_epoch) == (1, (2, 3, 1), 4)
    assert elect_preferred((1, 2, 3), state(2, (2, 3)), live={1, 2, 3}, controller_epoch=CE) is None  # not in ISR
    assert elect_preferred((1, 2, 3), state(2, (2, 3, 1)), live={2, 3}, controller_epoch=CE) is None  # dead
    assert elect_preferred((1, 2, 3), state(1, (1, 2)), live={1, 2}, controller_epoch=CE) is None  # already


# -- properties ----------------------------------------------------------------------------------------------

BROKERS = st.integers(min_value=0, max_value=5)


@st.composite
def situations(draw):
    replicas = tuple(draw(st.lists(BROKERS, min_size=1, max_size=4, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = draw(st.sampled_from(isr + (NO_LEADER,)))
    live = draw(st.sets(BROKERS))
    shutting = draw(st.sets(st.sampled_from(sorted(live)))) if live and draw(st.booleans()) else set()
    unclean = draw(st.booleans())
    epoch = draw(st.integers(min_value=0, max_value=1000))
    return replicas, state(leader, isr, epoch), live, shutting, unclean


@given(situations())
def test_elections_keep_the_invariants(situation):
    replicas, old, live, shutting, unclean = situation
    got = elect(replicas, old, live, CE, unclean=unclean, shutting_down=shutting)
    if got is None:
        return
    new = got.state
    assert new.isr, "the ISR is never empty"
    assert new.controller_epoch == CE and new.zk_version == old.zk_version
    assert (new.leader_epoch == old.leader_epoch + 1) == (new.leader != old.leader) == got.leader_changed
    assert new.leader_epoch >= old.leader_epoch
    if new.leader != NO_LEADER:
        assert new.leader in replicas and new.leader in live and new.leader in new.isr
        assert new.leader not in shutting or new.leader == old.leader
        if not got.unclean:
            assert new.leader in old.isr, "a clean election picks an ISR member: it holds every committed write"
            assert set(new.isr) <= set(old.isr) | {new.leader}
    else:
        assert new.isr == old.isr, "an offline partition remembers who may lead"
    assert got.unclean == (new.leader != NO_LEADER and new.leader not in old.isr)
    if got.unclean:
        assert unclean and not any(b in live and b not in shutting for b in old.isr)


@given(situations())
def test_an_election_is_a_fixpoint(situation):
    replicas, old, live, shutting, unclean = situation
    got = elect(replicas, old, live, CE, unclean=unclean, shutting_down=shutting)
    if got is not None:
        assert elect(replicas, got.state, live, CE, unclean=unclean, shutting_down=shutting) is None


@given(situations())
def test_a_live_isr_member_always_wins_over_an_offline_partition(situation):
    replicas, old, live, shutting, unclean = situation
    got = elect(replicas, old, live, CE, unclean=unclean, shutting_down=shutting)
    eligible_isr = [b for b in old.isr if b in live and b not in shutting]
    new = old if got is None else got.state
    if eligible_isr:
        assert new.leader != NO_LEADER


# -- damaged replicas (Rule 6) ---------------------------------------------------------------------------------


def elect_with_damage(replicas, old, live, shutting, unclean, damaged):
    return elect(replicas, old, live, CE, unclean=unclean,
                 shutting_down=damaged_excluded(old, live, shutting, damaged))


def test_a_damaged_leader_hands_leadership_to_an_isr_member_and_leaves_the_isr():
    got = elect_with_damage((1, 2, 3), state(1, (1, 2, 3)), {1, 2, 3}, set(), False, {1})
    assert (got.state.leader, got.state.isr, got.state.leader_epoch) == (2, (2, 3), 4)


def test_a_damaged_leader_with_no_other_isr_member_keeps_leading():
    assert elect_with_damage((1, 2, 3), state(1, (1,)), {1, 2, 3}, set(), False, {1}) is None


def test_a_damaged_follower_leaves_the_isr_and_a_lone_damaged_survivor_is_elected():
    got = elect_with_damage((1, 2, 3), state(1, (1, 2, 3)), {1, 2, 3}, set(), False, {3})
    assert (got.state.leader, got.state.isr) == (1, (1, 2))
    got = elect_with_damage((1, 2, 3), state(1, (1, 3)), {2, 3}, set(), False, {3})
    assert (got.state.leader, got.state.isr) == (3, (3,))  # a copy with a fenced gap beats an offline partition


@given(situations(), st.sets(BROKERS))
def test_damage_never_takes_a_partition_offline_and_never_leads_where_a_sound_copy_can(situation, damaged):
    replicas, old, live, shutting, unclean = situation
    plain = elect(replicas, old, live, CE, unclean=unclean, shutting_down=shutting)
    got = elect_with_damage(replicas, old, live, shutting, unclean, damaged)
    new = old if got is None else got.state
    if (old if plain is None else plain.state).leader != NO_LEADER:
        assert new.leader != NO_LEADER
    if any(b in live and b not in shutting and b not in damaged for b in old.isr):
        assert new.leader not in damaged
        assert not set(new.isr) & set(damaged)
