"""replica.selector.class (broker/replica_selector.py): Kafka's two selectors accepted, any other refused at
start in one line; the rack-aware choice (Rules 1 and 2), example by example and as a property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.config import BrokerConfig, ConfigError
from sparklog.broker.replica_selector import LEADER_SELECTOR, RACK_AWARE_SELECTOR, ReplicaView, select

BASE = {"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "z:1"}
LEADER = ReplicaView(1, "a", 100, 0)


def test_an_unknown_replica_selector_class_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties({**BASE, "replica.selector.class": "com.example.NearestReplicaSelector"})
    text = str(refused.value)
    assert "\n" not in text and "replica.selector.class" in text and "com.example.NearestReplicaSelector" in text


@pytest.mark.parametrize("name", ["", LEADER_SELECTOR, RACK_AWARE_SELECTOR])
def test_kafkas_selectors_and_none_are_accepted(name):
    assert BrokerConfig.from_properties({**BASE, "replica.selector.class": name}).replica_selector_class == name


def test_the_default_is_the_leader():
    assert BrokerConfig.from_properties(BASE).replica_selector_class == ""


@pytest.mark.parametrize("selector, rack, followers, chosen", [
    (RACK_AWARE_SELECTOR, "", [ReplicaView(2, "", 100, 0)], 1),  # no rack: the leader
    (RACK_AWARE_SELECTOR, "a", [ReplicaView(2, "a", 100, 5)], 1),  # the leader is in the rack
    (RACK_AWARE_SELECTOR, "b", [ReplicaView(2, "b", 90, 0), ReplicaView(3, "c", 100, 0)], 2),
    (RACK_AWARE_SELECTOR, "b", [ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 100, 0)], 3),  # highest LEO
    (RACK_AWARE_SELECTOR, "b", [ReplicaView(2, "b", 100, 7), ReplicaView(3, "b", 100, 3)], 2),  # latest caught up
    (RACK_AWARE_SELECTOR, "z", [ReplicaView(2, "b", 100, 0)], 1),  # no replica in the rack
    (RACK_AWARE_SELECTOR, "b", [ReplicaView(2, None, 100, 0)], 1),  # a broker without a rack
    (LEADER_SELECTOR, "b", [ReplicaView(2, "b", 100, 0)], 1),
    ("", "b", [ReplicaView(2, "b", 100, 0)], 1),
])
def test_the_choice(selector, rack, followers, chosen):
    assert select(selector, rack, LEADER, followers) == chosen


views = st.builds(ReplicaView, st.integers(2, 9), st.sampled_from(["a", "b", "c", None]), st.integers(0, 5),
                  st.integers(0, 5))


@given(st.sampled_from(["", "a", "b", "c"]), st.lists(views, max_size=5, unique_by=lambda v: v.broker_id))
def test_the_rack_aware_choice_is_the_leader_or_the_best_follower_in_the_clients_rack(rack, followers):
    chosen = select(RACK_AWARE_SELECTOR, rack, LEADER, followers)
    local = [v for v in followers if v.rack == rack and rack]
    if not local or LEADER.rack == rack:
        assert chosen == LEADER.broker_id
    else:
        best = max((v.log_end_offset, v.caught_up_ms) for v in local)
        assert [(v.log_end_offset, v.caught_up_ms) for v in local if v.broker_id == chosen] == [best]
