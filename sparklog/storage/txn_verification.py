"""The verification cache of one partition log (KIP-890 part 1, Kafka's VerificationStateEntry and
VerificationGuard): which producers' transactions the transaction coordinator confirmed include this
partition, so that a leader appends a transactional batch only to a transaction that is open.

State per producer id: absent, *pending* (epoch, guard: a verification was asked for) or *verified* (epoch,
guard: the coordinator said the partition is in the producer's ongoing transaction of that epoch).

Rule: verify-before-first-append (`needed`, `refuse_unverified`): a client's transactional batch of (producer
id, epoch) is taken only if the producer has a transaction open at this partition at that epoch (its first
batch was appended: producer_state.py Rule: producer-transactions) or a verified entry of that epoch;
otherwise the leader first asks the coordinator (AddPartitionsToTxn, verify_only), and the log refuses the
batch (TransactionRefusedError, INVALID_TXN_STATE) if it arrives unverified.
Rule: guard-outlives-no-marker (`start`, `complete`): `start` makes a pending entry with a new guard, replacing
any entry of the producer; the coordinator's yes is taken by `complete(producer id, guard)` only while that
same entry is still there. A marker (`clear`) drops the entry, so a yes that was in flight when the
transaction ended (its marker written meanwhile) finds its guard gone and the batch is refused: a zombie
write that raced the abort cannot reopen a transaction no marker will close (a hanging transaction).
Rule: cached-until-marker (`clear`): the entry stays verified until the producer's end-transaction marker
is appended (every batch of the transaction after the first is taken without asking again); `abandon`
drops a pending entry the coordinator refused. The cache is memory only: a log reopened, or a new leader,
verifies again (a transaction open at the log end counts as verified).

Not thread-safe: the log calls it under its append lock (the broker's event loop drives it).
"""

from __future__ import annotations

from typing import NamedTuple


class Verification(NamedTuple):
    epoch: int
    guard: object
    verified: bool


class TransactionVerifications:
    """The per-producer verification entries of one log (module docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, Verification] = {}

    def verified(self, producer_id: int, epoch: int) -> bool:
        """Rule: verify-before-first-append: a verified entry of `epoch`."""
        entry = self.entries.get(producer_id)
        return entry is not None and entry.verified and entry.epoch == epoch

    def start(self, producer_id: int, epoch: int) -> object:
        """Rule: guard-outlives-no-marker: a pending entry with a new guard, which `complete` takes back."""
        guard = object()
        self.entries[producer_id] = Verification(epoch, guard, False)
        return guard

    def complete(self, producer_id: int, guard: object) -> bool:
        """The coordinator confirmed the verification `guard` started: True if its entry is still there (now
        verified), False if a marker (or a newer verification) replaced it."""
        entry = self.entries.get(producer_id)
        if entry is None or entry.guard is not guard:
            return False
        if not entry.verified:
            self.entries[producer_id] = entry._replace(verified=True)
        return True

    def abandon(self, producer_id: int, guard: object) -> None:
        """The coordinator refused (or could not answer) the verification `guard` started: drop its entry."""
        entry = self.entries.get(producer_id)
        if entry is not None and entry.guard is guard:
            del self.entries[producer_id]

    def clear(self, producer_id: int) -> None:
        """Rule: cached-until-marker: the producer's end-transaction marker was appended."""
        self.entries.pop(producer_id, None)

    def reset(self) -> None:
        """The log's producer state was rebuilt (open, truncation): verify everything again."""
        self.entries.clear()
