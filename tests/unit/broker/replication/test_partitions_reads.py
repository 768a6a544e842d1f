"""PartitionManager reads what changed (real ZooKeeper): one partition's new state costs one znode read, not a
read of every partition state of its topic (a 2,000-partition topic whose ISRs ramp up cost O(n^2) reads)."""

from __future__ import annotations

import contextlib
import threading
import time

from sparklog.broker.replication.partitions import PartitionManager
from sparklog.coordination import paths as zk_paths
from sparklog.coordination import topics as topic_registry
from sparklog.storage import LogManager

ME = 1
PARTITIONS = 40


class CountingClient:
    """The kazoo client, with the paths of the reads (`get`, `get_async`) made through it counted."""

    def __init__(self, zk):
        self._zk = zk
        self.reads: list[str] = []
        self.sync_gets: list[str] = []  # those made with `get`: one round trip each
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._zk, name)

    def get(self, path, *args, **kwargs):
        self._count(path)
        self.sync_gets.append(path)
        return self._zk.get(path, *args, **kwargs)

    def get_async(self, path, *args, **kwargs):
        self._count(path)
        return self._zk.get_async(path, *args, **kwargs)

    def _count(self, path):
        with self._lock:
            self.reads.append(path)

    def taken(self) -> list[str]:
        with self._lock:
            reads, self.reads = self.reads, []
        return reads


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def wait_quiet(client, quiet_s=0.5, timeout=20.0):
    """Until no read has been made for `quiet_s` (the watches' first calls and their reads are over)."""
    deadline = time.monotonic() + timeout
    while client.taken() and time.monotonic() < deadline:
        time.sleep(quiet_s)


@contextlib.contextmanager
def manager_of(tmp_path, zk, topic: str, quiet: bool = True):
    """A PartitionManager (broker ME) over a counting client, `topic` created first with PARTITIONS partitions
    led by broker 2 (metadata only here); with `quiet`, once its watches are set and their reads are over."""
    topic_registry.create_topic(zk, topic, PARTITIONS, 1, {}, [2])
    client = CountingClient(zk)
    logs = LogManager([str(tmp_path / "logs")], {})
    manager = PartitionManager(client, ME, logs)
    try:
        manager.start()
        if quiet:
            wait_for(lambda: manager.statistics().watches == PARTITIONS + 1)
            wait_quiet(client)
        yield manager, client
    finally:
        manager.close()
        logs.close()


def test_one_partition_state_change_reads_that_partitions_state_alone(tmp_path, zk):
    with manager_of(tmp_path, zk, "wide") as (manager, client):
        state = topic_registry.partition_state(zk, "wide", 7)
        topic_registry.set_partition_state(
            zk, "wide", 7, topic_registry.PartitionState(2, (2,), state.leader_epoch + 1), state.zk_version)
        wait_for(lambda: manager.snapshot.topics["wide"].partitions[7].leader_epoch == state.leader_epoch + 1)
        time.sleep(0.5)
        reads = client.taken()
        state_reads = [path for path in reads if path.endswith("/state")]
        assert state_reads == [zk_paths.partition_state("wide", 7)], reads
        others = manager.snapshot.topics["wide"].partitions
        assert all(others[p].leader == 2 and others[p].leader_epoch == state.leader_epoch for p in others if p != 7)


def test_a_config_change_reads_the_config_alone(tmp_path, zk):
    with manager_of(tmp_path, zk, "configured") as (manager, client):
        topic_registry.set_topic_config(zk, "configured", {"retention.ms": "1234"})
        wait_for(lambda: manager.snapshot.topics["configured"].config.get("retention.ms") == "1234")
        time.sleep(0.5)
        reads = client.taken()
        assert zk_paths.topic_config("configured") in reads and not [p for p in reads if p.endswith("/state")], reads
        assert len(manager.snapshot.topics["configured"].partitions) == PARTITIONS


def test_a_topic_is_read_in_one_round_trip_not_one_per_partition(tmp_path, zk):
    """A whole read (a new topic) asks for every partition state at once (pipelined `get_async`), not one
    `get` after another: 2,000 partitions' states cost one round trip."""
    with manager_of(tmp_path, zk, "new", quiet=False) as (manager, client):
        assert len(manager.snapshot.topics["new"].partitions) == PARTITIONS
        assert not [path for path in client.sync_gets if path.endswith("/state")]
