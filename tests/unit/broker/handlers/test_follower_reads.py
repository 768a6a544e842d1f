"""broker/handlers/follower_reads.py over stand-ins for the broker state: the leader's candidates and redirect
(Rule 1), a follower's epoch check (Rule 2), and its out-of-range rule (Rule 3). The real path, on real
brokers, is tests/integration/test_follower_fetching.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

from sparklog.broker.handlers import follower_reads
from sparklog.broker.handlers.error_codes import (NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE,
                                                  OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION)
from sparklog.broker.handlers.fetch_sessions import _answer
from sparklog.broker.replica_selector import RACK_AWARE_SELECTOR
from sparklog.broker.replication.replica_state import FollowerState
from sparklog.protocol import errors

LAG_MS = 10_000
FENCED_LEADER_EPOCH = errors.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = errors.UnknownLeaderEpochError.errno


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def broker_state(selector=RACK_AWARE_SELECTOR, racks=None, leader_hw=50, following=None, leader_epoch=4):
    racks = {1: "a", 2: "b", 3: "c"} if racks is None else racks
    brokers = {broker_id: SimpleNamespace(rack=rack) for broker_id, rack in racks.items()}
    meta = SimpleNamespace(leader=1, leader_epoch=leader_epoch)
    snapshot = SimpleNamespace(brokers=brokers, following=following or {},
                               topics={"t": SimpleNamespace(partitions={0: meta})})
    fetchers = SimpleNamespace(leader_high_watermark=lambda key, leader: leader_hw)
    return SimpleNamespace(config=SimpleNamespace(replica_selector_class=selector),
                           partitions=SimpleNamespace(snapshot=snapshot),
                           replicas=SimpleNamespace(broker_id=1, lag_time_max_ms=LAG_MS, fetchers=fetchers))


def led(isr=(1, 2, 3), leos=None, caught_up_ago_ms=0, log_start=0):
    leos = {2: 100, 3: 100} if leos is None else leos
    now = _now_ms()
    followers = {r: FollowerState(leo=leo, caught_up_ms=now - caught_up_ago_ms) for r, leo in leos.items()}
    plog = SimpleNamespace(log_start_offset=log_start, log_end_offset=100, high_watermark=100, last_stable_offset=90)
    return SimpleNamespace(plog=plog, state=SimpleNamespace(isr=frozenset(isr), followers=followers))


def test_the_leader_names_the_in_sync_follower_in_the_clients_rack():
    assert follower_reads.preferred_replica(broker_state(), led(), "b", 10) == 2
    assert follower_reads.preferred_replica(broker_state(), led(), "c", 10) == 3


def test_no_redirect_for_the_leaders_rack_no_rack_or_the_leader_selector():
    assert follower_reads.preferred_replica(broker_state(), led(), "a", 10) == follower_reads.NO_REPLICA
    assert follower_reads.preferred_replica(broker_state(), led(), "", 10) == follower_reads.NO_REPLICA
    assert follower_reads.preferred_replica(broker_state(selector=""), led(), "b", 10) == follower_reads.NO_REPLICA


def test_a_follower_out_of_the_isr_behind_the_offset_stale_or_dead_is_no_candidate():
    none = follower_reads.NO_REPLICA
    assert follower_reads.preferred_replica(broker_state(), led(isr=(1, 3)), "b", 10) == none
    assert follower_reads.preferred_replica(broker_state(), led(leos={2: 5, 3: 100}), "b", 10) == none
    assert follower_reads.preferred_replica(broker_state(), led(caught_up_ago_ms=2 * LAG_MS), "b", 10) == none
    assert follower_reads.preferred_replica(broker_state(racks={1: "a", 3: "c"}), led(), "b", 10) == none
    assert follower_reads.preferred_replica(broker_state(), led(log_start=20), "b", 10) == none


def test_the_redirect_carries_the_leaders_offsets_and_no_records_and_a_session_always_answers_it():
    part = follower_reads.redirect(0, led(), 2, isolation=1)
    assert (part.error_code, part.preferred_read_replica, part.records, part.high_watermark,
            part.last_stable_offset) == (0, 2, b"", 100, 90)
    assert _answer(part) is None  # fetch_sessions.py Rule 3: answered every time, like an error


def test_a_follower_serves_only_a_fetch_naming_a_rack_in_the_epoch_it_knows():
    plog = SimpleNamespace(log_start_offset=0)
    state = broker_state(following={("t", 0): plog})
    snapshot = state.partitions.snapshot
    target = follower_reads.follower_target(state, snapshot, "t", 0, 4, "b", NOT_LEADER_OR_FOLLOWER)
    assert target.plog is plog and target.leader == 1 and target.state.followers == {}
    assert follower_reads.follower_target(state, snapshot, "t", 0, -1, "b", NOT_LEADER_OR_FOLLOWER).plog is plog
    assert follower_reads.follower_target(state, snapshot, "t", 0, 4, "", NOT_LEADER_OR_FOLLOWER) == NOT_LEADER_OR_FOLLOWER
    assert follower_reads.follower_target(state, snapshot, "t", 0, 3, "b", NOT_LEADER_OR_FOLLOWER) == FENCED_LEADER_EPOCH
    assert follower_reads.follower_target(state, snapshot, "t", 0, 5, "b", NOT_LEADER_OR_FOLLOWER) == UNKNOWN_LEADER_EPOCH
    assert (follower_reads.follower_target(state, snapshot, "t", 0, 4, "b", UNKNOWN_TOPIC_OR_PARTITION)
            == UNKNOWN_TOPIC_OR_PARTITION)
    empty = broker_state()
    assert (follower_reads.follower_target(empty, empty.partitions.snapshot, "t", 0, 4, "b", NOT_LEADER_OR_FOLLOWER)
            == NOT_LEADER_OR_FOLLOWER)


def test_past_the_followers_end_but_not_the_leaders_high_watermark_is_offset_not_available():
    state = broker_state(leader_hw=50)
    target = follower_reads.FollowedPartition(("t", 0), SimpleNamespace(log_start_offset=10), 1)
    assert follower_reads.follower_error(state, target, 50, OFFSET_OUT_OF_RANGE) == OFFSET_NOT_AVAILABLE
    assert follower_reads.follower_error(state, target, 51, OFFSET_OUT_OF_RANGE) == OFFSET_OUT_OF_RANGE
    assert follower_reads.follower_error(state, target, 5, OFFSET_OUT_OF_RANGE) == OFFSET_OUT_OF_RANGE
    assert follower_reads.follower_error(state, led(), 50, OFFSET_OUT_OF_RANGE) == OFFSET_OUT_OF_RANGE  # a leader's
    unknown = broker_state(leader_hw=-1)  # not fetched from the leader yet: nothing is known to exist
    assert follower_reads.follower_error(unknown, target, 50, OFFSET_OUT_OF_RANGE) == OFFSET_OUT_OF_RANGE


def test_an_incremental_session_fetch_keeps_the_consumers_rack():
    """Rule 2 in a fetch session (fetch_sessions.py): what the core reads of an incremental fetch names the rack."""
    from sparklog.broker.handlers.fetch_sessions import FetchSessionCache
    from sparklog.protocol.fetch import (FetchableTopicResponse, FetchPartition, FetchRequest, FetchResponse,
                                         FetchTopic, PartitionData)

    def request(session_id: int, epoch: int, topics: list) -> FetchRequest:
        return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=session_id, session_epoch=epoch,
                            rack_id="b", topics=topics, forgotten_topics_data=[])

    cache = FetchSessionCache()
    parts = [FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=100) for p in (0, 1)]
    context = cache.begin(request(0, 0, [FetchTopic(topic="t", partitions=parts)]), 0)
    answered = context.finish(FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchableTopicResponse(topic="t", partitions=[PartitionData(partition_index=p, error_code=0, high_watermark=0)
                                                      for p in (0, 1)])]))
    assert answered.session_id > 0
    incremental = cache.begin(request(answered.session_id, 1, []), 1)
    assert incremental.fetch.rack_id == "b" and incremental.fetch.replica_id == -1
