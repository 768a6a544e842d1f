"""The queued.max.request.bytes budget as a state machine (hypothesis), against a model of its rules."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sparklog.broker.network.queued_bytes import QueuedBytes

LIMIT = 100
HOLDERS = 5
READ = 60  # the most one read adds
FRAME = 150  # the largest frame (socket.request.max.bytes): a partial frame holds less


class Conn:
    """A connection as the server drives it: reads only while not paused."""

    def __init__(self, budget: QueuedBytes) -> None:
        self.budget = budget
        self.buffered = 0
        self.paused = False
        self.closed = False

    def queue_ready(self) -> None:
        assert self.paused, "woken while reading"
        self.paused = False

    def account(self) -> None:
        if not self.budget.hold(self, self.buffered):
            self.paused = True
        elif self.paused:
            self.paused = False


class Budget(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.budget = QueuedBytes(LIMIT)
        self.conns = [Conn(self.budget) for _ in range(HOLDERS)]

    def reading(self):
        return [c for c in self.conns if not c.paused and not c.closed]

    @precondition(lambda self: any(not c.paused and not c.closed and c.buffered < FRAME for c in self.conns))
    @rule(data=st.data(), n=st.integers(1, READ))
    def read_part_of_a_frame(self, data, n):
        conn = data.draw(st.sampled_from([c for c in self.reading() if c.buffered < FRAME]))
        conn.buffered = min(FRAME - 1, conn.buffered + n)
        conn.account()

    @precondition(lambda self: any(not c.paused and not c.closed and c.buffered for c in self.conns))
    @rule(data=st.data())
    def frame_completes(self, data):
        conn = data.draw(st.sampled_from([c for c in self.reading() if c.buffered]))
        conn.buffered = 0
        conn.account()

    @precondition(lambda self: any(not c.closed for c in self.conns))
    @rule(data=st.data())
    def close(self, data):
        conn = data.draw(st.sampled_from([c for c in self.conns if not c.closed]))
        conn.closed, conn.buffered, conn.paused = True, 0, False
        self.budget.hold(conn, 0)

    @rule(slot=st.integers(0, HOLDERS - 1))
    def connect(self, slot):
        if self.conns[slot].closed:
            self.conns[slot] = Conn(self.budget)

    @invariant()
    def total_is_what_the_holders_hold(self):
        assert self.budget.total == sum(c.buffered for c in self.conns)
        assert all(self.budget.held_by(c) == c.buffered for c in self.conns)

    @invariant()
    def only_holders_over_the_limit_wait(self):
        paused = [c for c in self.conns if c.paused]
        assert self.budget.waiting == len(paused)
        assert all(c.buffered and not c.closed for c in paused)
        if paused:
            assert self.budget.total > LIMIT, "a connection waits while the total is within the limit"

    @invariant()
    def memory_is_bounded(self):
        assert self.budget.total <= LIMIT + READ * HOLDERS + FRAME

    @invariant()
    def some_partial_frame_can_always_finish(self):
        """Rule 4: were every holder waiting, no frame could complete and nothing would wake them."""
        holders = [c for c in self.conns if c.buffered and not c.closed]
        if holders:
            assert any(not c.paused for c in holders), "every connection holding a partial frame waits"


TestQueuedBytes = Budget.TestCase
TestQueuedBytes.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


def test_the_oldest_partial_frame_reads_on_over_the_limit_so_two_halves_never_deadlock():
    """Two connections each hold most of a frame and the first's rest comes in two reads (a test run hung so)."""
    budget = QueuedBytes(LIMIT)
    first, second = Conn(budget), Conn(budget)
    first.buffered = 90
    first.account()
    second.buffered = 40  # over: second waits
    second.account()
    assert second.paused and not first.paused
    first.buffered += 5  # part of its rest: the total grows further over the limit
    first.account()
    assert not first.paused, "the oldest partial frame must read on, or nothing ever completes"
    first.buffered = 0  # its frame completed: second is woken
    first.account()
    assert not second.paused


def test_the_next_oldest_is_woken_though_the_total_stays_over():
    """When the oldest partial frame completes, the next oldest reads on even if the others keep the total over."""
    budget = QueuedBytes(LIMIT)
    first, second, third = Conn(budget), Conn(budget), Conn(budget)
    for conn, n in ((first, 30), (second, 50), (third, 50)):  # 130: third waits
        conn.buffered = n
        conn.account()
    second.buffered += 10  # 140: second waits too
    second.account()
    assert (first.paused, second.paused, third.paused) == (False, True, True)
    first.buffered = 0  # 110, still over: second, the oldest now, must read on or both wait forever
    first.account()
    assert not second.paused and third.paused
    second.buffered = 0  # 50: third woken
    second.account()
    assert not third.paused


def test_unlimited_never_waits():
    budget = QueuedBytes(None)
    conn = Conn(budget)
    assert budget.hold(conn, 10**12) and budget.waiting == 0
