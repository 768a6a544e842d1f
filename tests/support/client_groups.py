"""Helpers for the multi-process consumer-group tests: member processes, a ZooKeeper observer, checks.

Rule: every process started here is stopped by `Member.stop()`/`kill()` or, at the latest, by `stop_all()`
which the tests call in a finalizer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MEMBER_SCRIPT = Path(__file__).with_name("client_group_member.py")


class Member:
    """One `client_group_member.py` process; its records are read back from its output file."""

    def __init__(self, tmp: Path, name: str, zk_connect: str, group: str, topic: str, **options) -> None:
        self.name = name
        self.out = tmp / f"{name}.out"
        self.err = tmp / f"{name}.err"
        cmd = [sys.executable, str(MEMBER_SCRIPT), "--zookeeper", zk_connect, "--group", group, "--topic", topic,
               "--out", str(self.out), "--id", name]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        self._err = open(self.err, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(cmd, stdout=self._err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=str(REPO), env=env)

    def records(self) -> list[tuple[float, int, int, str]]:
        """(wall time, partition, offset, member) per processed record."""
        if not self.out.exists():
            return []
        rows = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0] == "R":
                rows.append((float(parts[1]), int(parts[2]), int(parts[3]), parts[4]))
        return rows

    def closed_stats(self) -> dict | None:
        if self.out.exists():
            for line in self.out.read_text().splitlines():
                if line.startswith("CLOSED "):
                    return json.loads(line.split(" ", 2)[2])
        return None

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._err.close()

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.proc.returncode

    def log(self) -> str:
        try:
            return self.err.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


class Observer:
    """Samples a group's ownership and offset registries every `interval` seconds from the test process."""

    def __init__(self, zk, group: str, interval: float = 0.05) -> None:
        self.zk = zk
        self.group = group
        self.interval = interval
        self.owners: list[tuple[float, float, dict]] = []  # (reads began, reads ended, owners read)
        self.offsets: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Observer":
        self._thread.start()
        return self

    def _run(self) -> None:
        from sparklog.client.group_registry import list_owners
        from sparklog.coordination.offsets import fetch_offsets

        while not self._stop.is_set():
            try:
                now = time.time()
                # one read per partition: each owner was read at some moment between `now` and the end
                owners = list_owners(self.zk, self.group)
                self.owners.append((now, time.time(), owners))
                self.offsets.append((now, {tp: o.offset for tp, o in fetch_offsets(self.zk, self.group).items()}))
            except Exception:  # noqa: BLE001 - a sample lost to a transient error is just skipped
                pass
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def latest(self) -> dict:
        return self.owners[-1][2] if self.owners else {}

    def wait_for(self, predicate, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            owners = self.latest()
            if predicate(owners):
                return owners
            time.sleep(self.interval)
        raise AssertionError(f"timed out waiting for {what}; owners now {self.latest()}")

    def owner_at(self, partition_key, t: float, tolerance: float) -> str | None:
        """The owner every sample within `tolerance` of `t` agrees on, or None when they differ or none. A sample
        stands for the whole span of its reads (under load a read of the registry takes longer than `tolerance`):
        one that began before `t` may hold an owner written after it."""
        seen = {owners.get(partition_key) for began, ended, owners in self.owners
                if began - tolerance <= t <= ended + tolerance}
        return seen.pop() if len(seen) == 1 else None


def wait_for_records(members, expected: int, timeout: float) -> set:
    deadline = time.monotonic() + timeout
    while True:
        seen = {(p, o) for m in members for (_, p, o, _) in m.records()}
        if len(seen) >= expected or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def duplicates(members) -> Counter:
    counts = Counter((p, o) for m in members for (_, p, o, _) in m.records())
    return Counter({k: v - 1 for k, v in counts.items() if v > 1})


def foreign_consumption(members, observer: Observer, topic: str, tolerance: float = 0.3) -> list:
    """Records a member processed while the ownership registry said another consumer owned the partition."""
    bad = []
    for member in members:
        for t, p, o, who in member.records():
            owner = observer.owner_at((topic, p), t, tolerance)
            if owner is not None and owner != who:
                bad.append((who, p, o, t, owner))
    return bad


def offset_regressions(observer: Observer) -> list:
    """Committed offsets that went backwards between two samples (a stale owner overwriting a newer one)."""
    last: dict = {}
    bad = []
    for t, offsets in observer.offsets:
        for tp, offset in offsets.items():
            if offset >= 0 and offset < last.get(tp, -1):
                bad.append((tp, last[tp], offset, t))
            if offset >= 0:
                last[tp] = max(offset, last.get(tp, -1))
    return bad


def per_member_partitions(owners: dict) -> dict:
    result = defaultdict(list)
    for tp, owner in owners.items():
        result[owner].append(tp[1])
    return {k: sorted(v) for k, v in result.items()}
