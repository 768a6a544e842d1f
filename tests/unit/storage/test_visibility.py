"""visibility.py: the high-watermark policy alone (local and replicated moves, cuts, the isolation seam), and
through PartitionLog: a READ_COMMITTED reader reads what a READ_UNCOMMITTED one does while no transaction
can be ongoing (Rule: isolation-limit)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from support.storage_batches import make_batch
from sparklog.storage import PartitionLog
from sparklog.storage.visibility import READ_COMMITTED, READ_UNCOMMITTED, Visibility, Visible


def at(offset: int) -> Visible:
    return Visible(offset, 0, offset * 10)


def test_the_local_policy_moves_forward_only():
    visibility = Visibility(expose_on_append=False)
    assert visibility.advance(at(5)) and visibility.hw == at(5)
    assert not visibility.advance(at(3)) and visibility.hw == at(5)
    assert not visibility.appended(9, 0, 90)  # flush.visibility=flushed: an append does not show
    assert visibility.hw == at(5)


def test_with_visibility_appended_an_append_moves_it():
    visibility = Visibility(expose_on_append=True)
    assert visibility.appended(4, 0, 40) and visibility.hw == at(4)


def test_a_replicated_log_ignores_flushes_and_appends_and_starts_with_nothing_committed():
    visibility = Visibility(expose_on_append=True)
    visibility.advance(at(7))
    visibility.use_replicated(at(0))
    assert visibility.hw == at(0)
    assert not visibility.advance(at(9)) and not visibility.appended(9, 0, 90)
    assert visibility.set_replicated(at(6)) and not visibility.set_replicated(at(2))
    assert visibility.hw == at(6)
    visibility.use_replicated(at(0))  # a second call changes nothing
    assert visibility.hw == at(6)


def test_back_to_local_it_follows_the_log_and_never_moves_back():
    visibility = Visibility(expose_on_append=False)
    visibility.use_replicated(at(0))
    visibility.set_replicated(at(8))
    assert not visibility.use_local(leo=12, recovery_point=5, locate=at)  # the recovery point is below: stays
    assert visibility.hw == at(8) and not visibility.replicated
    visibility.use_replicated(at(0))
    assert visibility.use_local(leo=12, recovery_point=10, locate=at) and visibility.hw == at(10)


def test_truncation_cuts_it_to_the_log_end():
    visibility = Visibility(expose_on_append=False)
    visibility.advance(at(9))
    visibility.cut_to(at(12))
    assert visibility.hw == at(9)
    visibility.cut_to(at(4))
    assert visibility.hw == at(4)


@given(st.lists(st.integers(0, 50), max_size=20), st.booleans())
def test_every_isolation_level_reads_to_the_high_watermark_while_no_transaction_is_ongoing(moves, replicated):
    visibility = Visibility(expose_on_append=False)
    if replicated:
        visibility.use_replicated(at(0))
    for offset in moves:
        (visibility.set_replicated if replicated else visibility.advance)(at(offset))
        assert visibility.limit(READ_COMMITTED) == visibility.limit(READ_UNCOMMITTED) == visibility.hw.offset
        assert visibility.visible(READ_COMMITTED) == visibility.visible(READ_UNCOMMITTED) == visibility.hw


def test_a_read_committed_reader_of_the_log_reads_what_a_read_uncommitted_one_reads(tmp_path, flusher):
    log = PartitionLog.open(str(tmp_path / "t-0"), {"flush.ms": 10**12}, flusher=flusher)
    for _ in range(3):
        log.append(make_batch(2))
    assert log.read(0, 1 << 20, isolation=READ_COMMITTED).length == 0  # nothing flushed: nothing visible
    log.flush()
    committed = log.read(0, 1 << 20, isolation=READ_COMMITTED)
    assert committed.length and committed.read_bytes() == log.read(0, 1 << 20).read_bytes()
