"""A history checker for replication under faults (Jepsen's Kafka analysis, reduced to what a log promises).

Record every acknowledged write `(topic, partition, offset, value)` and every read `(reader, topic,
partition, offset, value)` from any thread; then `check()` finds:

- lost writes: an acknowledged write whose value no reader ever saw at its offset (the final full read of
  every partition must be recorded for this to mean "lost" rather than "not read yet");
- divergence: one offset of a partition acknowledged or read with two different values (a new leader handed
  out an offset that an old one had already acknowledged, or a consumer read an uncommitted tail);
- duplicates: one value stored at two offsets (written values must be unique). A producer without
  idempotence may legally leave one kind: a retry of a write whose first attempt was appended but whose
  answer was lost (Kafka's at-least-once). Such a "retried" copy lies before the acknowledged offset, or the
  write was never acknowledged at all; it is reported in `Report.retried`, not as a problem, unless the
  history is of an idempotent producer (`History(idempotent=True)`), for which every copy is a duplicate. A
  copy after the acknowledged offset, or a value acknowledged at two offsets, is always a duplicate;
- non-monotonic reads: a reader that saw offset o and then o' <= o of the same partition without a
  `record_seek` in between (a consumer going backwards, or serving one offset twice).

Values must be unique per attempted write (`History.next_value()` makes them).
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Problem:
    kind: str  # "lost", "divergent", "duplicate", "non-monotonic"; "retried" (module docstring)
    topic: str
    partition: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.topic}-{self.partition}: {self.detail}"


@dataclass(frozen=True)
class Report:
    acknowledged: int
    read: int  # distinct (partition, offset) positions read
    problems: tuple[Problem, ...] = field(default=())
    retried: tuple[Problem, ...] = field(default=())  # a non-idempotent producer's legal retry copies

    @property
    def ok(self) -> bool:
        return not self.problems

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def __str__(self) -> str:
        head = (f"{self.acknowledged} acknowledged, {self.read} read, {len(self.problems)} problems, "
                f"{len(self.retried)} retried writes stored twice")
        return "\n".join([head, *map(str, self.problems[:50])])


class History:
    """Thread-safe recorder of acknowledged writes and reads; `check()` judges them (module docstring)."""

    def __init__(self, idempotent: bool = False) -> None:
        self.idempotent = idempotent  # the producer promises no retry copies (module docstring)
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._acks: list[tuple[TopicPartition, int, bytes]] = []
        self._reads: list[tuple[str, TopicPartition, int, bytes]] = []
        self._last_read: dict[tuple[str, TopicPartition], int] = {}
        self._backwards: list[Problem] = []

    def next_value(self, prefix: str = "v") -> bytes:
        """A value never handed out before by this history."""
        return f"{prefix}-{next(self._counter)}".encode()

    def record_ack(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self._acks.append(((topic, partition), offset, value))

    def record_read(self, reader: str, topic: str, partition: int, offset: int, value: bytes) -> None:
        key = (reader, (topic, partition))
        with self._lock:
            last = self._last_read.get(key)
            if last is not None and offset <= last:
                self._backwards.append(Problem("non-monotonic", topic, partition,
                                               f"reader {reader} read offset {offset} after {last}"))
            self._last_read[key] = offset
            self._reads.append((reader, (topic, partition), offset, value))

    def record_seek(self, reader: str, topic: str, partition: int) -> None:
        """The reader repositions on purpose (a restart, an explicit seek): its next offset may be lower."""
        with self._lock:
            self._last_read.pop((reader, (topic, partition)), None)

    def check(self) -> Report:
        with self._lock:
            acks, reads, backwards = list(self._acks), list(self._reads), list(self._backwards)
        seen: dict[TopicPartition, dict[int, set[bytes]]] = defaultdict(lambda: defaultdict(set))
        for (tp, offset, value) in acks:
            seen[tp][offset].add(value)
        read_at: dict[TopicPartition, dict[int, set[bytes]]] = defaultdict(lambda: defaultdict(set))
        for _reader, tp, offset, value in reads:
            read_at[tp][offset].add(value)
            seen[tp][offset].add(value)
        copies = _duplicates(read_at, acks)
        retried = [] if self.idempotent else [p for p in copies if p.kind == "retried"]
        duplicates = [p if p.kind == "duplicate" else _as_duplicate(p) for p in copies if p not in retried]
        problems = [*_divergent(seen), *_lost(acks, read_at), *duplicates, *backwards]
        read_positions = sum(len(offsets) for offsets in read_at.values())
        return Report(len(acks), read_positions, tuple(problems), tuple(retried))


def _divergent(seen) -> list[Problem]:
    return [Problem("divergent", tp[0], tp[1], f"offset {offset} has values {sorted(values)}")
            for tp, offsets in sorted(seen.items()) for offset, values in sorted(offsets.items())
            if len(values) > 1]


def _lost(acks, read_at) -> list[Problem]:
    return [Problem("lost", tp[0], tp[1], f"acknowledged {value!r} at offset {offset} was never read there")
            for tp, offset, value in acks if value not in read_at[tp].get(offset, ())]


def _duplicates(read_at, acks) -> list[Problem]:
    """Every value stored at several offsets: "retried" when a lost answer's retry explains the copies
    (module docstring), "duplicate" otherwise."""
    where: dict[tuple[TopicPartition, bytes], set[int]] = defaultdict(set)
    acked_at: dict[tuple[TopicPartition, bytes], set[int]] = defaultdict(set)
    for tp, offsets in read_at.items():
        for offset, values in offsets.items():
            for value in values:
                where[(tp, value)].add(offset)
    for tp, offset, value in acks:
        where[(tp, value)].add(offset)
        acked_at[(tp, value)].add(offset)
    return [Problem("retried" if _retry_explains(offsets, acked_at.get((tp, value), set())) else "duplicate",
                    tp[0], tp[1], f"{value!r} at offsets {sorted(offsets)}")
            for (tp, value), offsets in sorted(where.items()) if len(offsets) > 1]


def _retry_explains(offsets: set[int], acked: set[int]) -> bool:
    """Earlier attempts are appended before the one acknowledged (at most one), never after it."""
    return not acked or (len(acked) == 1 and max(acked) == max(offsets))


def _as_duplicate(problem: Problem) -> Problem:
    return Problem("duplicate", problem.topic, problem.partition, problem.detail)
