"""The driver's reading of a Metadata answer: missing topics, dead leaders, patterns and assignments
(`OffsetOracle._covered` over views as the brokers return them), and the retry budget of lookups."""


import pytest

from sparklog.datasource.metadata import (
    UNKNOWN_TOPIC_OR_PARTITION,
    OffsetOracle,
    TopicNotFound,
    with_retries,
)
from sparklog.datasource.options import SparklogOptionError, parse_read_options

LEADER_NOT_AVAILABLE = 5

VIEW = {  # {topic: (error code, {partition: has a live leader})}
    "pat_a": (0, {0: True, 1: True}),
    "pat_b": (0, {0: True, 1: False}),
    "other": (0, {0: True}),
}


def covered(view, **options):
    opts = parse_read_options({"bootstrap.servers": "h:1", **options}, streaming=True)
    return OffsetOracle(opts)._covered(opts.subscription, view)


def test_pattern_covers_matching_topics_and_waits_for_dead_leaders():
    tps, waiting = covered(VIEW, subscribePattern="pat")
    assert tps == [("pat_a", 0), ("pat_a", 1), ("pat_b", 0), ("pat_b", 1)]
    assert waiting == [("pat_b", 1)]


def test_a_missing_topic_is_an_error_naming_it_and_the_option():
    view = {"t": (UNKNOWN_TOPIC_OR_PARTITION, {}), "u": (0, {0: True})}
    with pytest.raises(TopicNotFound, match="Topic t does not exist .*'sparklog.waitForTopics'"):
        covered(view, subscribe="t,u")
    assert covered(view, subscribe="t,u", **{"sparklog.waitForTopics": "true"}) == ([("u", 0)], [])


def test_a_topic_being_created_is_waited_for():
    tps, waiting = covered({"t": (LEADER_NOT_AVAILABLE, {})}, subscribe="t")
    assert tps == [] and waiting == [("t", -1)]


def test_assign_covers_only_assigned_partitions_and_refuses_absent_ones():
    assert covered(VIEW, assign='{"pat_b":[0]}') == ([("pat_b", 0)], [])
    with pytest.raises(SparklogOptionError, match="Partition pat_a-5 is assigned but topic pat_a has 2 partitions"):
        covered(VIEW, assign='{"pat_a":[5]}')


class _Clock:
    """time.monotonic and time.sleep of the module under test: a sleep moves the clock, nothing else does."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_retries_stop_at_the_deadline(monkeypatch):
    """100 retries 125 ms apart would take 12.5 s: the 0.5 s deadline stops them after the attempts at 0, 125,
    250 and 375 ms (the next would start at the deadline), each given what is left of it (an injected clock:
    the test's own pace on a loaded machine does not enter; binary-exact steps)."""
    import sparklog.datasource.metadata as metadata

    clock, calls = _Clock(), []
    monkeypatch.setattr(metadata, "time", clock)

    def failing(timeout):
        calls.append(timeout)
        raise TimeoutError("no answer")

    with pytest.raises(TimeoutError):
        with_retries(failing, retries=100, interval_ms=125, what="lookup", deadline=clock.now + 0.5)
    assert 1 <= len(calls) < 10
    assert all(0 < t <= 0.5 for t in calls)
    assert calls == [0.5, 0.375, 0.25, 0.125] and clock.now == 1000.375
