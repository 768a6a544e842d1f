"""Fetch from the closest replica (KIP-392): the leader's preferred read replica, and a follower's consumer reads.

Rule 1 (redirect, `preferred_replica`): under the rack-aware selector (broker/replica_selector.py), a consumer's
Fetch (replica_id < 0) that names a rack (rack_id, Fetch v11+) is answered by the leader, for each partition
whose selected replica is a follower, with no records and no error, the leader's high watermark, last stable
offset and log start offset, and preferred_read_replica set to that follower (`redirect`). Such an answer is
sent at once (no long poll), and a fetch session carries it every time (fetch_sessions.py Rule 3). The
candidates are the leader and each in-sync follower of a live broker that holds the fetch offset and was caught
up within replica.lag.time.max.ms (replica_selector.py Rule 3). A fetch offset below the leader's log start is
never redirected (the leader answers it OFFSET_OUT_OF_RANGE).
Rule 2 (what a follower serves, `follower_target`): a consumer's Fetch that names a rack, of a partition this
broker follows, is served from the follower's log, when its current_leader_epoch is -1 or the leader epoch this
broker knows (older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH). A fetch that names no rack, a
follower's fetch, and any fetch of a partition neither led nor followed here keep the leader's answer
(NOT_LEADER_OR_FOLLOWER for a partition led elsewhere), as before KIP-392: a client that did not opt in still
learns that its leader moved. A follower never redirects (Kafka's leader alone selects).
Rule 3 (a follower's high watermark, `follower_error`): a follower serves read_uncommitted up to its own high
watermark (the leader's as last replicated, capped at its log end) and read_committed up to its own last stable
offset; an offset between its high watermark and its log end gets no records (the long poll waits for it). An
offset past its log end but not past the leader's high watermark it last learnt is OFFSET_NOT_AVAILABLE (not
replicated here yet: the client retries), not OFFSET_OUT_OF_RANGE; an offset below its log start or past the
leader's high watermark stays OFFSET_OUT_OF_RANGE (the client goes back to the leader).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from sparklog.broker.handlers.error_codes import NONE, NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE, OFFSET_OUT_OF_RANGE
from sparklog.broker.replica_selector import ReplicaView, is_rack_aware, select
from sparklog.protocol import errors
from sparklog.protocol.fetch import PartitionData

NO_REPLICA = -1  # preferred_read_replica: read from the one asked
NO_EPOCH_CHECK = -1
FENCED_LEADER_EPOCH = errors.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = errors.UnknownLeaderEpochError.errno


class _NoFollowers(NamedTuple):
    """A followed partition's stand-in for a leader state: it has no followers of its own."""

    followers: dict


class FollowedPartition(NamedTuple):
    """A partition this broker follows, served to a consumer (Rule 2); read as a led partition is read."""

    key: tuple[str, int]
    plog: Any
    leader: int
    state: _NoFollowers = _NoFollowers({})


def redirects(state) -> bool:
    """Whether this broker may answer a consumer with a preferred read replica (Rule 1's selector)."""
    return is_rack_aware(state.config.replica_selector_class)


def preferred_replica(state, led, rack_id: str, fetch_offset: int) -> int:
    """Rule 1: the follower a consumer in `rack_id` should read `led` from at `fetch_offset`, or NO_REPLICA."""
    if (not rack_id or led.__class__ is FollowedPartition or not redirects(state)
            or fetch_offset < led.plog.log_start_offset):
        return NO_REPLICA
    replicas = state.replicas
    brokers = state.partitions.snapshot.brokers
    me = replicas.broker_id
    leader = ReplicaView(me, _rack(brokers, me), led.plog.log_end_offset, 0)
    chosen = select(state.config.replica_selector_class, rack_id, leader, _candidates(led, brokers, fetch_offset,
                                                                                       replicas.lag_time_max_ms))
    return NO_REPLICA if chosen == me else chosen


def _candidates(led, brokers, fetch_offset: int, lag_time_max_ms: int) -> list[ReplicaView]:
    """replica_selector.py Rule 3's followers of `led`."""
    now_ms = int(time.monotonic() * 1000)
    isr = led.state.isr
    return [ReplicaView(replica, _rack(brokers, replica), follower.leo, follower.caught_up_ms)
            for replica, follower in led.state.followers.items()
            if replica in isr and replica in brokers and follower.leo >= fetch_offset
            and now_ms - follower.caught_up_ms <= lag_time_max_ms]


def _rack(brokers, broker_id: int) -> str | None:
    info = brokers.get(broker_id)
    return None if info is None else info.rack


def redirect(index: int, led, preferred: int, isolation: int) -> PartitionData:
    """Rule 1's answer for one partition: its offsets as the leader has them, no records, the replica to ask."""
    plog = led.plog
    high_watermark = plog.high_watermark
    stable = min(plog.last_stable_offset, high_watermark) if isolation else high_watermark
    return PartitionData(partition_index=index, error_code=NONE, high_watermark=high_watermark,
                         last_stable_offset=stable, log_start_offset=plog.log_start_offset,
                         aborted_transactions=None, preferred_read_replica=preferred, records=b"")


def follower_target(state, snapshot, topic: str, partition: int, current_leader_epoch: int, rack_id: str,
                    leader_answer: int):
    """Rule 2: the followed partition to serve, or, as an int, the error to answer (`leader_answer`, the
    leader's check's, when a follower does not serve it)."""
    if not rack_id or leader_answer != NOT_LEADER_OR_FOLLOWER:
        return leader_answer
    key = (topic, partition)
    plog = snapshot.following.get(key)
    if plog is None:
        return leader_answer
    meta = snapshot.topics[topic].partitions[partition]
    if current_leader_epoch != NO_EPOCH_CHECK and current_leader_epoch != meta.leader_epoch:
        return FENCED_LEADER_EPOCH if current_leader_epoch < meta.leader_epoch else UNKNOWN_LEADER_EPOCH
    return FollowedPartition(key, plog, meta.leader)


def follower_error(state, target, fetch_offset: int, code: int) -> int:
    """Rule 3: the error a read of `target` at `fetch_offset` answers, `code` being the log's (a led partition's
    stays as it is)."""
    if code != OFFSET_OUT_OF_RANGE or target.__class__ is not FollowedPartition:
        return code
    plog = target.plog
    if fetch_offset < plog.log_start_offset:
        return code
    leader_hw = state.replicas.fetchers.leader_high_watermark(target.key, target.leader)
    return OFFSET_NOT_AVAILABLE if fetch_offset <= leader_hw else code
