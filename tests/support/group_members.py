"""Consumer processes in a broker-coordinated group (kafka_group_member.py) and what they printed, plus the
measurement of a member joining under steady produce: how long the partitions that stay put stop flowing.

Used by tests/integration/test_kafka_groups.py (short) and benchmarks/groups.py (eager vs cooperative).

The join measurement: two members consume a topic while a feeder produces a message to every partition every
FEED_INTERVAL_S; one of them is busy (it spends `busy_ms` on every batch before it polls again, as an application
does), the other is quick. Once every partition flows, a third member is started. The quick member's unmoved
partitions are those it owned before the join and still owns after it; per unmoved partition, the longest gap
between two consumed messages from the join until the group settled is the stop it suffered. The rebalance
time is from starting the third member to the last assignment change, which settled the group.

Why a busy member: a member rejoins only from its poll. Eager protocols (range) revoke everything, so the quick
member, having rejoined at once, stops until the busy one has rejoined too: every partition waits for the
slowest member (stop-the-world), on average half of `busy_ms`, as the join lands anywhere in its work.
Cooperative-sticky revokes only what moves; the quick member keeps consuming the rest while the rounds complete.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MEMBER = str(REPO / "tests" / "support" / "kafka_group_member.py")
FEED_INTERVAL_S = 0.05
BUSY_MS = 1500  # the busy member's work per batch (default)
SETTLED_AFTER_S = 1.0  # the group counts as settled when no assignment changed for this long


class Member:
    """One consumer process and the events it printed (see kafka_group_member.py)."""

    def __init__(self, bootstrap: str, client: str, topic: str, group: str, *extra: str) -> None:
        self.events: list[dict] = []
        self._lock = threading.Lock()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, MEMBER, client, bootstrap, topic, group, *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> list[int] | None:
        found = [e["assigned"] for e in self.snapshot() if "assigned" in e]
        return found[-1] if found else None

    def consumed(self) -> set[tuple[int, int]]:
        return {tuple(e["m"]) for e in self.snapshot() if "m" in e}

    def count(self, key: str) -> int:
        return sum(1 for e in self.snapshot() if key in e)

    def go(self) -> None:
        """Let a member started with --wait-for-go subscribe."""
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def errors(self) -> list[str]:
        return [e["error"] for e in self.snapshot() if "error" in e]

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdin.close()  # after the exit: a member waiting for its go would take EOF for one
        self._reader.join(timeout=5)


def wait_until(what: str, predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass(frozen=True)
class JoinMeasurement:
    assignor: str
    rebalance_s: float  # the third member started -> the last assignment change, that settled the group
    unmoved: tuple[int, ...]
    unmoved_gap_s: float  # the longest stop of consumption on a quick member's unmoved partition
    steady_gap_s: float  # the longest gap on the quick member's partitions in the second before the join


def measure_join(bootstrap: str, topic: str, group: str, partitions: int, assignor: str, session_ms: int,
                 heartbeat_ms: int, started: list, busy_ms: int = BUSY_MS, timeout: float = 60) -> JoinMeasurement:
    """See the module docstring. Members heartbeat every `heartbeat_ms`: an eager member stops when it learns
    of the rebalance and waits for the last member to learn of it, up to that long. Every member process
    started is appended to `started` (the caller stops them, also when this raises)."""
    from confluent_kafka import Producer

    def member(*extra: str) -> Member:
        started.append(Member(bootstrap, "confluent", topic, group, "--session-ms", str(session_ms),
                              "--heartbeat-ms", str(heartbeat_ms), "--assignor", assignor, "--async-commit", *extra))
        return started[-1]

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            for p in range(partitions):
                producer.produce(topic, b"x", partition=p)
            producer.poll(0)
            time.sleep(FEED_INTERVAL_S)
        producer.flush(10)

    old = [member(), member("--process-ms", str(busy_ms))]  # the quick one first
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        wait_until("two members sharing every partition", lambda: _covers(old, partitions), timeout)
        wait_until("every partition flowing", lambda: len(_consumed_times(old, time.time() - 1)) == partitions, timeout)
        time.sleep(1.0)
        joined_at = time.time()
        before = {m: set(m.assignment()) for m in old}
        new = member()
        trio = [*old, new]
        wait_until("three members sharing every partition", lambda: _covers(trio, partitions), timeout)
        wait_until("the group settled", lambda: time.time() - _last_assignment(trio) > SETTLED_AFTER_S, timeout)
    finally:
        stop.set()
        feeder.join(15)
    return _measure(assignor, old, before, trio, joined_at)


def _covers(members: list[Member], partitions: int) -> bool:
    owned = [p for m in members for p in (m.assignment() or [])]
    return all(m.assignment() for m in members) and sorted(owned) == list(range(partitions))


def _consumed_times(members: list[Member], start: float = 0.0, end: float = float("inf")) -> dict[int, list[float]]:
    """{partition: times it was consumed} between `start` and `end`."""
    found: dict[int, list[float]] = {}
    for m in members:
        for e in m.snapshot():
            if "m" in e and start <= e["t"] < end:
                found.setdefault(e["m"][0], []).append(e["t"])
    return found


def _last_assignment(members: list[Member]) -> float:
    return max(e["t"] for m in members for e in m.snapshot() if "assigned" in e or "revoked" in e)


def _longest_gap(times: list[float], start: float, end: float) -> float:
    inside = sorted([start, *(t for t in times if start < t < end), end])
    return max(b - a for a, b in zip(inside, inside[1:]))


def _measure(assignor: str, old: list[Member], before: dict, trio: list[Member], joined_at: float
             ) -> JoinMeasurement:
    settled = _last_assignment(trio)
    end = settled + SETTLED_AFTER_S / 2  # an eager member resumes only after its new assignment
    quick = old[0]
    times = _consumed_times([quick])
    unmoved = tuple(sorted(before[quick] & set(quick.assignment())))
    gaps = [_longest_gap(times.get(p, []), joined_at, end) for p in unmoved]
    steady = max(_longest_gap(times[p], joined_at - 1.0, joined_at) for p in before[quick])
    return JoinMeasurement(assignor, settled - joined_at, unmoved, max(gaps, default=0.0), steady)
