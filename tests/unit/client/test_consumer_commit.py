"""The plain Consumer's commit() and committed() (Rule 3) against two scripted brokers: they go to the group's
coordinator, not to any broker, and find it again while it is loading or has moved."""

from __future__ import annotations

import pytest

from sparklog.client import Consumer
from sparklog.protocol import ApiKey, FindCoordinatorResponse
from sparklog.protocol.errors import GroupAuthorizationFailedError
from sparklog.protocol.offset_commit import (OffsetCommitResponse, OffsetCommitResponsePartition,
                                             OffsetCommitResponseTopic)
from sparklog.protocol.offset_fetch import (OffsetFetchResponse, OffsetFetchResponsePartition,
                                            OffsetFetchResponseTopic)
from support.client_fake_broker import FakeBroker

NOT_COORDINATOR, LOADING = 16, 14


def commit_answer(codes: list[int], committed: dict):
    """OffsetCommit answered with the scripted codes first; offsets of a successful commit are kept."""
    def answer(request):
        code = codes.pop(0) if codes else 0
        body = request.body
        if not code:
            committed.update({(t.name, p.partition_index): p.committed_offset for t in body.topics for p in t.partitions})
        return OffsetCommitResponse(throttle_time_ms=0, topics=[OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code) for p in t.partitions])
            for t in body.topics])
    return answer


def fetch_answer(codes: list[int], committed: dict):
    def answer(request):
        code = codes.pop(0) if codes else 0
        return OffsetFetchResponse(throttle_time_ms=0, error_code=code, topics=[OffsetFetchResponseTopic(
            name=t.name, partitions=[OffsetFetchResponsePartition(
                partition_index=p, committed_offset=committed.get((t.name, p), -1), committed_leader_epoch=-1,
                metadata="", error_code=0) for p in t.partition_indexes]) for t in request.body.topics])
    return answer


@pytest.fixture
def brokers():
    """`bootstrap` is not the coordinator (it says NOT_COORDINATOR to offset requests); `coordinator` is."""
    with FakeBroker({"t": 2}) as bootstrap, FakeBroker({"t": 2}) as coordinator:
        def find(request):
            return FindCoordinatorResponse(throttle_time_ms=0, error_code=0, error_message=None, node_id=7,
                                           host="127.0.0.1", port=coordinator.port)
        bootstrap.handlers[ApiKey.FIND_COORDINATOR] = find
        coordinator.handlers[ApiKey.FIND_COORDINATOR] = find
        bootstrap.handlers[ApiKey.OFFSET_COMMIT] = commit_answer([NOT_COORDINATOR] * 1000, {})
        bootstrap.handlers[ApiKey.OFFSET_FETCH] = fetch_answer([NOT_COORDINATOR] * 1000, {})
        yield bootstrap, coordinator


def consumer(bootstrap: FakeBroker, **settings) -> Consumer:
    return Consumer(bootstrap.bootstrap, **{"group.id": "g", "retry.backoff.ms": 10, **settings})


def test_commits_go_to_the_coordinator_and_follow_it_while_it_loads_or_moves(brokers):
    bootstrap, coordinator = brokers
    committed: dict = {}
    coordinator.handlers[ApiKey.OFFSET_COMMIT] = commit_answer([LOADING, NOT_COORDINATOR], committed)
    coordinator.handlers[ApiKey.OFFSET_FETCH] = fetch_answer([LOADING], committed)
    with consumer(bootstrap) as c:
        c.commit({("t", 0): 5, ("t", 1): 9}, timeout=10)
        assert committed == {("t", 0): 5, ("t", 1): 9}
        assert c.committed([("t", 0), ("t", 1)], timeout=10) == {("t", 0): 5, ("t", 1): 9}
    assert len([r for r in coordinator.requests if r.api_key == ApiKey.OFFSET_COMMIT]) == 3
    assert not [r for r in bootstrap.requests if r.api_key in (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)]


def test_a_coordinator_that_never_settles_fails_the_commit_after_its_timeout(brokers):
    bootstrap, coordinator = brokers
    coordinator.handlers[ApiKey.OFFSET_COMMIT] = commit_answer([LOADING] * 10_000, {})
    with consumer(bootstrap) as c, pytest.raises(Exception, match="COORDINATOR_LOAD_IN_PROGRESS|loading"):
        c.commit({("t", 0): 1}, timeout=0.5)


def test_other_commit_errors_are_raised_at_once(brokers):
    bootstrap, coordinator = brokers
    coordinator.handlers[ApiKey.OFFSET_COMMIT] = commit_answer([30], {})  # GROUP_AUTHORIZATION_FAILED
    with consumer(bootstrap) as c, pytest.raises(GroupAuthorizationFailedError):
        c.commit({("t", 0): 1}, timeout=10)
    assert len([r for r in coordinator.requests if r.api_key == ApiKey.OFFSET_COMMIT]) == 1


def test_read_committed_asks_for_stable_offsets_and_waits_out_unstable_offset_commit(brokers):
    """A read_committed consumer's committed() asks OffsetFetch v7 with require_stable, and a partition
    answered UNSTABLE_OFFSET_COMMIT (a transaction's offsets awaiting their marker) is asked again, not taken
    as never committed; read_uncommitted does not ask for stable offsets."""
    bootstrap, coordinator = brokers
    unstable = [2]

    def answer(request):
        pending = request.body.require_stable and unstable[0] > 0
        unstable[0] -= pending
        return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=[OffsetFetchResponseTopic(
            name="t", partitions=[OffsetFetchResponsePartition(
                partition_index=0, committed_offset=-1 if pending else 12, committed_leader_epoch=-1, metadata="",
                error_code=88 if pending else 0)])])

    coordinator.handlers[ApiKey.OFFSET_FETCH] = answer
    with consumer(bootstrap, **{"isolation.level": "read_committed"}) as c:
        assert c.committed([("t", 0)], timeout=10) == {("t", 0): 12}
    fetches = [r for r in coordinator.requests if r.api_key == ApiKey.OFFSET_FETCH]
    assert [(r.api_version, r.body.require_stable) for r in fetches] == [(7, True)] * 3
    with consumer(bootstrap) as c:
        assert c.committed([("t", 0)], timeout=10) == {("t", 0): 12}
    assert coordinator.requests[-1].body.require_stable is False
