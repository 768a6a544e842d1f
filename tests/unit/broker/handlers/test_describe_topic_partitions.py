"""DescribeTopicPartitions' pages (handlers/describe_topic_partitions.py Rules 1-3) over a snapshot stand-in:
examples of the cursor and the limit, and the property that paging with any limit gives every partition of every
topic exactly once, in order. The real broker answers in tests/integration/test_describe_topic_partitions.py."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.handlers.describe_topic_partitions import handle_describe_topic_partitions
from sparklog.broker.handlers.error_codes import (INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, LEADER_NOT_AVAILABLE,
                                                  UNKNOWN_TOPIC_OR_PARTITION)
from sparklog.protocol.describe_topic_partitions import DescribeTopicPartitionsRequest, RequestCursor, TopicRequest

LIVE = {1: SimpleNamespace(rack=None), 2: SimpleNamespace(rack=None)}


def partition(index: int, leader: int = 1):
    return SimpleNamespace(partition=index, leader=leader, leader_epoch=3, replicas=(1, 2, 3), isr=(1, 2, 3))


def broker_state(sizes: dict[str, int], broker_limit: int = 2000):
    topics = {name: SimpleNamespace(topic_id=None, partitions={i: partition(i) for i in range(n)})
              for name, n in sizes.items()}
    return SimpleNamespace(partitions=SimpleNamespace(snapshot=SimpleNamespace(topics=topics, brokers=LIVE)),
                           config=SimpleNamespace(max_request_partition_size_limit=broker_limit))


def ask(state, names=(), limit=2000, cursor=None):
    body = DescribeTopicPartitionsRequest(topics=[TopicRequest(name=n) for n in names], response_partition_limit=limit,
                                          cursor=None if cursor is None else RequestCursor(topic_name=cursor[0],
                                                                                           partition_index=cursor[1]))
    return handle_describe_topic_partitions(SimpleNamespace(body=body), state)


def pages(state, names=(), limit=2000) -> list[tuple[str, int]]:
    seen, cursor = [], None
    for _ in range(10_000):
        answer = ask(state, names, limit, cursor)
        seen += [(t.name, p.partition_index) for t in answer.topics for p in t.partitions]
        if answer.next_cursor is None:
            return seen
        cursor = (answer.next_cursor.topic_name, answer.next_cursor.partition_index)
    raise AssertionError("paging never ended")


def shape(answer):
    cursor = answer.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in answer.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


def test_every_topic_in_name_order_when_none_is_named():
    assert shape(ask(broker_state({"b": 2, "a": 1}))) == ([("a", 0, [0]), ("b", 0, [0, 1])], None)


def test_a_topic_cut_by_the_limit_ends_the_page_with_a_cursor_into_it():
    assert shape(ask(broker_state({"a": 2, "b": 3}), limit=3)) == ([("a", 0, [0, 1]), ("b", 0, [0])], ("b", 1))
    assert shape(ask(broker_state({"a": 2, "b": 3}), limit=3, cursor=("b", 1))) == ([("b", 0, [1, 2])], None)


def test_a_page_ending_at_a_topics_end_points_at_the_next_topic():
    assert shape(ask(broker_state({"a": 2, "b": 3}), limit=2)) == ([("a", 0, [0, 1])], ("b", 0))


def test_the_brokers_limit_bounds_the_clients():
    assert shape(ask(broker_state({"a": 5}, broker_limit=2), limit=4)) == ([("a", 0, [0, 1])], ("a", 2))


def test_named_topics_unknown_and_illegal_ones_answered_with_their_error():
    answer = ask(broker_state({"a": 1}), names=["zz", "a", "bad name!", "a"])
    assert shape(answer) == ([("a", 0, [0]), ("bad name!", INVALID_TOPIC_EXCEPTION, []),
                              ("zz", UNKNOWN_TOPIC_OR_PARTITION, [])], None)


def test_a_cursor_on_a_topic_not_named_is_an_invalid_request():
    assert shape(ask(broker_state({"a": 1, "b": 1}), names=["a"], cursor=("b", 0))) == (
        [("a", INVALID_REQUEST, [])], None)


def test_a_partition_whose_leader_is_gone_has_no_leader():
    state = broker_state({"a": 1})
    state.partitions.snapshot.topics["a"].partitions[0] = partition(0, leader=3)
    part = ask(state).topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch, part.isr_nodes, part.offline_replicas,
            part.eligible_leader_replicas) == (LEADER_NOT_AVAILABLE, -1, -1, [1, 2], [3], [])


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 7), max_size=5), st.integers(1, 9),
       st.booleans())
def test_paging_with_any_limit_gives_every_partition_once_in_order(sizes, limit, named):
    state = broker_state(sizes)
    expected = [(name, i) for name in sorted(sizes) for i in range(sizes[name])]
    assert pages(state, sorted(sizes) if named and sizes else (), limit) == expected
