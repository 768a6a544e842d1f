"""support/kafka_group_member.py's kafka-python member: a retriable error out of poll() (kafka-python 3.0 lets
a failed metadata refresh through while a broker is down) is reported and polled past; a fatal one ends it.
A fresh-clone run failed test_members_follow_a_sigkilled_coordinator_... on the first, when the member
treated every error as fatal."""

from __future__ import annotations

import argparse
import json

import kafka
import pytest
from kafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from support import kafka_group_member as member


class _Consumer:
    """KafkaConsumer's part the member uses; poll() raises each of `raises` once, then stops the member."""

    def __init__(self, raises, stopping):
        self.raises, self.stopping, self.closed = list(raises), stopping, False

    def subscribe(self, topics, listener=None):
        pass

    def poll(self, timeout_ms=0, max_records=0):
        if self.raises:
            raise self.raises.pop(0)
        self.stopping.append(True)
        return {}

    def close(self):
        self.closed = True


def _run(monkeypatch, capsys, raises):
    stopping: list[bool] = []
    made = []
    monkeypatch.setattr(kafka, "KafkaConsumer", lambda **_: made.append(_Consumer(raises, stopping)) or made[-1])
    args = argparse.Namespace(bootstrap="127.0.0.1:1", topic="t", group="g", session_ms=3000, heartbeat_ms=300,
                              assignor="range", instance=None)
    status = member.run_kafka_python(args, stopping)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return status, events, made[0]


def test_a_retriable_error_out_of_poll_is_reported_and_the_member_polls_again(monkeypatch, capsys):
    status, events, consumer = _run(monkeypatch, capsys, [KafkaConnectionError("111 ECONNREFUSED")])
    assert status == 0 and consumer.closed
    assert [e["poll_failed"] for e in events if "poll_failed" in e] == ["KafkaConnectionError: 111 ECONNREFUSED"]
    assert not [e for e in events if "error" in e]


def test_a_fatal_error_out_of_poll_still_ends_the_member(monkeypatch, capsys):
    with pytest.raises(TopicAuthorizationFailedError):
        _run(monkeypatch, capsys, [TopicAuthorizationFailedError()])
