"""support/processes.py: a process group's leader is watched without being reaped (Rule: signal-before-reap),
so kill_group's killpg still names that group, and the group's other members die with it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.processes import exited, kill_group, wait_exited


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie, exited and not reaped), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _state(pid) == "Z":  # exited; its parent (not us) reaps it
            return True
        time.sleep(0.05)
    return False


def test_a_leader_that_exited_is_seen_not_reaped_and_kill_group_takes_the_member_it_left(tmp_path):
    child = tmp_path / "child.pid"
    leader = subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {child}; exit 3"], start_new_session=True)
    try:
        assert wait_exited(leader, 30) == 3
        assert exited(leader) and leader.returncode is None
        assert _state(leader.pid) == "Z"  # not reaped: its number still names the group
        member = int(child.read_text())
        assert os.getpgid(member) == leader.pid and _state(member) is not None
        assert kill_group(leader) == 3
        assert _gone(member)
    finally:
        kill_group(leader)


def test_a_running_leader_is_not_exited_and_a_timeout_says_so():
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert not exited(leader)
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exited(leader, 0.2)
        os.kill(leader.pid, signal.SIGTERM)
        assert wait_exited(leader, 30) == -signal.SIGTERM
    finally:
        assert kill_group(leader) == -signal.SIGTERM


def test_kill_group_does_not_signal_a_group_whose_leader_was_reaped_already(monkeypatch):
    leader = subprocess.Popen(["true"], start_new_session=True)
    leader.wait(30)  # reaped: the number may name someone else's group by now
    signalled = []
    monkeypatch.setattr(os, "killpg", lambda *args: signalled.append(args))
    assert kill_group(leader) == 0
    assert signalled == []


def test_a_leader_reaped_behind_popens_back_is_not_signalled_either(monkeypatch):
    leader = subprocess.Popen(["true"], start_new_session=True)
    os.waitpid(leader.pid, 0)  # reaped by someone else: waitid then says there is no such child
    signalled = []
    monkeypatch.setattr(os, "killpg", lambda *args: signalled.append(args))
    assert exited(leader)
    kill_group(leader)
    assert signalled == []
