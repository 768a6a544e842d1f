"""Transactions in the log (transactions.py, txn_index.py, producer_state.py Rule: producer-transactions): open and completed
transactions, the last stable offset and the aborted-transaction index, checked against a model by
property, through recovery after a crash anywhere, truncation, retention and replication."""

from __future__ import annotations

import os
import random
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.crashfs import CrashFiles, Crashed, ProcessFiles
from sparklog.records.batch import build_batch
from sparklog.storage import PartitionLog
from sparklog.storage.errors import InvalidProducerEpoch
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.txn_index import (ENTRY_SIZE, AbortedTxn, decode_entries, encode_entries,
                                        txn_index_file_name)

NEVER = 10**12
SMALL = {"segment.bytes": "700", "flush.ms": NEVER, "file.delete.delay.ms": "0"}
PIDS = (100, 101, 102)


def data(pid: int, sequence: int, transactional: bool, epoch: int = 0) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([(None, f"{pid}/{sequence}".encode(), None, now)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=sequence, is_transactional=transactional)


class Model:
    """What the log must know: each producer's open transaction and every aborted one (pid, first, last)."""

    def __init__(self):
        self.ongoing: dict[int, int] = {}
        self.aborted: list[tuple[int, int, int]] = []
        self.sequences: dict[int, int] = {}
        self.unreplicated: list[tuple[int, int]] = []  # (first, marker)

    def run(self, log, operations) -> None:
        for op, pid in operations:
            if op in ("txn", "plain"):
                sequence = self.sequences.get(pid, 0)
                offset = log.append_as_leader(data(pid, sequence, op == "txn"), 0)
                self.sequences[pid] = sequence + 1
                if op == "txn":
                    self.ongoing.setdefault(pid, offset)
            elif op in ("commit", "abort"):
                offset = log.append_control_batch(pid, 0, op == "commit", 5, 0)
                first = self.ongoing.pop(pid, None)
                if first is not None:
                    self.unreplicated.append((first, offset))
                    if op == "abort":
                        self.aborted.append((pid, first, offset))
            elif op == "roll":
                log.roll()
            else:
                log.flush()

    def lso(self, hw: int) -> int:
        self.unreplicated = [(f, m) for f, m in self.unreplicated if m >= hw]
        return min([hw, *self.ongoing.values(), *(f for f, _ in self.unreplicated)])


OPERATIONS = st.lists(st.tuples(st.sampled_from(["txn"] * 4 + ["plain", "commit", "abort", "abort", "roll",
                                                 "flush"]), st.sampled_from(PIDS)), min_size=1, max_size=40)


def open_log(path, flusher, files=None, **config):
    return PartitionLog.open(str(path), {**SMALL, **config}, flusher=flusher, files=files)


def aborted(log) -> list[tuple[int, int, int]]:
    return [(e.producer_id, e.first_offset, e.last_offset) for e in log.transactions.index.entries()]


def assert_index_follows_segments(log) -> None:
    """txn_index.py Rule: index-file-of-marker: each entry in the file of the segment holding its marker, and the files say so."""
    bases = [s.base_offset for s in log.segments]
    for base, entries in log.transactions.index.entries_by_base().items():
        assert base in bases
        following = [b for b in bases if b > base]
        assert all(e.last_offset >= base and (not following or e.last_offset < following[0]) for e in entries)
        with open(os.path.join(log.directory, txn_index_file_name(base)), "rb") as f:
            assert decode_entries(f.read()) == (entries, None)
    on_disk = {n for n in os.listdir(log.directory) if n.endswith(".txnindex")}
    assert on_disk == {txn_index_file_name(b) for b in log.transactions.index.entries_by_base()}


def replicate(leader, follower) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_replicated(leader.read_replica(follower.log_end_offset, 10_000).read_bytes())


def assert_same_as_a_replica(log, root, flusher) -> None:
    """`log`'s transactions equal those a fresh replica of its batches builds; closes both."""
    replica = open_log(root / "replica-0", flusher)
    try:
        replicate(log, replica)
        assert log.producer_state.producers == replica.producer_state.producers
        assert log.producer_state.ongoing == replica.producer_state.ongoing
        assert log.transactions.index.entries() == replica.transactions.index.entries()
        assert_index_follows_segments(log)
    finally:
        log.close()
        replica.close()


# -- the index file format ------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**40), st.integers(0, 2**20),
                          st.integers(0, 2**62)), max_size=8))
def test_index_entries_round_trip_at_34_bytes_each_and_a_torn_tail_is_ignored(raw):
    entries, last = [], -1
    for pid, first, gap, stable in raw:
        entries.append(AbortedTxn(pid, max(first, last + 1), max(first, last + 1) + gap, stable))
        last = entries[-1].last_offset
    encoded = encode_entries(entries)
    assert len(encoded) == ENTRY_SIZE * len(entries) == 34 * len(entries)
    assert decode_entries(encoded) == (entries, None)
    for cut in range(1, ENTRY_SIZE):
        if entries:
            assert decode_entries(encoded[:-cut]) == (entries[:-1], None)


