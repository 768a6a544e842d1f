"""Bit rot in flushed data: never served, fenced, and every valid batch kept (log.py Rule: bit-rot-fenced and Rule:
verify-before-first-use)."""

import random
import threading
import time

import pytest

from support.corruption import run_trial
from support.crashfs import CrashFiles, Crashed
from support.storage_batches import make_batch, read_all
from sparklog.records.batch import iter_batches
from sparklog.storage import CorruptSegmentError, PartitionLog

SETTINGS = {"segment.bytes": 700, "index.interval.bytes": 120, "flush.ms": 10**9, "file.delete.delay.ms": 0}


def build(tmp_path, flusher, batches=30, settings=SETTINGS):
    log = PartitionLog.open(str(tmp_path / "t-0"), settings, flusher=flusher)
    for i in range(batches):
        log.append(make_batch(2, 40, tag=i))
    log.close()
    return log


def running(tmp_path, flusher):
    """An open log of 30 flushed batches over several segments."""
    log = PartitionLog.open(str(tmp_path / "t-0"), SETTINGS, flusher=flusher)
    for i in range(30):
        log.append(make_batch(2, 40, tag=i))
    log.flush()
    return log


def layout(log):
    """(segment path, position, base offset, size) of every batch, from the files."""
    out = []
    for segment in log.segments:
        position = 0
        for batch in iter_batches(open(segment.path, "rb").read()):
            out.append((segment.path, position, batch.base_offset, batch.size))
            position += batch.size
    return out


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


def served_offsets(log):
    return [(b.base_offset, b.next_offset) for b in iter_batches(read_all(log))]  # iter_batches checks CRCs


