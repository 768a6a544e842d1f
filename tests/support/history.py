"""A history checker for replication under faults (Jepsen's Kafka analysis, reduced to what a log promises).

Record every acknowledged write `(topic, partition, offset, value)` and every live read `(reader, topic,
partition, offset, value)` from any thread while the faults go on; once they are healed, record the final
log of every partition (`record_final_log`: what a read from its start to its end found, and that end). The
final log is the ground truth: what the cluster holds after the run. Then `check()` finds:

- nothing acknowledged: a history without one acknowledged write proves nothing, and is not ok;
- unread and short partitions: a partition written or read with no final log, or whose final log stops
  before the end it was read to (a final read cut short would hide every later loss);
- lost writes: an acknowledged write whose value the final log does not hold at its offset (a live reader
  having seen it there once does not save it: truncated later, it is lost);
- vanished reads: a value a live reader saw at an offset that the final log does not hold there (a reader
  saw data the cluster later took back: an uncommitted tail served, or a committed one truncated);
- divergence: one offset of a partition acknowledged or read (live or final) with two different values (a
  new leader handed out an offset that an old one had already acknowledged);
- duplicates: one value stored in the final log at two offsets that no retry explains: acknowledged at two
  offsets, or
  acknowledged at an offset below another copy of it (the acknowledged attempt is a producer's last one,
  so only a broker copying data twice puts a copy after it);
- retries (not a problem): one value at several offsets, acknowledged at most once and then at the highest.
  A producer with acks=all, retries and no idempotence re-sends a batch whose answer it lost (a timeout, a
  cut connection, a leader that died after appending); each attempt may be appended: Kafka allows this
  (at-least-once), idempotence (KIP-98) is what removes it. Counted apart, so that a report separates the
  legal from the lost. With `History(idempotent=True)` (a producer with idempotence) every copy is a
  duplicate;
- non-monotonic reads: a reader that saw offset o and then o' <= o of the same partition without a
  `record_seek` in between (a consumer going backwards, or serving one offset twice); a final log whose
  offsets do not increase.

Values must be unique per attempted write (`History.next_value()` makes them). The final log's end is the
offset after its last record: the checker is for logs without control records (no transactions).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
MAX_PRINTED = 50  # problems a report prints in full; the head counts them all


@dataclass(frozen=True)
class Problem:
    kind: str  # "unread", "short", "lost", "vanished", "divergent", "duplicate", "non-monotonic";
    # or "retry" (legal: Report.retries)
    topic: str
    partition: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.topic}-{self.partition}: {self.detail}"


@dataclass(frozen=True)
class Report:
    acknowledged: int
    read: int  # (partition, offset) positions in the final logs
    found: int = 0  # acknowledged writes the final logs hold at their acknowledged offsets, counted there
    problems: tuple[Problem, ...] = field(default=())
    retries: tuple[Problem, ...] = field(default=())  # non-idempotent retries: legal, never a problem

    @property
    def ok(self) -> bool:
        return self.acknowledged > 0 and not self.problems

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def __str__(self) -> str:
        head = (f"{self.acknowledged} acknowledged{' (nothing acknowledged proves nothing)' * (not self.acknowledged)}"
                f", {self.found} of them found in the final logs, {self.read} offsets in the final logs, "
                f"{len(self.problems)} problems "
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
        self._finals: dict[TopicPartition, tuple[int, dict[int, bytes]]] = {}  # tp -> (end, offset -> value)

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

    def record_final_log(self, topic: str, partition: int, end: int, records: list[tuple[int, bytes]]) -> None:
        """The final read of one partition: its `records` (offset, value) in the order read from its start, and
        the `end` (high watermark) the read was to reach. Recorded once per partition, after the faults."""
        tp = (topic, partition)
        offsets = [offset for offset, _ in records]
        backwards = [Problem("non-monotonic", topic, partition, f"the final read read offset {b} after {a}")
                     for a, b in zip(offsets, offsets[1:]) if b <= a]
        with self._lock:
            if tp in self._finals:
                raise ValueError(f"{topic}-{partition}: a second final log")
            self._finals[tp] = (end, dict(records))
            self._backwards.extend(backwards)

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

    def read_by(self, reader: str) -> int:
        """How many reads `reader` recorded."""
        with self._lock:
            return sum(1 for who, *_ in self._reads if who == reader)

    def values_read(self) -> set[bytes]:
        """Every value read, live or in a final log."""
        with self._lock:
            return {value for *_, value in self._reads} | {
                value for _end, records in self._finals.values() for value in records.values()}

    def check(self) -> Report:
        with self._lock:
            acks, reads, backwards = list(self._acks), list(self._reads), list(self._backwards)
            finals = dict(self._finals)
        final_at = _positions((tp, offset, value) for tp, (_end, records) in finals.items()
                              for offset, value in records.items())
        seen = _positions([*acks, *((tp, offset, value) for _r, tp, offset, value in reads),
                           *((tp, offset, value) for tp, offsets in final_at.items()
                             for offset, values in offsets.items() for value in values)])
        duplicates, retries = _copies(final_at, acks)
        if self.idempotent:  # no copy is legal
            duplicates, retries = duplicates + [_as_duplicate(p) for p in retries], []
        found = sum(1 for tp, offset, value in acks if value in final_at[tp].get(offset, ()))
        problems = [*_incomplete(finals, {tp for tp, *_ in acks} | {tp for _r, tp, *_ in reads}),
                    *_lost(acks, final_at), *_vanished(reads, final_at), *_divergent(seen), *duplicates, *backwards]
        read_positions = sum(len(records) for _end, records in finals.values())
        return Report(len(acks), read_positions, found, tuple(problems), tuple(retries))


def _positions(entries) -> dict[TopicPartition, dict[int, set[bytes]]]:
    """(tp, offset, value) entries as tp -> offset -> the values there."""
    at: dict[TopicPartition, dict[int, set[bytes]]] = defaultdict(lambda: defaultdict(set))
    for tp, offset, value in entries:
        at[tp][offset].add(value)
    return at


def _number(value: bytes) -> int:
    """The number next_value put in `value`; -1 for a value it did not make."""
    head, _, tail = value.rpartition(b"-")
    return int(tail) if head and tail.isdigit() else -1


def _divergent(seen) -> list[Problem]:
    return [Problem("divergent", tp[0], tp[1], f"offset {offset} has values {sorted(values)}")
            for tp, offsets in sorted(seen.items()) for offset, values in sorted(offsets.items())
            if len(values) > 1]


def _incomplete(finals, used: set[TopicPartition]) -> list[Problem]:
    """Partitions written or read without a final log, or whose final log stops before its end."""
    problems = [Problem("unread", tp[0], tp[1], "written or read, but no final read of it was recorded")
                for tp in sorted(used - finals.keys())]
    for tp, (end, records) in sorted(finals.items()):
        reached = max(records, default=-1) + 1
        if reached < end:
            problems.append(Problem("short", tp[0], tp[1], f"the final read stopped at offset {reached}, its end "
                                                           f"is {end}"))
    return problems


def _lost(acks, final_at) -> list[Problem]:
    return [Problem("lost", tp[0], tp[1], f"acknowledged {value!r} at offset {offset} is not there in the final log")
            for tp, offset, value in acks if value not in final_at[tp].get(offset, ())]


def _vanished(reads, final_at) -> list[Problem]:
    gone = sorted({(tp, offset, value, reader) for reader, tp, offset, value in reads
                   if value not in final_at[tp].get(offset, ())})
    return [Problem("vanished", tp[0], tp[1], f"reader {reader} saw {value!r} at offset {offset}, which the final "
                                              f"log does not hold there") for tp, offset, value, reader in gone]


def _copies(final_at, acks) -> tuple[list[Problem], list[Problem]]:
    """Values at more than one offset: (duplicates, retries), as the module docstring tells them apart."""
    where: dict[tuple[TopicPartition, bytes], set[int]] = defaultdict(set)
    for tp, offsets in final_at.items():
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
