"""The cache of one offsets partition: log order wins, tombstones delete and are remembered, and KIP-211
expiry of groups without members, on an injected clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.coordinator.group.offset_cache import CacheState, Committed, PartitionOffsets

MINUTE = 60_000


def commit(offset, at_ms, log_offset):
    return Committed(offset, "", at_ms, log_offset)


def test_a_change_older_in_the_log_than_the_held_one_is_ignored():
    cache = PartitionOffsets(0)
    cache.apply("g", ("t", 0), commit(20, 0, log_offset=8))
    cache.apply("g", ("t", 0), commit(10, 0, log_offset=5))  # acknowledged later, appended earlier
    assert cache.offsets("g")[("t", 0)].offset == 20


def test_a_tombstone_deletes_and_its_key_stays_seen():
    cache = PartitionOffsets(0)
    assert not cache.seen("g", ("t", 0)) and cache.state is CacheState.LOADING
    cache.apply("g", ("t", 0), commit(5, 0, 1))
    cache.apply("g", ("t", 1), commit(6, 0, 2))
    cache.apply("g", ("t", 0), Committed(None, "", 0, 3))
    cache.apply("g", ("t", 0), commit(4, 0, 2))  # older than the tombstone: stays deleted
    assert set(cache.offsets("g")) == {("t", 1)}
    assert cache.offsets("g", [("t", 0), ("t", 1), ("t", 9)]).keys() == {("t", 1)}
    cache.apply("g", ("t", 1), Committed(None, "", 0, 4))
    assert cache.offsets("g") == {} and cache.seen("g", ("t", 0)) and cache.groups() == []
    assert not cache.seen("g", ("t", 2)) and not cache.seen("other", ("t", 0))


def test_offsets_of_a_group_with_members_never_expire():
    cache = PartitionOffsets(0)
    cache.apply("g", ("t", 0), commit(5, 0, 1))
    assert cache.expired(lambda g: True, 10**9 * MINUTE, MINUTE) == {}


def test_offsets_expire_retention_after_the_later_of_the_last_commit_and_the_group_becoming_empty():
    cache = PartitionOffsets(0)
    members = {"g": True}
    cache.apply("g", ("t", 0), commit(5, 0, 1))
    cache.apply("g", ("t", 1), commit(6, 3 * MINUTE, 2))
    cache.apply("solo", ("t", 0), commit(1, 0, 3))  # member-less commits: empty from the first check (4 min)
    assert cache.expired(members.get, 4 * MINUTE, 10 * MINUTE) == {}
    members["g"] = False  # the last member left: its clock starts at this check (5 min)
    assert cache.expired(members.get, 5 * MINUTE, 10 * MINUTE) == {}
    assert cache.expired(members.get, 13 * MINUTE, 10 * MINUTE) == {}
    assert cache.expired(members.get, 14 * MINUTE, 10 * MINUTE) == {"solo": [("t", 0)]}
    assert cache.expired(members.get, 15 * MINUTE, 10 * MINUTE) == {"g": [("t", 0), ("t", 1)], "solo": [("t", 0)]}


def test_a_commit_after_the_group_became_empty_restarts_its_clock():
    cache = PartitionOffsets(0)
    cache.apply("g", ("t", 0), commit(5, 0, 1))
    assert cache.expired(lambda g: False, 1 * MINUTE, 10 * MINUTE) == {}
    cache.apply("g", ("t", 0), commit(7, 8 * MINUTE, 2))
    assert cache.expired(lambda g: False, 12 * MINUTE, 10 * MINUTE) == {}
    assert cache.expired(lambda g: False, 18 * MINUTE, 10 * MINUTE) == {"g": [("t", 0)]}


changes = st.lists(st.tuples(st.sampled_from(["g", "h"]), st.sampled_from([("t", 0), ("t", 1), ("u", 0)]),
                             st.one_of(st.none(), st.integers(0, 100))), max_size=30)


@given(changes, st.randoms())
def test_any_order_of_acknowledgement_leaves_what_the_log_order_leaves(log, rnd):
    """Rule 1: the cache ends as compaction would leave the log (the last record per key), whatever order
    the commits were acknowledged in."""
    in_order, shuffled = PartitionOffsets(0), PartitionOffsets(0)
    records = [(g, tp, Committed(o, "", 0, i)) for i, (g, tp, o) in enumerate(log)]
    for record in records:
        in_order.apply(*record)
    rnd.shuffle(records)
    for record in records:
        shuffled.apply(*record)
    last = {}
    for g, tp, o in log:
        last[(g, tp)] = o
    for g in ("g", "h"):
        assert shuffled.offsets(g) == in_order.offsets(g)
        assert {tp: c.offset for tp, c in in_order.offsets(g).items()} == {
            tp: o for (group, tp), o in last.items() if group == g and o is not None}
