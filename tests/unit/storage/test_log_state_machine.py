"""A stateful test of PartitionLog against a list of batches: append, read, roll, flush, retention, reopen, crash."""

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from support.crashfs import CrashFiles
from support.storage_batches import make_batch
from sparklog.storage import Flusher, OffsetOutOfRange, PartitionLog
from sparklog.records.batch import iter_batches

SETTINGS = {"segment.bytes": 500, "index.interval.bytes": 100, "flush.ms": 10**12,
            "file.delete.delay.ms": 0, "retention.ms": 1000}


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.directory = os.path.join(self.tmp, "model-0")
        self.flusher = Flusher()
        self.files = CrashFiles()
        self.log = PartitionLog.open(self.directory, SETTINGS, flusher=self.flusher, files=self.files)
        self.batches = []  # (base offset, next offset, bytes as stored)
        self.flushed = 0  # number of model batches that are fsynced
        self.tag = 0

    def teardown(self):
        self.log.close() if not self.files.crashed else None
        self.flusher.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(count=st.integers(1, 4), size=st.sampled_from([10, 60, 150]), batches=st.integers(1, 3))
    def append(self, count, size, batches):
        payload = [make_batch(count, size, timestamp=1000 * self.tag, tag=self.tag + i) for i in range(batches)]
        self.tag += batches
        base = self.log.append(b"".join(payload))
        assert base == (self.batches[-1][1] if self.batches else self.log.log_start_offset)
        for data in payload:
            self.batches.append((base, base + count, data))
            base += count

    @rule()
    def flush(self):
        self.log.flush()
        self.flushed = len(self.batches)

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def retention(self):
        self.log.enforce_retention(now_ms=1000 * self.tag + 5000)  # every flushed non-active segment expires
        start = self.log.log_start_offset
        dropped = sum(1 for b in self.batches if b[1] <= start)
        assert all(b[0] >= start for b in self.batches[dropped:])
        self.batches = self.batches[dropped:]
        self.flushed -= dropped
        assert self.flushed >= 0

    @rule()
    def reopen(self):
        self.log.close()
        self.reopen_log()
        self.flushed = len(self.batches)

    @rule(mode=st.sampled_from(["drop", "tear"]))
    def crash_reopen(self, mode):
        self.files.crash(mode)
        self.files = CrashFiles()
        self.reopen_log()
        # "drop" keeps exactly the fsynced batches; "tear" may keep some unsynced whole batches too
        kept = sum(1 for b in self.batches if b[1] <= self.log.log_end_offset)
        assert kept >= self.flushed and (mode == "tear" or kept == self.flushed)
        self.batches = self.batches[:kept]
        self.flushed = kept

    def reopen_log(self):
        self.log = PartitionLog.open(self.directory, SETTINGS, flusher=self.flusher, files=self.files)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def read(self, data):
        index = data.draw(st.integers(0, len(self.batches) - 1))
        base, next_offset, raw = self.batches[index]
        offset = data.draw(st.integers(base, next_offset - 1))
        piece = self.log.read(offset, data.draw(st.integers(1, 2000)))
        if index >= self.flushed:
            assert piece.length == 0
            return
        got = list(iter_batches(piece.read_bytes()))
        assert got and got[0].base_offset == base
        for batch in got:
            model = self.batches[index]
            assert (batch.base_offset, batch.next_offset) == model[:2]
            assert bytes(batch.raw)[12:] == model[2][12:]  # identical but for the assigned baseOffset
            index += 1

    @rule()
    def read_out_of_range(self):
        try:
            self.log.read(self.log.log_end_offset + 1, 100)
            raise AssertionError("read past the LEO did not raise")
        except OffsetOutOfRange:
            pass

    @invariant()
    def offsets_agree(self):
        leo = self.batches[-1][1] if self.batches else self.log.log_start_offset
        assert self.log.log_end_offset == leo
        hw = self.batches[self.flushed - 1][1] if self.flushed else self.log.log_start_offset
        assert self.log.high_watermark == hw
        assert self.log.log_start_offset <= self.log.high_watermark <= self.log.log_end_offset


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
