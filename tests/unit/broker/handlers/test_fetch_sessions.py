"""The fetch session cache (broker/fetch_sessions.py): its Rules, and a property test of its state machine."""

from __future__ import annotations

import random

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sparklog.broker.handlers.fetch_sessions import EVICTION_MS, FetchSessionCache, next_epoch
from sparklog.broker.handlers.error_codes import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NONE
from sparklog.protocol.fetch import (FetchableTopicResponse, FetchPartition, FetchRequest, FetchResponse,
                                     FetchTopic, ForgottenTopic, PartitionData)


def request(session_id=0, epoch=0, parts=(), forgotten=(), replica_id=-1) -> FetchRequest:
    topics: dict[str, list] = {}
    for topic, index, offset in parts:
        topics.setdefault(topic, []).append(FetchPartition(partition=index, fetch_offset=offset,
                                                           partition_max_bytes=1024))
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, session_id=session_id,
                        session_epoch=epoch, topics=[FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                        forgotten_topics_data=[ForgottenTopic(topic=t, partitions=list(ps)) for t, ps in forgotten])


def response(fetch, hw=10, records=None, errors=None) -> FetchResponse:
    """The core's answer to `fetch`: every partition at `hw`; records and errors where given by (topic, index)."""
    records, errors = records or {}, errors or {}
    return FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=[
        FetchableTopicResponse(topic=topic.topic, partitions=[PartitionData(
            partition_index=p.partition, error_code=errors.get((topic.topic, p.partition), NONE), high_watermark=hw,
            last_stable_offset=hw, log_start_offset=0, records=records.get((topic.topic, p.partition), b""))
            for p in topic.partitions]) for topic in fetch.topics])


def answered(resp) -> set:
    return {(t.topic, p.partition_index) for t in resp.responses for p in t.partitions}


def fetched(fetch) -> dict:
    return {(t.topic, p.partition): p.fetch_offset for t in fetch.topics for p in t.partitions}


def open_session(cache, parts, now=0, replica_id=-1) -> int:
    context = cache.begin(request(parts=parts, replica_id=replica_id), now)
    return context.finish(response(context.fetch)).session_id


PARTS = [("a", 0, 5), ("a", 1, 7), ("b", 0, 9)]


def test_a_full_fetch_at_epoch_0_makes_a_session_and_an_incremental_one_reads_all_its_partitions():
    cache = FetchSessionCache(rng=random.Random(1))
    session_id = open_session(cache, PARTS)
    assert session_id != 0 and len(cache) == 1
    context = cache.begin(request(session_id, 1, parts=[("a", 1, 8)]), 1)
    assert fetched(context.fetch) == {("a", 0): 5, ("a", 1): 8, ("b", 0): 9}
    resp = context.finish(response(context.fetch))
    assert resp.session_id == session_id and answered(resp) == set()  # nothing changed (Rule 3)


def test_an_incremental_answer_carries_only_records_errors_and_moved_offsets():
    cache = FetchSessionCache()
    session_id = open_session(cache, PARTS)
    context = cache.begin(request(session_id, 1), 1)
    resp = context.finish(response(context.fetch, records={("a", 0): b"x"}, errors={("b", 0): 6}))
    assert answered(resp) == {("a", 0), ("b", 0)}
    context = cache.begin(request(session_id, 2), 2)
    assert answered(context.finish(response(context.fetch))) == {("b", 0)}  # the error cleared: answered again
    context = cache.begin(request(session_id, 3), 3)
    assert answered(context.finish(response(context.fetch, hw=11))) == {("a", 0), ("a", 1), ("b", 0)}
    context = cache.begin(request(session_id, 4), 4)
    assert answered(context.finish(response(context.fetch, hw=11))) == set()


def test_partitions_are_added_and_forgotten_and_an_emptied_session_is_removed():
    cache = FetchSessionCache()
    session_id = open_session(cache, PARTS[:1])
    context = cache.begin(request(session_id, 1, parts=[("c", 3, 1)], forgotten=[("a", [0])]), 1)
    assert fetched(context.fetch) == {("c", 3): 1}
    assert answered(context.finish(response(context.fetch))) == {("c", 3)}  # new: answered once
    context = cache.begin(request(session_id, 2, forgotten=[("c", [3])]), 2)
    assert context.finish(response(context.fetch)).session_id == 0 and len(cache) == 0


def test_epoch_errors_leave_the_session_as_it_was():
    cache = FetchSessionCache()
    session_id = open_session(cache, PARTS)
    assert cache.begin(request(session_id, 2), 1) == INVALID_FETCH_SESSION_EPOCH
    assert cache.begin(request(session_id + 1, 1), 1) == FETCH_SESSION_ID_NOT_FOUND
    assert cache.begin(request(0, 1), 1) == FETCH_SESSION_ID_NOT_FOUND
    assert cache.begin(request(session_id, 1), 1).fetch is not None  # epoch 1 still expected


def test_a_full_fetch_naming_a_session_closes_it_and_epoch_0_opens_another():
    cache = FetchSessionCache()
    first = open_session(cache, PARTS)
    context = cache.begin(request(first, -1, parts=PARTS), 1)
    assert context.finish(response(context.fetch)).session_id == 0 and len(cache) == 0
    second = open_session(cache, PARTS)
    context = cache.begin(request(second, 0, parts=PARTS), 2)
    third = context.finish(response(context.fetch)).session_id
    assert third not in (0, second) and list(cache.sessions) == [third]
    assert cache.begin(request(second, 1), 3) == FETCH_SESSION_ID_NOT_FOUND


