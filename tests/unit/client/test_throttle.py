"""sparklog's clients honour throttle_time_ms (connection.py Rule 5, KIP-219): after a response that carries a
throttle, nothing more is sent to that broker until it has passed, and the producer's and consumer's metrics
count it."""

from __future__ import annotations

import time

from sparklog.client import Producer
from sparklog.protocol import ApiKey
from support.client_fake_broker import FakeBroker

THROTTLE_MS = 600


def test_the_producer_sends_nothing_more_to_a_broker_until_its_throttle_has_passed():
    with FakeBroker({"t": 1}) as broker:
        arrivals: list[float] = []
        answered: list[float] = []

        def produce(request):
            arrivals.append(time.monotonic())
            response = broker._produce(request.body)
            if len(arrivals) == 1:
                response.throttle_time_ms = THROTTLE_MS
            answered.append(time.monotonic())
            return response

        broker.handlers[ApiKey.PRODUCE] = produce
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
            producer.send("t", b"first", partition=0).get(10)
            producer.send("t", b"second", partition=0).get(10)
            metrics = producer.metrics()
        assert len(arrivals) == 2
        waited = arrivals[1] - answered[0]
        assert waited >= THROTTLE_MS / 1000.0 * 0.9, f"sent {waited:.3f} s after a {THROTTLE_MS} ms throttle"
        assert metrics["throttled_responses"] == 1 and metrics["throttle_time_ms_total"] == THROTTLE_MS
        assert metrics["throttle_time_ms_max"] == THROTTLE_MS
