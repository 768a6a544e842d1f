"""Crash recovery: random damage past the recovery point, one test per crash point, and power loss."""

import os
import random
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.crashfs import CrashFiles, Crashed
from support.storage_batches import make_batch, read_all
from sparklog.storage import PartitionLog
from sparklog.storage.log import RECOVERY_POINT_FILE
from sparklog.records.batch import PARTITION_LEADER_EPOCH_OFFSET, iter_batches, iter_records

NEVER = 10**12
SETTINGS = {"segment.bytes": 700, "index.interval.bytes": 120, "flush.ms": NEVER, "file.delete.delay.ms": 0}


def build(directory, flusher, batches, flushed, files=None, checkpoint_interval_ms=NEVER):
    """Append `batches` batch sizes; flush after the first `flushed`; return the log (not closed)."""
    log = PartitionLog.open(directory, SETTINGS, flusher=flusher, files=files,
                            checkpoint_interval_ms=checkpoint_interval_ms)
    for i, count in enumerate(batches):
        if i == flushed:
            log.flush()
        log.append(make_batch(count, 40, tag=i))
    if flushed >= len(batches):
        log.flush()
    return log


def write_recovery_point(directory, offset):
    name = os.path.basename(directory)
    topic, partition = name.rsplit("-", 1)
    with open(os.path.join(directory, RECOVERY_POINT_FILE), "w") as f:
        f.write(f"0\n1\n{topic} {partition} {offset}\n")


def on_disk_batches(log):
    """(segment path, position, base offset, next offset, size) of every batch, from the files."""
    out = []
    for segment in log.segments:
        data = open(segment.path, "rb").read()
        position = 0
        for batch in iter_batches(data):
            out.append((segment.path, position, batch.base_offset, batch.next_offset, batch.size))
            position += batch.size
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(1, 4), min_size=1, max_size=25), flushed_fraction=st.floats(0, 1),
       kind=st.sampled_from(["cut", "garbage", "zeros", "flip"]), where=st.floats(0, 1),
       seed=st.integers(0, 2**32))
def test_reopened_log_is_the_longest_valid_prefix(flusher, batches, flushed_fraction, kind, where, seed):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "t-0")
        flushed = int(flushed_fraction * len(batches))
        log = build(directory, flusher, batches, flushed)
        expected = read_all_unflushed(log)
        recovery_point = log.recovery_point
        layout = on_disk_batches(log)
        log.close()
        write_recovery_point(directory, recovery_point)  # as if the process died before the next flush
        unflushed = [b for b in layout if b[3] > recovery_point]
        keep = damage(kind, layout, unflushed, where, rng)
        reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
        visible = read_all(reopened)
        survivors = [b for b in iter_batches(expected) if b.next_offset <= keep]
        assert visible == b"".join(bytes(b.raw) for b in survivors)
        assert reopened.log_end_offset == reopened.high_watermark == keep
        assert reopened.append(make_batch(1)) == keep  # appends continue right after the valid prefix
        reopened.close()


def read_all_unflushed(log):
    return b"".join(open(s.path, "rb").read() for s in log.segments)


def damage(kind, layout, unflushed, where, rng):
    """Damage the files past the recovery point; return the offset the log must recover to."""
    end = layout[-1][3] if layout else 0
    if kind in ("garbage", "zeros") or not unflushed:
        path = layout[-1][0] if layout else None
        if path is None:
            return 0
        with open(path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 300)) if kind != "zeros" else bytes(rng.randint(1, 300)))
        return end
    victim = unflushed[int(where * len(unflushed)) % len(unflushed)]
    path, position, base, _, size = victim
    if kind == "cut":
        with open(path, "r+b") as f:
            f.truncate(position + rng.randrange(size))
    else:
        offset = rng.choice([o for o in range(size) if not PARTITION_LEADER_EPOCH_OFFSET <= o < 16])
        with open(path, "r+b") as f:
            f.seek(position + offset)
            byte = f.read(1)[0]
            f.seek(position + offset)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return base


def test_damage_in_a_middle_segment_deletes_the_later_segments(tmp_path, flusher):
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [3] * 20, flushed=2)
    layout = on_disk_batches(log)
    log.close()
    write_recovery_point(directory, 6)
    middle = log.segments[2]
    with open(middle.path, "r+b") as f:
        f.truncate(10)
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert reopened.log_end_offset == middle.base_offset
    assert [s.base_offset for s in reopened.segments] == [s.base_offset for s in log.segments[:3]]
    assert sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1].startswith(
        f"{middle.base_offset:020d}")
    assert len(layout) == 20


