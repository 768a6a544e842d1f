"""LogRetention: the log's head removed: time and size retention, and DeleteRecords' log start offset.

Rule: log-start-forward: the log start offset is the larger of the first segment's base offset and the
offset DeleteRecords moved it to (`delete_records_before`), checkpointed in `log-start-offset-checkpoint`
before the call returns; it only moves forward (truncation below it aside).
Retention deletes whole segments (segment_set.py, Rule: retention-whole-segments); the producers whose
batches are all gone are dropped with them (log.py, Rule: producer-state-follows-log).
"""

from __future__ import annotations


from sparklog.storage.checkpoints import LOG_START_OFFSET_FILE
from sparklog.storage.errors import LogClosedError, OffsetOutOfRange
from sparklog.storage.log_owner import RetentionOwner
from sparklog.storage.recovery import INT64_MAX


class LogRetention:
    """Removes the head of one log; the log's state is read and moved through it (no state of its own)."""

    def __init__(self, log: RetentionOwner):
        self._log = log

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to `offset` (Kafka's DeleteRecords); return the new log start offset.

        `offset` may be at most the high watermark; records below it are no longer served (a fetch there is
        OFFSET_OUT_OF_RANGE), and whole segments below it are deleted at once. Moving it backwards is a no-op.
        The new start is checkpointed durably before this returns, so a restart keeps it (Rule: log-start-forward).
        """
        log = self._log
        with log._flush_lock:
            with log._lock:
                if log._closed:
                    raise LogClosedError(f"{log.name} is closed")
                high_watermark = log._visibility.hw.offset
                if offset < 0 or offset > high_watermark:
                    raise OffsetOutOfRange(offset, log.log_start_offset, high_watermark, log.name)
                if offset <= log.log_start_offset:
                    return log.log_start_offset
                log._log_start = offset
                log._checkpoints.write(LOG_START_OFFSET_FILE, offset)
                doomed = [s for s in log._segments[:-1] if s.next_offset <= offset]
                log._segment_set.drop_head(doomed)
                log._producers.truncate_head(offset, log._segment_set.bases[0])
            log._segment_set.schedule_deletes(doomed, log.config.file_delete_delay_ms)
        log._visibility.announce(log)  # the log start moved (visibility.py Rule: listeners-hear-what-readers-see)
        return offset

    def enforce(self, now_ms: int | None = None) -> int:
        """Delete the oldest whole segments past retention.ms or beyond retention.bytes; return how many.

        Never one holding offsets at or above the HW. The active segment too, once non-empty and wholly
        below the HW: a new empty one is rolled at the LEO first, so a quiet log empties and its log start
        reaches its end (Kafka's LocalLog.deletableSegments and UnifiedLog.deleteSegments). A segment's age
        is that of its largest timestamp (the design notes' rule), or of its file's last modification when
        none of its batches carries a timestamp (Kafka's LogSegment.largestTimestamp).
        """
        log = self._log
        now = log._clock() if now_ms is None else now_ms
        segment_set = log._segment_set
        for segment in segment_set.retention_victims(log.config, log._visibility.hw.offset, now):
            if not segment.verified:  # a hint, unlocked: their timestamps must be verified
                log._verify(segment)
        with log._flush_lock, log._lock:
            doomed = segment_set.retention_victims(log.config, log._visibility.hw.offset, now)
            if doomed:
                if doomed[-1] is log._segments[-1]:
                    log._roll_locked()  # a log always has an active segment: the next append's
                segment_set.drop_head(doomed)
                log._fences.clip(log._segment_set.bases[0], INT64_MAX)
                log._producers.truncate_head(log.log_start_offset, log._segment_set.bases[0])
        if doomed:
            log._files.fsync_dir(log.directory)  # the renames: a crash must not bring the segments back
            log._visibility.announce(log)  # the log start moved (visibility.py Rule: listeners-hear-what-readers-see)
        segment_set.schedule_deletes(doomed, log.config.file_delete_delay_ms)
        return len(doomed)
