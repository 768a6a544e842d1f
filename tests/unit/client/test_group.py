"""The group consumer's pure parts: Algorithm 1 over consumer streams, and subscriptions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sparklog.client.group import _subscription, stream_assignment

consumer_ids = st.text(alphabet="abcdefghij-_0123456789", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(subscriptions=st.dictionaries(consumer_ids, st.dictionaries(st.sampled_from(["t", "u"]),
                                                                      st.integers(1, 4), min_size=1), min_size=1,
                                     max_size=6),
       counts=st.fixed_dictionaries({"t": st.integers(0, 30), "u": st.integers(0, 7)}))
def test_every_partition_goes_to_exactly_one_stream_and_streams_differ_by_at_most_one(subscriptions, counts):
    partitions = {t: [(t, p) for p in range(n)] for t, n in counts.items()}
    owners: dict = {}
    per_stream: dict = {}
    for cid, topics in subscriptions.items():
        mine = stream_assignment(partitions, subscriptions, cid, topics)
        for tp, stream in mine.items():
            assert tp not in owners, f"{tp} assigned twice"
            owners[tp] = cid
            per_stream.setdefault((cid, tp[0], stream), []).append(tp)
        for topic in topics:
            assert all(tp[0] in topics for tp in mine)
    for topic, n in counts.items():
        subscribed = [cid for cid, topics in subscriptions.items() if topic in topics]
        expected = {(topic, p) for p in range(n)} if subscribed else set()
        assert {tp for tp in owners if tp[0] == topic} == expected
        sizes = [len(v) for (cid, t, _), v in per_stream.items() if t == topic]
        streams = sum(subscriptions[cid][topic] for cid in subscribed)
        sizes += [0] * (streams - len(sizes))
        if sizes:
            assert max(sizes) - min(sizes) <= 1


def test_streams_are_consumers_of_algorithm_1_in_sorted_order():
    partitions = {"t": [("t", p) for p in range(12)]}
    subs = {"c1": {"t": 1}, "c2": {"t": 2}}
    # C_T sorted: c1-0, c2-0, c2-1 -> ranges [0,4), [4,8), [8,12)
    assert stream_assignment(partitions, subs, "c1", subs["c1"]) == {("t", p): 0 for p in range(4)}
    assert stream_assignment(partitions, subs, "c2", subs["c2"]) == {
        **{("t", p): 0 for p in range(4, 8)}, **{("t", p): 1 for p in range(8, 12)}}


def test_the_assignment_does_not_depend_on_registry_order():
    partitions = {"t": [("t", p) for p in range(7)]}
    a = {"x": {"t": 1}, "y": {"t": 1}, "z": {"t": 1}}
    b = dict(reversed(list(a.items())))
    for cid in a:
        assert stream_assignment(partitions, a, cid, a[cid]) == stream_assignment(partitions, b, cid, b[cid])


def test_subscriptions():
    assert _subscription("t") == {"t": 1}
    assert _subscription(["a", "b"]) == {"a": 1, "b": 1}
    assert _subscription({"a": 2}) == {"a": 2}
    for bad in ([], {"a": 0}, ["bad/name"]):
        with pytest.raises(ValueError):
            _subscription(bad)
