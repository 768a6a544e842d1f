"""Loading `__transaction_state` (state_manager.read_state) from a real partition log: the last record of each
transactional id wins, a tombstone removes the id, a record that does not decode is skipped; and placement is
Kafka's hash."""

from __future__ import annotations

import pytest

from sparklog.broker.coordinator.transaction.metadata import TxnState, TxnTransit
from sparklog.broker.coordinator.transaction.state_manager import _record, read_state, state_partition
from sparklog.records.batch import build_batch
from sparklog.storage.flusher import Flusher
from sparklog.storage.log import PartitionLog


@pytest.fixture
def flusher():
    flusher = Flusher("test-flusher")
    yield flusher
    flusher.close()


def transit(pid, epoch, state, partitions=(), start=-1):
    return TxnTransit(pid, -1, epoch, -1, 60000, state, frozenset(partitions), start, 7)


def test_the_last_record_of_each_id_is_loaded_and_tombstones_remove(tmp_path, flusher):
    plog = PartitionLog.open(str(tmp_path / "__transaction_state-0"), {"flush.ms": 10**12}, flusher=flusher)
    try:
        written = [("a", transit(1, 0, TxnState.EMPTY)), ("b", transit(2, 0, TxnState.EMPTY)),
                   ("a", transit(1, 0, TxnState.ONGOING, [("t", 0)], 5)),
                   ("a", transit(1, 0, TxnState.PREPARE_COMMIT, [("t", 0)], 5)),
                   ("c", transit(3, 4, TxnState.COMPLETE_ABORT)), ("c", transit(3, 4, TxnState.DEAD))]
        for tid, t in written:
            key, value = _record(tid, t)
            plog.append_as_leader(build_batch([(key, value, None, 1)]), 0)
        plog.append_as_leader(build_batch([(b"\x00\x00\x00\x01b", b"\x00\x07junk", None, 1)]), 0)  # skipped
        plog.append_as_leader(build_batch([(b"\x00\x00\x00\x01b", b"\x00\x00\x00\x00", None, 1)]), 0)  # skipped
        found = read_state(plog, 64)  # a buffer smaller than a batch: read on all the same
        assert found == {"a": transit(1, 0, TxnState.PREPARE_COMMIT, [("t", 0)], 5),
                         "b": transit(2, 0, TxnState.EMPTY)}
    finally:
        plog.close()


def test_placement_is_kafkas_hash():
    """Utils.abs("tx".hashCode) % 50: "tx".hashCode = 116*31 + 120 = 3716."""
    assert state_partition("tx", 50) == 3716 % 50
    assert all(0 <= state_partition(f"id-{i}", 7) < 7 for i in range(100))
