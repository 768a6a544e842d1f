"""LogLoader: open a partition log's directory and recover it (Kafka's LogLoader, with bit rot fenced).

Rule: swaps-completed-first: before any segment is read, leftovers of an earlier run are removed (`.deleted`,
`.tmp`, and `.cleaned`: a clean that never committed) and each `.swap` completes its swap: the live segments
whose offsets it covers are deleted and it is renamed live (Rule: cleaned-swap, in log.py).
Rule: torn-tail-truncated: the segments from the recovery point on (and always the last one) are replayed;
damage at or past the recovery point is a torn tail: truncated, and the later segments deleted.
Rule: bit-rot-fenced: damage below the recovery point is bit rot in fsynced bytes: the damaged offsets are
fenced (fences.py), the valid batches after them move to a segment of their own (`<resumed base>.log`,
written tmp, fsync, rename, fsync dir) and the damaged segment is cut after its valid prefix; every valid
batch is kept and offsets are never reused. A fenced range is a gap between two segments, which reads step
over. The same repair runs when a later verification finds damage (`fence_damage`).
Like Redpanda's log_replayer, a segment's replay returns where its valid prefix ends; the loader truncates.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterable, NamedTuple

from sparklog.storage.config import LogConfig
from sparklog.storage.fences import FencedRanges
from sparklog.storage.files import Files
from sparklog.storage.log_owner import LoaderOwner
from sparklog.storage.recovery import INT64_MAX, READ_CHUNK_BYTES, RecoveryStop, Resync, ValidPrefix, find_next_batch
from sparklog.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment,
                                      parse_segment_file_name, segment_file_name)

logger = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"


class LoadedLog(NamedTuple):
    """What loading found: the segments kept (never empty) and the recovery point read."""

    segments: tuple[LogSegment, ...]
    recovery_point: int


class LogLoader:
    """Loads and repairs the segments of one log; holds no state of its own (the log's is read through it)."""

    def __init__(self, log: LoaderOwner):
        self._log = log

    @property
    def directory(self) -> str:
        return self._log.directory

    @property
    def name(self) -> str:
        return self._log.name

    @property
    def config(self) -> LogConfig:
        return self._log.config

    @property
    def _files(self) -> Files:
        return self._log._files

    @property
    def _fences(self) -> FencedRanges:
        return self._log._fences

    def _clock(self) -> int:
        return self._log._clock()

    def load(self) -> LoadedLog:
        """Recover the directory's segments, replaying from the checkpointed recovery point."""
        log = self._log
        bases = self._scan_directory()
        recovery_point = log._recovery_checkpoint.read()
        log._fences = FencedRanges.load(self._files, self.directory, log._fences_changed)
        segments: list[LogSegment] = []
        now = self._clock()
        for i, base in enumerate(bases):
            if segments and not self._follows(segments[-1].next_offset, base, recovery_point):
                logger.warning("%s: segment %d does not follow offset %d; deleting it and %d later segment(s)",
                               self.name, base, segments[-1].next_offset, len(bases) - i - 1)
                self.delete_segment_files(bases[i:])
                break
            bound = bases[i + 1] if i + 1 < len(bases) else None
            segment = LogSegment(self.directory, base, self.config, self._files, now)
            prefix = self._load_segment(segment, recovery_point, last=bound is None)
            segments.append(segment)
            if not prefix.clean and prefix.next_offset < recovery_point:  # Rule: bit-rot-fenced
                _, prefix = self.fence_damage(segment, prefix, recovery_point, bound, segments.extend)
            if not prefix.clean:  # Rule: torn-tail-truncated
                logger.warning("%s: segment %d truncated at offset %d (%s); deleting %d later segment(s)",
                               self.name, segments[-1].base_offset, prefix.next_offset, prefix.stop.value,
                               len(bases) - i - 1)
                self.delete_segment_files(bases[i + 1:])
                break
        if not segments:
            segments.append(LogSegment(self.directory, recovery_point, self.config, self._files, now))
        self._fences.clip(segments[0].base_offset, segments[-1].next_offset)
        return LoadedLog(tuple(segments), recovery_point)

    def _load_segment(self, segment: LogSegment, recovery_point: int, last: bool) -> ValidPrefix:
        """Kafka's LogLoader rule: replay fully every segment that may hold offsets at or past the recovery
        point, and the last one (appends go there: it is verified before they start, Rule: verify-before-first-use)."""
        if last or segment.base_offset > recovery_point:
            return segment.recover(recovery_point)
        prefix = segment.load(recovery_point)  # cheap: trusts the index and replays only the tail
        if segment.next_offset > recovery_point:  # holds bytes that were never fsynced: replay it all
            prefix = segment.recover(recovery_point)
        return prefix

    def _follows(self, previous_end: int, base: int, recovery_point: int) -> bool:
        """May a segment starting at `base` follow one ending at `previous_end`? A gap is a fenced range
        (Rule: bit-rot-fenced), or one below the recovery point (the fence file was lost): fence it again."""
        if base == previous_end or self._fences.covers(previous_end, base):
            return True
        if previous_end < base and previous_end < recovery_point:
            logger.error("%s: offsets [%d, %d) are missing below the recovery point %d; fencing them",
                         self.name, previous_end, base, recovery_point)
            self._fences.add(previous_end, base)
            return True
        return False

    # -- bit rot: fencing damaged ranges (Rule: bit-rot-fenced) ----------------------------------------------------

    def fence_damage(self, segment: LogSegment, prefix: ValidPrefix, protected_until: int, bound: int | None,
                      publish: Callable[[list[LogSegment]], None]) -> tuple[list[LogSegment], ValidPrefix]:
        """`segment` replays cleanly only to `prefix`, below `protected_until`: fence the damaged offsets,
        move each run of valid batches after them into a segment of its own, and cut the damaged ones.

        `bound` is the next segment's base (None for the last segment, whose fence then runs to the
        recovery point, kept as the base of a new empty segment so offsets are never reused). `publish`
        gets the new segments before any cut, so a reader never finds the batches in neither place.
        Returns the new segments and the replay of the last one (not clean: a torn tail, Rule: torn-tail-truncated).
        """
        added, cuts, source, last = [], [], segment, prefix
        while True:
            resync = find_next_batch(source._read_at, source.file_size(), prefix.truncate_at, prefix.next_offset + 1,
                                     INT64_MAX if bound is None else bound, self._may_end_at(protected_until, bound))
            end = resync.header.base_offset if resync else protected_until if bound is None else bound
            self._fence(source, prefix, end)
            cuts.append((source, prefix))
            if resync is None:  # the damage runs to the end of the file: the fence to the next segment
                if bound is None:
                    added.append(LogSegment(self.directory, end, self.config, self._files, self._clock()))
                last = ValidPrefix(end, 0, RecoveryStop.END_OF_LOG, 0)
                break
            source = self._move_tail(source, resync)
            added.append(source)
            prefix = last = source.recover(protected_until)
            if prefix.clean or prefix.next_offset >= protected_until:
                break
        publish(added)
        for damaged, valid in cuts:
            damaged.cut(valid.truncate_at, valid.next_offset)
            damaged.flush()
        self._files.fsync_dir(self.directory)
        return added, last

    def _may_end_at(self, protected_until: int, bound: int | None) -> Callable[[int], bool]:
        """Where a segment's last batch may end: at the next segment's base (or a fenced gap before it); the
        last segment at the recovery point or past it (unflushed batches follow)."""
        if bound is None:
            return lambda next_offset: next_offset >= protected_until
        return lambda next_offset: next_offset == bound or self._fences.covers(next_offset, bound)

    def _fence(self, segment: LogSegment, prefix: ValidPrefix, end: int) -> None:
        logger.error("%s: DATA LOSS: segment %s is damaged at byte %d (%s); fencing offsets [%d, %d) and keeping "
                     "every valid batch after them", self.name, segment.path, prefix.truncate_at, prefix.stop.value,
                     prefix.next_offset, end)
        self._fences.add(prefix.next_offset, end)  # before the files change (fences.py Rule: fence-saved-first)

    def _move_tail(self, source: LogSegment, resync: Resync) -> LogSegment:
        """Copy `source`'s bytes from `resync` on into a new segment named by the batch there (Rule: bit-rot-fenced)."""
        base = resync.header.base_offset
        path = os.path.join(self.directory, segment_file_name(base))
        tmp = path + TMP_SUFFIX
        out = self._files.open(tmp, create=True)
        try:
            self._files.truncate(out, 0)
            end, position = source.file_size(), resync.position
            while position < end:
                chunk = self._files.pread(source.fd, min(READ_CHUNK_BYTES, end - position), position)
                self._files.pwrite(out, chunk, position - resync.position)
                position += len(chunk)
            self._files.fsync(out)
        finally:
            self._files.close(out)
        self._files.rename(tmp, path)
        self._files.fsync_dir(self.directory)
        return LogSegment(self.directory, base, self.config, self._files, self._clock())

    def _scan_directory(self) -> list[int]:
        names = self._files.listdir(self.directory)
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(TMP_SUFFIX) or name.endswith(CLEANED_SUFFIX):
                self._files.unlink(os.path.join(self.directory, name))  # leftovers of a previous run (Rule: cleaned-swap)
        swaps = [name for name in names if name.endswith(SWAP_SUFFIX)]
        if swaps:
            self._complete_swaps(swaps)
            names = self._files.listdir(self.directory)
        logs = set()
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed and parsed[1] == ".log":
                logs.add(parsed[0])
        for name in names:  # an index without its log is an orphan
            parsed = parse_segment_file_name(name)
            if parsed and parsed[0] not in logs:
                self._files.unlink(os.path.join(self.directory, name))
        return sorted(logs)

    def _complete_swaps(self, swaps: list[str]) -> None:
        """Rule: cleaned-swap: each `<base>.log.swap` was fsynced whole before that name was given to it: it replaces
        the live segments whose base offsets lie in [base, its next offset); its index files are rebuilt."""
        bases = []
        for name in swaps:
            parsed = parse_segment_file_name(name[: -len(SWAP_SUFFIX)])
            if parsed and parsed[1] == ".log":
                bases.append(parsed[0])
            else:
                self._files.unlink(os.path.join(self.directory, name))  # an index: rebuilt from the .log
        for base in bases:
            swap = LogSegment(self.directory, base, self.config, self._files, 0, suffix=SWAP_SUFFIX)
            end = swap.recover(INT64_MAX).next_offset
            swap.close()
            for index_path in (swap.index.path, swap.time_index.path):
                self._files.unlink(index_path)
            covered = [b for b in self._live_bases() if base <= b < end]
            logger.info("%s: completing the swap of cleaned segment %d over offsets [%d, %d) (%d segment(s))",
                        self.name, base, base, end, len(covered))
            self.delete_segment_files(covered)
            self._files.rename(swap.path, os.path.join(self.directory, segment_file_name(base)))
        self._files.fsync_dir(self.directory)

    def _live_bases(self) -> list[int]:
        return sorted(p[0] for p in map(parse_segment_file_name, self._files.listdir(self.directory))
                      if p and p[1] == ".log")

    def delete_segment_files(self, bases: Iterable[int]) -> None:
        for base in bases:
            segment = LogSegment(self.directory, base, self.config, self._files, 0)
            segment.delete_files()
