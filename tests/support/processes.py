"""Stopping a test's child process: SIGTERM, then SIGKILL if it has not exited within the grace period."""

from __future__ import annotations

import subprocess


def terminate(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Ask `proc` to stop and wait for it; kill it if it outlives `grace_s`."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
