"""Transactions in one partition log: which are open, which just completed, the last stable offset (LSO) and
the aborted-transaction index kept from the markers (the transaction half of Kafka's ProducerStateManager,
KIP-98). The log calls it from narrow hooks (append.py, PartitionLog via `LogTransactions`); the producer
state (producer_state.py Rule: producer-transactions) holds each producer's open transaction and snapshots it.

Rule: transactions-tracked (applying a batch, `apply`): every appended batch with the transactional or control
bit (leader, follower and recovery replay alike), after the producer state's `update`:
  - a transactional data batch opens its producer's transaction at its base offset (unless one is open);
  - a control batch is read as an end-transaction marker (records/control.py): it closes its producer's
    transaction; the completed transaction stays *unstable* until the high watermark passes its marker, and
    an aborted one gets an entry in the aborted-transaction index (txn_index.py), whose lastStableOffset is
    the first offset of the other transactions still open (else the marker's offset + 1);
  - a marker for a producer with no open transaction changes nothing (Kafka's: no entry, no completion);
  - a control batch that is no marker is logged and skipped: a follower copies its leader's bytes.
Rule: last-stable-offset (the LSO, `last_stable_offset`): the smallest of the high watermark, the first offset
of every open transaction and the first offset of every completed transaction whose marker is not yet below
the high watermark (Kafka's firstUnstableOffset), the latter two raised to the log start offset when retention
or DeleteRecords removed their first batches (as Kafka's maybeUpdateFirstUnstableOffset): read_committed
consumers read below it, and it never passes the HW. It only moves backwards when the HW does (truncation, a
new leader's HW): a transaction opens at the log end.
Rule: transactions-rebuilt (rebuilding, `rebuild`): on open and after truncation, the producer state is loaded
from its newest snapshot at or below the log end (and at or below the earliest damaged index file,
txn_index.py Rule: index-recovery), the index entries of markers from that offset on are dropped, and the
batches from there to the log end are replayed through Rule: transactions-tracked: the state and the index
equal those an incremental append built.
Rule: aborted-in-range (reading, `aborted_between`): the aborted transactions with data in [start, end), for
Fetch.

TransactionTracker is not thread-safe: the log calls it under its append lock (LogTransactions takes it).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol

from sparklog.records import BytesLike
from sparklog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from sparklog.records.control import InvalidControlRecord, parse_marker
from sparklog.storage.errors import InvalidProducerEpoch
from sparklog.storage.files import Files
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.segment_set import LogSegments
from sparklog.storage.txn_index import AbortedTxn, TransactionIndex
from sparklog.storage.visibility import READ_COMMITTED, Visibility, Visible

logger = logging.getLogger(__name__)

TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK  # a batch Rule: transactions-tracked looks at

# KIP-890 part 1's hook (PartitionLog.transaction_verifier): called with (producer id, epoch) for each
# transactional batch a leader takes from a client, before anything is written; it raises
# TransactionRefusedError (INVALID_TXN_STATE) for a batch of a transaction the coordinator did not add this
# partition to. None: every transactional batch is taken.
TransactionVerifier = Callable[[int, int], None]


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
        self._unreplicated: list[CompletedTxn] = []  # completed, marker at or past the HW (Rule: last-stable-offset)

    # -- Rule: transactions-tracked --------------------------------------------------------------------------

    def apply(self, header: BatchHeader, batch: BytesLike | None) -> None:
        """Rule: transactions-tracked for one appended batch (`batch`: its bytes, needed for a control batch
        only)."""
        if header.attributes & CONTROL_MASK:
            assert batch is not None  # every caller reads a control batch's bytes
            self._apply_marker(header, batch)
        elif header.attributes & TRANSACTIONAL_MASK and header.producer_id >= 0:
            self._producers.begin_transaction(header.producer_id, header.base_offset)

    def apply_record_set(self, data: BytesLike, headers: Iterable[tuple[int, BatchHeader]]) -> None:
        """`apply` for each (position in `data`, header with its offset) of an appended record set."""
        view = memoryview(data)
        for position, header in headers:
            if header.attributes & TXN_BITS:
                self.apply(header, view[position:position + header.size])

    def _apply_marker(self, header: BatchHeader, batch: BytesLike) -> None:
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

    # -- Rule: last-stable-offset ----------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int, log_start: int = 0) -> int:
        """Rule: last-stable-offset: below the HW, the first offset of any transaction not yet stable (at least
        `log_start`)."""
        if self._unreplicated:
            self._unreplicated = [txn for txn in self._unreplicated if txn.last_offset >= high_watermark]
        stable = min(self._producers.ongoing.values(), default=high_watermark)
        for txn in self._unreplicated:
            stable = min(stable, txn.first_offset)
        return min(max(stable, log_start), high_watermark)

    def settled(self) -> bool:
        """No transaction open or completed above the HW and none aborted in the index: the LSO is the HW (Rule:
        last-stable-offset) and no range has an aborted transaction (Rule: aborted-in-range)."""
        return not self._producers.ongoing and not self._unreplicated and self.index.empty()

    def first_unstable_offset(self) -> int | None:
        """The first offset of an open or unreplicated transaction (None: none), for statistics and tests."""
        offsets = [*self._producers.ongoing.values(), *(txn.first_offset for txn in self._unreplicated)]
        return min(offsets, default=None)

    # -- Rule: transactions-rebuilt --------------------------------------------------------------------------

    def rebuild(self, log_end: int, bases: tuple[int, ...], headers_from: Callable[[int], Iterator[BatchHeader]],
                read_batch: Callable[[BatchHeader], bytes]) -> None:
        """Rule: transactions-rebuilt: the producer state, the open transactions and the index from the newest
        usable snapshot and a replay of the batches after it. The caller trims the head after (producer_state.py
        Rule: producer-trimming)."""
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
        """The live segments changed (txn_index.py Rule: index-follows-segments)."""
        self.index.set_segments(bases)

    # -- Rule: aborted-in-range ------------------------------------------------------------------------------

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction with data in [start, end)."""
        return [(txn.producer_id, txn.first_offset) for txn in self.index.collect(start, end)]


