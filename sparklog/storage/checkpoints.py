"""A partition directory's checkpoint files: the recovery point, the log start offset, the cleaner's offset.

Each is Kafka's OffsetCheckpointFile format with one entry (a version line, a count line, then
"topic partition offset"), written tmp → fsync → rename (Files.write_atomically, as CheckpointFile.java).

Rule: checkpoint-never-above-fsynced: the recovery-point file never names an offset above what is fsynced;
a stale one only costs replay time on open (recovery scans everything from it).
Rule: checkpoint-rewritten-when-behind: the recovery-point file is rewritten at once when the point moves
below what it names (truncation, recovery: a replay from there would trust bytes it never checked),
otherwise only every `checkpoint_interval_ms` (Kafka's log.flush.offset.checkpoint.interval.ms) and on
close.
An unreadable file is logged with what happens instead, and read as missing.
"""

from __future__ import annotations

import logging
import math
import os
import time

from sparklog.storage.files import Files

logger = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"  # Kafka's name; here one per partition directory
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"  # Kafka's name; here one per partition directory
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"  # Kafka's name (one per log dir there): the first dirty offset
CHECKPOINT_VERSION = 0  # Kafka's OffsetCheckpointFile version
DEFAULT_CHECKPOINT_INTERVAL_MS = 60_000  # log.flush.offset.checkpoint.interval.ms: Kafka's 60 s


class OffsetCheckpoints:
    """The one-entry checkpoint files of one partition directory."""

    def __init__(self, files: Files, directory: str, topic: str, partition: int):
        self._files = files
        self._directory = directory
        self._topic = topic
        self._partition = partition

    def read(self, file_name: str, fallback: str) -> int | None:
        """The offset in `file_name`; None when missing, or unreadable (logged, with what happens instead:
        `fallback`)."""
        data = self._files.read_file(os.path.join(self._directory, file_name))
        if data is None:
            return None
        try:
            version, count, entry = data.decode("ascii").splitlines()
            topic, partition, offset = entry.split(" ")
            if int(version) != CHECKPOINT_VERSION or int(count) != 1 or (topic, int(partition)) != (
                self._topic, self._partition
            ):
                raise ValueError(entry)
            return max(0, int(offset))
        except (ValueError, UnicodeDecodeError):
            logger.warning("%s-%d: unreadable %s; %s", self._topic, self._partition, file_name, fallback)
            return None

    def write(self, file_name: str, offset: int) -> None:
        text = f"{CHECKPOINT_VERSION}\n1\n{self._topic} {self._partition} {offset}\n"
        self._files.write_atomically(os.path.join(self._directory, file_name), text.encode("ascii"))


class RecoveryPointCheckpoint:
    """The recovery-point file and when it is due (Rule: checkpoint-rewritten-when-behind)."""

    def __init__(self, checkpoints: OffsetCheckpoints, interval_ms: int):
        self._checkpoints = checkpoints
        self._interval_s = interval_ms / 1000
        self.checkpointed: int | None = None  # what the file says (None: missing or unreadable)
        self.checkpointed_at = time.monotonic()
        self.writes = 0

    def read(self) -> int:
        """The checkpointed offset, or 0 (replay everything) if the file is missing or unreadable."""
        self.checkpointed = self._checkpoints.read(RECOVERY_POINT_FILE, "replaying every segment")
        return 0 if self.checkpointed is None else self.checkpointed

    def write(self, offset: int) -> None:
        self._checkpoints.write(RECOVERY_POINT_FILE, offset)
        self.checkpointed = offset
        self.checkpointed_at = time.monotonic()
        self.writes += 1

    def due(self, point: int, now: float, force: bool = False) -> bool:
        """Must the file be rewritten now for the fsynced recovery point `point`? Always when it names
        offsets the log no longer has; otherwise only when stale, on close (`force`), or once the interval
        has passed since the last write."""
        at = self.due_at(point)
        return at is not None and (force or now >= at)

    def due_at(self, point: int) -> float | None:
        """When (monotonic) the file must be rewritten for the recovery point `point`: -inf (now) when it names
        offsets the log no longer has, the end of the interval since the last write when it is stale, None
        when it names `point`."""
        checkpointed = self.checkpointed
        if checkpointed == point:
            return None
        if checkpointed is not None and point < checkpointed:
            return -math.inf
        return self.checkpointed_at + self._interval_s
