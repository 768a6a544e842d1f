"""What a read_committed reader is served (KIP-98): Fetch up to the last stable offset with the aborted
transactions of the range, and ListOffsets bounded by the last stable offset. The log keeps the LSO and the
aborted-transaction index (storage/transactions.py); this module only applies Kafka's reading rules.

Rule 1 (Fetch, isolation_level 1, `fetch`): the batches from the fetch offset whose last offset is below the
LSO, as read_uncommitted serves them below the HW; the response's last_stable_offset is the LSO, and its
aborted_transactions lists (producer id, first offset) of every aborted transaction with data in [fetch
offset, LSO) (Kafka's collectAbortedTransactions; a consumer drops those producers' batches from the first
offset until their abort marker). A fetch offset between the LSO and the log end gets no records.
Rule 1a (the one-partition fast path, `fast_limit`): when the LSO is the high watermark and no aborted
transaction has data from the fetch offset on, a read_committed fetch is answered as a read_uncommitted
one (last_stable_offset = high watermark, no aborted transactions), read up to the high watermark read
before the slice; anything else goes to the general path.
Rule 2 (ListOffsets, isolation_level 1, `list_offset`): latest is the LSO; a timestamp lookup answers only an
offset below the LSO (else none: -1), earliest is unchanged (Kafka's fetchOffsetForTimestamp).
"""

from __future__ import annotations

from sparklog.protocol.fetch import AbortedTransaction

READ_COMMITTED = 1  # Kafka's IsolationLevel.READ_COMMITTED
LATEST_TIMESTAMP = -1  # ListOffsetsRequest.LATEST_TIMESTAMP
EARLIEST_TIMESTAMP = -2  # ListOffsetsRequest.EARLIEST_TIMESTAMP
NO_OFFSET = -1
NO_TIMESTAMP = -1


def fetch(plog, offset: int, max_bytes: int) -> tuple[object, int, list]:
    """Rule 1: (the slice served, the LSO, the aborted transactions of the range). Raises what read() raises."""
    stable = plog.last_stable_offset
    records = plog.read(offset, max_bytes, max_offset=stable)
    aborted = plog.aborted_transactions(offset, stable) if len(records) else []
    return records, stable, [AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in aborted]


def fast_limit(plog, offset: int, high_watermark: int) -> int | None:
    """Rule 1a: the offset the fast path reads below (`high_watermark`), or None: the general path's."""
    return plog.committed_read_limit(offset, high_watermark)


def list_offset(plog, asked: int, found: tuple[int, int]) -> tuple[int, int]:
    """Rule 2: the (timestamp, offset) answer `found` for `asked`, bounded by the LSO."""
    stable = plog.last_stable_offset
    if asked == LATEST_TIMESTAMP:
        return NO_TIMESTAMP, stable
    if asked == EARLIEST_TIMESTAMP or found[1] < stable:
        return found
    return NO_TIMESTAMP, NO_OFFSET