class _MarkerAppender(Protocol):
    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      leader_epoch: int) -> int: ...


class _Host(Protocol):
    """What LogTransactions' methods need of the log they are part of (PartitionLog)."""

    name: str
    _leo: int
    _lock: threading.Lock
    _producers: ProducerStateManager
    _segment_set: LogSegments
    _visibility: Visibility
    _txns: TransactionTracker
    transaction_verifier: TransactionVerifier | None

    @property
    def _pipeline(self) -> _MarkerAppender: ...

    @property
    def log_start_offset(self) -> int: ...

    def _stable_below(self, hw: Visible) -> Visible: ...

    @property
    def last_stable_offset(self) -> int: ...

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]: ...

    def _refuse_unverified(self, producer_id: int, epoch: int) -> None: ...


class LogTransactions:
    """PartitionLog's transaction part (a base class: the log's state and locks stay the log's): the tracker
    built beside the producer state, the marker entry point, the LSO and the aborted transactions readers are
    served. Appends feed the tracker in append.py; recovery in PartitionLog._rebuild_producer_state."""

    _txns: TransactionTracker
    transaction_verifier: TransactionVerifier | None

    def _init_transactions(self: _Host, directory: str, files: Files) -> None:
        self._txns = TransactionTracker(directory, files, self._producers)
        self._segment_set.on_change = self._txns.set_segments  # txn_index.py Rule: index-follows-segments
        self._visibility.stable = self._stable_below  # visibility.py Rule: isolation-limit
        self.transaction_verifier = None  # KIP-890 part 1 (TransactionVerifier)

    # -- KIP-890 part 1 (txn_verification.py) -----------------------------------------------------------------

    def verify_transactions(self: _Host, enabled: bool) -> None:
        """Install (or remove) the verifier that refuses a client's transactional batch the coordinator has
        not confirmed (txn_verification.py Rule: verify-before-first-append)."""
        self.transaction_verifier = self._refuse_unverified if enabled else None

    def _refuse_unverified(self: _Host, producer_id: int, epoch: int) -> None:
        with self._lock:
            self._producers.refuse_unverified(producer_id, epoch)

    def transaction_needs_verification(self: _Host, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch of (producer id, epoch) must be verified with the coordinator before
        it is appended (always False while no verifier is installed)."""
        if self.transaction_verifier is None:
            return False
        with self._lock:
            return self._producers.needs_verification(producer_id, epoch)

    def start_transaction_verification(self: _Host, producer_id: int, epoch: int) -> object:
        """A pending verification's guard (txn_verification.py Rule: guard-outlives-no-marker)."""
        with self._lock:
            return self._producers.verifications.start(producer_id, epoch)

    def complete_transaction_verification(self: _Host, producer_id: int, guard: object, confirmed: bool) -> bool:
        """The coordinator's answer to the verification `guard` started: True if the producer's batches may
        now be appended (confirmed, and no marker came in between)."""
        with self._lock:
            verifications = self._producers.verifications
            if confirmed:
                return verifications.complete(producer_id, guard)
            verifications.abandon(producer_id, guard)
            return False

    def _rebuild_transactions(self: _Host) -> None:
        """Rule: transactions-rebuilt over the log's segments (PartitionLog._rebuild_producer_state)."""
        segments = self._segment_set
        self._txns.rebuild(self._leo, segments.bases, lambda offset: segments.headers_from(offset, self.name),
                           segments.read_batch)

    def append_control_batch(self: _Host, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                             leader_epoch: int) -> int:
        """Append, as the leader of `leader_epoch`, the end-transaction marker of `producer_id`'s transaction
        (records/control.py); return its offset. Replicated as any batch; every replica's producer state
        applies it. InvalidProducerEpoch, with nothing written, for an epoch below the producer's."""
        return self._pipeline.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch)

    @property
    def last_stable_offset(self: _Host) -> int:
        """The LSO (Rule: last-stable-offset): what read_committed readers read below."""
        return self._visibility.limit(READ_COMMITTED)

    def _stable_below(self: _Host, hw: Visible) -> Visible:
        """Visibility's LSO seam: the tracker, read under the append lock, caps the HW `hw`."""
        with self._lock:
            offset = self._txns.last_stable_offset(hw.offset, self.log_start_offset)
        return hw if offset >= hw.offset else self._segment_set.visible_at(offset)

    def committed_read_limit(self: _Host, start: int, high_watermark: int) -> int | None:
        """`high_watermark` (read before) when a read_committed read from `start` below it is served as a
        read_uncommitted one: the LSO is at or past it and no aborted transaction has data in [start,
        high_watermark); else None (broker read_committed.py Rule 1a). A log with no transaction state
        (`settled`) answers under one lock round trip, with no LSO or index lookup: the Fetch fast path asks it
        for every read_committed fetch, librdkafka's default."""
        with self._lock:
            settled = self._txns.settled()
        if not settled:
            return None if self.last_stable_offset < high_watermark or self.aborted_transactions(
                start, high_watermark) else high_watermark
        return high_watermark if self._visibility.hw.offset >= high_watermark else None

    def aborted_transactions(self: _Host, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with data in [start, end) (Rule:
        aborted-in-range): Fetch's aborted_transactions for a read_committed range."""
        with self._lock:
            return self._txns.aborted_between(start, end)

    @property
    def transactions(self: _Host) -> TransactionTracker:
        """The transaction tracker; read it only under the log's append lock or in tests."""
        return self._txns
