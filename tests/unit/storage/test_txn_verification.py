"""KIP-890 part 1's verification cache (txn_verification.py) on a real PartitionLog, by a hypothesis state
machine against a model: verifications started, answered (confirmed or refused, possibly after a marker or a
newer verification replaced them), transactional appends, markers, epoch bumps and reopens. A transactional
batch is appended exactly when the model says the partition is verified for its producer and epoch (Rule:
verify-before-first-append), a confirmation that a marker overtook is refused (Rule:
guard-outlives-no-marker), and the cache lasts until the marker (Rule: cached-until-marker)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.records.batch import build_batch
from sparklog.storage import Flusher, PartitionLog
from sparklog.storage.errors import TransactionRefusedError

SETTINGS = {"segment.bytes": 2000, "flush.ms": 10**12, "file.delete.delay.ms": 0}
PIDS = (100, 101)


def txn_batch(pid: int, epoch: int, sequence: int) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([(None, f"{pid}/{epoch}/{sequence}".encode(), None, now)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


class VerificationModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.directory = os.path.join(self.tmp, "verified-0")
        self.flusher = Flusher()
        self.log = self._open()
        self.epoch = dict.fromkeys(PIDS, 0)  # the producer's current epoch (what it sends)
        self.log_epoch: dict[int, int] = {}  # the epoch of its last appended batch
        self.sequence: dict[int, int] = {}
        self.ongoing: set[int] = set()  # an open transaction at this partition
        self.entry: dict[int, tuple[int, object, bool]] = {}  # the cache: (epoch, guard, verified)
        self.guards: dict[int, list[object]] = {pid: [] for pid in PIDS}  # every guard started, stale ones too

    def _open(self):
        log = PartitionLog.open(self.directory, SETTINGS, flusher=self.flusher)
        log.verify_transactions(True)
        return log

    def teardown(self):
        self.log.close()
        self.flusher.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _verified(self, pid: int, epoch: int) -> bool:
        if pid in self.ongoing and self.log_epoch.get(pid) == epoch:
            return True
        entry = self.entry.get(pid)
        return entry is not None and entry[2] and entry[0] == epoch

    @rule(pid=st.sampled_from(PIDS), stale=st.booleans())
    def start(self, pid, stale):
        epoch = max(0, self.epoch[pid] - 1) if stale else self.epoch[pid]
        guard = self.log.start_transaction_verification(pid, epoch)
        self.entry[pid] = (epoch, guard, False)
        self.guards[pid].append(guard)

    @rule(pid=st.sampled_from(PIDS), confirmed=st.booleans())
    def verify(self, pid, confirmed):
        """A verification answered before anything else happens (the common case)."""
        self.start(pid, False)
        self.answer(pid, 0, confirmed)

    @rule(pid=st.sampled_from(PIDS), which=st.integers(0, 3), confirmed=st.booleans())
    def answer(self, pid, which, confirmed):
        if not self.guards[pid]:
            return
        guard = self.guards[pid][-1 - min(which, len(self.guards[pid]) - 1)]
        entry = self.entry.get(pid)
        current = entry is not None and entry[1] is guard
        assert self.log.complete_transaction_verification(pid, guard, confirmed) == (confirmed and current)
        if current:
            if confirmed:
                self.entry[pid] = (entry[0], guard, True)
            else:
                del self.entry[pid]

    @rule(pid=st.sampled_from(PIDS))
    def append(self, pid):
        epoch = self.epoch[pid]
        sequence = self.sequence.get(pid, 0) if self.log_epoch.get(pid) == epoch else 0
        before = self.log.log_end_offset
        if not self._verified(pid, epoch):
            with pytest.raises(TransactionRefusedError):
                self.log.append_as_leader(txn_batch(pid, epoch, sequence), 0)
            assert self.log.log_end_offset == before  # nothing appended
            return
        self.log.append_as_leader(txn_batch(pid, epoch, sequence), 0)
        self.log_epoch[pid], self.sequence[pid] = epoch, sequence + 1
        self.ongoing.add(pid)

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid, commit):
        self.log.append_control_batch(pid, self.epoch[pid], commit, 0, 0)
        self.ongoing.discard(pid)
        self.entry.pop(pid, None)

    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid):
        self.epoch[pid] += 1

    @precondition(lambda self: self.entry)
    @rule()
    def reopen(self):
        self.log.close()
        self.log = self._open()
        self.entry.clear()  # memory only: verified again after a reopen

    @invariant()
    def needs_verification_matches(self):
        for pid in PIDS:
            for epoch in {self.epoch[pid], max(0, self.epoch[pid] - 1)}:
                assert self.log.transaction_needs_verification(pid, epoch) == (not self._verified(pid, epoch))


TestVerificationModel = VerificationModel.TestCase
TestVerificationModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_confirmation_overtaken_by_the_marker_is_refused(tmp_path):
    """The zombie race: the coordinator said yes, but the abort marker was written before the answer came."""
    flusher = Flusher()
    log = PartitionLog.open(str(tmp_path / "race-0"), SETTINGS, flusher=flusher)
    try:
        log.verify_transactions(True)
        guard = log.start_transaction_verification(7, 0)
        log.append_control_batch(7, 0, False, 0, 0)  # the coordinator aborted meanwhile
        assert not log.complete_transaction_verification(7, guard, True)
        with pytest.raises(TransactionRefusedError):
            log.append_as_leader(txn_batch(7, 0, 0), 0)
        assert log.transactions.first_unstable_offset() is None  # no transaction left open
    finally:
        log.close()
        flusher.close()


def test_the_verification_lasts_until_the_marker(tmp_path):
    """Rule: cached-until-marker: verified once, every batch of the transaction is taken; the marker ends it
    (the producer's next transaction is verified again), and a reopened log verifies again."""
    flusher = Flusher()
    log = PartitionLog.open(str(tmp_path / "cached-0"), SETTINGS, flusher=flusher)
    try:
        log.verify_transactions(True)
        assert log.complete_transaction_verification(7, log.start_transaction_verification(7, 0), True)
        for sequence in range(3):
            log.append_as_leader(txn_batch(7, 0, sequence), 0)
        assert not log.transaction_needs_verification(7, 0)
        log.append_control_batch(7, 0, True, 0, 0)
        assert log.transaction_needs_verification(7, 0)
        with pytest.raises(TransactionRefusedError):
            log.append_as_leader(txn_batch(7, 0, 3), 0)
        assert log.complete_transaction_verification(7, log.start_transaction_verification(7, 0), True)
        log.close()
        log = PartitionLog.open(str(tmp_path / "cached-0"), SETTINGS, flusher=flusher)
        log.verify_transactions(True)
        assert log.transaction_needs_verification(7, 0)  # memory only
    finally:
        log.close()
        flusher.close()


def test_without_the_verifier_every_transactional_batch_is_taken(tmp_path):
    flusher = Flusher()
    log = PartitionLog.open(str(tmp_path / "off-0"), SETTINGS, flusher=flusher)
    try:
        assert not log.transaction_needs_verification(7, 0)
        log.append_as_leader(txn_batch(7, 0, 0), 0)
        assert log.log_end_offset == 1
    finally:
        log.close()
        flusher.close()