def test_the_entry_format_is_kafkas_aborted_txn():
    assert encode_entries([AbortedTxn(7, 10, 20, 21)]) == struct.pack(">hqqqq", 0, 7, 10, 20, 21)


def test_a_bad_version_or_disordered_entry_stops_the_file_with_its_reason():
    good = AbortedTxn(7, 10, 20, 21)
    assert decode_entries(encode_entries([good]) + struct.pack(">hqqqq", 1, 8, 30, 40, 41)) == (
        [good], "entry 1 has version 1")
    assert decode_entries(encode_entries([good, AbortedTxn(8, 5, 15, 16)])) == (
        [good], "entry 1 has offsets out of order")


# -- the model ------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_open_transactions_the_index_and_the_lso_are_the_models(tmp_path_factory, flusher, operations):
    log = open_log(tmp_path_factory.mktemp("m") / "t-0", flusher)
    model = Model()
    model.run(log, operations)
    assert log.producer_state.ongoing == model.ongoing
    assert aborted(log) == model.aborted
    assert log.last_stable_offset == model.lso(log.high_watermark)
    log.flush()
    assert log.last_stable_offset == model.lso(log.high_watermark) == min([log.log_end_offset,
                                                                         *model.ongoing.values()])
    assert_index_follows_segments(log)
    for start in range(0, log.log_end_offset + 1, 3):
        expected = [(p, f) for p, f, m in model.aborted if m >= start and f < start + 5]
        assert log.aborted_transactions(start, start + 5) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, cut=st.integers(0, 60))
def test_the_committed_read_limit_is_the_lso_and_index_answer(tmp_path_factory, flusher, operations, cut):
    """committed_read_limit (the Fetch fast path's read_committed question) answers as the LSO and the aborted
    index do, whether the log has transaction state or none (its settled shortcut), for every fetch offset
    and a high watermark read before the HW moved on or before a truncation moved it back."""
    log = open_log(tmp_path_factory.mktemp("r") / "t-0", flusher)
    log.use_replicated_high_watermark()
    Model().run(log, operations)
    log.set_high_watermark(min(cut, log.log_end_offset))
    hw = log.high_watermark
    for read in {max(0, hw - 1), hw, hw + 1}:
        for start in range(0, log.log_end_offset + 1):
            slow = None if log.last_stable_offset < read or log.aborted_transactions(start, read) else read
            assert log.committed_read_limit(start, read) == slow, (start, read)
    assert log.transactions.settled() == (log.producer_state.ongoing == {} and aborted(log) == []
                                          and log.transactions.first_unstable_offset() is None)


def test_the_lso_waits_for_the_high_watermark_to_pass_the_marker(tmp_path, flusher):
    log = open_log(tmp_path / "t-0", flusher)
    log.use_replicated_high_watermark()
    log.append_as_leader(data(100, 0, False), 0)
    log.append_as_leader(data(101, 0, True), 0)  # offset 1
    log.append_as_leader(data(100, 1, False), 0)
    log.set_high_watermark(3)
    assert log.last_stable_offset == 1
    marker = log.append_control_batch(101, 0, True, 1, 0)
    assert marker == 3 and log.producer_state.ongoing == {}
    assert log.last_stable_offset == 1  # the marker is not replicated yet
    log.set_high_watermark(4)
    assert log.last_stable_offset == 4


def test_a_marker_of_a_fenced_epoch_is_refused_and_nothing_is_written(tmp_path, flusher):
    log = open_log(tmp_path / "t-0", flusher)
    log.append_as_leader(data(100, 0, True, epoch=3), 0)
    with pytest.raises(InvalidProducerEpoch, match="marker epoch 2 is below the producer's epoch 3"):
        log.append_control_batch(100, 2, False, 1, 0)
    assert log.log_end_offset == 1 and log.producer_state.ongoing == {100: 0}


def test_a_marker_for_a_producer_with_no_open_transaction_changes_nothing(tmp_path, flusher):
    log = open_log(tmp_path / "t-0", flusher)
    assert log.append_control_batch(100, 0, False, 1, 0) == 0
    log.flush()
    assert aborted(log) == [] and log.last_stable_offset == 1


# -- recovery, truncation, retention, replication --------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, damage=st.sampled_from(["close", "no-close", "no-snapshots", "no-index",
                                                      "corrupt-index"]))
