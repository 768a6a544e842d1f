"""benchmarks/measure.py's confluent-kafka send loop: a full local queue is backpressure, not the end of a run."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import measure  # noqa: E402


class FullQueueProducer:
    """librdkafka's Producer as the loop sees it: produce() raises BufferError while `full` deliveries are
    outstanding, and each poll() delivers one."""

    def __init__(self, full_for: int):
        self.full_for = full_for
        self.taken = 0
        self.polls = 0

    def produce(self, topic, value, **_):
        if self.full_for > 0:
            raise BufferError("Local: Queue full")
        self.taken += 1

    def poll(self, _timeout):
        self.polls += 1
        self.full_for -= 1


def test_a_queue_full_for_several_polls_delays_the_message_and_loses_none():
    producer = FullQueueProducer(full_for=5)  # before the fix the second BufferError escaped
    assert measure._send(producer, "t", 1_000, b"v", None, time.perf_counter() + 60) == 1_000
    assert producer.taken == 1_000


def test_a_queue_still_full_at_the_stop_time_ends_the_loop_with_what_was_taken():
    producer = FullQueueProducer(full_for=10**9)
    assert measure._send(producer, "t", 1_000, b"v", None, time.perf_counter() + 0.05) == 0
    assert producer.taken == 0
