"""What each part of a partition log needs of the log that owns it: one Protocol per part.

The log's parts (append.py, log_loader.py, log_retention.py, log_truncation.py,
verification.py) hold no state of their own:
each reads and moves its owner's (log.py's PartitionLog) through the narrow view named here, so a part
imports this module and never log.py (which imports every part), and the type checker proves at
PartitionLog's construction of each part that the log offers all the part uses.
Rule: owner-locks-are-the-logs: a part takes its owner's locks (`_flush_lock` first, then `_lock`) as the
log's own methods do (log.py's class docstring); it adds none.
Rule: owner-view-is-narrow: a view names only what its part reads or moves; a part that needs more widens
its view here, where the reviewer sees what it takes.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from sparklog.storage.checkpoints import OffsetCheckpoints, RecoveryPointCheckpoint
from sparklog.storage.config import LogConfig
from sparklog.storage.fences import FencedRanges
from sparklog.storage.files import Files
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.segment import LogSegment
from sparklog.storage.segment_set import LogSegments
from sparklog.storage.transactions import TransactionTracker, TransactionVerifier
from sparklog.storage.visibility import Visibility

__all__ = ["AppendOwner", "LoaderOwner", "RetentionOwner", "TruncationOwner", "VerifierOwner"]


class _Owner(Protocol):
    """What every part reads: the log's name, settings, files, clock and segment set."""

    directory: str
    name: str
    config: LogConfig
    _files: Files
    _clock: Callable[[], int]
    _closed: bool
    _segment_set: LogSegments


class _LockedOwner(_Owner, Protocol):
    """A part that changes the log's segments or state under its locks (Rule: owner-locks-are-the-logs)."""

    _lock: threading.Lock
    _flush_lock: threading.RLock
    _visibility: Visibility

    @property
    def _segments(self) -> tuple[LogSegment, ...]: ...


class LoaderOwner(_Owner, Protocol):
    """log_loader.LogLoader's view: the recovery point to load from and the fences it sets up."""

    _fences: FencedRanges
    _recovery_checkpoint: RecoveryPointCheckpoint

    def _fences_changed(self, ranges: tuple[tuple[int, int], ...]) -> None: ...


class RetentionOwner(_LockedOwner, Protocol):
    """log_retention.LogRetention's view: the log's head, its checkpoint and the producers it trims."""

    _checkpoints: OffsetCheckpoints
    _fences: FencedRanges
    _log_start: int
    _producers: ProducerStateManager

    @property
    def log_start_offset(self) -> int: ...

    def _roll_locked(self) -> LogSegment: ...

    def _verify(self, segment: LogSegment) -> int: ...


class TruncationOwner(_LockedOwner, Protocol):
    """log_truncation.LogTruncation's view: the log's tail (LEO, recovery point, log start), the fences it
    clips and the producer state it rebuilds."""

    _leo: int
    _recovery_point: int
    _log_start: int
    _fences: FencedRanges

    def _rebuild_producer_state(self) -> None: ...

    def _verify(self, segment: LogSegment) -> int: ...

    def flush(self) -> None: ...


class VerifierOwner(_LockedOwner, Protocol):
    """verification.SegmentVerifier's view: what is flushed, and the counter of bytes it replayed."""

    _recovery_point: int
    _verified_bytes: int


class AppendOwner(_LockedOwner, Protocol):
    """append.AppendPipeline's view: the LEO, the producer and transaction state, the flush counters, and the
    facade's own entry points (a set a stage cannot take goes back through them)."""

    _leo: int
    _producers: ProducerStateManager
    _txns: TransactionTracker
    _unflushed_messages: int
    _first_unflushed_at: float | None
    _appends: int
    _appended_bytes: int
    _flush_messages: int
    transaction_verifier: TransactionVerifier | None

    @property
    def leader_epochs(self) -> LeaderEpochCache: ...

    @property
    def stamps_append_time(self) -> bool: ...

    def _roll_locked(self) -> LogSegment: ...

    def _schedule_flush(self) -> None: ...

    def flush(self) -> None: ...

    def append(self, batches: Any, append_time_ms: int | None = None) -> int: ...

    def append_as_leader(self, batches: Any, leader_epoch: int, append_time_ms: int | None = None) -> int: ...
