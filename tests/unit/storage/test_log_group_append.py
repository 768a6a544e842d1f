"""A single append is a group of one (append.py: every entry point reads its sets and hands them to the one
write sequence, `_commit`): client record sets appended alone (append_as_leader) and the same sets appended
in groups (append_group_as_leader, groups of one included) give the same outcomes and leave the same files
byte for byte, across rolls, index entries, duplicates, refused sets and producer errors; and what each left
agrees with the log itself: every base offset answered is the offset the batch is stored at, each with the
leader's epoch, and the producer state the appends kept is the one the log rebuilds from its batches alone
(its producer snapshots removed before a reopen)."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from sparklog.records.batch import iter_batches
from sparklog.storage import PartitionLog

from support.storage_batches import BASE_TS
from tests.unit.storage.test_log_plain_append import SETTINGS, batches

EPOCH = 3


def _clock() -> int:
    """The batches' time: no producer expires (the rebuilt state is compared with the kept one)."""
    return BASE_TS
sets = st.lists(batches(), min_size=1, max_size=3).map(b"".join)


def _outcome(outcome):
    """A group's outcome as a lone append's: the base offset, or the error's type and message."""
    if isinstance(outcome, BaseException):
        return type(outcome), str(outcome)
    return outcome[0]


def _append(log, record_sets: list[bytes], groups: list[int]) -> list:
    """`record_sets` in order, in groups of the sizes `groups` cycles through (0: a lone append_as_leader)."""
    outcomes, position, turn = [], 0, 0
    while position < len(record_sets):
        size = groups[turn % len(groups)]
        turn += 1
        if size == 0:
            try:
                outcomes.append(log.append_as_leader(record_sets[position], EPOCH))
            except Exception as exc:  # noqa: BLE001 - compared, type and message
                outcomes.append((type(exc), str(exc)))
            position += 1
            continue
        group = [memoryview(s) for s in record_sets[position:position + size]]
        outcomes.extend(_outcome(o) for o in log.append_group_as_leader(group, EPOCH))
        position += size
    return outcomes


def _files(directory: str) -> dict[str, bytes]:
    found = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            found[name] = f.read()
    return found


def _stored_bases(log) -> dict[int, int]:
    """Each stored batch's base offset -> its partition leader epoch."""
    return {b.base_offset: b.partition_leader_epoch for b in iter_batches(
        b"".join(piece.read_bytes() for piece in log.iter_slices()))}


def _run(directory: str, record_sets: list[bytes], groups: list[int], flusher) -> tuple[list, dict, dict]:
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    log = PartitionLog.open(directory, dict(SETTINGS), flusher=flusher, clock=_clock)
    try:
        outcomes = _append(log, record_sets, groups)
        log.flush()
        stored = _stored_bases(log)
        end = log.log_end_offset
        producers = dict(log.producer_state.producers)
        assert set(stored.values()) <= {EPOCH}  # the leader's epoch on every batch
        assert all(type(o) is not int or o in stored for o in outcomes)  # each answer is a stored batch's offset
    finally:
        log.close()
    files = _files(directory)
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    rebuilt = PartitionLog.open(directory, dict(SETTINGS), flusher=flusher, clock=_clock)
    try:
        assert rebuilt.log_end_offset == end
        assert dict(rebuilt.producer_state.producers) == producers  # the appends kept what the batches say
    finally:
        rebuilt.close()
    return outcomes, files, producers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record_sets=st.lists(sets, min_size=1, max_size=14),
       groups=st.lists(st.integers(0, 4), min_size=1, max_size=4))
def test_sets_appended_alone_and_in_groups_leave_the_same_log(record_sets, groups, flusher):
    work = tempfile.mkdtemp()
    try:
        alone = _run(os.path.join(work, "alone", "topic-0"), record_sets, [0], flusher)
        grouped = _run(os.path.join(work, "grouped", "topic-0"), record_sets, groups, flusher)
        assert grouped == alone
    finally:
        shutil.rmtree(work)


def test_a_plain_append_keeps_each_batchs_epoch_and_a_leaders_stamps_its_own(tmp_path, flusher):
    """append() (KEEP_EPOCH) writes a batch's partitionLeaderEpoch as it came; append_as_leader stamps the
    leader's, alone or in a group; all three take offsets from the LEO."""
    from sparklog.records.batch import build_batch

    log = PartitionLog.open(str(tmp_path / "topic-0"), dict(SETTINGS), flusher=flusher)
    try:
        sent = bytearray(build_batch([(None, b"v", None, None)] * 2))
        sent[12:16] = (7).to_bytes(4, "big")
        assert log.append(bytes(sent)) == 0
        assert log.append_as_leader(bytes(sent), 9) == 2
        assert [o[0] for o in log.append_group_as_leader([bytes(sent)], 11)] == [4]
        log.flush()
        assert _stored_bases(log) == {0: 7, 2: 9, 4: 11}
    finally:
        log.close()
