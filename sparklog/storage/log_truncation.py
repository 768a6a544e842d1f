"""LogTruncation: the log's tail removed (a follower cutting its divergent tail) and the log restarted at an
offset (Kafka's LocalLog.truncateTo and UnifiedLog.truncateFullyAndStartAt).

Rule: truncation-removes-whole-batches: `truncate_to(offset)` removes every batch whose last offset is >=
`offset`; a batch straddling it goes whole, so the LEO may end below `offset`. Below the log start (or at or
below the first segment's base), the log is emptied and restarts at `offset`, as `truncate_fully_and_start_at`
does for any `offset`, past the LEO too. Either way the HW and the recovery point come down with the LEO, the
fences are clipped to what is left, the producer state is rebuilt (log.py Rule: producer-state-follows-log),
the removed segments are deleted after file.delete.delay.ms, and a flush makes the cut durable before the
call returns.
"""

from __future__ import annotations

from sparklog.storage.errors import LogClosedError
from sparklog.storage.log_owner import TruncationOwner
from sparklog.storage.segment import LogSegment
from sparklog.storage.visibility import Visible


class LogTruncation:
    """Removes the tail of one log; the log's state is read and moved through it (no state of its own)."""

    def __init__(self, log: TruncationOwner):
        self._log = log

    def truncate_to(self, offset: int) -> None:
        """PartitionLog.truncate_to (Rule: truncation-removes-whole-batches)."""
        log = self._log
        holder = log._segment_set.holding(offset) or log._segments[0]
        if not holder.verified:
            log._verify(holder)
        with log._flush_lock:
            with log._lock:
                if offset >= log._leo:
                    return
                doomed = self._truncate_locked(offset)
                log._fences.clip(log._segment_set.bases[0], log._leo)
                log._rebuild_producer_state()
                cut = log._segments[-1]
            log._segment_set.schedule_deletes(doomed, log.config.file_delete_delay_ms)
            log.flush()  # fsyncs the directory (the renames) and rewrites the checkpoint if it named removed offsets
            log._files.fsync(cut.fd)  # the cut itself: flush() skips a segment the cut left empty
        log._visibility.announce(log)  # visibility.py Rule: listeners-hear-what-readers-see

    def _truncate_locked(self, offset: int) -> list[LogSegment]:
        log = self._log
        if offset <= log._segments[0].base_offset or offset < log._log_start:  # Kafka's truncateFullyAndStartAt
            doomed = log._segment_set.restart_at(offset, log.config)
            log._log_start = offset
        else:
            doomed = log._segment_set.truncate(offset)
        active = log._segments[-1]
        log._leo = active.next_offset
        log._visibility.cut_to(Visible(log._leo, active.base_offset, active.size))
        log._recovery_point = min(log._recovery_point, log._leo)
        return doomed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """PartitionLog.truncate_fully_and_start_at: empty the log and restart it at `offset`, which may lie
        past the LEO; the epoch cache is the caller's."""
        log = self._log
        with log._flush_lock:
            with log._lock:
                if log._closed:
                    raise LogClosedError(f"{log.name} is closed")
                doomed = log._segment_set.restart_at(offset, log.config)
                log._leo = offset
                log._visibility.reset(Visible(offset, offset, 0))
                log._recovery_point = min(log._recovery_point, offset)
                log._fences.clip(offset, offset)  # no damaged range is left
                log._rebuild_producer_state()  # every snapshot and producer is below `offset`: none is left
            log._segment_set.schedule_deletes(doomed, log.config.file_delete_delay_ms)
            log.flush()
        log._visibility.announce(log)  # visibility.py Rule: listeners-hear-what-readers-see
