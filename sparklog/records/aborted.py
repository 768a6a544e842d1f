"""A read_committed consumer's rule for aborted transactions (KIP-98; Kafka's consumer Fetcher): which batches
of a fetched chunk are aborted data, given the chunk's aborted-transaction list from the Fetch response.

Rule 1: batches are shown in offset order to `skips`. An aborted transaction (producer id, first offset)
becomes *active* once a batch whose last offset is at or past its first offset is seen; a transactional data
batch of an active producer is skipped; that producer's abort marker ends it (and, as every control batch,
is skipped: markers are never records). Non-transactional batches are never skipped: only a transactional
batch can belong to a transaction.
Rule 2: the list comes with one Fetch answer and applies to that answer's batches only (the broker lists
every aborted transaction with data in the range it served).
"""

from __future__ import annotations

from typing import Iterable

from sparklog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from sparklog.records.control import InvalidControlRecord, parse_marker


class AbortedTransactions:
    """The aborted transactions of one fetched chunk (module docstring); `skips(batch)` in offset order."""

    __slots__ = ("_pending", "_active")

    def __init__(self, aborted: Iterable[tuple[int, int]]):
        self._pending = sorted(((first, pid) for pid, first in aborted), reverse=True)  # popped from the end
        self._active: set[int] = set()

    def skips(self, batch: BatchHeader, raw=None) -> bool:
        """Whether `batch` is left out (Rule 1); `raw`, the batch's bytes, is read for a control batch (a
        RecordBatch carries them as `batch.raw`)."""
        if not batch.attributes & TRANSACTIONAL_MASK:
            return bool(batch.attributes & CONTROL_MASK)
        pending = self._pending
        while pending and pending[-1][0] <= batch.last_offset:
            self._active.add(pending.pop()[1])
        if batch.attributes & CONTROL_MASK:
            if batch.producer_id in self._active and not _commits(raw if raw is not None else batch.raw):
                self._active.discard(batch.producer_id)
            return True
        return batch.producer_id in self._active


def _commits(raw) -> bool:
    try:
        return parse_marker(raw).commit
    except InvalidControlRecord:
        return False  # not a marker we read: the transaction stays active, its data skipped (never shown)
