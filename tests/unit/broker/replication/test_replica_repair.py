"""A follower whose log has fenced ranges re-copies them from its leader (replica_fetcher.py Rule 3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.storage_batches import make_batch
from sparklog.broker.replication.replica_fetcher import ReplicaFetcher, repair_point
from sparklog.records.batch import iter_batches
from sparklog.storage import PartitionLog
from sparklog.storage.flusher import Flusher

SETTINGS = {"segment.bytes": 700, "index.interval.bytes": 120, "flush.ms": 10**9, "file.delete.delay.ms": 0}


@pytest.fixture
def flusher():
    flusher = Flusher("test-flusher")
    yield flusher
    flusher.close()


def test_no_fence_no_repair():
    assert repair_point(()) is None


@given(st.lists(st.integers(0, 1000), min_size=2, max_size=10, unique=True).filter(lambda xs: len(xs) % 2 == 0))
def test_the_repair_starts_at_the_first_fenced_offset(bounds):
    bounds = sorted(bounds)
    ranges = tuple(zip(bounds[::2], bounds[1::2]))
    assert repair_point(ranges) == bounds[0]


def copy_from(leader, follower):
    """What the fetcher's FETCHING state does: the leader's bytes from the follower's LEO, appended verbatim."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_replicated(leader.read_replica(follower.log_end_offset, 10**6).read_bytes())


def all_bytes(log):
    return b"".join(open(s.path, "rb").read()[:s.size] for s in log.segments)


def damage_a_middle_batch(follower):
    segment = follower.segments[1]
    batches = list(iter_batches(open(segment.path, "rb").read()))
    position = sum(b.size for b in batches[:1])
    with open(segment.path, "r+b") as f:
        f.seek(position + batches[1].size - 5)
        byte = f.read(1)[0]
        f.seek(position + batches[1].size - 5)
        f.write(bytes([byte ^ 0x10]))
    return batches[1].base_offset


def test_a_follower_with_a_fenced_range_ends_byte_identical_to_its_leader(tmp_path, flusher):
    leader = PartitionLog.open(str(tmp_path / "leader" / "t-0"), SETTINGS, flusher=flusher)
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"), SETTINGS, flusher=flusher)
    for i in range(30):
        leader.append_as_leader(make_batch(2, 40, tag=i), leader_epoch=3)
    copy_from(leader, follower)
    follower.close()
    damaged = damage_a_middle_batch(follower)
    follower = PartitionLog.open(follower.directory, SETTINGS, flusher=flusher)
    follower.scrub()
    assert follower.fenced_ranges() == ((damaged, damaged + 2),)

    fetcher = ReplicaFetcher(broker_id=1, leader_id=0)
    fetcher._repair(follower)
    assert follower.log_end_offset == damaged and follower.fenced_ranges() == ()
    assert fetcher.statistics().repairs == 1
    fetcher._repair(follower)  # nothing left to repair
    assert fetcher.statistics().repairs == 1
    copy_from(leader, follower)
    assert all_bytes(follower) == all_bytes(leader)
    follower.close()
    reopened = PartitionLog.open(follower.directory, SETTINGS, flusher=flusher)  # the repair is durable
    assert reopened.fenced_ranges() == () and all_bytes(reopened) == all_bytes(leader)
    reopened.close()
    leader.close()
