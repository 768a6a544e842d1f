"""Storage: partition logs of RecordBatch v2 segment files (the paper's section 3.1)."""

from sparklog.storage.cleaner_manager import CleanerConfig, CleanerManager, CleanerStatistics
from sparklog.storage.config import LogConfig
from sparklog.storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSegmentError,
    InvalidConfigError,
    InvalidRecordError,
    TransactionRefusedError,
    InvalidTopicName,
    LogClosedError,
    OffsetOutOfRange,
    RecordBatchTooLarge,
    StorageError,
)
from sparklog.storage.files import Files
from sparklog.storage.flusher import Flusher, default_flusher
from sparklog.storage.log import FileSlice, LogStatistics, PartitionLog
from sparklog.storage.log_manager import LogManager, LogManagerStatistics
from sparklog.storage.recovery import RecoveryStop, ValidPrefix
from sparklog.storage.scrubber import Scrubber, ScrubberConfig, ScrubberStatistics
from sparklog.storage.segment import TimestampOffset
from sparklog.storage.topic_names import validate_topic

__all__ = [
    "CleanerConfig",
    "CleanerManager",
    "CleanerStatistics",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "FileSlice",
    "Files",
    "Flusher",
    "InvalidConfigError",
    "InvalidRecordError",
    "TransactionRefusedError",
    "InvalidTopicName",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "LogManagerStatistics",
    "LogStatistics",
    "OffsetOutOfRange",
    "PartitionLog",
    "RecordBatchTooLarge",
    "RecoveryStop",
    "Scrubber",
    "ScrubberConfig",
    "ScrubberStatistics",
    "StorageError",
    "TimestampOffset",
    "ValidPrefix",
    "default_flusher",
    "validate_topic",
]
