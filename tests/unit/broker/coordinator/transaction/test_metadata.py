"""The transaction state machine (metadata.py): its table, the decisions by hand, and a hypothesis state machine
that drives one transactional id through random requests, write failures, timeouts and reloads."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.broker.coordinator.transaction import metadata as m
from sparklog.broker.coordinator.transaction.metadata import TxnMetadata, TxnState as S
from sparklog.protocol import transaction_log as tl

CONCURRENT, FENCED, MAPPING, BAD_STATE = 51, 90, 49, 48

# Kafka's TransactionState.validPreviousStates, written out again here (the oracle, not the code's table)
KAFKA_TABLE = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareEpochFence": {"Ongoing"},
}


def test_the_table_is_kafkas():
    assert {m.KAFKA_NAMES[s]: {m.KAFKA_NAMES[p] for p in prev} for s, prev in m.VALID_PREVIOUS.items()} == KAFKA_TABLE
    assert [int(s) for s in S] == list(range(8))  # the ids written to __transaction_state


def ready(now=0) -> TxnMetadata:
    """An id after its first InitProducerId: producer 1000, epoch 0, Empty."""
    meta = TxnMetadata("tx", 1000, 60_000, now)
    meta.complete(meta.prepare(m.init_producer_id(meta, 60_000, (-1, -1), now, 2000)))
    return meta


def step(meta, decision):
    assert isinstance(decision, m.TxnTransit), decision
    meta.complete(meta.prepare(decision))


def test_a_transaction_commits_through_prepare_commit():
    meta = ready()
    assert (meta.producer_epoch, meta.state) == (0, S.EMPTY)
    step(meta, m.add_partitions(meta, 1000, 0, [("t", 0)], 5))
    assert (meta.state, meta.partitions, meta.start_ms) == (S.ONGOING, {("t", 0)}, 5)
    assert m.add_partitions(meta, 1000, 0, [("t", 0)], 6) == 0  # already in: nothing to write
    step(meta, m.end_txn(meta, 1000, 0, True, 7))
    assert meta.state == S.PREPARE_COMMIT
    assert m.end_txn(meta, 1000, 0, True, 8) == CONCURRENT  # markers in flight
    assert m.end_txn(meta, 1000, 0, False, 8) == BAD_STATE  # Rule 3: the decision stands
    step(meta, m.complete_markers(meta, 9))
    assert (meta.state, meta.partitions, meta.start_ms) == (S.COMPLETE_COMMIT, frozenset(), -1)
    assert m.end_txn(meta, 1000, 0, True, 10) == 0  # a retry
    assert m.end_txn(meta, 1000, 0, False, 10) == BAD_STATE


def test_a_stale_epoch_or_another_producer_id_is_refused():
    meta = ready()
    assert m.add_partitions(meta, 1000, 1, [("t", 0)], 1) == FENCED
    assert m.add_partitions(meta, 1001, 0, [("t", 0)], 1) == MAPPING
    step(meta, m.init_producer_id(meta, 60_000, (-1, -1), 2, 2000))  # a second instance: epoch 1
    assert m.add_partitions(meta, 1000, 0, [("t", 0)], 3) == FENCED
    assert m.end_txn(meta, 1000, 0, True, 3) == FENCED


def test_init_producer_id_fences_an_open_transaction_then_bumps():
    meta = ready()
    step(meta, m.add_partitions(meta, 1000, 0, [("t", 0)], 1))
    assert m.init_producer_id(meta, 60_000, (-1, -1), 2, 2000) == m.FENCE
    fence = meta.prepare(m.fence_and_abort(meta, 2), pending=S.PREPARE_EPOCH_FENCE)
    assert meta.busy() and meta.pending == S.PREPARE_EPOCH_FENCE
    assert m.init_producer_id(meta, 60_000, (-1, -1), 2, 2000) == CONCURRENT
    meta.complete(fence)
    assert (meta.state, meta.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert m.end_txn(meta, 1000, 0, True, 3) == FENCED  # the zombie's commit
    step(meta, m.complete_markers(meta, 4))
    step(meta, m.init_producer_id(meta, 60_000, (-1, -1), 5, 2000))
    assert (meta.state, meta.producer_epoch) == (S.EMPTY, 2)


def test_kip_360_bump_with_the_held_epoch_and_its_retry():
    meta = ready()
    step(meta, m.init_producer_id(meta, 60_000, (1000, 0), 1, 2000))
    assert meta.producer_epoch == 1
    assert m.init_producer_id(meta, 60_000, (1000, 0), 2, 2000) == 0  # the retry: the current epoch answers
    assert m.init_producer_id(meta, 60_000, (1000, 7), 2, 2000) == FENCED


def test_an_exhausted_epoch_takes_a_new_producer_id():
    meta = ready()
    meta.producer_epoch = m.MAX_EPOCH - 1
    assert m.needs_new_producer_id(meta)
    step(meta, m.init_producer_id(meta, 60_000, (-1, -1), 1, 2000))
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (2000, 0, 1000)


def test_timeout_and_expiry():
    meta = ready()
    step(meta, m.add_partitions(meta, 1000, 0, [("t", 0)], 100))
    assert not m.timed_out(meta, 100 + 59_999) and m.timed_out(meta, 100 + 60_000)
    assert m.expire(meta, 10**9, 1000) is None  # open: never expires
    meta.prepare(m.fence_and_abort(meta, 1), pending=S.PREPARE_EPOCH_FENCE)
    meta.abandon()  # the write failed: as before
    assert (meta.state, meta.producer_epoch, meta.pending) == (S.ONGOING, 0, None)


def test_an_illegal_transition_is_refused():
    meta = ready()
    with pytest.raises(m.IllegalTransition):
        meta.prepare(meta.transit(S.COMPLETE_COMMIT, 1))
    meta.prepare(m.add_partitions(meta, 1000, 0, [("t", 0)], 1))
    with pytest.raises(m.IllegalTransition):  # one pending at a time
        meta.prepare(meta.transit(S.ONGOING, 1))


PARTITIONS = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 2)), min_size=1, max_size=3)


class OneTransactionalId(RuleBasedStateMachine):
    """Random requests on one id; each decision's transit is written (kept as `log`) or its write fails."""

    def __init__(self):
        super().__init__()
        self.now = 0
        self.meta = ready()
        self.log = [self.meta.transit(self.meta.state, 0)]
        self.decided: S | None = None  # the Prepare* last written, until its Complete*
        self.next_pid = 5000
        self.opened_at = -1  # when the open transaction began (the model of start_ms)

    def _apply(self, decision, write_ok: bool, pending=None):
        if not isinstance(decision, m.TxnTransit):
            return decision
        before = self.meta.state
        self.meta.prepare(decision, pending=pending)
        if not write_ok:
            self.meta.abandon()
            return None
        assert m.KAFKA_NAMES[before] in KAFKA_TABLE[m.KAFKA_NAMES[pending or decision.state]]
        assert decision.producer_epoch >= self.meta.producer_epoch or decision.producer_id != self.meta.producer_id
        if decision.state == S.ONGOING and before != S.ONGOING:
            self.opened_at = self.now
        self.meta.complete(decision)
        self.log.append(decision)
        return None

    def _held(self, stale: bool):
        return self.meta.producer_id, self.meta.producer_epoch - (1 if stale else 0)

    @rule(dt=st.integers(0, 70_000))
    def tick(self, dt):
        self.now += dt

    @rule(stale=st.booleans(), kip360=st.booleans(), ok=st.booleans())
    def init(self, stale, kip360, ok):
        held = self._held(stale) if kip360 else (-1, -1)
        before = (self.meta.producer_id, self.meta.producer_epoch)
        decision = m.init_producer_id(self.meta, 60_000, held, self.now, self.next_pid)
        if decision == m.FENCE:
            return self._apply(m.fence_and_abort(self.meta, self.now), ok, pending=S.PREPARE_EPOCH_FENCE)
        self.next_pid += 1
        if isinstance(decision, m.TxnTransit):
            assert not (kip360 and stale and self.meta.producer_epoch > 0)  # a stale holder never bumps
        self._apply(decision, ok)
        if ok and isinstance(decision, m.TxnTransit):
            assert (self.meta.producer_id, self.meta.producer_epoch) != before

    @rule(parts=PARTITIONS, stale=st.booleans(), ok=st.booleans())
    def add(self, parts, stale, ok):
        pid, epoch = self._held(stale)
        decision = m.add_partitions(self.meta, pid, epoch, parts, self.now)
        if stale and self.meta.producer_epoch >= 0:
            assert decision == FENCED
        self._apply(decision, ok)

    @rule(commit=st.booleans(), stale=st.booleans(), ok=st.booleans())
    def end(self, commit, stale, ok):
        pid, epoch = self._held(stale)
        decision = m.end_txn(self.meta, pid, epoch, commit, self.now)
        if stale:
            assert decision == FENCED
        if self.decided is not None and isinstance(decision, m.TxnTransit):
            raise AssertionError("a second decision over a prepared one")
        self._apply(decision, ok)
        if ok and isinstance(decision, m.TxnTransit):
            self.decided = decision.state

    @precondition(lambda self: self.meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))
    @rule(ok=st.booleans())
    def markers_written(self, ok):
        decided = self.meta.state
        self._apply(m.complete_markers(self.meta, self.now), ok)
        if ok:
            expected = S.COMPLETE_COMMIT if decided == S.PREPARE_COMMIT else S.COMPLETE_ABORT
            assert self.meta.state == expected  # Rule 3: the decision stands
            self.decided = None

    @rule(ok=st.booleans())
    def timeout(self, ok):
        if m.timed_out(self.meta, self.now):
            self._apply(m.fence_and_abort(self.meta, self.now), ok, pending=S.PREPARE_EPOCH_FENCE)
            if ok:
                self.decided = S.PREPARE_ABORT

    @invariant()
    def partitions_only_in_a_transaction(self):
        open_states = (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
        assert (self.meta.start_ms != -1) == (self.meta.state in open_states)
        if self.meta.state not in open_states:
            assert self.meta.partitions == frozenset()
        else:
            assert self.meta.start_ms == self.opened_at  # the timeout runs from the first partition added
        assert self.meta.pending is None

    @invariant()
    def the_log_reloads_to_the_state(self):
        """Rule 1: what was written is the state: a coordinator loading the last record sees the same id."""
        last = self.log[-1]
        entry = tl.decode_value(tl.encode_value(tl.TxnLogEntry(
            last.producer_id, last.producer_epoch, last.timeout_ms, int(last.state), tuple(sorted(last.partitions)),
            last.last_update_ms, last.start_ms)))
        reloaded = (entry.producer_id, entry.producer_epoch, S(entry.status), frozenset(entry.partitions),
                    entry.start_ms)
        meta = self.meta
        assert reloaded == (meta.producer_id, meta.producer_epoch, meta.state, meta.partitions, meta.start_ms)


OneTransactionalId.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestOneTransactionalId = OneTransactionalId.TestCase


def test_an_id_without_a_transaction_expires_after_transactional_id_expiration_ms():
    meta = ready(now=100)
    assert m.expire(meta, 100 + 999, 1000) is None
    dead = m.expire(meta, 100 + 1000, 1000)
    assert dead.state == S.DEAD
    meta.complete(meta.prepare(dead))
    assert meta.state == S.DEAD


def test_verify_partitions_answers_each_partition_and_changes_nothing():
    """KIP-890 part 1's verify_only check: in the open transaction NONE, not in it INVALID_TXN_STATE; the
    producer's errors and markers in flight for all; after Complete* every partition is out."""
    meta = ready()
    step(meta, m.add_partitions(meta, 1000, 0, [("t", 0)], 5))
    assert m.verify_partitions(meta, 1000, 0, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): BAD_STATE}
    assert meta.partitions == {("t", 0)} and meta.state == S.ONGOING  # nothing added
    assert m.verify_partitions(meta, 1001, 0, [("t", 0)]) == MAPPING
    assert m.verify_partitions(meta, 1000, 1, [("t", 0)]) == FENCED
    step(meta, m.end_txn(meta, 1000, 0, False, 6))
    assert m.verify_partitions(meta, 1000, 0, [("t", 0)]) == CONCURRENT  # PrepareAbort: markers being written
    step(meta, m.complete_markers(meta, 7))
    assert m.verify_partitions(meta, 1000, 0, [("t", 0)]) == {("t", 0): BAD_STATE}  # the zombie's late write
