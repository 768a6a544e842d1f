"""The idempotent producer's checks in PartitionLog (append.py Rule: producer-state-in-append) and the producer state's
snapshots and recovery (producer_state.py), against a model of what Kafka's broker answers."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.crashfs import CrashFiles, Crashed, ProcessFiles
from sparklog.records.batch import build_batch, iter_records
from sparklog.storage import PartitionLog
from sparklog.storage.errors import DuplicateSequence, InvalidProducerEpoch, OutOfOrderSequence
from sparklog.storage.producer_state import (INT32_MAX, BatchMetadata, CorruptSnapshot, ProducerStateManager, last_sequence,
                                             snapshot_file_name)

NEVER = 10**12
SMALL = {"segment.bytes": "600", "flush.ms": NEVER, "file.delete.delay.ms": "0"}


def batch(pid: int, epoch: int, sequence: int, count: int = 2, tag: str = "") -> bytes:
    now = time.time_ns() // 1_000_000  # expiry (producer.id.expiration.ms) counts from the batch's timestamp
    records = [(None, f"{pid}/{epoch}/{sequence + i}{tag}".encode(), None, now) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def open_log(tmp_path, flusher, name="t-0", **config):
    return PartitionLog.open(str(tmp_path / name), {**SMALL, **config}, flusher=flusher)


def values(log) -> list[bytes]:
    log.flush()
    return [r.value for piece in log.iter_slices() for r in iter_records(piece.read_bytes())]


# -- the check (Rule: producer-check) ---------------------------------------------------------------------------------


def test_a_retried_batch_gets_its_original_offset_and_is_not_appended(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    assert log.append(batch(7, 0, 0)) == 0
    assert log.append(batch(7, 0, 2)) == 2
    assert log.append(batch(7, 0, 4)) == 4
    assert log.append(batch(7, 0, 2)) == 2  # the retry of the second batch
    assert log.append(batch(7, 0, 0)) == 0
    assert log.log_end_offset == 6
    assert values(log) == [b"7/0/0", b"7/0/1", b"7/0/2", b"7/0/3", b"7/0/4", b"7/0/5"]


def test_only_the_last_five_batches_are_recognised_as_duplicates(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    for sequence in range(0, 12, 2):
        log.append(batch(7, 0, sequence))
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(7, 0, 0))  # the sixth batch back: forgotten, and not the next sequence either
    assert log.append(batch(7, 0, 2)) == 2


def test_a_gap_is_out_of_order_and_nothing_is_written(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(batch(7, 0, 0))
    with pytest.raises(OutOfOrderSequence, match="expected 2"):
        log.append(batch(7, 0, 3))
    assert log.log_end_offset == 2


def test_a_stale_epoch_is_refused_and_a_new_epoch_restarts_at_zero(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(batch(7, 1, 0))
    with pytest.raises(InvalidProducerEpoch):
        log.append(batch(7, 0, 2))
    with pytest.raises(OutOfOrderSequence, match="new epoch"):
        log.append(batch(7, 2, 5))
    assert log.append(batch(7, 2, 0)) == 2
    assert log.log_end_offset == 4


def test_an_unknown_producer_is_accepted_at_any_sequence_as_kafka_2_5_does(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    assert log.append(batch(9, 3, 1000)) == 0
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(9, 3, 999))


def test_producers_are_independent_and_non_idempotent_batches_are_unchecked(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    plain = build_batch([(None, b"plain", None, None)])
    log.append(batch(1, 0, 0))
    log.append(batch(2, 0, 0))
    log.append(plain)
    log.append(plain)
    assert log.append(batch(1, 0, 0)) == 0
    assert log.append(batch(2, 0, 0)) == 2
    assert log.log_end_offset == 6


def test_sequences_wrap_past_int32_max():
    assert last_sequence(INT32_MAX - 1, 3) == 1
    assert last_sequence(INT32_MAX, 0) == INT32_MAX


def test_the_sequence_wraps_to_zero(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(batch(7, 0, INT32_MAX - 1, count=2))
    assert log.append(batch(7, 0, 0)) == 2
    assert log.append(batch(7, 0, INT32_MAX - 1, count=2)) == 0


def test_a_record_set_of_several_batches_is_checked_batch_by_batch(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(batch(7, 0, 0) + batch(7, 0, 2))
    assert log.append(batch(7, 0, 4)) == 4
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(7, 0, 6) + batch(7, 0, 9))
    with pytest.raises(DuplicateSequence):
        log.append(batch(7, 0, 4) + batch(7, 0, 6))
    assert log.log_end_offset == 6


# -- the state machine against a model ----------------------------------------------------------------

# Operations of one producer: send the next batch, resend one of the last five, skip a sequence (a gap),
# move to a newer epoch, or send with an older one.
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("next"), st.integers(1, 4)),
    st.tuples(st.just("retry"), st.integers(0, 6)),
    st.tuples(st.just("gap"), st.integers(1, 3)),
    st.tuples(st.just("bump"), st.just(0)),
    st.tuples(st.just("stale"), st.just(0)),
), max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_the_log_answers_as_the_model_says(tmp_path_factory, flusher, operations):
    log = PartitionLog.open(str(tmp_path_factory.mktemp("p") / "t-0"), SMALL, flusher=flusher)
    epoch, sequence, sent, expected = 1, 0, [], []  # sent: (epoch, base sequence, count, base offset)
    seen = None  # the epoch of the last batch the log took: the one it checks against
    try:
        for op, arg in operations:
            if op == "next":
                base = log.append(batch(5, epoch, sequence, arg))
                assert base == log.log_end_offset - arg
                sent.append((epoch, sequence, arg, base))
                expected += [f"5/{epoch}/{sequence + i}".encode() for i in range(arg)]
                sequence, seen = sequence + arg, epoch
            elif op == "retry" and sent:
                e, s, count, base = sent[-1 - min(arg, len(sent) - 1)]
                if (e, s, count, base) in [item for item in sent if item[0] == seen][-5:]:
                    assert log.append(batch(5, e, s, count, tag="dup")) == base
                elif e < seen:
                    with pytest.raises(InvalidProducerEpoch):
                        log.append(batch(5, e, s, count))
                else:
                    with pytest.raises(OutOfOrderSequence):
                        log.append(batch(5, e, s, count))
            elif op == "gap" and sent:
                with pytest.raises(OutOfOrderSequence):
                    log.append(batch(5, epoch, sequence + arg))
            elif op == "bump":
                epoch, sequence = epoch + 1, 0
            elif op == "stale" and sent and epoch - 1 < seen:
                with pytest.raises(InvalidProducerEpoch):
                    log.append(batch(5, epoch - 1, sequence))
        assert values(log) == expected
    finally:
        log.close()


# -- snapshots and recovery (Rule: producer-snapshots, Rule: producer-recovery and Rule: producer-trimming)
# ---------------------------------------------------------------

APPENDS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=30)  # (producer, count)


def replicate(leader, follower) -> None:
    """Copy the leader's batches to the follower as a follower's fetches do (append_replicated)."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_replicated(leader.read_replica(follower.log_end_offset, 10_000).read_bytes())


