"""One transactional id's state and the rules of its transitions (Kafka's `TransactionMetadata` and
`TransactionState`), sans-IO: the functions here decide; the coordinator writes and acts.

States (Kafka's ids, written as `transaction_status` in `__transaction_state`):

    state               id  what it means                                    valid previous states
    Empty               0   no transaction open                              Empty, CompleteCommit, CompleteAbort
    Ongoing             1   a transaction is open; partitions are added      Ongoing, Empty, CompleteCommit,
                                                                             CompleteAbort
    PrepareCommit       2   commit decided; markers being written            Ongoing
    PrepareAbort        3   abort decided; markers being written             Ongoing, PrepareEpochFence
    CompleteCommit      4   every commit marker written                      PrepareCommit
    CompleteAbort       5   every abort marker written                       PrepareAbort
    Dead                6   the id expired; its record is a tombstone        Empty, CompleteCommit, CompleteAbort
    PrepareEpochFence   7   (in memory only, never written) the epoch is     Ongoing
                            bumped to fence the producer; PrepareAbort next

Transitions, and what causes each:

    (none) | Empty | Complete* --InitProducerId--> Empty          epoch + 1 (a new producer id once the epoch
                                                                 would pass MAX_EPOCH); partitions cleared
    Ongoing --InitProducerId (a new instance)--> PrepareEpochFence --> PrepareAbort    (the client retries;
                                                                 CONCURRENT_TRANSACTIONS meanwhile)
    Empty | Ongoing | Complete* --AddPartitionsToTxn / AddOffsetsToTxn--> Ongoing    (partitions added; the
                                                                 start time set when it was not Ongoing)
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort)--> PrepareAbort --markers written--> CompleteAbort
    Ongoing --transaction.timeout.ms passed--> PrepareEpochFence --> PrepareAbort (the producer is fenced)
    Empty | Complete* --transactional.id.expiration.ms without a transition--> Dead (tombstone)

Rule 1 (write before acting): a transition is first *prepared* (`TxnMetadata.prepare`: checked against the
table, the id marked pending, a `TxnTransit` returned), then written to the id's `__transaction_state` partition
and replicated, and only then *completed* (`TxnMetadata.complete`) and acted on (markers sent, the client
answered). A failed write *abandons* it: the id is as before. While a transition is pending every other request
on the id gets CONCURRENT_TRANSACTIONS (retriable).
Rule 2 (fencing): a request whose producer id is not the id's gets INVALID_PRODUCER_ID_MAPPING; one whose epoch
is not the id's current epoch gets PRODUCER_FENCED (the handler answers INVALID_PRODUCER_EPOCH to versions that
predate PRODUCER_FENCED). InitProducerId with the producer id and epoch the caller holds (KIP-360) bumps the
epoch when they are the current ones, returns the current ones when they are the ones before the last bump (a
retry of a bump that landed), and is PRODUCER_FENCED otherwise.
Rule 3 (decisions stand): once PrepareCommit (PrepareAbort) is written, the transaction ends committed
(aborted), whatever fails: a coordinator that loads the partition finishes its markers. EndTxn repeating the
decision already taken answers NONE (a retry) or CONCURRENT_TRANSACTIONS (markers in flight); the other decision
gets INVALID_TXN_STATE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from sparklog.protocol import errors

__all__ = ["TxnState", "TxnTransit", "TxnMetadata", "IllegalTransition", "VALID_PREVIOUS", "KAFKA_NAMES",
           "MAX_EPOCH", "NO_PRODUCER_ID", "NO_EPOCH", "init_producer_id", "add_partitions", "end_txn",
           "fence_and_abort", "complete_markers", "expire", "timed_out", "producer_error", "needs_new_producer_id",
           "verify_partitions"]

MAX_EPOCH = 2**15 - 1  # Kafka's Short.MaxValue: an epoch past MAX_EPOCH - 1 takes a new producer id
NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_START = -1  # start_ms when no transaction is open

NONE = 0
CONCURRENT_TRANSACTIONS = errors.ConcurrentTransactionsError.errno
INVALID_PRODUCER_ID_MAPPING = errors.InvalidProducerIdMappingError.errno
INVALID_TXN_STATE = errors.InvalidTxnStateError.errno
PRODUCER_FENCED = errors.ProducerFencedError.errno


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


S = TxnState
KAFKA_NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit",
               S.PREPARE_ABORT: "PrepareAbort", S.COMPLETE_COMMIT: "CompleteCommit",
               S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead", S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_COMPLETE_OR_EMPTY = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: _COMPLETE_OR_EMPTY,
    S.ONGOING: _COMPLETE_OR_EMPTY | {S.ONGOING},
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: _COMPLETE_OR_EMPTY,
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransition(RuntimeError):
    """A transition the state table does not allow, or one prepared over another: a bug, never input."""


@dataclass(frozen=True)
class TxnTransit:
    """A prepared transition: the id's whole state after it, as written to the log (Rule 1)."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset
    start_ms: int
    last_update_ms: int


