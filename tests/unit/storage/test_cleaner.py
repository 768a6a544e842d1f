"""The log cleaner on real logs: what it keeps (the design notes' four guarantees, against a model), codecs,
headers, null keys, tombstones, the compaction lags, and a crash at every file operation of a clean."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from support.crashfs import CrashFiles, Crashed, ProcessFiles
from sparklog.records.batch import build_batch, iter_batches, iter_records
from sparklog.records.compression import CODECS
from sparklog.storage import CleanerConfig, CleanerManager, Flusher, PartitionLog
from sparklog.storage.cleaner import NO_HORIZON, Cleaner, cleanable_range
from sparklog.storage.cleaner_manager import CLEANER_NICE_INCREMENT, MAX_NICE
from sparklog.storage.errors import InvalidRecordError
from sparklog.storage.files import OS_FILES
from sparklog.storage.offset_map import OffsetMap

pytestmark = pytest.mark.usefixtures("codec")  # each test with the compiled scan and the pure-Python one

NEVER = 10**12
T0 = 1_700_000_000_000
RETENTION = 1000  # delete.retention.ms of these tests
SETTINGS = {"cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 100, "flush.ms": NEVER,
            "file.delete.delay.ms": 0, "delete.retention.ms": RETENTION, "min.cleanable.dirty.ratio": 0.0}


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def open_log(directory, clock, files=None, flusher=None, **overrides):
    return PartitionLog.open(directory, dict(SETTINGS, **overrides), clock=clock, files=files, flusher=flusher)


def records(log, offset=None):
    """(offset, key, value, headers) of every visible record from `offset` (default: the log start)."""
    return [(r.offset, r.key, r.value, r.headers) for piece in log.iter_slices(offset)
            for r in iter_records(piece.read_bytes())]


def append(log, pairs, clock, codec="none", headers=None):
    log.append(build_batch([(k, v, headers, clock.now) for k, v in pairs], compression=codec))


def clean(log, clock, map_bytes=64 * 1024, files=OS_FILES):
    return Cleaner(OffsetMap(map_bytes), files, clock=clock).clean(log)


def latest(model):
    """key -> (offset, value) of its last record."""
    last = {}
    for offset, key, value, _ in model:
        last[key] = (offset, value)
    return last


# -- what is kept -------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", sorted(CODECS))
def test_each_key_keeps_its_last_value_in_every_codec_with_headers(tmp_path, flusher, compression):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)
    for i in range(40):
        append(log, [(b"k%d" % (i % 5), b"v%d" % i), (b"other", b"o%d" % i)], clock, compression,
               [("h", b"%d" % i)])
    log.roll()
    log.flush()
    before = records(log)
    result = clean(log, clock)
    after = records(log)
    assert result.records_removed == len(before) - len(after) > 0
    kept = {(o, k, v) for o, k, v, _ in after}
    assert kept == {(o, k, v) for k, (o, v) in latest(before).items()}
    assert all(h == (("h", b"%d" % (o // 2)),) for o, _, _, h in after)  # headers travel with their record
    codecs = {b.compression for p in log.iter_slices() for b in iter_batches(p.read_bytes()) if b.record_count}
    assert log.log_end_offset == 80 and codecs == {CODECS[compression]}  # recompressed with their own codec
    log.close()


def test_each_null_key_of_a_compacted_topic_is_named_by_its_index_in_the_append(tmp_path, flusher):
    """KIP-467: the refusal names exactly the records without a key (a client fails those alone)."""
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"flush.visibility": "appended"})
    with pytest.raises(InvalidRecordError) as refused:
        append(log, [(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")], clock, "zstd")
    assert [i for i, _ in refused.value.record_errors] == [1, 3]
    assert {m for _, m in refused.value.record_errors} == {
        "Compacted topic cannot accept message without key (cleanup.policy=compact)"}
    assert log.log_end_offset == 0


def test_a_null_key_is_refused_in_a_compacted_topic_and_nothing_is_appended(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"flush.visibility": "appended"})
    append(log, [(b"a", b"1")], clock)
    with pytest.raises(InvalidRecordError, match="without key"):
        append(log, [(b"b", b"2"), (None, b"3")], clock, "lz4")
    assert log.log_end_offset == 1
    log.reconfigure(log.config.with_overrides({"cleanup.policy": "delete"}))
    append(log, [(None, b"4")], clock)  # a delete-policy topic takes null keys
    log.reconfigure(log.config.with_overrides({"cleanup.policy": "compact"}))
    append(log, [(b"a", b"5")], clock)
    log.roll()
    log.flush()
    clean(log, clock)
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(2, b"a", b"5")]  # null-key records are dropped (Kafka)
    log.close()


def test_tombstones_delete_a_key_and_go_after_delete_retention_ms(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock)
    append(log, [(b"a", None)], clock)
    log.roll()
    log.flush()
    clean(log, clock)
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(1, b"b", b"1"), (2, b"a", None)]
    clock.now += RETENTION + 1
    append(log, [(b"c", b"1")], clock)  # a new dirty section, so the cleaner runs again
    log.roll()
    log.flush()
    result = clean(log, clock)
    assert result.tombstones_removed == 1
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(1, b"b", b"1"), (3, b"c", b"1")]
    log.close()


def test_a_tombstone_lives_delete_retention_ms_after_the_clean_that_first_saw_it(tmp_path, flusher):
    """KIP-534: the first clean writes the delete horizon into the tombstone's batch; its own timestamp
    (here long past delete.retention.ms) does not count."""
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)

    def clean_again():  # a new dirty section, so that the cleaner runs
        append(log, [(b"other", b"%d" % clock.now)], clock)
        log.roll()
        log.flush()
        return clean(log, clock)

    append(log, [(b"a", b"1")], clock)
    append(log, [(b"a", None), (b"b", b"1")], clock, "gzip")
    log.roll()
    log.flush()
    clock.now += 10 * RETENTION
    first = clean(log, clock)
    assert first.tombstones_removed == 0 and [(o, k, v) for o, k, v, _ in records(log)][:2] == [(1, b"a", None),
                                                                                           (2, b"b", b"1")]
    (batch,) = [b for p in log.iter_slices(1) for b in iter_batches(p.read_bytes()) if b.base_offset == 1]
    assert batch.delete_horizon_ms == clock.now + RETENTION and batch.compression == CODECS["gzip"]
    assert [r.timestamp for r in batch.records()] == [T0, T0]  # the records' own timestamps are unchanged
    clock.now += RETENTION
    assert clean_again().tombstones_removed == 0  # at the horizon, not past it
    clock.now += 1
    assert clean_again().tombstones_removed == 1
    assert [k for _, k, _, _ in records(log)][:1] == [b"b"]
    log.close()


def test_the_active_segment_and_records_younger_than_min_compaction_lag_are_not_cleaned(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"min.compaction.lag.ms": 500})
    for i in range(30):
        append(log, [(b"k", b"%d" % i)], clock)
    log.flush()
    assert clean(log, clock) is None  # every record is younger than the lag
    clock.now += 501
    result = clean(log, clock)
    assert result is not None and result.end == log.segments[-1].base_offset  # the active segment stays dirty
    assert [o for o, *_ in records(log)][-1] == 29 and len(records(log)) > 1
    log.close()


def test_a_compact_only_topic_keeps_old_segments_from_time_retention(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"retention.ms": 10})
    for i in range(30):
        append(log, [(b"k%d" % i, b"v")], clock)
    log.flush()
    clock.now += 10_000
    assert log.enforce_retention() == 0
    log.reconfigure(log.config.with_overrides({"cleanup.policy": "compact,delete"}))
    assert log.enforce_retention() > 0
    log.close()


def test_the_manager_picks_the_dirtiest_compacted_log_and_reports_its_last_run(tmp_path, flusher):
    clock = Clock()
    dirty = open_log(str(tmp_path / "dirty-0"), clock, flusher=flusher)
    plain = open_log(str(tmp_path / "plain-0"), clock, flusher=flusher, **{"cleanup.policy": "delete"})
    for log in (dirty, plain):
        for i in range(30):
            append(log, [(b"k", b"%d" % i)], clock)
        log.roll()
        log.flush()
    manager = CleanerManager(lambda: [plain, dirty], CleanerConfig(dedupe_buffer_size=64 * 1024), clock=clock)
    assert manager.dirty_ratio(dirty) == 1.0 and manager.dirty_ratio(plain) is None
    result = manager.clean_once()
    assert manager.last_run(dirty) == result and manager.last_run(plain) is None
    assert manager.dirty_ratio(dirty) == 0.0 and manager.clean_once() is None
    assert manager.statistics().runs == 1 and manager.statistics().records_removed == 29
    manager.close()
    dirty.close()
    plain.close()


def test_reads_and_appends_go_on_while_the_cleaner_thread_runs(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"flush.visibility": "appended"})
    manager = CleanerManager(lambda: [log], CleanerConfig(dedupe_buffer_size=64 * 1024, backoff_ms=1),
                             clock=clock).start()
    try:
        for i in range(600):
            append(log, [(b"k%d" % (i % 4), b"%d" % i)], clock)
            if i % 50 == 0:
                log.flush()
            seen = [o for o, *_ in records(log, max(log.log_start_offset, log.log_end_offset - 3))]
            assert seen == list(range(log.log_end_offset - 3, log.log_end_offset))[-len(seen):]
        log.roll()
        log.flush()
        deadline = time.monotonic() + 60  # the cleaner thread runs at nice 19: a loaded machine starves it for seconds
        while manager.dirty_ratio(log) != 0.0 and time.monotonic() < deadline:
            manager.wake()
            clock.now += 1
            time.sleep(0.01)
    finally:
        manager.close()
    assert manager.statistics().runs >= 1
    assert {k: (o, v) for o, k, v, _ in records(log)} == {b"k%d" % j: (596 + j, b"%d" % (596 + j)) for j in range(4)}
    log.close()


# -- the four guarantees against a model ------------------------------------------------------------------


class CompactionModel(RuleBasedStateMachine):
    """Appends with random keys and tombstones, cleans (with a small offset map, so ranges end where it
    fills), reads from any offset, time passing and reopening, checked against the list of appended records."""

    def __init__(self):
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.directory = os.path.join(self.tmp.name, "t-0")
        self.clock = Clock()
        self.flusher = Flusher("test-flusher")
        self.log = open_log(self.directory, self.clock, flusher=self.flusher)
        self.model: list[tuple[int, bytes, bytes | None, int]] = []  # (offset, key, value, timestamp)
        self.cleaned_to = 0

    @rule(pairs=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
                                   st.one_of(st.none(), st.binary(min_size=1, max_size=30))), min_size=1, max_size=3),
          codec=st.sampled_from(["none", "gzip", "zstd"]))
    def append(self, pairs, codec):
        base = self.log.log_end_offset
        append(self.log, pairs, self.clock, codec)
        self.model += [(base + i, k, v, self.clock.now) for i, (k, v) in enumerate(pairs)]
        self.log.flush()

    @rule(ms=st.integers(0, 2 * RETENTION))
    def time_passes(self, ms):
        self.clock.now += ms

    @rule(map_bytes=st.sampled_from([64, 64 * 1024]))
    def clean(self, map_bytes):
        self.log.roll()
        result = clean(self.log, self.clock, map_bytes)
        if result is not None:
            self.cleaned_to = max(self.cleaned_to, result.end)

    @rule()
    def reopen(self):
        self.log.close()
        self.log = open_log(self.directory, self.clock, flusher=self.flusher)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read_from_any_offset(self, data):
        start = data.draw(st.integers(0, self.log.log_end_offset))
        seen = [r for r in records(self.log, start) if r[0] >= start]  # a fetch may begin inside a batch
        offsets = [o for o, *_ in seen]
        assert offsets == sorted(set(offsets))  # order kept, no duplicate
        by_offset = {o: (k, v) for o, k, v, _ in self.model}
        assert all(by_offset[o] == (k, v) for o, k, v, _ in seen)  # offsets never change
        caught_up = max(start, self.cleaned_to)  # a consumer past the cleaned range sees every record
        assert [o for o in offsets if o >= caught_up] == [o for o, *_ in self.model if o >= caught_up]

    @invariant()
    def a_reader_from_the_start_sees_every_final_value_and_young_tombstone(self):
        seen = {o for o, *_ in records(self.log)}
        last = {}
        for offset, key, value, timestamp in self.model:
            last[key] = (offset, value, timestamp)
        for offset, value, timestamp in last.values():
            if value is not None or timestamp >= self.clock.now - RETENTION:
                assert offset in seen

    def teardown(self):
        self.log.close()
        self.flusher.close()
        self.tmp.cleanup()


def test_compaction_guarantees():
    """The model run as a function, so that it runs with each codec too (a TestCase cannot take a parameter)."""
    run_state_machine_as_test(CompactionModel, settings=settings(max_examples=30, stateful_step_count=20,
                                                                 deadline=None,
                                                                 suppress_health_check=[HealthCheck.too_slow]))


# -- a crash at every file operation of a clean ----------------------------------------------------------


class CountingFiles(CrashFiles):
    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def _alive(self, method: str = "", path: str = "") -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        super()._alive(method, path)


class Killed(Exception):
    """The process died here (SIGKILL): every file operation before this one happened, none after."""


class KillFiles(ProcessFiles):
    """Plain files until the armed call, which kills the process: it and every later call raise Killed."""

    method = None
    left = 0
    dead = False

    def arm(self, method, skip):
        self.method, self.left = method, skip

    def __getattribute__(self, name):
        get = object.__getattribute__
        if get(self, "dead") and not name.startswith("_") and name not in ("arm", "dead", "method", "left",
                                                                                         "exit", "open_fds"):
            raise Killed(name)
        if name == get(self, "method"):
            if get(self, "left") == 0:
                self.dead = True
                raise Killed(name)
            self.left -= 1
        return get(self, name)


def build_dirty_log(directory, clock, files, flusher):
    log = open_log(directory, clock, files=files, flusher=flusher)
    for i in range(12):
        append(log, [(b"k%d" % (i % 3), b"v%d" % i), (b"k%d" % (i % 2), b"w%d" % i)], clock, "gzip" if i % 2 else "none")
    append(log, [(b"k0", None)], clock)
    log.roll()
    log.flush()
    return log


def crash_points(tmp_path, flusher):
    files = CountingFiles()
    log = build_dirty_log(str(tmp_path / "probe" / "t-0"), Clock(), files, flusher)
    files.calls.clear()
    clean(log, Clock(), files=files)
    return [(method, k) for method, n in sorted(files.calls.items())
            for k in range(n) if method in ("pwrite", "fsync", "rename", "fsync_dir", "unlink", "truncate")]


@pytest.mark.parametrize("mode", ["kill", "drop", "tear"])
def test_a_crash_at_any_step_of_a_clean_loses_no_latest_value(tmp_path, flusher, mode):
    """"kill": the process dies at that call (every earlier operation stays); "drop" and "tear": power is
    lost there (only what was fsynced stays, tails torn or not)."""
    points = crash_points(tmp_path, flusher)
    assert len(points) > 20
    if mode == "tear":  # a torn tail differs from a dropped one only where file bytes are written
        points = [(method, skip) for method, skip in points if method in ("pwrite", "fsync", "truncate")]
    for n, (method, skip) in enumerate(points):
        clock = Clock()
        files = KillFiles() if mode == "kill" else CrashFiles()
        directory = str(tmp_path / f"{mode}{n}" / "t-0")
        log = build_dirty_log(directory, clock, files, flusher)
        expected = records(log)
        files.arm(method, skip) if mode == "kill" else files.arm(method, mode=mode, skip=skip)
        with pytest.raises((Crashed, Killed)):
            clean(log, clock, files=files)
        if mode == "kill":
            log._closed = True  # what a SIGKILL leaves: no close, no flush
            files.exit()  # ... and the kernel closes the dead process's descriptors
        flusher.unregister(log)  # the dead process's log: never flushed nor closed
        reopened = open_log(directory, clock, flusher=flusher)
        seen = records(reopened)
        offsets = [o for o, *_ in seen]
        assert offsets == sorted(set(offsets)), (method, skip)  # nothing duplicated
        assert set(seen) <= set(expected), (method, skip)  # nothing changed
        assert {k: o for o, k, _, _ in expected} == {k: o for o, k, _, _ in seen}, (method, skip)  # latest kept
        assert reopened.log_end_offset == 25
        assert not [f for f in os.listdir(directory) if f.endswith((".cleaned", ".swap"))]
        assert clean(reopened, clock) is None or records(reopened)[-1][0] == 24  # cleans again from there
        reopened.close()


def _thirty_in_a_closed_segment(tmp_path, flusher, clock):
    """A log whose first segment holds 30 records of one key, rolled and flushed: all of it cleanable."""
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)
    for i in range(30):
        append(log, [(b"k", b"%d" % i)], clock)
    log.roll()
    log.flush()
    return log


def test_cleanable_range_counts_clean_and_dirty_bytes(tmp_path, flusher):
    clock = Clock()
    log = _thirty_in_a_closed_segment(tmp_path, flusher, clock)
    span = cleanable_range(log, clock.now)
    assert span.first_dirty == 0 and span.end == 30 and span.dirty_ratio == 1.0
    clean(log, clock)
    span = cleanable_range(log, clock.now)
    assert span.first_dirty == span.end == 30 and span.dirty_ratio == 0.0
    log.close()


def test_cleanable_range_from_another_thread_reads_no_segment_the_cleaner_closed_meanwhile(tmp_path, flusher):
    # a fresh-clone run: dirty_ratio() (the broker's cleaner reporter, the test thread) read a segment's first
    # header through a descriptor the cleaner thread had just closed, replacing the segment: EBADF (or, had an
    # open() reused the number, another file's bytes). The first dirty header is read pinned now.
    clock = Clock()
    log = _thirty_in_a_closed_segment(tmp_path, flusher, clock)
    log.segments[0].close()  # what a cleaning's replace_segments does to the segment it swaps out
    span = cleanable_range(log, clock.now)
    assert span.first_dirty == 0 and span.end == 30 and span.first_dirty_timestamp == -1
    log.close()


def test_a_log_below_its_dirty_ratio_is_cleaned_once_its_first_dirty_record_passes_max_compaction_lag(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"min.cleanable.dirty.ratio": 0.99,
                                                                     "max.compaction.lag.ms": 1000})
    for i in range(30):
        append(log, [(b"k%d" % (i % 3), b"%d" % i)], clock)
    log.roll()
    log.flush()
    clean(log, clock)  # everything clean: the next appends make a ratio well below 0.99
    append(log, [(b"k0", b"late")], clock)
    log.roll()
    log.flush()
    manager = CleanerManager(lambda: [log], CleanerConfig(dedupe_buffer_size=64 * 1024), clock=clock)
    assert manager.dirty_ratio(log) < 0.99 and manager.clean_once() is None
    clock.now += 1001
    assert manager.clean_once() is not None  # overdue: max.compaction.lag.ms beats min.cleanable.dirty.ratio
    assert {k: v for _, k, v, _ in records(log)}[b"k0"] == b"late"
    manager.close()
    log.close()


def test_a_log_below_its_dirty_ratio_is_cleaned_once_a_tombstones_delete_horizon_passes(tmp_path, flusher):
    """KIP-534 (cleaner.py Rule: clean-for-delete-horizon): each clean reports the earliest delete horizon of the
    tombstones it kept (the one written by the clean that first saw them, not a later one's); once it has passed, the manager
    cleans the log whatever its dirty ratio, and the tombstone goes."""
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)

    def add(key, value):
        append(log, [(key, value)], clock)
        log.roll()
        log.flush()

    manager = CleanerManager(lambda: [log], CleanerConfig(dedupe_buffer_size=64 * 1024), clock=clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock)
    add(b"a", None)
    assert manager.clean_once().earliest_delete_horizon == T0 + RETENTION  # the tombstone's horizon, written
    clock.now += RETENTION // 2
    add(b"c", b"1")
    assert manager.clean_once().earliest_delete_horizon == T0 + RETENTION  # kept, its horizon unchanged
    log.reconfigure(log.config.with_overrides({"min.cleanable.dirty.ratio": 0.99}))
    add(b"d", b"1")
    clock.now = T0 + RETENTION
    assert manager.dirty_ratio(log) < 0.99 and manager.clean_once() is None  # at the horizon, not past it
    clock.now += 1
    result = manager.clean_once()
    assert result is not None and result.tombstones_removed == 1 and result.earliest_delete_horizon == NO_HORIZON
    assert [k for _, k, _, _ in records(log)] == [b"b", b"c", b"d"]
    assert manager.clean_once() is None  # nothing left to wait for
    manager.close()
    log.close()


def test_a_horizon_clean_with_nothing_dirty_recopies_the_clean_section_without_the_expired_tombstone(
        tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"min.cleanable.dirty.ratio": 0.5})
    manager = CleanerManager(lambda: [log], CleanerConfig(dedupe_buffer_size=64 * 1024), clock=clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock)
    append(log, [(b"a", None), (b"b", b"2")], clock, "gzip")
    log.roll()
    log.flush()
    assert manager.clean_once() is not None
    clock.now += RETENTION + 1
    span = cleanable_range(log, clock.now)
    assert span.first_dirty == span.end  # nothing dirty at all
    result = manager.clean_once()
    assert result.tombstones_removed == 1 and result.records_removed == 1
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(3, b"b", b"2")]
    manager.close()
    log.close()


# -- max.compaction.lag.ms rolls the active segment (KIP-354) ---------------------------------------------


def test_an_append_rolls_the_active_segment_once_its_first_record_is_older_than_max_compaction_lag(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"segment.bytes": 10**6,
                                                                     "max.compaction.lag.ms": 1000})
    append(log, [(b"k", b"1")], clock)
    clock.now += 999
    append(log, [(b"k", b"2")], clock)
    assert len(log.segments) == 1  # not at the lag yet
    clock.now += 1
    append(log, [(b"k", b"3")], clock)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.flush()
    clean(log, clock)
    assert [(o, v) for o, _, v, _ in records(log)] == [(1, b"2"), (2, b"3")]  # the rolled segment is cleanable
    log.close()


def test_records_with_old_timestamps_roll_one_segment_per_lag_not_one_per_batch(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"segment.bytes": 10**6,
                                                                     "max.compaction.lag.ms": 1000})
    for i in range(5):
        log.append(build_batch([(b"k", b"%d" % i, None, T0 - 10**6)]))  # a replay of day-old records
    assert len(log.segments) == 1
    log.close()


def test_the_cleaner_rolls_an_idle_partitions_overdue_segment_and_a_live_lag_change_moves_the_deadline(
        tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher, **{"segment.bytes": 10**6})
    for i in range(3):
        append(log, [(b"k", b"%d" % i)], clock)
    log.flush()
    manager = CleanerManager(lambda: [log], CleanerConfig(dedupe_buffer_size=64 * 1024), clock=clock)
    clock.now += 5000
    assert manager.clean_once() is None and len(log.segments) == 1  # no lag set: segment.ms (7 days) rules
    log.reconfigure(log.config.with_overrides({"max.compaction.lag.ms": 4000}))
    assert manager.clean_once() is not None  # rolled without an append, then cleaned
    assert [(o, v) for o, _, v, _ in records(log)] == [(2, b"2")] and log.log_end_offset == 3
    manager.close()
    log.close()


def test_the_cleaner_threads_run_below_the_request_threads_priority():
    """On Linux, where nice is per thread (the project's platform)."""
    manager = CleanerManager(lambda: [], CleanerConfig(dedupe_buffer_size=64 * 1024, backoff_ms=10)).start()
    try:
        thread = manager._threads[0].native_id
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        deadline = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, thread) == base and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, thread) == min(MAX_NICE, base + CLEANER_NICE_INCREMENT)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's is untouched
    finally:
        manager.close()


