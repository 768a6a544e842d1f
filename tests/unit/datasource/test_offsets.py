"""Offsets JSON, the rate limit and input-partition planning: pure functions, checked by example and property."""

import json
import pickle

from hypothesis import given, strategies as st

from sparklog.datasource import offsets as off
from sparklog.datasource.offsets import OffsetRange, SparklogInputPartition


def test_json_is_canonical():
    offsets = {("b", 10): 1, ("b", 2): 2, ("a", 0): 3}
    data = off.to_json(offsets)
    assert json.dumps(data) == '{"a": {"0": 3}, "b": {"2": 2, "10": 1}}'
    assert off.from_json(json.loads(json.dumps(data))) == offsets
    assert json.dumps(off.to_json(off.from_json({"b": {"10": 1, "2": 2}, "a": {"0": 3}}))) == json.dumps(data)


def test_rate_limit_shares_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 600, ("t", 1): 300, ("t", 2): 200}
    assert off.rate_limit(100, start, latest) == {("t", 0): 60, ("t", 1): 30, ("t", 2): 110}


def test_rate_limit_everything_when_under_limit_and_new_partitions_from_zero():
    start = {("t", 0): 5}
    latest = {("t", 0): 7, ("u", 0): 3}
    assert off.rate_limit(100, start, latest) == latest
    assert sum(off.rate_limit(4, start, latest)[tp] - start.get(tp, 0) for tp in latest) == 4


def test_rate_limit_does_not_exceed_with_many_small_partitions():
    # Spark's Kafka source rounds 0.5 up for each and would take 20 here
    start = {("t", p): 0 for p in range(20)}
    latest = {("t", p): 1 for p in range(20)}
    end = off.rate_limit(10, start, latest)
    assert sum(end.values()) == 10


def test_rate_limit_keeps_offsets_that_went_backwards():
    # a recreated topic: latest below start is left for partitions() to report as data loss
    assert off.rate_limit(5, {("t", 0): 50}, {("t", 0): 10}) == {("t", 0): 10}


tps = st.tuples(st.sampled_from("abc"), st.integers(0, 5))


@given(st.dictionaries(tps, st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
       st.integers(0, 3000))
def test_rate_limit_properties(spans, limit):
    start = {tp: min(a, b) for tp, (a, b) in spans.items()}
    latest = {tp: max(a, b) for tp, (a, b) in spans.items()}
    end = off.rate_limit(limit, start, latest)
    assert set(end) == set(latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    total = sum(latest[tp] - start[tp] for tp in latest)
    assert sum(end[tp] - start[tp] for tp in latest) == min(limit, total)


def test_plan_one_per_partition_and_drops_empty():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)]
    assert off.plan(ranges) == [OffsetRange("t", 0, 0, 10)]


def test_plan_max_records_per_partition():
    assert off.plan([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4) == [
        OffsetRange("t", 0, 0, 3), OffsetRange("t", 0, 3, 6), OffsetRange("t", 0, 6, 10)]


def test_plan_min_partitions_splits_large_ranges():
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)]
    planned = off.plan(ranges, min_partitions=5)
    assert [r.partition for r in planned] == [0, 0, 0, 0, 0, 1]  # round(100 / 22) = 5 pieces, 10 stays whole
    assert planned[0].start == 0 and planned[4].end == 100


@given(st.lists(st.integers(0, 500), min_size=1, max_size=8), st.integers(1, 40), st.one_of(st.none(), st.integers(1, 200)))
def test_plan_covers_exactly_and_is_deterministic(sizes, min_partitions, max_records):
    ranges = [OffsetRange("t", p, 1000, 1000 + s) for p, s in enumerate(sizes)]
    planned = off.plan(ranges, min_partitions, max_records)
    assert planned == off.plan(ranges, min_partitions, max_records)
    for r in ranges:
        pieces = [x for x in planned if x.partition == r.partition]
        covered = [o for x in pieces for o in range(x.start, x.end)]
        assert covered == list(range(r.start, r.end))
        assert all(x.size > 0 for x in pieces)
        if max_records:
            assert all(x.size <= max_records for x in pieces)


def test_input_partition_pickles_with_its_range():
    p = SparklogInputPartition("t", 3, 10, 20, "h:1")
    q = pickle.loads(pickle.dumps(p))
    assert q == p and (q.topic, q.partition, q.start, q.end, q.bootstrap) == ("t", 3, 10, 20, "h:1")
