"""The storage layer's exceptions; the broker maps each to one Kafka error code."""

from __future__ import annotations

from sparklog.records.batch import CorruptRecordError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "DuplicateSequence",
    "InvalidConfigError",
    "InvalidProducerEpoch",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicName",
    "LogClosedError",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "RecordBatchTooLarge",
    "RecordValidationError",
    "rejected_records",
    "StorageError",
]


class StorageError(Exception):
    """Base class of the errors raised by the storage layer (CorruptRecordError aside)."""


class OffsetOutOfRange(StorageError):
    """A read asked for an offset outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE, 1)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int, name: str = "log"):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range for {name}: valid offsets are "
            f"[{log_start_offset}, {log_end_offset}] (log start offset to log end offset)"
        )


class RecordBatchTooLarge(StorageError):
    """A batch is larger than max.message.bytes (MESSAGE_TOO_LARGE, 10); nothing was appended."""


class RecordValidationError(StorageError):
    """Records refused by the log's validation (Kafka's RecordValidationException), nothing appended:
    ``record_errors`` names the records at fault as (batch index, message), KIP-467's per-record errors
    (index 0 is the first record of the append), empty when the fault is not one record's."""

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...] = ()):
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class InvalidTimestampError(RecordValidationError):
    """A CreateTime timestamp lies outside message.timestamp.before/after.max.ms of the broker's clock
    (INVALID_TIMESTAMP, 32); nothing was appended."""


class InvalidRecordError(RecordValidationError):
    """A record breaks the topic's rules: a null key in a compacted topic (INVALID_RECORD, 87, as Kafka's
    LogValidator answers); nothing was appended."""


def rejected_records(record_errors: list[tuple[int, str]]) -> str:
    """The message of a RecordValidationError with record errors, as Kafka's LogValidator words it."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
    return (f"One or more records have been rejected due to {len(record_errors)} record errors in total, and "
            f"only showing the first three errors at most: [{shown}]")


class TransactionRefusedError(StorageError):
    """A client's transactional batch the log's transaction_verifier refused (INVALID_TXN_STATE, 48, as
    Kafka's KIP-890 verification answers a partition that is not in an ongoing transaction of the producer);
    nothing was appended."""


class InvalidTopicName(StorageError, ValueError):
    """A topic name breaks Kafka's rule [a-zA-Z0-9._-]{1,249}, not '.' or '..' (INVALID_TOPIC_EXCEPTION, 17)."""


class InvalidConfigError(StorageError, ValueError):
    """A log setting is unknown or has an illegal value (INVALID_CONFIG, 40)."""


class CorruptIndexError(StorageError):
    """An index file fails its sanity check; the caller rebuilds it from the log."""


class CorruptSegmentError(StorageError):
    """A read found no valid batch where the index and the offset chain say one starts (bit rot found
    while reading, KAFKA_STORAGE_ERROR, 56, which clients retry); the log fences the damage."""


class LogClosedError(StorageError):
    """The log was closed or deleted."""


class OffsetsNotContiguous(StorageError):
    """A replicated batch does not start where the log ends (a follower's fetch raced a truncation)."""


class OutOfOrderSequence(StorageError):
    """An idempotent producer's batch does not continue its sequence (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpoch(StorageError):
    """An idempotent producer's batch carries an epoch older than the partition has seen (INVALID_PRODUCER_EPOCH)."""


class DuplicateSequence(StorageError):
    """A duplicate batch inside a record set of several batches, which cannot be answered with one offset
    (DUPLICATE_SEQUENCE_NUMBER)."""
