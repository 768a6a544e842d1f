"""Batches for the storage tests, built with the real codec (sparklog.records.batch.build_batch)."""

from __future__ import annotations

from sparklog.records.batch import build_batch, iter_batches

BASE_TS = 1_700_000_000_000


def make_batch(count: int = 3, value_size: int = 20, timestamp: int = BASE_TS, tag: int = 0) -> bytes:
    """A batch of `count` records with distinct values (tag, i) and the given timestamp."""
    records = []
    for i in range(count):
        value = f"{tag}:{i}:".encode().ljust(value_size, b"x")
        records.append((f"k{i}".encode(), value, None, timestamp + i))
    return build_batch(records)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, next offset) of every whole batch in `data`."""
    return [(b.base_offset, b.next_offset) for b in iter_batches(data)]


def read_all(log) -> bytes:
    """Every visible byte of the log, through read() slices."""
    return b"".join(piece.read_bytes() for piece in log.iter_slices())
