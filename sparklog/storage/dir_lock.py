"""The log dirs' lock: one process at a time opens the logs under a log dir (Kafka's `<log.dir>/.lock`).

Rule: log-dirs-flocked: `lock_log_dirs` takes an exclusive, non-blocking flock on `<dir>/.lock` in every dir (creating
both) before any log under them is opened; if another process holds one, it releases what it took and raises
LogDirInUse naming the dir, having opened no log. A second broker on the same dirs would otherwise recover,
checkpoint and serve the live broker's logs as its own.
Rule: lock-lives-with-object: the locks live as long as the returned object (`release()` or process exit: the kernel
drops an flock with its descriptor, so a SIGKILLed broker leaves no stale lock). The file itself is never deleted.
"""

from __future__ import annotations

import fcntl
import os
from typing import Iterable

from sparklog.storage.errors import StorageError

LOCK_FILE = ".lock"  # Kafka's name for it


class LogDirInUse(StorageError):
    """Another process holds a log dir's lock: a broker already runs on it."""


class LogDirLocks:
    """The held locks (Rule: lock-lives-with-object)."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the descriptor drops its flock


def lock_log_dirs(log_dirs: Iterable[str]) -> LogDirLocks:
    """Rule: log-dirs-flocked."""
    fds: list[int] = []
    try:
        for log_dir in log_dirs:
            os.makedirs(log_dir, exist_ok=True)
            path = os.path.join(log_dir, LOCK_FILE)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LogDirInUse(f"log dir {log_dir} is in use by another process ({path} is locked): "
                                  "is a broker already running on it?") from None
    except BaseException:
        LogDirLocks(fds).release()
        raise
    return LogDirLocks(fds)
