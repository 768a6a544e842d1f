"""The Kafka group member's range assignor (kafka_group_consumer Rule 2), as properties over any group."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparklog.client.kafka_group_consumer import range_assignment

TOPICS = ["a", "b", "c"]
members_st = st.dictionaries(
    st.text("abcdef0123456789-", min_size=1, max_size=8),
    st.tuples(st.one_of(st.none(), st.text("xyz", min_size=1, max_size=3)),
              st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True)),
    min_size=1, max_size=6)
counts_st = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 20), max_size=3)


@given(members_st, counts_st)
def test_every_partition_goes_to_exactly_one_subscriber_in_contiguous_ranges_of_sizes_differing_by_one(members,
                                                                                                      counts):
    out = range_assignment(members, counts)
    assert set(out) == set(members)
    for topic, count in counts.items():
        subscribers = [m for m, (_, topics) in members.items() if topic in topics]
        shares = {m: sorted(p for t, p in out[m] if t == topic) for m in members}
        owned = sorted(p for m in members for p in shares[m])
        assert owned == (list(range(count)) if subscribers else [])
        assert all(not shares[m] for m in members if m not in subscribers)
        sizes = [len(shares[m]) for m in subscribers]
        assert not sizes or max(sizes) - min(sizes) <= 1
        for m in subscribers:
            assert shares[m] == list(range(shares[m][0], shares[m][0] + len(shares[m]))) if shares[m] else True


def test_kafka_s_order_static_members_by_instance_id_first_and_the_larger_shares_first():
    members = {"m-b": (None, ["a"]), "m-a": (None, ["a"]), "m-z": ("i-1", ["a"])}
    out = range_assignment(members, {"a": 7})
    assert out == {"m-z": [("a", 0), ("a", 1), ("a", 2)], "m-a": [("a", 3), ("a", 4)], "m-b": [("a", 5), ("a", 6)]}


def test_a_topic_without_partitions_or_subscribers_assigns_nothing():
    assert range_assignment({"m": (None, ["a"])}, {}) == {"m": []}
    assert range_assignment({"m": (None, ["a"])}, {"b": 3}) == {"m": []}
