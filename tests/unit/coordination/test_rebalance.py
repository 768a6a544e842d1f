from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination.rebalance import assign, assign_all, chunk

topic_partitions = st.lists(
    st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(min_value=0, max_value=20)), max_size=60
)
consumer_ids = st.lists(st.text(alphabet="abcxyz0123-", min_size=1, max_size=6), min_size=1, max_size=12, unique=True)


@given(topic_partitions, consumer_ids)
def test_every_partition_has_exactly_one_owner(partitions, consumers):
    owned = [p for c in consumers for p in assign(partitions, consumers, c)]
    assert sorted(owned) == sorted(set(partitions))


@given(topic_partitions, consumer_ids)
def test_shares_differ_by_at_most_one_and_earlier_consumers_get_the_extra(partitions, consumers):
    sizes = [len(assign(partitions, consumers, c)) for c in sorted(consumers)]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


@given(topic_partitions, consumer_ids, st.randoms(use_true_random=False))
def test_independent_of_input_order(partitions, consumers, rnd):
    shuffled_p, shuffled_c = list(partitions), list(consumers)
    rnd.shuffle(shuffled_p)
    rnd.shuffle(shuffled_c)
    for c in consumers:
        assert assign(partitions, consumers, c) == assign(shuffled_p, shuffled_c, c)


@given(topic_partitions, consumer_ids)
def test_a_consumer_not_in_the_group_gets_nothing(partitions, consumers):
    assert assign(partitions, consumers, "not-a-member!") == []


@given(topic_partitions, consumer_ids)
def test_shares_are_contiguous_runs_of_the_sorted_partitions(partitions, consumers):
    ordered = sorted(set(partitions))
    flattened = [p for c in sorted(consumers) for p in assign(partitions, consumers, c)]
    assert flattened == ordered


def test_paper_example_sorted_by_topic_then_partition():
    partitions = [("t", 3), ("t", 0), ("s", 1), ("t", 1), ("t", 2)]
    assert assign_all(partitions, ["c2", "c1"]) == {
        "c1": [("s", 1), ("t", 0), ("t", 1)],
        "c2": [("t", 2), ("t", 3)],
    }


def test_more_consumers_than_partitions_leaves_the_last_ones_idle():
    assert assign_all([("t", 0)], ["a", "b", "c"]) == {"a": [("t", 0)], "b": [], "c": []}


def test_chunk_ranges():
    assert [list(chunk(j, 7, 3)) for j in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert list(chunk(0, 0, 2)) == []