def assert_state_is_the_replicas(log, root, flusher) -> None:
    """`log`'s producer state equals the one a fresh replica of its batches builds; closes both."""
    replica = PartitionLog.open(str(root / "replica-0"), SMALL, flusher=flusher)
    try:
        replicate(log, replica)
        assert log.producer_state.producers == replica.producer_state.producers
    finally:
        log.close()
        replica.close()


def fill(log, appends) -> None:
    sequences: dict[int, int] = {}
    for producer, count in appends:
        sequence = sequences.get(producer, 0)
        log.append(batch(100 + producer, 0, sequence, count))
        sequences[producer] = sequence + count


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=APPENDS, damage=st.sampled_from(["close", "no-close", "corrupt-newest", "no-snapshots"]))
def test_recovered_state_equals_the_incremental_state(tmp_path_factory, flusher, appends, damage):
    directory = str(tmp_path_factory.mktemp("r") / "t-0")
    files = ProcessFiles()
    log = PartitionLog.open(directory, SMALL, flusher=flusher, files=files)
    fill(log, appends)
    incremental = {pid: entry for pid, entry in log.producer_state.producers.items()}
    log.flush()
    if damage == "no-close":  # a crash after the flush: no snapshot of the tail
        log._flusher.unregister(log)
        files.exit()
    else:
        log.close()
    snapshots = sorted(name for name in os.listdir(directory) if name.endswith(".snapshot"))
    if damage == "corrupt-newest" and snapshots:
        with open(os.path.join(directory, snapshots[-1]), "r+b") as f:
            f.seek(8)
            f.write(b"\xff")
    if damage == "no-snapshots":
        for name in snapshots:
            os.unlink(os.path.join(directory, name))
    reopened = PartitionLog.open(directory, SMALL, flusher=flusher)
    try:
        assert reopened.producer_state.producers == incremental
    finally:
        reopened.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=APPENDS)
def test_a_follower_carries_the_leaders_state(tmp_path_factory, flusher, appends):
    root = tmp_path_factory.mktemp("f")
    leader = PartitionLog.open(str(root / "a-0"), SMALL, flusher=flusher)
    follower = PartitionLog.open(str(root / "b-0"), SMALL, flusher=flusher)
    try:
        fill(leader, appends)
        replicate(leader, follower)
        assert follower.producer_state.producers == leader.producer_state.producers
    finally:
        leader.close()
        follower.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=APPENDS, cut=st.integers(0, 100))
