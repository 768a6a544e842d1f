"""What replication needs of PartitionLog: verbatim follower appends, a settable HW, leader epochs in the
headers and the cache, reads up to the LEO, and truncation of the tail (with the cache) against a model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.storage_batches import make_batch
from sparklog.records.batch import iter_batches
from sparklog.storage import CorruptRecordError, PartitionLog
from sparklog.storage.errors import OffsetsNotContiguous
from sparklog.storage.leader_epochs import EpochEntry

NEVER = 10**12


def open_log(tmp_path, flusher, name="t-0", **settings):
    settings.setdefault("flush.ms", NEVER)
    return PartitionLog.open(str(tmp_path / name), settings, flusher=flusher)


def all_bytes(log) -> bytes:
    return b"".join(s.read_bytes() for s in iter_replica_slices(log))


def iter_replica_slices(log):
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read_replica(offset, 1 << 20)
        if not piece.length:
            return
        yield piece
        offset = list(iter_batches(piece.read_bytes()))[-1].next_offset


def test_follower_copies_leader_bytes_verbatim(tmp_path, flusher):
    leader = open_log(tmp_path, flusher, "a-0", **{"segment.bytes": "400"})
    follower = open_log(tmp_path, flusher, "b-0", **{"segment.bytes": "400"})
    for epoch, count in ((0, 3), (0, 2), (2, 5), (5, 1)):
        leader.append_as_leader(make_batch(count, tag=count), epoch)
    follower.append_replicated(leader.read_replica(0, 10_000).read_bytes())
    while follower.log_end_offset < leader.log_end_offset:  # one segment per read
        follower.append_replicated(leader.read_replica(follower.log_end_offset, 10_000).read_bytes())
    assert all_bytes(follower) == all_bytes(leader)
    assert [b.partition_leader_epoch for b in iter_batches(all_bytes(follower))] == [0, 0, 2, 5]
    assert follower.leader_epochs.entries == leader.leader_epochs.entries == (
        EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(5, 10))
    assert len(follower.segments) > 1


@pytest.mark.parametrize("length", [-12, 0, 5])
def test_leader_append_of_a_bad_length_is_refused_not_looped_on(tmp_path, flusher, length):
    log = open_log(tmp_path, flusher)
    data = bytearray(make_batch(2))
    data[8:12] = length.to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(data) + make_batch(1), 3)
    assert log.log_end_offset == 0


def test_replicated_batches_must_continue_the_log_and_nothing_is_written_otherwise(tmp_path, flusher):
    leader = open_log(tmp_path, flusher, "a-0")
    follower = open_log(tmp_path, flusher, "b-0")
    leader.append_as_leader(make_batch(3), 0)
    leader.append_as_leader(make_batch(2), 0)
    second = leader.read_replica(3, 10_000).read_bytes()
    with pytest.raises(OffsetsNotContiguous):
        follower.append_replicated(second)
    first = leader.read_replica(0, 10_000).read_bytes()
    damaged = bytearray(first)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_replicated(bytes(damaged))
    assert follower.log_end_offset == 0 and follower.size_bytes == 0


def test_replicated_high_watermark_is_set_not_flushed(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"flush.visibility": "appended"})
    log.use_replicated_high_watermark()
    seen = []
    log.add_high_watermark_listener(lambda _, hw: seen.append(hw))
    log.append_as_leader(make_batch(3), 0)
    log.append_as_leader(make_batch(4), 0)
    log.flush()
    assert log.high_watermark == 0 and log.read(0, 10_000).length == 0
    assert log.set_high_watermark(5) == 3  # rounded down to the batch holding 5
    assert log.set_high_watermark(100) == 7  # capped at the LEO
    assert log.set_high_watermark(2) == 7  # never backwards
    assert seen == [3, 7]
    assert [b.base_offset for b in iter_batches(log.read(0, 10_000).read_bytes())] == [0, 3]


def test_replicated_mode_starts_with_nothing_committed(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))
    log.flush()
    assert log.high_watermark == 3
    log.use_replicated_high_watermark()
    assert log.high_watermark == 0 and log.read(0, 10_000).length == 0
    log.use_replicated_high_watermark()  # later calls change nothing
    assert log.set_high_watermark(3) == 3
    log.use_replicated_high_watermark()
    assert log.high_watermark == 3


def test_back_to_a_single_replica_the_high_watermark_follows_fsyncs_again(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.use_replicated_high_watermark()
    log.append_as_leader(make_batch(3), 0)
    log.flush()
    log.append_as_leader(make_batch(2), 0)
    assert log.high_watermark == 0
    log.use_local_high_watermark()
    assert log.high_watermark == 3  # what is fsynced, not the unflushed tail
    log.flush()
    assert log.high_watermark == 5
    log.use_replicated_high_watermark()
    log.set_high_watermark(5)
    log.append_as_leader(make_batch(1), 0)
    log.use_local_high_watermark()
    assert log.high_watermark == 5  # never backwards


def test_truncate_fully_and_start_past_the_end(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": "300"})
    for _ in range(4):
        log.append_as_leader(make_batch(3), 1)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.leader_epochs.entries == ()
    leader = open_log(tmp_path, flusher, "leader-0")
    leader.append_as_leader(make_batch(2), 5)
    copied = bytearray(leader.read_replica(0, 10_000).read_bytes())
    copied[0:8] = (100).to_bytes(8, "big")  # the same batch at the leader's offset 100
    assert log.append_replicated(bytes(copied)) == 102
    log.close()
    reopened = open_log(tmp_path, flusher, **{"segment.bytes": "300"})
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 102)
    assert [e.start_offset for e in reopened.leader_epochs.entries] == [100]
    reopened.close()


def test_read_replica_reaches_the_log_end_beyond_the_high_watermark(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.use_replicated_high_watermark()
    log.append_as_leader(make_batch(3), 0)
    assert log.read(0, 10_000).length == 0
    assert [b.next_offset for b in iter_batches(log.read_replica(0, 10_000).read_bytes())] == [3]
    assert log.read_replica(3, 10_000).length == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),
                                st.tuples(st.just("truncate"), st.integers(0, 30))), max_size=20))
def test_truncation_keeps_the_log_and_its_epochs_a_prefix(tmp_path_factory, flusher, steps):
    """Against a model (the list of (offset, epoch) appended): truncate_replica_to(o) keeps exactly the
    whole batches ending at or below o, the cache names only epochs still in the log, and both survive
    reopening. (The flusher is shared by the examples: each opens its own directory.)"""
    directory = tmp_path_factory.mktemp("trunc")
    log = open_log(directory, flusher, **{"segment.bytes": "300"})
    model, epoch = [], 0  # (base, next, epoch) per batch
    for step in steps:
        if step[0] == "append":
            epoch += step[1]
            base = log.append_as_leader(make_batch(step[2]), epoch)
            model.append((base, base + step[2], epoch))
        else:
            log.truncate_replica_to(step[1])
            model = [b for b in model if b[1] <= step[1]]
    got = [(b.base_offset, b.next_offset, b.partition_leader_epoch) for b in iter_batches(all_bytes(log))]
    assert got == model
    if model:
        assert log.log_end_offset == model[-1][1]
        starts = {}
        for base, _, e in model:
            starts.setdefault(e, base)
        assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == sorted(starts.items())
    log.close()
    reopened = open_log(directory, flusher, **{"segment.bytes": "300"})
    assert [(b.base_offset, b.next_offset) for b in iter_batches(all_bytes(reopened))] == [m[:2] for m in model]
    assert reopened.leader_epochs.entries == log.leader_epochs.entries
    reopened.close()


@pytest.mark.parametrize("method, match", [
    ("fsync", lambda path: path.endswith(".log")),  # the cut segment's fsync
    ("rename", lambda path: "leader-epoch" in path),  # the epoch checkpoint's replacement
])
def test_crash_during_replica_truncation_keeps_log_and_epochs_consistent(tmp_path, flusher, method, match):
    """One test per crash point of truncate_replica_to: after the restart the log is a prefix of what it
    was, and the epoch cache names exactly the epochs of the batches still there, where each starts."""
    from support.crashfs import CrashFiles, Crashed

    settings = {"flush.ms": NEVER, "segment.bytes": "300", "file.delete.delay.ms": "0"}
    files = CrashFiles()
    directory = tmp_path / "t-0"
    log = PartitionLog.open(str(directory), settings, flusher=flusher, files=files)
    for epoch in (0, 0, 1, 2, 2, 3):
        log.append_as_leader(make_batch(2), epoch)
    log.flush()
    before = [(b.base_offset, b.partition_leader_epoch) for b in iter_batches(all_bytes(log))]
    files.arm(method, match)
    with pytest.raises(Crashed):
        log.truncate_replica_to(5)
    reopened = PartitionLog.open(str(directory), settings, flusher=flusher)
    after = [(b.base_offset, b.partition_leader_epoch) for b in iter_batches(all_bytes(reopened))]
    assert after == before[:len(after)] and len(after) >= 2  # a prefix, never below the cut
    starts = {}
    for base, epoch in after:
        starts.setdefault(epoch, base)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epochs.entries] == sorted(starts.items())
    reopened.close()


def test_read_replica_at_the_log_end_reads_no_file(tmp_path, flusher, monkeypatch):
    """A caught-up follower's fetch reads at the LEO: answered from memory, not by walking the segment's
    unindexed tail header by header (one pread per batch since the last index entry, on every fetch of every
    partition of the request, which made a parked follower fetch's re-checks grow with the log)."""
    from sparklog.storage.segment import LogSegment

    log = open_log(tmp_path, flusher)
    for i in range(20):
        log.append_as_leader(make_batch(1, tag=i), 0)
    walks = []
    real = LogSegment.find_batch
    monkeypatch.setattr(LogSegment, "find_batch", lambda self, *a: walks.append(a) or real(self, *a))
    assert log.read_replica(log.log_end_offset, 10_000).length == 0
    assert walks == []
    assert [b.base_offset for b in iter_batches(log.read_replica(19, 10_000).read_bytes())] == [19]
