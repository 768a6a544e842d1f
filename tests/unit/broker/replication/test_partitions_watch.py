"""PartitionManager never misses a state written between its read of the registry and the setting of its
watches (real ZooKeeper): a broker restarted while the controller re-elects it must learn it leads."""

from __future__ import annotations

import time

from sparklog.broker.replication.partitions import PartitionManager
from sparklog.coordination import topics as topic_registry
from sparklog.storage import LogManager

ME = 1


def test_a_state_written_before_the_watch_is_set_is_not_missed(tmp_path, zk):
    topic_registry.create_topic(zk, "raced", 1, 1, {}, [2])  # broker 2 leads; we are broker 1
    logs = LogManager([str(tmp_path / "logs")], {})
    manager = PartitionManager(zk, ME, logs)
    watch_nodes = manager._watch_nodes

    def controller_writes_then_watch():  # the controller moves leadership here just before the watch is set
        state = topic_registry.partition_state(zk, "raced", 0)
        if state.leader != ME:
            topic_registry.set_partition_state(
                zk, "raced", 0, topic_registry.PartitionState(ME, (ME,), state.leader_epoch + 1), state.zk_version)
        watch_nodes()

    manager._watch_nodes = controller_writes_then_watch
    try:
        manager.start()
        deadline = time.monotonic() + 10
        while ("raced", 0) not in manager.snapshot.leading and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ("raced", 0) in manager.snapshot.leading, "the broker never learned that it leads"
    finally:
        manager.close()
        logs.close()
