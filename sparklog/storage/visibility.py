"""Visibility: up to where a reader of a partition log may read, and who moves that mark (one authority).

The high watermark (HW) is the offset below which readers see records. It is a batch boundary, kept with
where it is in the files (`Visible`), so a read finds its end without a lookup.

Rule: readers-below-visibility: readers see offsets below the HW only; which HW is the policy's:
- local (a log that is not replicated): the flushed offset by default, or the log end offset with
  flush.visibility=appended (`expose_on_append`); it only moves forward.
- replicated (Rule: replicated-hw-from-outside): only `set_replicated` moves it (min LEO over the ISR on a
  leader, the leader's HW on a follower), never a flush or an append.
Rule: hw-moves-forward: the HW never moves back, but truncation below it (`cut_to`) or a restart of the log
at an offset (`reset`).
Rule: isolation-limit: a reader asks `limit(isolation)` (or `visible(isolation)`): READ_UNCOMMITTED reads
to the HW; READ_COMMITTED to the last stable offset (LSO): the HW capped by the first offset of a
transaction not yet stable (`_last_stable` asks the log's `stable(hw)`: transactions.py Rule:
last-stable-offset).

Rule: listeners-hear-what-readers-see: the listeners hear every forward move of the HW, and (`announce`) every
other change of what a reader of the log sees: the log start moved (retention, DeleteRecords) or the tail cut
(truncation), with the HW as it is then.

Not thread-safe: the log changes it under its append lock; readers read `hw` (one attribute, replaced whole)
without a lock. Listeners run outside the lock, from whichever thread moved the HW.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, NamedTuple

logger = logging.getLogger(__name__)

READ_UNCOMMITTED = 0  # Kafka's IsolationLevel ids, as a Fetch or ListOffsets request carries them
READ_COMMITTED = 1

HighWatermarkListener = Callable[[Any, int], None]  # (the log, the new HW)


class Visible(NamedTuple):
    """An offset at a batch boundary and where it is in the files."""

    offset: int
    segment_base: int
    position: int


class Visibility:
    """The HW policy of one log (see the module docstring)."""

    __slots__ = ("hw", "replicated", "expose_on_append", "listeners", "stable")

    def __init__(self, expose_on_append: bool) -> None:
        self.hw = Visible(0, 0, 0)
        self.replicated = False  # True: set_replicated alone moves the HW
        self.expose_on_append = expose_on_append
        self.listeners: tuple[HighWatermarkListener, ...] = ()
        self.stable: Callable[[Visible], Visible] | None = None  # the HW -> the LSO (the log's); None: the HW

    # -- who moves it ------------------------------------------------------------------------------

    def advance(self, visible: Visible) -> bool:
        """The local policy's move (an append or a flush reached `visible`); True if the HW moved."""
        if self.replicated or visible.offset <= self.hw.offset:
            return False
        self.hw = visible
        return True

    def appended(self, offset: int, segment_base: int, position: int) -> bool:
        """An append ended at `offset`: the HW follows it with flush.visibility=appended; True if it moved."""
        return self.expose_on_append and self.advance(Visible(offset, segment_base, position))

    def set_replicated(self, visible: Visible) -> bool:
        """Replication's move, forward only; True if the HW moved."""
        if visible.offset <= self.hw.offset:
            return False
        self.hw = visible
        return True

    def use_replicated(self, log_start: Visible) -> None:
        """Replication sets the HW from now on. The first call drops it to the log start: what an opened log
        holds may include a tail no other replica has, and nothing may be shown as committed until
        replication says so (a leader learns it within one fetch of each ISR follower, a follower from its
        leader's next answer)."""
        if not self.replicated:
            self.replicated = True
            self.hw = log_start

    def use_local(self, leo: int, recovery_point: int, locate: Callable[[int], Visible]) -> bool:
        """The local policy again (the log became its partition's only replica): the HW follows this copy
        alone once more (its fsyncs, or its appends with flush.visibility=appended), and never moves back;
        `locate(offset)` says where an offset is in the files. True if the HW moved."""
        if not self.replicated:
            return False
        self.replicated = False
        target = leo if self.expose_on_append else recovery_point
        return target > self.hw.offset and self.advance(locate(target))

    def cut_to(self, end: Visible) -> None:
        """Truncation left the log ending at `end`: the HW is never above the log end."""
        if self.hw.offset > end.offset:
            self.hw = end

    def reset(self, visible: Visible) -> None:
        """The log restarts at `visible` (emptied, or replication starts and nothing is committed yet)."""
        self.hw = visible

    # -- what readers may read ---------------------------------------------------------------------

    def limit(self, isolation: int = READ_UNCOMMITTED) -> int:
        """The offset below which a reader of `isolation` may read (Rule: isolation-limit)."""
        return self.hw.offset if isolation == READ_UNCOMMITTED else self._last_stable().offset

    def visible(self, isolation: int = READ_UNCOMMITTED) -> Visible:
        """limit(isolation) with where it is in the files."""
        return self.hw if isolation == READ_UNCOMMITTED else self._last_stable()

    def _last_stable(self) -> Visible:
        """The LSO: min(the HW, the first offset of a transaction not yet stable), where it is in the files."""
        stable = self.stable
        return self.hw if stable is None else stable(self.hw)

    # -- listeners ---------------------------------------------------------------------------------

    def add_listener(self, listener: HighWatermarkListener) -> None:
        self.listeners = self.listeners + (listener,)

    def remove_listener(self, listener: HighWatermarkListener) -> None:
        self.listeners = tuple(fn for fn in self.listeners if fn is not listener)

    def announce(self, log: Any) -> None:
        """Rule: listeners-hear-what-readers-see, for a change other than the HW moving forward (outside the lock)."""
        self.notify(log, self.hw.offset)

    def notify(self, log: Any, high_watermark: int) -> None:
        for listener in self.listeners:
            try:
                listener(log, high_watermark)
            except Exception:
                logger.exception("%s: high watermark listener failed", getattr(log, "name", log))
