import os
import time

import pytest

from support.storage_batches import make_batch
from sparklog.storage import InvalidTopicName, LogManager


def test_logs_spread_over_dirs_and_reload(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with LogManager(dirs, {"flush.ms": 5}) as manager:
        logs = [manager.get_or_create("orders", p) for p in range(4)]
        assert manager.get_or_create("orders", 0) is logs[0]
        assert sorted(len(os.listdir(d)) for d in dirs) == [2, 2]
        for log in logs:
            log.append(make_batch(2))
        deadline = time.monotonic() + 5  # the manager's flusher makes them visible
        while any(log.high_watermark < 2 for log in logs) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(log.high_watermark == 2 for log in logs)
        assert manager.statistics().logs == 4
    os.makedirs(str(tmp_path / "a" / "not a partition"))
    with LogManager(dirs) as manager:
        loaded = manager.load_existing()
        assert len(loaded) == 4 and manager.get("orders", 3).log_end_offset == 2
        assert manager.delete("orders") == 4
        assert manager.logs() == [] and sorted(os.listdir(str(tmp_path / "a"))) == ["not a partition"]


def test_overrides_and_bad_names(tmp_path):
    with LogManager(str(tmp_path), {"segment.bytes": 1000}) as manager:
        log = manager.get_or_create("t", 0, {"segment.bytes": 300})
        assert log.config.segment_bytes == 300
        with pytest.raises(InvalidTopicName):
            manager.get_or_create("bad topic", 0)


def test_background_retention_thread_runs_and_close_stops_it(tmp_path):
    clock_ms = [10**13]
    manager = LogManager(str(tmp_path), {"segment.bytes": 300, "retention.ms": 1000, "flush.ms": 1,
                                         "file.delete.delay.ms": 0},
                         clock=lambda: clock_ms[0], retention_check_interval_ms=20)
    log = manager.get_or_create("t", 0)
    for i in range(10):
        log.append(make_batch(2, 50, timestamp=1000))
    log.flush()
    deadline = time.monotonic() + 5
    while (len(log.segments) > 1 or not manager.statistics().deleted_segments) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(log.segments) == 1 and manager.statistics().deleted_segments > 0
    manager.close()
    assert not manager._retention_thread.is_alive() and log.closed


def test_checkpoint_interval_reaches_every_log(tmp_path):
    with LogManager(str(tmp_path), {"flush.ms": 5}, checkpoint_interval_ms=0) as manager:
        log = manager.get_or_create("orders", 0)
        log.append(make_batch(2))
        deadline = time.monotonic() + 5  # the background flush moves the point, and checkpoints it at once
        while log.statistics().checkpoints < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.statistics().checkpoints == 2 and log.recovery_point == 2  # at open (0), then 2
    with LogManager(str(tmp_path), {"flush.ms": 5}) as manager:  # default: 60 s, and on close
        log = manager.get_or_create("orders", 0)
        log.append(make_batch(2))
        while log.recovery_point < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.recovery_point == 4 and log.statistics().checkpoints == 0
    assert log.statistics().checkpoints == 1  # written by close
