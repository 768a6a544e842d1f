"""Stopping a test's child process: SIGTERM, then SIGKILL if it has not exited within the grace period; and
a child started in a process group of its own (start_new_session), stopped as a group.

Rule: signal-before-reap: a process group is signalled (os.killpg) only while its leader is unreaped, for
only then does its number still name that group: once the leader is reaped and the group's last member is
gone, the kernel hands the number out again (pid_max wraps within minutes on a busy machine) and a late
killpg could hit another test's broker. So a group's leader is watched with `exited` / `wait_exited`
(os.waitid with WNOWAIT: seen, not reaped), never with Popen.poll() or Popen.wait(), until `kill_group`
has signalled the group and reaps it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def terminate(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Ask `proc` to stop and wait for it; kill it if it outlives `grace_s`."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _exit_status(proc: subprocess.Popen) -> int | None:
    """`proc`'s exit status as Popen.returncode gives it (-N: killed by signal N) if it has exited, else None;
    never reaps it (Rule: signal-before-reap)."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by someone else: Popen.poll() records it (returncode 0), so no signal follows
        proc.poll()
        return proc.returncode
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited (Popen.poll() without reaping it)."""
    return _exit_status(proc) is not None


def wait_exited(proc: subprocess.Popen, timeout_s: float) -> int:
    """Popen.wait(timeout_s) without reaping: the exit status, or TimeoutExpired."""
    deadline = time.monotonic() + timeout_s
    while (status := _exit_status(proc)) is None:
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        time.sleep(0.05)
    return status


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """`sig` to the process group `proc` leads, if `proc` is not reaped yet (Rule: signal-before-reap)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def kill_group(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    """SIGKILL the process group `proc` leads (started with start_new_session), then reap `proc`; returns
    its exit status."""
    signal_group(proc, signal.SIGKILL)
    return proc.wait(timeout_s)