def test_recovery_rebuilds_the_incremental_state(tmp_path_factory, flusher, operations, damage):
    root = tmp_path_factory.mktemp("r")
    files = ProcessFiles()
    log = open_log(root / "t-0", flusher, files)
    Model().run(log, operations)
    before = (dict(log.producer_state.producers), dict(log.producer_state.ongoing), aborted(log))
    log.flush()
    if damage == "close":
        log.close()
    else:  # a SIGKILL after the flush: no snapshot of the tail
        log._flusher.unregister(log)
        files.exit()
    directory = str(root / "t-0")
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(".snapshot") and damage == "no-snapshots" or name.endswith(".txnindex") and (
                damage == "no-index"):
            os.unlink(path)
        elif name.endswith(".txnindex") and damage == "corrupt-index":
            with open(path, "r+b") as f:
                f.write(b"\x00\x09")  # entry 0's version
    reopened = open_log(root / "t-0", flusher)
    if damage == "no-index":  # entries of markers below the snapshot are trusted to the files (as Kafka's)
        assert (reopened.producer_state.producers, reopened.producer_state.ongoing) == before[:2]
        reopened.close()
        return
    assert (reopened.producer_state.producers, reopened.producer_state.ongoing, aborted(reopened)) == before
    assert_same_as_a_replica(reopened, root, flusher)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, method=st.sampled_from(["pwrite", "fsync", "rename", "fsync_dir", "truncate"]),
       skip=st.integers(0, 40), mode=st.sampled_from(["drop", "tear"]))
def test_after_power_loss_anywhere_the_index_is_that_of_the_surviving_log(tmp_path_factory, flusher, operations,
                                                                         method, skip, mode):
    """Power lost at any write, fsync, rename or truncate (index and snapshot files included): the reopened
    transactions and index equal what a replica of the surviving batches builds."""
    root = tmp_path_factory.mktemp("c")
    files = CrashFiles()
    log = open_log(root / "t-0", flusher, files)
    files.arm(method, skip=skip, mode=mode)
    try:
        Model().run(log, operations)
        log.close()
        files.crash(mode, random.Random(skip))
    except Crashed:
        flusher.unregister(log)
    assert_same_as_a_replica(open_log(root / "t-0", flusher), root, flusher)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, cut=st.integers(0, 60))
def test_truncation_removes_markers_and_reopens_their_transactions(tmp_path_factory, flusher, operations, cut):
    root = tmp_path_factory.mktemp("t")
    log = open_log(root / "t-0", flusher)
    Model().run(log, operations)
    log.truncate_to(cut)
    assert all(e.last_offset < log.log_end_offset for e in log.transactions.index.entries())
    assert all(first < log.log_end_offset for first in log.producer_state.ongoing.values())
    assert_same_as_a_replica(log, root, flusher)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_a_follower_carries_the_leaders_transactions(tmp_path_factory, flusher, operations):
    root = tmp_path_factory.mktemp("f")
    leader = open_log(root / "t-0", flusher)
    Model().run(leader, operations)
    assert_same_as_a_replica(leader, root, flusher)


def test_retention_deletes_the_index_with_its_segment(tmp_path, flusher):
    log = open_log(tmp_path / "t-0", flusher, **{"retention.bytes": "1"})
    log.append_as_leader(data(100, 0, True), 0)
    log.append_control_batch(100, 0, False, 1, 0)
    log.roll()
    log.append_as_leader(data(101, 0, True), 0)
    log.append_control_batch(101, 0, False, 1, 0)
    log.flush()
    assert aborted(log) == [(100, 0, 1), (101, 2, 3)]
    assert log.enforce_retention() == 1
    assert aborted(log) == [(101, 2, 3)] and log.log_start_offset == 2
    assert_index_follows_segments(log)


def test_a_version_1_snapshot_still_loads_with_no_transaction_open(tmp_path):
    v1 = ProducerStateManager.decode  # the reader; a v1 file is built by hand
    body = struct.pack(">i", 1) + struct.pack(">qhqb", 7, 2, 1000, 1) + struct.pack(">iiqq", 0, 4, 10, 14)
    from crc32c import crc32c
    entry = v1(struct.pack(">hI", 1, crc32c(body)) + body)[7]
    assert (entry.epoch, list(entry.batches), entry.txn_first_offset) == (2, [(0, 4, 10, 14)], -1)


def test_a_producer_with_an_open_transaction_does_not_expire(tmp_path, flusher):
    log = open_log(tmp_path / "t-0", flusher)
    log.append_as_leader(data(100, 0, True), 0)
    log.append_as_leader(data(101, 0, False), 0)
    assert log.producer_state.expire(time.time_ns() // 1_000_000 + 10**10) == 1
    assert list(log.producer_state.producers) == [100]


def test_the_lso_is_never_below_the_log_start(tmp_path, flusher):
    """Rule: last-stable-offset: DeleteRecords (or retention) past an open transaction's first batch: the LSO is the log start,
    so read_committed readers are not left below the log."""
    log = open_log(tmp_path / "t-0", flusher)
    log.append_as_leader(data(100, 0, True), 0)  # 0, opens 100's transaction
    log.append_as_leader(data(101, 0, False), 0)
    log.append_as_leader(data(100, 1, True), 0)  # 2, in the same transaction
    log.flush()
    assert log.last_stable_offset == 0
    log.delete_records_before(1)
    assert log.last_stable_offset == 1 and log.producer_state.ongoing == {100: 0}
    log.delete_records_before(3)  # every batch of 100 gone: its state and its transaction go (Rule: producer-trimming)
    assert log.last_stable_offset == 3 and log.producer_state.ongoing == {}
