"""LeaderEpochCache: which leader epoch wrote which offsets of one log (KIP-101, KIP-279).

An entry (epoch, start_offset) says that the leader of `epoch` appended its first message at
`start_offset`; epoch e ends where the next entry starts (the latest epoch ends at the log end offset).

Rule: epochs-increasing: entries are strictly increasing in both epoch and start offset. `assign(e, s)` of an epoch not
above the latest is ignored; one whose start offset is not above an entry's drops that entry (a leader of a later
epoch rewrote that range), as Kafka's LeaderEpochFileCache does.
Rule: epochs-follow-log: the cache follows the log: truncating the log's tail to offset o drops entries starting at or
after o (`truncate_from_end`); retention moving the log start to s drops entries wholly below s and moves
the one holding s to s (`truncate_from_start`).
Rule: epochs-checkpointed: every change is written at once to `leader-epoch-checkpoint` in the log directory, Kafka's
format (version 0, the entry count, then one `epoch start_offset` line each), tmp -> fsync -> rename through
storage/files.py. An unreadable file is logged and treated as empty: the follower then truncates by its
high watermark, never keeping a divergent suffix longer than that.

Thread-safety: one lock; the appender and the fetcher handler may call it from different threads.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from typing import NamedTuple

from sparklog.storage.files import Files

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"  # Kafka's name
CHECKPOINT_VERSION = 0  # Kafka's LeaderEpochCheckpointFile version
UNDEFINED_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # Kafka's EpochEndOffset.UNDEFINED_EPOCH_OFFSET


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """The answer to OffsetForLeaderEpoch: the largest epoch <= the one asked for, and where it ends."""

    epoch: int
    end_offset: int


class LeaderEpochCache:
    """The epoch -> start offset entries of one log, checkpointed (module docstring)."""

    def __init__(self, directory: str, files: Files, entries: list[EpochEntry] | None = None) -> None:
        self._path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILE)
        self._files = files
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = list(entries or [])

    @classmethod
    def load(cls, directory: str, files: Files) -> "LeaderEpochCache":
        """Read the checkpoint in `directory` (none or unreadable: an empty cache)."""
        cache = cls(directory, files)
        data = files.read_file(cache._path)
        if data is not None:
            try:
                cache._entries = _parse(data)
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("%s is unreadable (%s); starting with no leader epochs", cache._path, exc)
        return cache

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        entries = self._entries
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (Rule: epochs-increasing); True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} at offset {start_offset} is not valid")
        with self._lock:
            if self._entries and epoch <= self._entries[-1].epoch:
                return False
            kept = [e for e in self._entries if e.start_offset < start_offset]
            self._entries = kept + [EpochEntry(epoch, start_offset)]
            self._write()
            return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEndOffset:
        """KIP-279's answer: (largest epoch <= `epoch`, the start offset of the next higher epoch).

        The latest epoch ends at the log end offset; an epoch below every entry gets (epoch, first start
        offset); an epoch above every entry, or UNDEFINED_EPOCH, gets (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        """
        with self._lock:
            entries = self._entries
            if epoch == UNDEFINED_EPOCH or not entries:
                return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if epoch == entries[-1].epoch:
                return EpochEndOffset(epoch, log_end_offset)
            higher = bisect.bisect_right([e.epoch for e in entries], epoch)
            if higher == len(entries):
                return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if higher == 0:
                return EpochEndOffset(epoch, entries[0].start_offset)
            return EpochEndOffset(entries[higher - 1].epoch, entries[higher].start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log's tail from `end_offset` on was removed: drop the entries starting there or later."""
        with self._lock:
            kept = [e for e in self._entries if e.start_offset < end_offset]
            if kept != self._entries:
                self._entries = kept
                self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the entry holding it starts there, earlier ones go."""
        with self._lock:
            entries = self._entries
            holding = bisect.bisect_right([e.start_offset for e in entries], start_offset) - 1
            if holding < 0:
                return
            kept = [EpochEntry(entries[holding].epoch, start_offset)] + entries[holding + 1:]
            if kept != entries:
                self._entries = kept
                self._write()

    def clear(self) -> None:
        with self._lock:
            if self._entries:
                self._entries = []
                self._write()

    def _write(self) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        self._files.write_atomically(self._path, ("\n".join(lines) + "\n").encode("ascii"))


def _parse(data: bytes) -> list[EpochEntry]:
    lines = data.decode("ascii").splitlines()
    if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
        raise ValueError("not a version 0 leader epoch checkpoint")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ValueError(f"{count} entries announced, {len(lines) - 2} found")
    entries: list[EpochEntry] = []
    for line in lines[2:]:
        epoch, start = line.split(" ")
        entry = EpochEntry(int(epoch), int(start))
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset):
            raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append(entry)
    return entries