def middle_batch(log):
    batches = layout(log)
    second = [b for b in batches if b[0] == log.segments[1].path]
    return second[len(second) // 2], batches


def test_a_flipped_payload_byte_in_a_closed_segment_is_never_served(tmp_path, flusher):
    log = build(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    flip(path, position + size - 5)  # inside the records: only the CRC can tell
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    served = served_offsets(reopened)
    assert base not in [b for b, _ in served]
    assert [b for b, _ in served] == [b[2] for b in batches if b[2] != base]  # every other batch is kept
    assert reopened.fenced_ranges() == ((base, base + 2),)
    stats = reopened.statistics()
    assert (stats.fenced_ranges, stats.fenced_offsets, stats.log_end_offset) == (1, 2, 60)


def test_a_truncated_middle_segment_keeps_every_later_segment(tmp_path, flusher):
    log = build(tmp_path, flusher)
    batches = layout(log)
    middle = log.segments[2]
    with open(middle.path, "r+b") as f:
        f.truncate(10)
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    lost = [b[2] for b in batches if b[0] == middle.path]
    assert [b for b, _ in served_offsets(reopened)] == [b[2] for b in batches if b[2] not in lost]
    assert reopened.fenced_ranges() == ((middle.base_offset, middle.next_offset),)
    assert reopened.log_end_offset == 60
    assert reopened.append(make_batch(1)) == 60  # offsets are never reused


@pytest.mark.parametrize("byte", [0, 5, 7, 9, 11])  # baseOffset (high, low bytes) and batchLength: outside the CRC
def test_a_damaged_header_field_outside_the_crc_is_never_served_at_a_wrong_offset(tmp_path, flusher, byte):
    log = build(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    flip(path, position + byte)
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    served = served_offsets(reopened)
    assert [b for b, _ in served] == [b[2] for b in batches if b[2] != base]
    assert reopened.fenced_ranges() == ((base, base + 2),)


def test_a_segment_whose_first_batch_is_not_at_its_base_is_fenced(tmp_path, flusher):
    log = build(tmp_path, flusher)
    segment = log.segments[1]
    flip(segment.path, 7)  # the first batch's baseOffset: CRC intact, structure broken
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    assert segment.base_offset not in [b for b, _ in served_offsets(reopened)]
    assert reopened.fenced_ranges() == ((segment.base_offset, segment.base_offset + 2),)


def test_fences_survive_a_restart_and_retention_drops_them(tmp_path, flusher):
    log = build(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    flip(path, position + size - 5)
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    served = served_offsets(reopened)
    reopened.close()
    again = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    assert served_offsets(again) == served and again.fenced_ranges() == ((base, base + 2),)
    again.config = again.config.with_overrides({"retention.bytes": 1})
    again.enforce_retention()
    assert again.fenced_ranges() == ()
    again.close()


def test_the_scrubber_fences_rot_in_a_running_log_and_readers_step_over_it(tmp_path, flusher):
    log = running(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    flip(path, position + size - 5)
    assert log.scrub() > 0
    assert log.fenced_ranges() == ((base, base + 2),)
    assert [b for b, _ in served_offsets(log)] == [b[2] for b in batches if b[2] != base]
    assert log.read(base, 10**6).read_bytes()[:8] == (base + 2).to_bytes(8, "big")  # a fetch inside skips it
    log.append(make_batch(1))
    assert log.log_end_offset == 61
    log.close()


def test_a_reader_walking_into_unfenced_damage_gets_an_error_not_bytes(tmp_path, flusher):
    log = running(tmp_path, flusher)
    (path, position, base, size), _ = middle_batch(log)
    flip(path, position + 7)  # the scrubber has not run: the reader's structure check must catch it
    with pytest.raises(CorruptSegmentError):
        log.read(base, 10**6)
    log.close()


def test_damaged_index_files_are_rebuilt_before_first_use(tmp_path, flusher):
    settings = dict(SETTINGS, **{"segment.bytes": 3000, "index.interval.bytes": 60})
    log = build(tmp_path, flusher, settings=settings)
    index = log.segments[0].index.path
    data = bytearray(open(index, "rb").read())
    data[7] ^= 0x04  # a position that stays in order but no longer points at a batch start
    open(index, "wb").write(bytes(data))
    reopened = PartitionLog.open(log.directory, settings, flusher=flusher)
    assert reopened.statistics().unverified_segments >= 1
    assert [b for b, _ in served_offsets(reopened)] == [b[2] for b in layout(log)]
    assert reopened.statistics().unverified_segments == 0


def test_a_short_corruption_run(tmp_path, flusher):
    """The suite's short version of scripts/corruption_run.py: seeded random trials, every kind and file."""
    rng = random.Random(14)
    failures = []
    for i in range(60):
        trial = run_trial(rng, str(tmp_path / f"t-{i}"), flusher)
        if not trial.ok:
            failures.append(trial)
    assert failures == []


def test_the_fence_listener_hears_of_fences_at_open_and_when_they_change(tmp_path, flusher):
    log = build(tmp_path, flusher)
    (path, position, base, size), _ = middle_batch(log)
    flip(path, position + size - 5)
    heard = []
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher,
                                 on_fence=lambda *event: heard.append(event))
    served_offsets(reopened)  # the segment is verified before this first read, which finds the damage
    assert heard == [("t", 0, ((base, base + 2),))]
    reopened.close()
    heard.clear()
    again = PartitionLog.open(log.directory, SETTINGS, flusher=flusher, on_fence=lambda *event: heard.append(event))
    assert heard == [("t", 0, ((base, base + 2),))]  # known from the fence file
    again.config = again.config.with_overrides({"retention.bytes": 1})
    again.enforce_retention()
    assert heard[-1] == ("t", 0, ())
    again.close()


def test_readers_never_step_over_valid_batches_while_the_scrubber_fences(tmp_path, flusher):
    """The fence publishes the moved batches before it cuts the damaged segment, and a read that saw the
    segment tuple change looks again: no pass of a concurrent reader misses a batch that is intact."""
    log = running(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    intact = {b[2] for b in batches if b[2] != base}
    stop, problems, passes = threading.Event(), [], [0]

    def reader():
        while not stop.is_set():
            seen, offset = set(), 0
            while offset < log.high_watermark:
                try:
                    data = log.read(offset, 300).read_bytes()
                except CorruptSegmentError:
                    continue  # damage met before the fence: retried, never served
                header = next(iter_batches(data, False))
                seen.add(header.base_offset)
                offset = header.next_offset
            if not intact <= seen:
                problems.append(sorted(intact - seen))
            passes[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        time.sleep(0.05)
        flip(path, position + size - 5)
        log.scrub()
        time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert problems == [] and passes[0] > 2
    assert log.fenced_ranges() == ((base, base + 2),)
    log.close()


@pytest.mark.parametrize("method, match", [
    ("rename", lambda p: p.endswith("fenced-offsets.tmp")),  # before the fence is durable
    ("pwrite", lambda p: p.endswith(".log.tmp")),  # while the valid batches after it are copied
    ("rename", lambda p: p.endswith(".log.tmp")),  # before the copy has its name
    ("truncate", lambda p: p.endswith(".log")),  # before the damaged segment is cut
    ("fsync_dir", lambda p: True),  # before the new names are durable
])
def test_power_loss_at_each_step_of_a_fence_keeps_every_valid_batch(tmp_path, flusher, method, match):
    log = build(tmp_path, flusher)
    (path, position, base, size), batches = middle_batch(log)
    flip(path, position + size - 5)
    files = CrashFiles()
    files.arm(method, match)
    with pytest.raises(Crashed):
        opened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher, files=files)
        served_offsets(opened)  # the damaged segment is verified before this first read
    reopened = PartitionLog.open(log.directory, SETTINGS, flusher=flusher)
    assert [b for b, _ in served_offsets(reopened)] == [b[2] for b in batches if b[2] != base]
    assert reopened.fenced_ranges() == ((base, base + 2),) and reopened.log_end_offset == 60
    reopened.close()
