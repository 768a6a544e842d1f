"""A fetcher's side of a fetch session (protocol/fetch_session_handler.py), against the broker's cache."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from sparklog.broker.handlers.error_codes import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NONE
from sparklog.broker.handlers.fetch_sessions import FetchSessionCache
from sparklog.protocol.fetch import (FetchableTopicResponse, FetchPartition, FetchRequest, FetchResponse,
                                     PartitionData)
from sparklog.protocol.fetch_session_handler import FetchSessionHandler


def wanted(offsets: dict) -> dict:
    return {key: FetchPartition(partition=key[1], fetch_offset=offset, partition_max_bytes=100)
            for key, offset in offsets.items()}


def round_trip(handler, cache, offsets, now=0, hw=None):
    """One Fetch: the handler's request through the cache and a core that answers every partition at `hw` (its
    fetch offset by default). (request, response, what the fetcher read: {key: hw})."""
    session_id, epoch, topics, forgotten = handler.build(wanted(offsets))
    body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, session_id=session_id, session_epoch=epoch,
                        topics=topics, forgotten_topics_data=forgotten)
    context = cache.begin(body, now)
    if context.__class__ is int:
        resp = FetchResponse(throttle_time_ms=0, error_code=context, session_id=0, responses=[])
    else:
        resp = context.finish(FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=[
            FetchableTopicResponse(topic=t.topic, partitions=[PartitionData(
                partition_index=p.partition, error_code=NONE,
                high_watermark=p.fetch_offset if hw is None else hw[(t.topic, p.partition)],
                last_stable_offset=0, log_start_offset=0, records=b"") for p in t.partitions])
            for t in context.fetch.topics]))
    handler.handle(resp)
    return body, resp, {(t.topic, p.partition_index): p.high_watermark for t in resp.responses for p in t.partitions}


def sent(body) -> set:
    return {(t.topic, p.partition) for t in body.topics for p in t.partitions}


def test_after_the_full_fetch_only_changed_partitions_are_sent_and_forgotten_ones_named():
    handler, cache = FetchSessionHandler(), FetchSessionCache()
    offsets = {("t", i): 0 for i in range(5)}
    body, resp, _ = round_trip(handler, cache, offsets)
    assert body.session_epoch == 0 and sent(body) == set(offsets) and resp.session_id == handler.session_id != 0
    body, _, _ = round_trip(handler, cache, offsets)
    assert body.session_epoch == 1 and sent(body) == set()
    offsets[("t", 2)] = 7
    del offsets[("t", 4)]
    body, _, read = round_trip(handler, cache, offsets)
    assert sent(body) == {("t", 2)} and body.forgotten_topics_data[0].partitions == [4]
    assert read == {("t", 2): 7}  # its high watermark moved: answered (the others did not)


def test_a_session_error_starts_over_with_a_full_fetch():
    handler, cache = FetchSessionHandler(), FetchSessionCache()
    offsets = {("t", i): 0 for i in range(3)}
    round_trip(handler, cache, offsets)
    cache.sessions[handler.session_id].epoch += 1  # the broker expects another epoch
    body, resp, _ = round_trip(handler, cache, offsets)
    assert resp.error_code == INVALID_FETCH_SESSION_EPOCH and handler.restarts == 1
    body, resp, _ = round_trip(handler, cache, offsets)
    assert body.session_epoch == 0 and sent(body) == set(offsets) and resp.session_id != 0
    cache.sessions.clear()  # evicted
    _, resp, _ = round_trip(handler, cache, offsets)
    assert resp.error_code == FETCH_SESSION_ID_NOT_FOUND
    body, resp, _ = round_trip(handler, cache, offsets)
    assert (body.session_id, body.session_epoch) == (0, 0) and sent(body) == set(offsets)
    assert len(cache) == 1  # the session named for closing was closed: one session, not two


def test_sessions_off_and_a_cache_without_slots_keep_every_fetch_full():
    for handler, cache in ((FetchSessionHandler(enabled=False), FetchSessionCache()),
                           (FetchSessionHandler(), FetchSessionCache(slots=0))):
        offsets = {("t", 0): 0, ("u", 1): 3}
        for _ in range(3):
            body, resp, _ = round_trip(handler, cache, offsets)
            assert sent(body) == set(offsets) and resp.session_id == 0 and len(cache) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.integers(0, 6), st.integers(0, 3), max_size=6),
                          st.dictionaries(st.integers(0, 6), st.integers(0, 3), max_size=6),
                          st.sampled_from(["ok", "ok", "lost", "evict"])), max_size=12))
def test_the_fetcher_reads_what_a_sessionless_fetch_would(steps):
    """Whatever the partitions, offsets, evictions and lost answers: every partition whose high watermark differs
    from the one the fetcher last read is answered, as a sessionless fetch would answer it."""
    handler, cache = FetchSessionHandler(), FetchSessionCache(rng=random.Random(0))
    known: dict = {}
    for offsets, marks, fault in steps:
        offsets = {("t", i): o for i, o in offsets.items()}
        hw = {key: marks.get(key[1], 0) for key in offsets}
        if fault == "evict":
            cache.sessions.clear()
        _, resp, read = round_trip(handler, cache, offsets, hw=hw)
        if fault == "lost":
            handler.lost()
            known = {}
            continue
        if resp.error_code != NONE:
            known = {}
            continue
        assert {key for key in offsets if known.get(key) != hw[key]} <= set(read)
        known = {key: v for key, v in {**known, **read}.items() if key in offsets}


def test_one_partition_is_fetched_sessionless_and_more_ask_for_a_session():
    """Rule 5: a one-partition fetch stays on the broker's one-partition fast path (outside any session)."""
    handler, cache = FetchSessionHandler(), FetchSessionCache()
    body, resp, _ = round_trip(handler, cache, {("t", 0): 0})
    assert (body.session_id, body.session_epoch) == (0, -1) and resp.session_id == 0 and len(cache) == 0
    body, resp, _ = round_trip(handler, cache, {("t", 0): 0, ("t", 1): 0})
    assert body.session_epoch == 0 and resp.session_id != 0 and len(cache) == 1
    body, _, _ = round_trip(handler, cache, {("t", 0): 0})  # in a session: incremental, the other forgotten
    assert body.session_epoch == 1 and body.forgotten_topics_data[0].partitions == [1]
