"""The sparse indexes under concurrency: the writer appends while the flusher and readers use them unlocked."""

import os
import sys
import threading
import time
from contextlib import closing

import pytest

from support.storage_batches import make_batch
from sparklog.storage import PartitionLog
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.index import OffsetIndex, TimeIndex



def _race(index, add, use, rounds=20_000):
    """Run `add(i)` in this thread and `use()` in another; return the exceptions `use` raised."""
    errors, stop = [], threading.Event()

    def user():
        while not stop.is_set():
            try:
                use()
            except Exception as exc:  # the race shows up as IndexError
                errors.append(exc)
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=user)
    thread.start()
    try:
        for i in range(rounds):
            add(i)
            if errors:
                break
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
    return errors


def test_flush_never_sees_a_half_appended_offset_entry(tmp_path):
    with closing(OffsetIndex(str(tmp_path / "0.index"), 0, OS_FILES, 10**6)) as index:
        assert _race(index, lambda i: index.append(i, i * 10), index.flush) == []
        index.flush()
        assert len(index) == 20_000 and index.lookup(19_999) == (19_999, 199_990)


def test_lookup_never_sees_a_half_appended_offset_entry(tmp_path):
    with closing(OffsetIndex(str(tmp_path / "0.index"), 0, OS_FILES, 10**6)) as index:
        assert _race(index, lambda i: index.append(i, i * 10), lambda: index.lookup(10**9), rounds=200_000) == []


def test_flush_never_sees_a_half_appended_time_entry(tmp_path):
    with closing(TimeIndex(str(tmp_path / "0.timeindex"), 0, OS_FILES, 10**6)) as index:
        assert _race(index, lambda i: index.maybe_append(i, i), index.flush) == []


class _FailingFsync(Files):
    """Plain files whose next fsync of an index file fails once (a transient I/O error)."""

    def __init__(self):
        self.fail_next = False

    def fsync(self, fd):
        if self.fail_next and os.readlink(f"/proc/self/fd/{fd}").endswith(".index"):
            self.fail_next = False
            raise OSError(5, "injected EIO")
        super().fsync(fd)


def test_a_failed_flush_stays_due_so_the_high_watermark_catches_up_without_another_append(tmp_path, flusher):
    files = _FailingFsync()
    log = PartitionLog.open(str(tmp_path / "t-0"), {"flush.ms": 1, "index.interval.bytes": 0},
                            files=files, flusher=flusher, checkpoint_interval_ms=10**12)
    flusher.unregister(log)  # this test drives the flushes
    for i in range(3):
        log.append(make_batch(2, tag=i))
    files.fail_next = True
    with pytest.raises(OSError):
        log.flush()
    assert log.high_watermark == 0
    assert log.flush_due(time.monotonic() + 1)  # the pending mark survived the failure
    log.flush()
    assert log.high_watermark == log.log_end_offset == 6
    log.close()
