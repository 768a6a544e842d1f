"""Random damage to a partition log's files, and the check that follows it (issue 14's corruption run).

One trial builds a log of several small segments, damages one file (flip a byte, zero a 4 KB page, or
truncate it; a .log, .index or .timeindex), then reads every offset back and checks:
- every batch served passes its CRC-32C and is the batch written at that offset (byte for byte, but for
  the partition leader epoch, which no checksum covers);
- every batch whose bytes the damage did not touch is served (no valid batch is lost);
- the log end offset did not move back (offsets are never reused).
"Offline" trials damage the files of a cleanly closed log and reopen it (bit rot found before first use);
"online" trials damage a flushed, closed segment of an open log and run the scrubber's pass.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from support.storage_batches import make_batch
from sparklog.records.batch import PARTITION_LEADER_EPOCH_OFFSET, iter_batches
from sparklog.storage import PartitionLog

PAGE = 4096  # what a failing disk sector group or a bad page-cache page loses
KINDS = ("flip", "zero-page", "truncate")
SETTINGS = {"segment.bytes": 6000, "index.interval.bytes": 300, "flush.ms": 10**9, "file.delete.delay.ms": 0}


@dataclass
class Trial:
    mode: str
    kind: str
    path: str
    span: tuple[int, int]  # damaged byte range of `path`
    lost: list[int] = field(default_factory=list)  # base offsets of intact batches not served
    bad: list[str] = field(default_factory=list)  # batches served that should not have been
    fenced: tuple = ()

    @property
    def ok(self) -> bool:
        return not self.lost and not self.bad


def _layout(log) -> list[tuple[str, int, int, bytes]]:
    """(path, position, base offset, bytes) of every batch in the files."""
    out = []
    for segment in log.segments:
        data = open(segment.path, "rb").read()
        position = 0
        for batch in iter_batches(data):
            out.append((segment.path, position, batch.base_offset, bytes(batch.raw)))
            position += batch.size
    return out


def _damage(rng: random.Random, path: str, kind: str) -> tuple[int, int]:
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    with open(path, "r+b") as f:
        if kind == "flip":
            at = rng.randrange(size)
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
            return at, at + 1
        if kind == "zero-page":
            start = rng.randrange(0, size, PAGE) if rng.random() < 0.5 else rng.randrange(size)
            end = min(size, start + PAGE)
            f.seek(start)
            f.write(bytes(end - start))
            return start, end
        at = rng.randrange(size)
        f.truncate(at)
        return at, size


def _mask_epoch(raw: bytes) -> bytes:
    return raw[:PARTITION_LEADER_EPOCH_OFFSET] + bytes(4) + raw[PARTITION_LEADER_EPOCH_OFFSET + 4:]


def _build(rng: random.Random, directory: str, flusher) -> PartitionLog:
    log = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    for i in range(rng.randint(20, 80)):
        log.append(make_batch(rng.randint(1, 5), rng.randint(10, 400), tag=i))
    log.flush()
    return log


def run_trial(rng: random.Random, directory: str, flusher) -> Trial:
    log = _build(rng, directory, flusher)
    online = rng.random() < 0.3 and len(log.segments) > 1
    if online:
        victims = [s.path for s in log.segments[:-1]]  # the scrubber verifies flushed, closed segments
    else:
        log.close()
        victims = [s.path + suffix for s in log.segments for suffix in ("", "", ".index", ".timeindex")]
        victims = [p.replace(".log.index", ".index").replace(".log.timeindex", ".timeindex") for p in victims]
    layout, end_offset = _layout(log), log.log_end_offset
    path, kind = rng.choice(victims), rng.choice(KINDS)
    span = _damage(rng, path, kind)
    if online:
        log.scrub()
    else:
        log = PartitionLog.open(directory, SETTINGS, flusher=flusher)
    trial = Trial("online" if online else "offline", kind, os.path.basename(path), span)
    try:
        _check(log, layout, path, span, end_offset, trial)
        trial.fenced = log.fenced_ranges()
    finally:
        log.close()
    return trial


def _check(log, layout, path, span, end_offset, trial: Trial) -> None:
    written = {base: _mask_epoch(raw) for _, _, base, raw in layout}
    served = {}
    for piece in log.iter_slices():
        try:
            for batch in iter_batches(piece.read_bytes()):  # raises on a CRC mismatch
                served[batch.base_offset] = _mask_epoch(bytes(batch.raw))
        except Exception as exc:  # noqa: BLE001 - any failure to decode what was served is the finding
            trial.bad.append(f"{piece}: {exc}")
    for base, raw in served.items():
        if written.get(base) != raw:
            trial.bad.append(f"batch served at offset {base} is not the batch written there")
    log_path = path if path.endswith(".log") else None
    for seg_path, position, base, raw in layout:
        touched = seg_path == log_path and position < span[1] and span[0] < position + len(raw)
        if not touched and base not in served:
            trial.lost.append(base)
    if log.log_end_offset < end_offset:
        trial.bad.append(f"log end offset moved back from {end_offset} to {log.log_end_offset}")
