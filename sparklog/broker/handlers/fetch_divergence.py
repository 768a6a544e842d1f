"""Fetch v12+ truncation detection (KIP-320, as Kafka's Partition.readRecords does it): a fetcher says the epoch of
the last record it fetched (`last_fetched_epoch`); the leader answers from its leader epoch cache (the one
OffsetForLeaderEpoch and the replica fetchers' truncation read, storage/leader_epochs.py).

Rule: diverged-when: with E = the largest epoch <= last_fetched_epoch this leader has and O = where E ends here
(`LeaderEpochCache.end_offset_for`), the fetcher's log diverged if E < last_fetched_epoch (the leader never had
that epoch) or O < fetch_offset (the epoch ended here before the fetcher's position). The partition is then
answered with no records and DivergingEpoch = (E, O): the fetcher truncates to O (or asks again) and fetches on.
A last_fetched_epoch of -1 (none; what consumers send) is never checked.
"""

from __future__ import annotations

from sparklog.broker.handlers.error_codes import NONE
from sparklog.protocol.fetch import EpochEndOffset, PartitionData

__all__ = ["diverging", "diverged"]


def diverging(plog, part) -> EpochEndOffset | None:
    """Rule: diverged-when for the FetchPartition `part` of the leader's log `plog`: the DivergingEpoch, or None."""
    found = plog.leader_epochs.end_offset_for(part.last_fetched_epoch, plog.log_end_offset)
    if found.epoch < part.last_fetched_epoch or found.end_offset < part.fetch_offset:
        return EpochEndOffset(epoch=found.epoch, end_offset=found.end_offset)
    return None


def diverged(index: int, epoch: EpochEndOffset, high_watermark: int, log_start: int) -> PartitionData:
    """The answer of a diverged partition: no records, its DivergingEpoch."""
    return PartitionData(partition_index=index, error_code=NONE, high_watermark=high_watermark,
                         last_stable_offset=high_watermark, log_start_offset=log_start, diverging_epoch=epoch,
                         aborted_transactions=None, preferred_read_replica=-1, records=b"")
