"""PartitionManager applies /config/topics/<t> changes to the open logs at once (live reconfigure), with a
real ZooKeeper and real partition logs."""

from __future__ import annotations

import time

import pytest

from sparklog.broker.replication.partitions import PartitionManager
from sparklog.coordination import topics as topic_registry
from sparklog.records.batch import LOG_APPEND_TIME, build_batch, iter_batches
from sparklog.storage import CleanerConfig, LogManager

ME = 1


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


@pytest.fixture
def manager(tmp_path, zk):
    logs = LogManager([str(tmp_path / "logs")], {"flush.visibility": "appended"})
    topic_registry.create_topic(zk, "live", 1, 1, {"retention.ms": "100000"}, [ME])
    manager = PartitionManager(zk, ME, logs, log_defaults={"flush.visibility": "appended"})
    manager.start()
    yield manager
    manager.close()
    logs.close()


def test_a_config_change_reaches_the_open_log_without_reopening_it(manager, zk):
    plog = manager.snapshot.leading[("live", 0)]
    plog.append(build_batch([(None, b"before", None, 1)]))
    topic_registry.set_topic_config(zk, "live", {"message.timestamp.type": "LogAppendTime",
                                                 "max.message.bytes": "5000"})
    wait_for(lambda: plog.config.message_timestamp_type == "LogAppendTime")
    assert manager.snapshot.leading[("live", 0)] is plog and not plog.closed
    assert plog.config.max_message_bytes == 5000 and plog.config.retention_ms == 604_800_000  # override removed
    plog.append(build_batch([(None, b"after", None, 1)]))
    assert [b.timestamp_type for b in iter_batches(b"".join(s.read_bytes() for s in plog.iter_slices()))] == [
        0, LOG_APPEND_TIME]
    stats = manager.statistics()
    assert stats.config_changes_applied == 1 and stats.config_changes_pending == 0


def test_a_bad_override_written_by_hand_leaves_the_log_as_it_was(manager, zk):
    plog = manager.snapshot.leading[("live", 0)]
    topic_registry.set_topic_config(zk, "live", {"retention.ms": "soon"})
    wait_for(lambda: manager.statistics().config_changes_pending == 1)
    assert plog.config.retention_ms == 100000
    topic_registry.set_topic_config(zk, "live", {"retention.ms": "200"})
    wait_for(lambda: plog.config.retention_ms == 200)
    assert manager.statistics().config_changes_pending == 0


def test_making_a_live_topic_compacted_wakes_the_cleaner_at_once(tmp_path, zk):
    """Not after log.cleaner.backoff.ms (here 10 minutes): the change itself wakes the cleaner."""
    defaults = {"flush.visibility": "appended", "flush.messages": 1}
    logs = LogManager([str(tmp_path / "logs")], defaults, cleaner=CleanerConfig(backoff_ms=600_000))
    plain = {"segment.bytes": "300", "file.delete.delay.ms": "0"}
    topic_registry.create_topic(zk, "table", 1, 1, plain, [ME])
    manager = PartitionManager(zk, ME, logs, log_defaults=defaults)
    manager.start()
    try:
        plog = manager.snapshot.leading[("table", 0)]
        for i in range(30):
            plog.append(build_batch([(b"k%d" % (i % 3), b"v%d" % i, None, 1)]))
        time.sleep(0.2)  # the cleaner thread is in its backoff, with no compacted log to clean
        assert logs.cleaner.last_run(plog) is None
        topic_registry.set_topic_config(zk, "table", {**plain, "cleanup.policy": "compact",
                                                      "min.cleanable.dirty.ratio": "0.01"})
        wait_for(lambda: logs.cleaner.last_run(plog) is not None)
    finally:
        manager.close()
        logs.close()
