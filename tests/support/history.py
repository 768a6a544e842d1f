"""A history checker for replication under faults (Jepsen's Kafka analysis, reduced to what a log promises).

Record every acknowledged write `(topic, partition, offset, value)` and every read `(reader, topic,
partition, offset, value)` from any thread; then `check()` finds:

- lost writes: an acknowledged write whose value no reader ever saw at its offset (the final full read of
  every partition must be recorded for this to mean "lost" rather than "not read yet");
- divergence: one offset of a partition acknowledged or read with two different values (a new leader handed
  out an offset that an old one had already acknowledged, or a consumer read an uncommitted tail);
- duplicates: one value stored at two offsets that no retry explains: acknowledged at two offsets, or
  acknowledged at an offset below another copy of it (the acknowledged attempt is a producer's last one,
  so only a broker copying data twice puts a copy after it);
- retries (not a problem): one value at several offsets, acknowledged at most once and then at the highest.
  A producer with acks=all, retries and no idempotence re-sends a batch whose answer it lost (a timeout, a
  cut connection, a leader that died after appending); each attempt may be appended: Kafka allows this
  (at-least-once), idempotence (KIP-98) is what removes it. Counted apart, so that a report separates the
  legal from the lost. With `History(idempotent=True)` (a producer with idempotence) every copy is a
  duplicate;
- non-monotonic reads: a reader that saw offset o and then o' <= o of the same partition without a
  `record_seek` in between (a consumer going backwards, or serving one offset twice).

Values must be unique per attempted write (`History.next_value()` makes them).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
MAX_PRINTED = 50  # problems a report prints in full; the head counts them all


@dataclass(frozen=True)
class Problem:
    kind: str  # "lost", "divergent", "duplicate", "non-monotonic"; or "retry" (legal: Report.retries)
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
    retries: tuple[Problem, ...] = field(default=())  # non-idempotent retries: legal, never a problem

    @property
    def ok(self) -> bool:
        return not self.problems

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def __str__(self) -> str:
        head = (f"{self.acknowledged} acknowledged, {self.read} read, {len(self.problems)} problems "
                f"{dict(Counter(p.kind for p in self.problems))}, {len(self.retries)} values written more than "
                f"once by non-idempotent retries (legal without idempotence)")
        return "\n".join([head, *map(str, self.problems[:MAX_PRINTED])])


class History:
    """Thread-safe recorder of acknowledged writes and reads; `check()` judges them (module docstring)."""

    def __init__(self, idempotent: bool = False) -> None:
        self.idempotent = idempotent  # the producer promises no retry copies (module docstring)
        self._lock = threading.Lock()
        self._handed_out = 0  # values made by next_value: the next one's number
        self._acks: list[tuple[TopicPartition, int, bytes]] = []
        self._reads: list[tuple[str, TopicPartition, int, bytes]] = []
        self._last_read: dict[tuple[str, TopicPartition], int] = {}
        self._backwards: list[Problem] = []

    def next_value(self, prefix: str = "v") -> bytes:
        """A value never handed out before by this history."""
        with self._lock:
            self._handed_out += 1
            return f"{prefix}-{self._handed_out - 1}".encode()

    def handed_out(self) -> int:
        """How many values `next_value` has made so far: a mark for `acknowledged_after`."""
        with self._lock:
            return self._handed_out

    def acknowledged_after(self, mark: int) -> int:
        """How many acknowledged writes carry a value made after `mark = handed_out()` was taken (a test
        asking what was acknowledged of what was sent after some event, whatever the delay of earlier acks)."""
        with self._lock:
            return sum(1 for *_, value in self._acks if _number(value) >= mark)

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

    def acknowledged(self) -> int:
        """How many writes have been acknowledged so far (a test watching writes go on)."""
        with self._lock:
            return len(self._acks)

    def skipped(self, reader: str) -> list[tuple[TopicPartition, int]]:
        """Acknowledged offsets below the last offset `reader` read of their partition that it never read:
        the gaps it saw (a log serving around damage a healthy replica could have served)."""
        with self._lock:
            read = {(tp, offset) for who, tp, offset, _ in self._reads if who == reader}
            last = {tp: offset for (who, tp), offset in self._last_read.items() if who == reader}
            return sorted({(tp, offset) for tp, offset, _ in self._acks
                           if tp in last and offset < last[tp] and (tp, offset) not in read})

    def values_read(self) -> set[bytes]:
        with self._lock:
            return {value for *_, value in self._reads}

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
        duplicates, retries = _copies(read_at, acks)
        if self.idempotent:  # no copy is legal
            duplicates, retries = duplicates + [_as_duplicate(p) for p in retries], []
        problems = [*_divergent(seen), *_lost(acks, read_at), *duplicates, *backwards]
        read_positions = sum(len(offsets) for offsets in read_at.values())
        return Report(len(acks), read_positions, tuple(problems), tuple(retries))


def _number(value: bytes) -> int:
    """The number next_value put in `value`; -1 for a value it did not make."""
    head, _, tail = value.rpartition(b"-")
    return int(tail) if head and tail.isdigit() else -1


def _divergent(seen) -> list[Problem]:
    return [Problem("divergent", tp[0], tp[1], f"offset {offset} has values {sorted(values)}")
            for tp, offsets in sorted(seen.items()) for offset, values in sorted(offsets.items())
            if len(values) > 1]


def _lost(acks, read_at) -> list[Problem]:
    return [Problem("lost", tp[0], tp[1], f"acknowledged {value!r} at offset {offset} was never read there")
            for tp, offset, value in acks if value not in read_at[tp].get(offset, ())]


def _copies(read_at, acks) -> tuple[list[Problem], list[Problem]]:
    """Values at more than one offset: (duplicates, retries), as the module docstring tells them apart."""
    where: dict[tuple[TopicPartition, bytes], set[int]] = defaultdict(set)
    for tp, offsets in read_at.items():
        for offset, values in offsets.items():
            for value in values:
                where[(tp, value)].add(offset)
    acked_at: dict[tuple[TopicPartition, bytes], list[int]] = defaultdict(list)
    for tp, offset, value in acks:
        where[(tp, value)].add(offset)
        acked_at[(tp, value)].append(offset)
    duplicates, retries = [], []
    for (tp, value), offsets in sorted(where.items()):
        if len(offsets) < 2:
            continue
        acked = acked_at.get((tp, value), [])
        retried = len(acked) == 0 or (len(acked) == 1 and acked[0] == max(offsets))
        detail = f"{value!r} at offsets {sorted(offsets)}, acknowledged at {sorted(acked) or 'none'}"
        (retries if retried else duplicates).append(
            Problem("retry" if retried else "duplicate", tp[0], tp[1], detail))
    return duplicates, retries


def _as_duplicate(problem: Problem) -> Problem:
    return Problem("duplicate", problem.topic, problem.partition, problem.detail)