class TxnMetadata:
    """One transactional id's state (Kafka's `TransactionMetadata`); `pending` is the state of a transition
    prepared and not yet completed or abandoned (Rule 1)."""

    __slots__ = ("transactional_id", "producer_id", "last_producer_id", "producer_epoch", "last_producer_epoch",
                 "timeout_ms", "state", "partitions", "start_ms", "last_update_ms", "pending")

    def __init__(self, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int,
                 producer_epoch: int = NO_EPOCH, state: TxnState = S.EMPTY) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = NO_PRODUCER_ID
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = NO_EPOCH
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions: frozenset = frozenset()
        self.start_ms = NO_START
        self.last_update_ms = now_ms
        self.pending: TxnState | None = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransit) -> "TxnMetadata":
        meta = cls(transactional_id, transit.producer_id, transit.timeout_ms, transit.last_update_ms)
        meta._apply(transit)
        return meta

    def transit(self, state: TxnState, now_ms: int, **changes) -> TxnTransit:
        """The id's state with `changes`, moved to `state` at `now_ms` (not yet prepared)."""
        base = TxnTransit(self.producer_id, self.last_producer_id, self.producer_epoch, self.last_producer_epoch,
                          self.timeout_ms, state, self.partitions, self.start_ms, now_ms)
        return replace(base, **changes)

    def prepare(self, transit: TxnTransit, pending: TxnState | None = None) -> TxnTransit:
        """Rule 1: check the transition against the table and mark the id pending (as `pending`, when the
        transition passes through an in-memory state: PrepareEpochFence)."""
        via = pending or transit.state
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: {via.name} prepared while {self.pending.name} is")
        if self.state not in VALID_PREVIOUS[via] or (via != transit.state and via not in VALID_PREVIOUS[transit.state]):
            raise IllegalTransition(f"{self.transactional_id}: {self.state.name} -> {transit.state.name}")
        self.pending = via
        return transit

    def complete(self, transit: TxnTransit) -> None:
        """Rule 1: the transit is written; it becomes the id's state."""
        if self.pending is None:
            raise IllegalTransition(f"{self.transactional_id}: {transit.state.name} completed, none prepared")
        self._apply(transit)
        self.pending = None

    def abandon(self) -> None:
        """Rule 1: the write failed; the id stays as it was."""
        self.pending = None

    def _apply(self, t: TxnTransit) -> None:
        self.producer_id, self.last_producer_id = t.producer_id, t.last_producer_id
        self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        self.timeout_ms, self.state, self.partitions = t.timeout_ms, t.state, t.partitions
        self.start_ms, self.last_update_ms = t.start_ms, t.last_update_ms

    def busy(self) -> bool:
        """A transition pending, or markers being written: CONCURRENT_TRANSACTIONS for the client."""
        return self.pending is not None or self.state in _PREPARED or self.state == S.PREPARE_EPOCH_FENCE

    def __repr__(self) -> str:
        return (f"TxnMetadata({self.transactional_id!r}, pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"{self.state.name}, partitions={sorted(self.partitions)}, pending={self.pending})")


# -- decisions: a TxnTransit to write, or an error code (NONE: nothing to write, answer success) -------------

FENCE = "fence"  # init_producer_id's answer for an open transaction: fence_and_abort it, answer CONCURRENT


def init_producer_id(meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int], now_ms: int,
                     new_producer_id: int) -> TxnTransit | int | str:
    """InitProducerId on an existing id (a new id is a TxnMetadata with epoch NO_EPOCH). `expected` is the
    (producer id, epoch) the caller holds, or (-1, -1); `new_producer_id` is used if the epoch is exhausted."""
    if meta.busy():
        return CONCURRENT_TRANSACTIONS
    if meta.state == S.ONGOING:
        return FENCE
    pid, epoch = expected
    if pid != NO_PRODUCER_ID and (pid, epoch) != (meta.producer_id, meta.producer_epoch):
        if (pid, epoch) == (meta.last_producer_id, meta.last_producer_epoch):
            return NONE  # Rule 2: a retry of the bump that landed; the current id and epoch answer it
        return PRODUCER_FENCED
    return meta.transit(S.EMPTY, now_ms, timeout_ms=timeout_ms, partitions=frozenset(), start_ms=NO_START,
                        **_bumped(meta, new_producer_id))


