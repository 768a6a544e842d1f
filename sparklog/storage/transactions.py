"""Transactions in one partition log: which are open, which just completed, the last stable offset (LSO) and
the aborted-transaction index kept from the markers (the transaction half of Kafka's ProducerStateManager,
KIP-98). The log calls it from narrow hooks; the producer state (producer_state.py Rule 2a) holds each
producer's open transaction and snapshots it.

Rule 1 (applying a batch, `apply`): every appended batch with the transactional or control bit (leader,
follower and recovery replay alike), after the producer state's `update`:
  - a transactional data batch opens its producer's transaction at its base offset (unless one is open);
  - a control batch is read as an end-transaction marker (records/control.py): it closes its producer's
    transaction; the completed transaction stays *unstable* until the high watermark passes its marker, and
    an aborted one gets an entry in the aborted-transaction index (txn_index.py), whose lastStableOffset is
    the first offset of the other transactions still open (else the marker's offset + 1);
  - a marker for a producer with no open transaction changes nothing (Kafka's: no entry, no completion);
  - a control batch that is no marker is logged and skipped: a follower copies its leader's bytes.
Rule 2 (the LSO, `last_stable_offset`): the smallest of the high watermark, the first offset of every open
transaction and the first offset of every completed transaction whose marker is not yet below the high
watermark (Kafka's firstUnstableOffset), the latter two raised to the log start offset when retention or
DeleteRecords removed their first batches (as Kafka's maybeUpdateFirstUnstableOffset): read_committed
consumers read below it, and it never passes the HW.
It only moves backwards when the HW does (truncation, a new leader's HW): a transaction opens at the log end.
Rule 3 (rebuilding, `rebuild`): on open and after truncation, the producer state is loaded from its newest
snapshot at or below the log end (and at or below the earliest damaged index file, txn_index Rule 4), the
index entries of markers from that offset on are dropped, and the batches from there to the log end are
replayed through Rule 1: the state and the index equal those an incremental append built.
Rule 4 (reading, `aborted_between`): the aborted transactions with data in [start, end), for Fetch.

Not thread-safe: the log calls it under its append lock.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, NamedTuple

from sparklog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from sparklog.records.control import InvalidControlRecord, parse_marker
from sparklog.storage.errors import InvalidProducerEpoch
from sparklog.storage.files import Files
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.txn_index import AbortedTxn, TransactionIndex

logger = logging.getLogger(__name__)

TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK  # a batch Rule 1 looks at


class CompletedTxn(NamedTuple):
    """A transaction closed by its marker at `last_offset`, unstable until the HW passes the marker."""

    producer_id: int
    first_offset: int
    last_offset: int


class TransactionTracker:
    """Open and completed transactions, the LSO and the aborted-transaction index of one log."""

    def __init__(self, directory: str, files: Files, producers: ProducerStateManager):
        self._producers = producers
        self.index = TransactionIndex(directory, files)
        self._unreplicated: list[CompletedTxn] = []  # completed, marker at or past the HW: Rule 2

    # -- Rule 1 ----------------------------------------------------------------------------------

    def apply(self, header: BatchHeader, batch) -> None:
        """Rule 1 for one appended batch (`batch`: its bytes, needed for a control batch only)."""
        if header.attributes & CONTROL_MASK:
            self._apply_marker(header, batch)
        elif header.attributes & TRANSACTIONAL_MASK and header.producer_id >= 0:
            self._producers.begin_transaction(header.producer_id, header.base_offset)

    def apply_record_set(self, data, headers: Iterable[tuple[int, BatchHeader]]) -> None:
        """`apply` for each (position in `data`, header with its offset) of an appended record set."""
        view = memoryview(data)
        for position, header in headers:
            if header.attributes & TXN_BITS:
                self.apply(header, view[position:position + header.size])

    def _apply_marker(self, header: BatchHeader, batch) -> None:
        try:
            marker = parse_marker(batch)
        except InvalidControlRecord as exc:
            logger.warning("%s: control batch at offset %d skipped: %s", self.index.directory,
                           header.base_offset, exc)
            return
        first = self._producers.end_transaction(marker.producer_id)
        if first is None:
            return
        self._unreplicated.append(CompletedTxn(marker.producer_id, first, header.base_offset))
        if not marker.commit:
            stable = min(self._producers.ongoing.values(), default=header.base_offset + 1)
            self.index.append(AbortedTxn(marker.producer_id, first, header.base_offset, stable))

    def check_marker(self, producer_id: int, producer_epoch: int) -> None:
        """A leader's check of a marker before it is written: its epoch is not below the producer's (Kafka's
        appendEndTxnMarker refuses a fenced coordinator's stale marker)."""
        entry = self._producers.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(f"producer {producer_id}: marker epoch {producer_epoch} is below the "
                                       f"producer's epoch {entry.epoch}")

    # -- Rule 2 ----------------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int, log_start: int = 0) -> int:
        """Rule 2: below the HW, the first offset of any transaction not yet stable (at least `log_start`)."""
        if self._unreplicated:
            self._unreplicated = [txn for txn in self._unreplicated if txn.last_offset >= high_watermark]
        stable = min(self._producers.ongoing.values(), default=high_watermark)
        for txn in self._unreplicated:
            stable = min(stable, txn.first_offset)
        return min(max(stable, log_start), high_watermark)

    def first_unstable_offset(self) -> int | None:
        """The first offset of an open or unreplicated transaction (None: none), for statistics and tests."""
        offsets = [*self._producers.ongoing.values(), *(txn.first_offset for txn in self._unreplicated)]
        return min(offsets, default=None)

    # -- Rule 3 ----------------------------------------------------------------------------------

    def rebuild(self, log_end: int, bases: tuple[int, ...], headers_from: Callable[[int], Iterator[BatchHeader]],
                read_batch: Callable[[BatchHeader], bytes]) -> None:
        """Rule 3: the producer state, the open transactions and the index from the newest usable snapshot
        and a replay of the batches after it. The caller trims the head (producer_state Rule 5) after."""
        damaged = self.index.load(bases)
        start = self._producers.load(log_end, at_most=damaged)
        self.index.truncate_from(start)
        self._unreplicated = []
        update = self._producers.update
        for header in headers_from(start):
            if header.producer_id >= 0 and not header.attributes & CONTROL_MASK:
                update(header.producer_id, header.producer_epoch, header.base_sequence, header.last_offset_delta,
                       header.base_offset, header.max_timestamp)
            if header.attributes & TXN_BITS:
                self.apply(header, read_batch(header) if header.attributes & CONTROL_MASK else None)

    def set_segments(self, bases: tuple[int, ...]) -> None:
        """The live segments changed (txn_index Rule 2)."""
        self.index.set_segments(bases)

    # -- Rule 4 ----------------------------------------------------------------------------------

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction with data in [start, end)."""
        return [(txn.producer_id, txn.first_offset) for txn in self.index.collect(start, end)]
