"""A history checker for transactions: consume-transform-produce workers judged by the FINAL logs.

The scenario (support/transaction_run.py): an input topic pre-filled with numbered values `in-<n>`, workers that
read it read_committed in one Kafka group and copy each record to an output topic inside a transaction, with
the consumed offsets sent in the transaction. Each output value is `<input value>|<tag>|<i>/<count>`: `tag`
names one transaction attempt (worker, process, sequence: never reused), `i` the record's place in it and
`count` how many records it wrote. Each worker appends to its journal `commit <tag>` once commit_transaction
returned and `abort <tag>` once abort_transaction returned; a worker killed in between leaves its attempt
undecided (the coordinator decides it: committed if EndTxn was written, aborted otherwise).

After the faults, every partition of the output is read twice from its start to its end: read_committed (to
the last stable offset) and read_uncommitted (to the high watermark); the group's committed offsets of the
input are read too. The final logs are the ground truth. `check()` finds:

- "unread": an output partition without a final read (a final read that cannot reach its end raises instead
  of being recorded short: support/transaction_run.py Rule 1);
- "unstable": a partition whose last stable offset is below its high watermark at the end (a hanging
  transaction: nothing is open once every worker stopped);
- "missing": an input value that no committed output record carries (a record consumed, its offset committed,
  its output aborted or lost);
- "duplicate": an input value carried by more than one committed output record (offsets not committed with the
  output: a worker that restarts reads it again);
- "aborted-read": a record read read_committed whose attempt the journals say was aborted;
- "partial": an attempt with some but not all of its `count` records visible read_committed, or one of its
  records at two places (a transaction half visible: markers written to some partitions only);
- "lost-commit": an attempt the journals say was committed with fewer than `count` records read committed;
- "phantom": a record read read_committed that the read_uncommitted read of the same partition does not hold at
  that offset (read_committed must be a filter of the log, never something else);
- "offsets": an input partition whose committed offset in the group is not its end (offsets not sent in the
  transaction, or lost by the group coordinator), or could not be read at all (None: offsets left pending, the
  group coordinator answering UNSTABLE_OFFSET_COMMIT for good).

A history with no committed attempt proves nothing and is not ok.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

MAX_PRINTED = 20  # problems of each kind printed


@dataclass(frozen=True)
class Problem:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class Report:
    inputs: int
    committed_attempts: int  # attempts with records visible read_committed
    aborted_attempts: int  # attempts the journals say were aborted
    problems: tuple[Problem, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.committed_attempts > 0 and not self.problems

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def __str__(self) -> str:
        head = (f"{self.inputs} input values, {self.committed_attempts} transactions visible read_committed"
                f"{' (none: proves nothing)' * (not self.committed_attempts)}, {self.aborted_attempts} aborted, "
                f"{len(self.problems)} problems {dict(Counter(p.kind for p in self.problems))}")
        kinds = dict.fromkeys(p.kind for p in self.problems)
        return "\n".join([head, *(str(p) for kind in kinds for p in self.of_kind(kind)[:MAX_PRINTED])])


@dataclass(frozen=True)
class OutputValue:
    source: str
    tag: str
    index: int
    count: int

    @classmethod
    def parse(cls, value: bytes) -> "OutputValue":
        source, tag, place = value.decode().split("|")
        index, count = place.split("/")
        return cls(source, tag, int(index), int(count))


def output_value(source: str, tag: str, index: int, count: int) -> bytes:
    """The value a worker writes for input `source`, record `index` of `count` in attempt `tag`."""
    return f"{source}|{tag}|{index}/{count}".encode()


def input_value(n: int) -> bytes:
    return f"in-{n}".encode()


FinalLog = tuple[int, list[tuple[int, bytes]]]  # (end the read was to reach, [(offset, value)] in order)


class TransactionHistory:
    """What a run recorded: the inputs, the journals' decisions, the final logs; `check()` judges them."""

    def __init__(self, inputs: int) -> None:
        self.inputs = inputs
        self.committed_tags: set[str] = set()
        self.aborted_tags: set[str] = set()
        self.read_committed: dict[int, FinalLog] = {}
        self.read_uncommitted: dict[int, FinalLog] = {}
        self.unstable: dict[int, tuple[int, int]] = {}  # partition -> (LSO, HW) where they differ at the end
        self.group_offsets: dict[int, tuple[int | None, int]] = {}  # input partition -> (committed or None, end)
        self.output_partitions: int = 0

    def record_journal(self, lines) -> None:
        for line in lines:
            decision, _, tag = line.strip().partition(" ")
            if decision == "commit":
                self.committed_tags.add(tag)
            elif decision == "abort":
                self.aborted_tags.add(tag)

    def record_final(self, partition: int, committed: FinalLog, uncommitted: FinalLog) -> None:
        self.read_committed[partition], self.read_uncommitted[partition] = committed, uncommitted
        if committed[0] != uncommitted[0]:
            self.unstable[partition] = (committed[0], uncommitted[0])

    def check(self) -> Report:
        visible = [(p, offset, OutputValue.parse(v)) for p, (_end, log) in self.read_committed.items()
                   for offset, v in log]
        by_tag: dict[str, list[OutputValue]] = defaultdict(list)
        for _p, _offset, value in visible:
            by_tag[value.tag].append(value)
        problems = [*self._incomplete(), *self._exactly_once(visible), *self._atomic(by_tag),
                    *self._phantoms(), *self._offsets()]
        return Report(self.inputs, len(by_tag), len(self.aborted_tags), tuple(problems))

    def _incomplete(self) -> list[Problem]:
        problems = [Problem("unread", f"output partition {p} has no final read")
                    for p in range(self.output_partitions) if p not in self.read_committed]
        problems += [Problem("unstable", f"output partition {p}: last stable offset {lso} below high watermark "
                                         f"{hw} once every worker stopped") for p, (lso, hw) in self.unstable.items()]
        return problems

    def _exactly_once(self, visible) -> list[Problem]:
        carried = Counter(value.source for _p, _o, value in visible)
        problems = [Problem("missing", f"{input_value(n).decode()} is in no committed output record")
                    for n in range(self.inputs) if carried[input_value(n).decode()] == 0]
        problems += [Problem("duplicate", f"{source} is carried by {times} committed output records: "
                                          f"{sorted((p, o, v.tag) for p, o, v in visible if v.source == source)}")
                     for source, times in sorted(carried.items()) if times > 1]
        return problems

    def _atomic(self, by_tag: dict[str, list[OutputValue]]) -> list[Problem]:
        problems = [Problem("aborted-read", f"attempt {tag} was aborted, yet {len(by_tag[tag])} of its records "
                                            f"were read read_committed") for tag in sorted(self.aborted_tags & by_tag.keys())]
        for tag, values in sorted(by_tag.items()):
            count, places = values[0].count, Counter(v.index for v in values)
            if sorted(places) != list(range(count)) or max(places.values()) > 1:
                problems.append(Problem("partial", f"attempt {tag}: records {sorted(places.elements())} of "
                                                   f"{count} visible read_committed"))
        problems += [Problem("lost-commit", f"attempt {tag} was committed (its journal says so), none of its "
                                            f"records is read_committed") for tag in sorted(self.committed_tags - by_tag.keys())]
        return problems

    def _phantoms(self) -> list[Problem]:
        problems = []
        for p, (_end, log) in sorted(self.read_committed.items()):
            everything = dict(self.read_uncommitted.get(p, (0, []))[1])
            problems += [Problem("phantom", f"partition {p} offset {offset}: read_committed read {value!r}, "
                                            f"read_uncommitted {everything.get(offset)!r}")
                         for offset, value in log if everything.get(offset) != value]
        return problems

    def _offsets(self) -> list[Problem]:
        return [Problem("offsets", f"input partition {p}: the group's committed offset is {committed}, its end "
                                   f"{end}") for p, (committed, end) in sorted(self.group_offsets.items())
                if committed != end]
