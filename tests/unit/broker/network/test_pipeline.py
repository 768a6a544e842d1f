"""InFlight, the per-connection reply order, as a state machine: whatever order replies complete in, they
leave in request order, never past an incomplete head, and the count and bytes held are exact."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.broker.network.pipeline import InFlight

MAX = 4


class InFlightMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.inflight = InFlight(MAX)
        self.added = []  # (request number, slot or None if added ready, size)
        self.pending = {}  # request number -> slot
        self.written = []
        self.next = 0

    @precondition(lambda self: not self.inflight.full)
    @rule(size=st.integers(0, 1000), ready=st.booleans())
    def add(self, size, ready):
        if ready:
            self.inflight.add_ready(size, self.next)
        else:
            self.pending[self.next] = self.inflight.add(size)
        self.added.append((self.next, size))
        self.next += 1

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def complete(self, data):
        number = data.draw(st.sampled_from(sorted(self.pending)))
        self.inflight.complete(self.pending.pop(number), number)

    @rule()
    def pop_all_ready(self):
        while (slot := self.inflight.pop_ready()) is not None:
            self.written.append(slot.reply)
        head = len(self.written)
        assert head == self.next or head in self.pending  # stopped only at an incomplete head (or empty)

    @invariant()
    def order_and_accounting(self):
        assert self.written == list(range(len(self.written)))
        held = self.added[len(self.written):]
        assert len(self.inflight) == len(held) <= MAX
        assert self.inflight.bytes == sum(size for _, size in held)
        assert self.inflight.full == (len(held) == MAX)


TestInFlight = InFlightMachine.TestCase
TestInFlight.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_connection_must_hold_at_least_one_request():
    with pytest.raises(ValueError, match="at least 1"):
        InFlight(0)


def test_clear_forgets_everything():
    inflight = InFlight(2)
    inflight.add(10)
    inflight.add_ready(5, b"reply")
    inflight.clear()
    assert (len(inflight), inflight.bytes, inflight.pop_ready()) == (0, 0, None)