def test_missing_checkpoint_replays_everything(tmp_path, flusher):
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [2] * 10, flushed=10)
    log.close()
    os.unlink(os.path.join(directory, RECOVERY_POINT_FILE))
    with open(log.segments[0].path, "r+b") as f:  # damage before the old recovery point is found too
        f.seek(100)
        f.write(b"\xff")
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert reopened.log_end_offset == 0 and read_all(reopened) == b""


def test_corrupt_checkpoint_is_treated_as_missing(tmp_path, flusher):
    directory = str(tmp_path / "t-0")
    build(directory, flusher, [2] * 5, flushed=5).close()
    with open(os.path.join(directory, RECOVERY_POINT_FILE), "w") as f:
        f.write("garbage")
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert reopened.log_end_offset == 10


# -- one test per crash point, with the crash-simulating file layer ------------------------------


def crash_during(tmp_path, flusher, method, match, action, mode="drop", checkpoint_interval_ms=NEVER):
    files = CrashFiles()
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [2] * 6, flushed=6, files=files,  # offsets 0..11 durable
                checkpoint_interval_ms=checkpoint_interval_ms)
    files.arm(method, match, mode)
    with pytest.raises(Crashed):
        action(log)
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    records = [r.offset for r in iter_records(read_all(reopened))]
    assert records == list(range(reopened.log_start_offset, reopened.log_end_offset))
    assert reopened.high_watermark == reopened.log_end_offset
    return reopened


def append_and_flush(log):
    log.append(make_batch(2, 40))
    log.append(make_batch(2, 40))
    log.flush()


def test_crash_during_append_write_loses_only_that_append(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "pwrite", lambda p: p.endswith(".log"), append_and_flush, "tear")
    assert log.log_end_offset == 12


def test_crash_before_the_log_fsync_loses_the_unflushed_appends(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "fsync", lambda p: p.endswith(".log"), append_and_flush)
    assert log.log_end_offset == 12


def test_crash_before_the_index_fsync_keeps_the_data_and_rebuilds_the_index(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "fsync", lambda p: p.endswith(".index"), append_and_flush, "tear")
    assert log.log_end_offset == 16


def append_flush_and_close(log):
    append_and_flush(log)
    log.close()


def test_crash_before_the_closing_checkpoint_rename_replays_from_the_old_point(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "rename", lambda p: p.endswith(".tmp"), append_flush_and_close)
    assert log.log_end_offset == 16
    assert not any(n.endswith(".tmp") for n in os.listdir(log.directory))


def test_crash_before_a_periodic_checkpoint_rename_replays_from_the_old_point(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "rename", lambda p: p.endswith(".tmp"), append_and_flush,
                       checkpoint_interval_ms=0)  # a checkpoint at every flush that moves the recovery point
    assert log.log_end_offset == 16
    assert not any(n.endswith(".tmp") for n in os.listdir(log.directory))


def read_checkpoint(directory):
    with open(os.path.join(directory, RECOVERY_POINT_FILE)) as f:
        return int(f.read().split()[-1])


def test_recovery_from_an_old_checkpoint_replays_every_later_segment(tmp_path, flusher):
    """Flushes move the recovery point but not the file (interval: never); a crash then recovers from the
    old checkpoint: everything fsynced survives, and damage anywhere after the checkpoint is found."""
    directory = str(tmp_path / "t-0")
    build(directory, flusher, [2] * 3, flushed=3).close()  # the closing checkpoint says 6
    files = CrashFiles()
    log = PartitionLog.open(directory, SETTINGS, flusher=flusher, files=files, checkpoint_interval_ms=NEVER)
    for i in range(15):
        log.append(make_batch(2, 40, tag=100 + i))
        log.flush()
    assert log.recovery_point == 36 and read_checkpoint(directory) == 6 and len(log.segments) > 3
    log.append(make_batch(2, 40))  # never fsynced: lost
    files.crash("tear", random.Random(7))
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert reopened.log_end_offset == reopened.high_watermark == 36
    assert [r.offset for r in iter_records(read_all(reopened))] == list(range(36))
    segments = [(s.path, s.base_offset) for s in reopened.segments]
    reopened.close()
    assert read_checkpoint(directory) == 36

    # The checkpoint is old again (as after a crash), and a flushed batch past it is damaged: the replay
    # from the old checkpoint finds it, although it lies before the last recovery point.
    with open(os.path.join(directory, RECOVERY_POINT_FILE), "w") as f:
        f.write("0\n1\nt 0 6\n")
    path, base = next((p, b) for p, b in segments if b > 6)
    with open(path, "r+b") as f:
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 1]))
    again = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert again.log_end_offset == base
    assert [r.offset for r in iter_records(read_all(again))] == list(range(base))
    again.close()


