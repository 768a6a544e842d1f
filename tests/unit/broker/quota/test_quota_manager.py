"""The sampled rate and throttle time (rate.py), quota groups and idle expiry (manager.py), and the dispatcher's
metering (dispatch.py Rule 7) on real partition logs: the fast path is metered per request, a throttle is
answered in throttle_time_ms and sets the connection's mute, follower fetches are exempt, a consumer's fetch is
sized to one window, and with no quota configured the dispatcher is not metering at all."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.quota.manager import QuotaManager, QuotaWindows
from sparklog.broker.quota.rate import Rate
from sparklog.coordination.client_quotas import (CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                                                 Entity)
from sparklog.protocol.registry import decode_response
from sparklog.protocol.api_keys import ApiKey
from sparklog.records.batch import build_batch

from unit.broker.handlers.test_fetch_fast_path import fetch_frame
from unit.broker.handlers.test_produce_fast_path import broker, identified_session, produce_frame


def test_rate_is_measured_over_at_least_samples_minus_one_windows():
    rate = Rate(1.0, 11)
    rate.record(10_000, 100.0)
    assert rate.rate(100.001) == pytest.approx(1000.0)  # a first burst: over 10 windows, not 1 ms


@given(st.floats(1e3, 1e8), st.floats(1.01, 1.9))  # (past ~1.95x the delay is capped: the next test)
def test_the_throttle_time_brings_the_rate_back_to_the_bound(bound, over):
    """Rule: throttle-time. Silence for the throttle the sensor asks, and the measured rate is the bound."""
    rate = Rate(1.0, 11)
    start = 1000.0
    for second in range(11):
        rate.record(bound * over, start + second)
    now = start + 10.5
    delay_ms = rate.throttle_ms(bound, now)
    assert delay_ms > 0
    span = rate.span(now)
    assert sum(rate.values) / (span + delay_ms / 1000.0) == pytest.approx(bound, rel=0.01)


def test_the_throttle_is_never_longer_than_the_span_kept():
    rate = Rate(1.0, 11)
    rate.record(1e12, 5.0)  # a terabyte against a bound of one byte a second
    assert rate.throttle_ms(1.0, 5.0) == 11_000


def test_idle_sensors_expire_and_memory_stays_bounded():
    clock = [0.0]
    manager = QuotaManager(QuotaWindows(3, 1.0), clock=lambda: clock[0])
    manager.update(Entity(client=DEFAULT), {PRODUCER_BYTE_RATE: 1000.0})
    for i in range(5000):
        manager.client_quota("User:ANONYMOUS", f"client-{i}").record_produce(10, 0.5)
    assert len(manager.sensors) == 5000  # clients/<default>: one quota per client-id
    manager.sweep(10.0)
    assert manager.sensors == {}
    quota = manager.client_quota("User:ANONYMOUS", "client-1")
    assert quota.record_produce(10, 10.1) == 0  # a fresh sensor: the expired one measured 0 anyway


def test_quota_groups_follow_the_entity_that_matched():
    manager = QuotaManager()
    manager.update(Entity("alice"), {PRODUCER_BYTE_RATE: 100.0})
    manager.update(Entity("alice", DEFAULT), {CONSUMER_BYTE_RATE: 200.0})
    manager.update(Entity(client="c1"), {REQUEST_PERCENTAGE: 10.0})
    a1 = manager.client_quota("User:alice", "c1")
    a2 = manager.client_quota("User:alice", "c2")
    assert a1.produce.sensor is a2.produce.sensor  # users/alice: shared by all of alice's client-ids
    assert a1.fetch.sensor is not a2.fetch.sensor  # users/alice/clients/<default>: one per client-id
    assert a1.request is not None and a2.request is None
    assert manager.client_quota("User:bob", "c2") is None


def test_activation_is_told_once_per_change():
    manager = QuotaManager()
    told = []
    manager.on_active = told.append
    manager.update(Entity(client="x"), {PRODUCER_BYTE_RATE: 1.0})
    manager.update(Entity(client="y"), {PRODUCER_BYTE_RATE: 1.0})
    manager.update(Entity(client="x"), {})
    manager.update(Entity(client="y"), {})
    assert told == [True, False]


# -- the dispatcher (Rule 7) -------------------------------------------------------------------------------


@pytest.fixture
def dispatcher():
    with tempfile.TemporaryDirectory() as log_dir:
        d = broker(log_dir)
        try:
            yield d
        finally:
            d.state.logs.close()


def throttle_of(reply, api) -> int:
    frame = b"".join(bytes(c) if isinstance(c, (bytes, bytearray, memoryview)) else c.read_bytes() for c in reply)
    return decode_response(api, 8 if api == ApiKey.PRODUCE else 11, frame[4:])[1].throttle_time_ms


def test_no_quota_no_metering(dispatcher):
    assert not dispatcher.metering and "handle_frame" not in dispatcher.__dict__
    dispatcher.state.quotas.update(Entity(client="c"), {PRODUCER_BYTE_RATE: 10.0})
    assert dispatcher.metering and dispatcher.handle_frame == dispatcher._metered
    dispatcher.state.quotas.update(Entity(client="c"), {})
    assert not dispatcher.metering and "handle_frame" not in dispatcher.__dict__


def test_fast_path_produce_is_metered_and_throttled(dispatcher):
    session = identified_session(dispatcher)
    dispatcher.state.quotas.update(Entity(client="c"), {PRODUCER_BYTE_RATE: 1000.0})
    frame = produce_frame("t", 0, 1)
    fast_before = dispatcher._fast_produces
    throttles = []
    for i in range(200):  # 200 x ~100 bytes in no time: far over 1000 B/s measured over 10 s
        throttles.append(throttle_of(dispatcher.handle_frame(frame, session), ApiKey.PRODUCE))
        if session.mute_s:
            break
    assert dispatcher._fast_produces > fast_before  # within the quota the fast path answered (and was metered)
    assert throttles[-1] > 0 and session.mute_s == pytest.approx(throttles[-1] / 1000.0)
    assert dispatcher.state.logs.get_or_create("t", 0).log_end_offset == len(throttles)  # throttled still appends


def test_unquoted_client_runs_free_beside_a_quoted_one(dispatcher):
    session = identified_session(dispatcher)
    dispatcher.state.quotas.update(Entity(client="other"), {PRODUCER_BYTE_RATE: 1.0})
    for _ in range(100):
        assert throttle_of(dispatcher.handle_frame(produce_frame("t", 0, 1), session), ApiKey.PRODUCE) == 0
    assert session.mute_s == 0


def test_consumer_quota_throttles_with_an_empty_fetch_and_exempts_followers(dispatcher):
    session = identified_session(dispatcher)
    plog = dispatcher.state.logs.get_or_create("t", 0)
    for i in range(50):
        plog.append(build_batch([(None, b"x" * 400, None, None)]))
    dispatcher.state.quotas.update(Entity(client="c"), {CONSUMER_BYTE_RATE: 2000.0})
    first = dispatcher.handle_frame(fetch_frame(11, "t", 0, 0), session)
    assert sum(len(c) for c in first) <= 2000 + 600  # one window's worth (2000 B), not the 1 MiB asked
    assert throttle_of(first, ApiKey.FETCH) == 0
    for _ in range(30):
        reply = dispatcher.handle_frame(fetch_frame(11, "t", 0, 0), session)
        if session.mute_s:
            break
    frame = b"".join(bytes(c) for c in reply)
    body = decode_response(ApiKey.FETCH, 11, frame[4:])[1]
    assert body.throttle_time_ms > 0 and body.responses == []
    session.mute_s = 0.0
    follower = dispatcher.handle_frame(fetch_frame(11, "t", 0, 0, replica_id=2), session)
    assert session.mute_s == 0 and throttle_of(follower, ApiKey.FETCH) == 0


def test_request_percentage_throttles_a_client_that_takes_the_loops_time(dispatcher):
    """request_percentage=1: 1% of the loop's one thread (manager.py Rule: request-capacity). Metadata requests
    handled back to back use far more, so the group is throttled, in the response and by the mute."""
    from sparklog.protocol import MetadataRequest
    from sparklog.protocol.registry import encode_request

    session = identified_session(dispatcher)
    dispatcher.state.quotas.update(Entity(client="c"), {REQUEST_PERCENTAGE: 1.0})
    frame = memoryview(encode_request(ApiKey.METADATA, 8, 3, "c", MetadataRequest(topics=None)))[4:]
    for _ in range(20_000):
        reply = dispatcher.handle_frame(frame, session)
        if session.mute_s:
            break
    assert session.mute_s > 0
    body = decode_response(ApiKey.METADATA, 8, b"".join(bytes(c) for c in reply)[4:])[1]
    assert body.throttle_time_ms == int(session.mute_s * 1000)


def test_a_run_of_an_unquoted_client_is_still_grouped_and_a_quoted_one_is_metered(dispatcher):
    """Rule 7 with Rule 5: a quota on another client leaves this client's runs grouped (one append); a quota on
    this client meters each of its requests."""
    session = identified_session(dispatcher)
    frames = [produce_frame("t", 0, 1, correlation_id=i) for i in range(10)]
    dispatcher.state.quotas.update(Entity(client="other"), {PRODUCER_BYTE_RATE: 1.0})
    replies: list = []
    dispatcher.handle_frames(frames, session, replies)
    assert dispatcher._grouped_produces == 10
    dispatcher.state.quotas.update(Entity(client="c"), {PRODUCER_BYTE_RATE: 1e12})
    dispatcher.handle_frames(frames, session, replies)
    assert dispatcher._grouped_produces == 10  # metered one by one
    sensor = dispatcher.state.quotas.sensors[("produce", "", "c")]
    assert sum(sensor.values) == sum(len(f) for f in frames)