def test_truncation_rebuilds_the_state_of_the_remaining_prefix(tmp_path_factory, flusher, appends, cut):
    root = tmp_path_factory.mktemp("t")
    log = PartitionLog.open(str(root / "a-0"), SMALL, flusher=flusher)
    fill(log, appends)
    log.truncate_to(cut)
    assert_state_is_the_replicas(log, root, flusher)


def test_snapshots_are_written_at_roll_and_close_and_removed_past_the_log_end(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    for sequence in range(0, 80, 4):
        log.append(batch(7, 0, sequence, count=4))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    names = set(os.listdir(log.directory))
    assert {snapshot_file_name(base) for base in bases[1:]} <= names
    log.truncate_to(bases[1])
    assert not any(name.endswith(".snapshot") and int(name[:20]) > bases[1] for name in os.listdir(log.directory))
    log.close()
    assert snapshot_file_name(log.log_end_offset) in os.listdir(log.directory)


def test_retention_drops_producers_whose_batches_are_all_deleted(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"flush.visibility": "appended"})
    log.append(batch(1, 0, 0, count=4))
    for sequence in range(0, 40, 4):
        log.append(batch(2, 0, sequence, count=4))
    log.flush()
    log.delete_records_before(log.segments[2].base_offset)
    assert set(log.producer_state.producers) == {2}
    assert min(int(n[:20]) for n in os.listdir(log.directory) if n.endswith(".snapshot")) >= log.segments[0].base_offset
    assert log.append(batch(1, 0, 77)) > 0  # forgotten: accepted at any sequence (Kafka >= 2.5)
    log.close()


def test_expired_producers_are_dropped(tmp_path):
    state = ProducerStateManager(str(tmp_path), files=None, expiration_ms=1000)
    state.update(1, 0, 0, 0, 0, max_timestamp=5_000)
    state.update(2, 0, 0, 0, 1, max_timestamp=9_500)
    assert state.expire(10_000) == 1
    assert set(state.producers) == {2}


def test_snapshot_bytes_decode_whole_and_refuse_damage():
    state = ProducerStateManager("unused", files=None)
    for pid in range(3):
        for sequence in range(0, 14, 2):
            state.update(pid, 1, sequence, 1, 100 * pid + sequence, 1234)
    data = state.encode()
    assert ProducerStateManager.decode(data) == state.producers
    for cut in range(len(data)):  # every truncation
        with pytest.raises(CorruptSnapshot):
            ProducerStateManager.decode(data[:cut])
    with pytest.raises(CorruptSnapshot):
        ProducerStateManager.decode(data + b"\0")
    for position in range(0, len(data), 7):  # flipped bytes
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptSnapshot):
            ProducerStateManager.decode(bytes(damaged))


def test_replay_over_bit_rot_in_an_unverified_segment_stops_instead_of_looping(tmp_path, flusher):
    dense = {"index.interval.bytes": "50"}  # an index entry per batch: opening trusts it, replays no closed segment
    log = open_log(tmp_path, flusher, **dense)
    for sequence in range(0, 40, 4):
        log.append(batch(7, 0, sequence, count=4))
    first = log.segments[0]
    path, second_batch = first.path, first.read_header(0).size
    log.close()
    for name in os.listdir(log.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.directory, name))
    with open(path, "r+b") as f:  # the second batch's length now says 0 bytes: a walk trusting it never moves
        f.seek(second_batch + 8)
        f.write((-12).to_bytes(4, "big", signed=True))
    opened = []
    thread = threading.Thread(target=lambda: opened.append(open_log(tmp_path, flusher, **dense)), daemon=True)
    thread.start()
    thread.join(10)
    assert opened, "opening the log did not return"
    entry = opened[0].producer_state.producers[7]
    assert BatchMetadata(*entry.batches[-1]).last_sequence == 39  # the later segments were replayed
    opened[0].close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=APPENDS, method=st.sampled_from(["pwrite", "fsync", "rename", "fsync_dir"]),
       skip=st.integers(0, 30), mode=st.sampled_from(["drop", "tear"]))
def test_after_power_loss_anywhere_the_state_is_that_of_the_surviving_log(tmp_path_factory, flusher, appends,
                                                                         method, skip, mode):
    """Power lost at any write, fsync or rename (snapshot files included): the reopened state equals the state
    a replica builds from the batches that survived (snapshots never describe batches the log lost)."""
    root = tmp_path_factory.mktemp("c")
    files = CrashFiles()
    log = PartitionLog.open(str(root / "a-0"), SMALL, flusher=flusher, files=files)
    files.arm(method, skip=skip, mode=mode)
    try:
        fill(log, appends)
        log.close()
        files.crash(mode, random.Random(skip))
    except Crashed:
        flusher.unregister(log)
    assert_state_is_the_replicas(PartitionLog.open(str(root / "a-0"), SMALL, flusher=flusher), root, flusher)