# -- transactional data (cleaner.py Rule: clean-range and on, storage/transactions.py) ----------------------


def _txn(key, value, pid, sequence, clock):
    return build_batch([(key, value, None, clock.now)], producer_id=pid, producer_epoch=0, base_sequence=sequence,
                       is_transactional=True)


def _read_committed(log) -> dict:
    """key -> value as a read_committed reader of the whole log ends up with (aborted data and markers skipped)."""
    from sparklog.records.aborted import AbortedTransactions

    rule, last = AbortedTransactions(log.aborted_transactions(0, log.last_stable_offset)), {}
    for piece in log.iter_slices():
        for batch in iter_batches(piece.read_bytes()):
            if batch.base_offset < log.last_stable_offset and not rule.skips(batch):
                last.update((r.key, r.value) for r in batch.records())
    return last


def test_an_aborted_value_never_supersedes_a_committed_one_and_markers_stay(tmp_path, flusher):
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)
    append(log, [(b"k", b"v1"), (b"j", b"j1")], clock)
    log.append(_txn(b"k", b"aborted", 7, 0, clock))
    log.append_control_batch(7, 0, False, 1, 0)
    log.append(_txn(b"j", b"j2", 8, 0, clock))
    log.append_control_batch(8, 0, True, 1, 0)
    log.roll()
    log.flush()
    assert _read_committed(log) == {b"k": b"v1", b"j": b"j2"}
    clean(log, clock)
    assert _read_committed(log) == {b"k": b"v1", b"j": b"j2"}
    assert [b.base_offset for p in log.iter_slices() for b in iter_batches(p.read_bytes()) if b.is_control] == [3, 5]
    assert log.aborted_transactions(0, log.log_end_offset) == [(7, 2)]


def test_an_open_transaction_is_not_cleaned(tmp_path, flusher):
    """Rule: clean-range: the range ends at the open transaction's first offset, whatever the HW."""
    clock = Clock()
    log = open_log(str(tmp_path / "t-0"), clock, flusher=flusher)
    append(log, [(b"k", b"v1")], clock)
    log.append(_txn(b"k", b"open", 7, 0, clock))
    log.roll()
    append(log, [(b"x", b"x")], clock)
    log.roll()
    log.flush()
    assert (log.high_watermark, log.last_stable_offset) == (3, 1)
    assert cleanable_range(log, clock()) is None  # no segment lies wholly below the LSO
    clean(log, clock)
    log.append_control_batch(7, 0, False, 1, 0)
    log.roll()
    log.flush()
    clean(log, clock)
    assert _read_committed(log) == {b"k": b"v1", b"x": b"x"}
