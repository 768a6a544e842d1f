"""The clients' one backoff rule (KIP-580): exponential, jittered, capped, and never past a deadline."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from sparklog.client.backoff import JITTER, ExponentialBackoff, Retry


@given(initial=st.integers(1, 10_000), cap=st.integers(1, 100_000), attempts=st.integers(0, 10_000),
       draw=st.floats(0, 1))
def test_the_delay_is_the_jittered_exponential_term_capped_at_max(initial, cap, attempts, draw):
    backoff = ExponentialBackoff(initial, cap)
    delay = backoff.delay(attempts, uniform=lambda lo, hi: lo + (hi - lo) * draw)
    assert 0 <= delay <= cap / 1000
    if initial >= cap:
        assert delay == cap / 1000  # Kafka's way of asking for a fixed backoff
    elif attempts < 40:
        term = initial * 2 ** attempts
        assert delay == pytest.approx(min(cap, term * (1 - JITTER + 2 * JITTER * draw)) / 1000)


def test_retries_in_a_row_back_off_more_and_jitter_spreads_them():
    backoff = ExponentialBackoff(100, 1_000)
    first = {round(backoff.delay(0), 4) for _ in range(200)}
    assert min(first) >= 0.08 and max(first) <= 0.12 and len(first) > 50  # 100 ms +-20%, not one fixed value
    assert all(backoff.delay(3) >= 0.64 for _ in range(100))  # 800 ms -20%
    assert all(backoff.delay(30) == 1.0 for _ in range(100))  # capped at retry.backoff.max.ms, jitter included


def test_retry_never_sleeps_past_its_deadline():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    retry = Retry(ExponentialBackoff(100, 10_000), 1.0, clock=lambda: now[0], sleep=sleep)
    while not retry.expired():
        retry.sleep()
    assert now[0] == 1.0 and retry.attempts == len(slept) >= 3
    assert slept[:3] == sorted(slept[:3])  # growing waits