def test_crash_during_retention_rename_keeps_a_consistent_log(tmp_path, flusher):
    def retention(log):
        log.enforce_retention(now_ms=10**15)

    log = crash_during(tmp_path, flusher, "rename", lambda p: p.endswith(".index"), retention)
    # The crash came before retention fsynced the directory: its renames are undone, nothing is lost,
    # and the next retention run deletes the segments again.
    assert log.log_end_offset == 12 and log.log_start_offset == 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))


def test_crash_during_truncation_keeps_a_prefix(tmp_path, flusher):
    log = crash_during(tmp_path, flusher, "fsync", lambda p: p.endswith(".log"), lambda lg: lg.truncate_to(5))
    assert log.log_end_offset in (4, 8)  # 8: the later segment's removal was durable, the cut was not


# -- power loss ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["drop", "tear"])
@pytest.mark.parametrize("flush_messages", [1, 7])
def test_power_loss_loses_at_most_the_messages_since_the_last_flush(tmp_path, flusher, mode, flush_messages):
    rng = random.Random(flush_messages)
    for trial in range(8):
        files = CrashFiles()
        directory = str(tmp_path / f"t-{trial}")
        log = PartitionLog.open(directory, dict(SETTINGS, **{"flush.messages": flush_messages}),
                                flusher=flusher, files=files)
        acknowledged = 0
        for _ in range(rng.randint(1, 30)):
            log.append(make_batch(rng.randint(1, 3), 40))
            acknowledged = log.log_end_offset
        flushed = log.recovery_point
        files.crash(mode, rng)
        reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
        assert flushed <= reopened.log_end_offset <= acknowledged
        if flush_messages == 1:
            assert reopened.log_end_offset == acknowledged  # every acknowledged append was fsynced
        assert acknowledged - flushed < flush_messages + 3  # at most M messages (plus one batch) unflushed
        records = [r.offset for r in iter_records(read_all(reopened))]
        assert records == list(range(reopened.log_end_offset))
        reopened.close()


# -- directory entries: a new, renamed or removed segment file is durable only after fsync of the directory --


def test_a_flushed_log_keeps_every_rolled_segment_after_power_loss(tmp_path, flusher):
    files = CrashFiles()
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [2] * 20, flushed=20, files=files)  # 700-byte segments: several rolls
    assert len(log.segments) > 3 and log.high_watermark == 40
    files.crash("drop")
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert [r.offset for r in iter_records(read_all(reopened))] == list(range(40))


def test_a_truncation_is_not_undone_by_power_loss(tmp_path, flusher):
    files = CrashFiles()
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [2] * 20, flushed=20, files=files)
    log.truncate_to(6)  # retires every later segment, then flushes
    files.crash("drop")
    reopened = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    assert reopened.log_end_offset == 6  # the removed offsets do not come back


def test_retention_makes_its_deletions_durable(tmp_path, flusher):
    files = CrashFiles()
    directory = str(tmp_path / "t-0")
    log = build(directory, flusher, [2] * 20, flushed=20, files=files)
    log.config = log.config.with_overrides({"retention.bytes": 1000})
    assert log.enforce_retention()
    assert sorted(p for p in files.durable_names() if p.endswith(".log")) == [s.path for s in log.segments]


def test_a_failed_background_flush_is_retried_without_another_append(tmp_path, flusher):
    """flusher.py Rule: idle-logs-cost-nothing: a flush whose fsync fails leaves its appends unflushed, and the
    log schedules itself again (log.py `_restore_pending`): the flusher retries and the records become visible
    though nothing more is appended."""
    files = CrashFiles()
    log = PartitionLog.open(str(tmp_path / "t-0"), {**SETTINGS, "flush.ms": 20}, flusher=flusher, files=files)
    files.arm("fsync", mode="fail")
    log.append(make_batch(3, 40))
    deadline = time.monotonic() + 10
    while log.high_watermark < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert flusher.statistics().flush_errors == 1  # the first try failed
    assert log.high_watermark == 3 and log.recovery_point == 3