def test_zero_slots_makes_no_session():
    cache = FetchSessionCache(slots=0)
    assert open_session(cache, PARTS) == 0 and len(cache) == 0


def test_a_follower_evicts_a_consumer_but_a_consumer_evicts_only_an_old_session():
    cache = FetchSessionCache(slots=1)
    consumer = open_session(cache, PARTS)
    assert open_session(cache, PARTS[:1], now=1) == 0  # young, and the newcomer is no more valuable
    follower = open_session(cache, PARTS[:1], now=2, replica_id=1)
    assert follower != 0 and consumer not in cache.sessions
    assert open_session(cache, PARTS * 5, now=3) == 0  # a follower's young session stays
    context = cache.begin(request(follower, 1), EVICTION_MS + 10)  # used when older than EVICTION_MS
    context.finish(response(context.fetch))
    assert open_session(cache, PARTS * 5, now=EVICTION_MS + 11) == 0  # a consumer is worth less than a follower
    assert open_session(cache, PARTS, now=EVICTION_MS + 12, replica_id=2) != 0  # more partitions: worth more
    assert follower not in cache.sessions


def test_a_stale_session_goes_first():
    cache = FetchSessionCache(slots=2)
    stale = open_session(cache, PARTS, replica_id=1)
    kept = open_session(cache, PARTS * 3, now=EVICTION_MS)
    assert open_session(cache, PARTS[:1], now=EVICTION_MS + 1) != 0
    assert stale not in cache.sessions and kept in cache.sessions


def test_epochs_wrap_to_1():
    assert next_epoch(1) == 2 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


class SessionCacheMachine(RuleBasedStateMachine):
    """Clients open, use, misuse and close sessions while time passes: the cache never holds more than its
    slots, every session answers exactly its expected epoch, and an eviction only ever makes room (Rule 4)."""

    @initialize(slots=st.integers(0, 4))
    def start(self, slots):
        self.cache = FetchSessionCache(slots=slots, eviction_ms=100, rng=random.Random(0))
        self.now = 0
        self.epochs: dict[int, int] = {}  # what the clients believe: session id -> next epoch

    def _forget_evicted(self):
        self.epochs = {sid: e for sid, e in self.epochs.items() if sid in self.cache.sessions}

    @rule(n=st.integers(1, 5), follower=st.booleans())
    def open(self, n, follower):
        before = dict(self.cache.sessions)
        full = len(before) >= self.cache.slots
        session_id = open_session(self.cache, [("t", i, 0) for i in range(n)], self.now, 1 if follower else -1)
        gone = set(before) - set(self.cache.sessions)
        assert len(gone) <= 1 and (not gone or full)  # one eviction at most, only from a full cache
        for sid in gone:
            victim = before[sid]
            stale = self.now - victim.last_used_ms > 100
            assert stale or victim.evictable_by(follower, 100)
            assert stale or victim.value() <= (follower, n, 0)
        if session_id:
            self.epochs[session_id] = 1
        else:
            assert not gone and (self.cache.slots == 0 or full)
        self._forget_evicted()

    @precondition(lambda self: self.epochs)
    @rule(data=st.data(), wrong=st.integers(1, 3))
    def use(self, data, wrong):
        session_id = data.draw(st.sampled_from(sorted(self.epochs)))
        if data.draw(st.booleans()):
            assert self.cache.begin(request(session_id, self.epochs[session_id] + wrong), self.now) \
                == INVALID_FETCH_SESSION_EPOCH
            return
        context = self.cache.begin(request(session_id, self.epochs[session_id]), self.now)
        assert context.finish(response(context.fetch)).session_id == session_id
        self.epochs[session_id] = next_epoch(self.epochs[session_id])

    @precondition(lambda self: self.epochs)
    @rule(data=st.data())
    def close(self, data):
        session_id = data.draw(st.sampled_from(sorted(self.epochs)))
        self.cache.begin(request(session_id, -1), self.now).finish(FetchResponse(responses=[]))
        assert self.cache.begin(request(session_id, self.epochs.pop(session_id)), self.now) \
            == FETCH_SESSION_ID_NOT_FOUND

    @rule(ms=st.integers(0, 150))
    def wait(self, ms):
        self.now += ms

    @invariant()
    def bounded(self):
        assert len(self.cache) <= self.cache.slots
        assert set(self.epochs) == set(self.cache.sessions)
        for session_id, epoch in self.epochs.items():
            assert self.cache.sessions[session_id].epoch == epoch


TestSessionCacheMachine = SessionCacheMachine.TestCase
TestSessionCacheMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


def test_a_consumer_displaces_a_smaller_consumer_session_only_once_it_is_old():
    cache = FetchSessionCache(slots=1)
    small = open_session(cache, PARTS[:1])
    assert open_session(cache, PARTS, now=10) == 0  # worth more, but the small session is young
    context = cache.begin(request(small, 1), EVICTION_MS + 5)  # used when older than EVICTION_MS
    context.finish(response(context.fetch))
    assert open_session(cache, PARTS, now=EVICTION_MS + 6) != 0  # old now, and worth less: displaced
    assert small not in cache.sessions