def _bumped(meta: TxnMetadata, new_producer_id: int) -> dict:
    if meta.producer_epoch >= MAX_EPOCH - 1:
        return {"producer_id": new_producer_id, "last_producer_id": meta.producer_id, "producer_epoch": 0,
                "last_producer_epoch": meta.producer_epoch}
    return {"producer_epoch": meta.producer_epoch + 1, "last_producer_id": meta.producer_id,
            "last_producer_epoch": meta.producer_epoch}


def needs_new_producer_id(meta: TxnMetadata | None) -> bool:
    """Whether init_producer_id will take `new_producer_id`: no metadata (or Dead), or the epoch exhausted."""
    return meta is None or meta.state == S.DEAD or meta.producer_epoch >= MAX_EPOCH - 1


def producer_error(meta: TxnMetadata, producer_id: int, epoch: int) -> int:
    if producer_id != meta.producer_id:
        return INVALID_PRODUCER_ID_MAPPING
    return PRODUCER_FENCED if epoch != meta.producer_epoch else NONE


def add_partitions(meta: TxnMetadata, producer_id: int, epoch: int, partitions, now_ms: int) -> TxnTransit | int:
    """AddPartitionsToTxn / AddOffsetsToTxn: NONE when every partition is in the open transaction already."""
    code = producer_error(meta, producer_id, epoch)
    if code != NONE:
        return code
    if meta.busy():
        return CONCURRENT_TRANSACTIONS
    wanted = frozenset(partitions)
    if meta.state == S.ONGOING and wanted <= meta.partitions:
        return NONE
    start = meta.start_ms if meta.state == S.ONGOING else now_ms
    return meta.transit(S.ONGOING, now_ms, partitions=meta.partitions | wanted, start_ms=start)


def verify_partitions(meta: TxnMetadata, producer_id: int, epoch: int, partitions) -> dict | int:
    """A partition leader's check (AddPartitionsToTxn verify_only, KIP-890 part 1), nothing changed: the
    producer's error (Rule 2), CONCURRENT_TRANSACTIONS while markers are written, else per partition NONE if
    it is in the open transaction and INVALID_TXN_STATE if not (the partitions are cleared at Complete*). A
    pending transition is not checked: the leader's guard refuses a batch whose marker came first."""
    code = producer_error(meta, producer_id, epoch)
    if code != NONE:
        return code
    if meta.state in _PREPARED:
        return CONCURRENT_TRANSACTIONS
    return {tp: NONE if tp in meta.partitions else INVALID_TXN_STATE for tp in partitions}


def end_txn(meta: TxnMetadata, producer_id: int, epoch: int, commit: bool, now_ms: int) -> TxnTransit | int:
    """EndTxn from the client (Rule 3 for the repeated and the contrary decisions)."""
    code = producer_error(meta, producer_id, epoch)
    if code != NONE:
        return code
    if meta.pending is not None:
        return CONCURRENT_TRANSACTIONS
    if meta.state == S.ONGOING:
        return meta.transit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)
    same = {S.PREPARE_COMMIT: commit, S.PREPARE_ABORT: not commit, S.COMPLETE_COMMIT: commit,
            S.COMPLETE_ABORT: not commit}.get(meta.state)
    if same is None or not same:
        return INVALID_TXN_STATE
    return CONCURRENT_TRANSACTIONS if meta.state in _PREPARED else NONE


def fence_and_abort(meta: TxnMetadata, now_ms: int) -> TxnTransit | int:
    """An open transaction aborted by the coordinator (a new instance, or the timeout): the epoch bumped (past
    PrepareEpochFence) and PrepareAbort written with it, so the old instance is fenced. Prepare it with
    `pending=PREPARE_EPOCH_FENCE`. An epoch at MAX_EPOCH cannot be bumped: aborted without fencing."""
    if meta.pending is not None or meta.state != S.ONGOING:
        return CONCURRENT_TRANSACTIONS
    epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else meta.producer_epoch
    return meta.transit(S.PREPARE_ABORT, now_ms, producer_epoch=epoch, last_producer_epoch=meta.producer_epoch)


def complete_markers(meta: TxnMetadata, now_ms: int) -> TxnTransit:
    """Every marker of the prepared transaction is written: Complete*, the partitions cleared."""
    done = S.COMPLETE_COMMIT if meta.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return meta.transit(done, now_ms, partitions=frozenset(), start_ms=NO_START)


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    """An open transaction older than its timeout, nothing pending: fence_and_abort it."""
    return meta.state == S.ONGOING and meta.pending is None and meta.start_ms + meta.timeout_ms <= now_ms


def expire(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> TxnTransit | None:
    """transactional.id.expiration.ms without a transition and no transaction open: Dead (a tombstone)."""
    if meta.pending is not None or meta.state not in _COMPLETE_OR_EMPTY:
        return None
    if meta.last_update_ms + expiration_ms > now_ms:
        return None
    return meta.transit(S.DEAD, now_ms)
