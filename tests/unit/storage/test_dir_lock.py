"""The log dirs' lock (storage/dir_lock.py): one holder at a time, all or nothing, released with its holder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparklog.storage.dir_lock import LOCK_FILE, LogDirInUse, lock_log_dirs


def test_a_held_dir_is_refused_naming_it_and_the_other_dirs_are_left_unlocked(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    held = lock_log_dirs([b])
    with pytest.raises(LogDirInUse, match=f"log dir {b} is in use"):
        lock_log_dirs([a, b])
    lock_log_dirs([a]).release()  # the failed attempt released `a` again
    held.release()
    again = lock_log_dirs([a, b])
    assert os.path.exists(os.path.join(a, LOCK_FILE))
    again.release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    code = ("import os, sys; from sparklog.storage.dir_lock import lock_log_dirs; lock_log_dirs([sys.argv[1]]); "
            "print('locked', flush=True); os.kill(os.getpid(), 9)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, timeout=60)
    assert done.stdout == b"locked\n" and done.returncode == -9
    lock_log_dirs([str(tmp_path)]).release()
