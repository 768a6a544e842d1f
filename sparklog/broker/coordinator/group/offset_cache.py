"""The committed offsets of one `__consumer_offsets` partition, in memory (Kafka's per-partition half of
`GroupMetadataManager`): sans-IO, no clock and no log; the store (offset_store.py) feeds it records.

States of one partition's cache:

    LOADING --every record up to the log end at load start applied (`loaded()`)--> LOADED
    LOADING | LOADED --this broker stops leading the partition--> dropped (the store forgets the object)

Rule 1 (order): every change carries the log offset of its record; a change older than the one the cache
holds for that key is ignored. Commits append on executor threads and are applied when acknowledged, so two
commits of one key may be applied out of order; the log's order is the truth, as compaction's is.
Rule 2 (tombstones): a null value deletes the key. The cache remembers the deletion (by log offset, Rule 1),
and a key with any record in the topic, even a tombstone, is `seen`: the ZooKeeper fallback of the store is
for keys the topic has never seen.
Rule 3 (expiry, KIP-211): the offsets of a group with members never expire. A group without members loses
its offsets `retention_ms` after the later of its last commit and the first expiry check that found it
without members (`empty_since`), i.e. within one check interval of Kafka's "retention after it became
empty" (a member-less group that only commits counts as empty from its first check on).
Rule: transactional-offsets-pending (TxnOffsetCommit, Kafka's pending transactional offsets): an offset a
transaction commits is held per producer id, invisible to `offsets` and `seen`, until its producer's marker
is applied (`complete`): COMMIT applies each as a commit at its own record's log offset (so Rule 1 keeps a
later plain commit or tombstone of the key: the log's order, as Kafka's `olderThan`), ABORT drops them. A
later pending offset of the same producer and key replaces an earlier one. `has_pending` answers
OffsetFetch's require_stable (UNSTABLE_OFFSET_COMMIT). A marker that arrives while the cache is LOADING is
kept and applied after the load (`complete` then `loaded`): a marker appended after the load's read began is
not in what the load read, and one that is finds nothing left pending (idempotent).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable

TopicPartition = tuple[str, int]


class CacheState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(frozen=True)
class Committed:
    """One committed offset as the cache holds it; `offset is None` is a deletion (Rule 2)."""

    offset: int | None
    metadata: str
    commit_timestamp: int
    log_offset: int
    leader_epoch: int = -1


class PartitionOffsets:
    """The cache of one offsets partition (module docstring). Loop thread only."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = CacheState.LOADING
        self._groups: dict[str, dict[TopicPartition, Committed]] = {}
        self._empty_since: dict[str, int] = {}
        self._pending: dict[int, dict[tuple[str, TopicPartition], Committed]] = {}  # producer id -> its offsets
        self._completions: list[tuple[int, bool]] = []  # markers met while LOADING (Rule: transactional-offsets-pending)

    def loaded(self) -> None:
        self.state = CacheState.LOADED
        completions, self._completions = self._completions, []
        for producer_id, commit in completions:
            self.complete(producer_id, commit)

    def take_over(self, replayed: "PartitionOffsets") -> None:
        """Adopt what a load replayed into a fresh cache (committed and pending offsets), before `loaded()`."""
        for group, held in replayed._groups.items():
            for tp, value in held.items():
                self.apply(group, tp, value)
        for producer_id, held in replayed._pending.items():
            for (group, tp), value in held.items():
                self.add_pending(producer_id, group, tp, value)

    def apply(self, group: str, tp: TopicPartition, value: Committed) -> None:
        """Record a commit or a deletion (Rules 1 and 2)."""
        offsets = self._groups.setdefault(group, {})
        held = offsets.get(tp)
        if held is None or held.log_offset < value.log_offset:
            offsets[tp] = value

    def add_pending(self, producer_id: int, group: str, tp: TopicPartition, value: Committed) -> None:
        """A transaction's offset, held until its marker (Rule: transactional-offsets-pending)."""
        held = self._pending.setdefault(producer_id, {})
        earlier = held.get((group, tp))
        if earlier is None or earlier.log_offset < value.log_offset:
            held[(group, tp)] = value

    def complete(self, producer_id: int, commit: bool) -> int:
        """The producer's marker: its pending offsets committed (COMMIT) or dropped (ABORT); how many."""
        if self.state is CacheState.LOADING:
            self._completions.append((producer_id, commit))
            return 0
        held = self._pending.pop(producer_id, {})
        if commit:
            for (group, tp), value in held.items():
                self.apply(group, tp, value)
        return len(held)

    def has_pending(self, group: str, tp: TopicPartition) -> bool:
        return any((group, tp) in held for held in self._pending.values())

    def pending(self) -> dict[int, dict[tuple[str, TopicPartition], Committed]]:
        """Producer id -> its undecided offsets (a copy), for statistics and tests."""
        return {pid: dict(held) for pid, held in self._pending.items()}

    def drop(self, group: str, tps: Iterable[TopicPartition], log_offset: int) -> None:
        """Delete `tps` of `group` as of `log_offset` whatever the cache holds (a deleted topic whose tombstones
        could not be appended: Rule 1 then lets any later commit, at `log_offset + 1` or beyond, win)."""
        offsets = self._groups.setdefault(group, {})
        for tp in tps:
            offsets[tp] = Committed(None, "", -1, log_offset)

    def seen(self, group: str, tp: TopicPartition) -> bool:
        return tp in self._groups.get(group, ())

    def offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None
                ) -> dict[TopicPartition, Committed]:
        """The live (not deleted) offsets of `group`, of `partitions` or all."""
        held = self._groups.get(group, {})
        keys = held if partitions is None else [tp for tp in partitions if tp in held]
        return {tp: held[tp] for tp in keys if held[tp].offset is not None}

    def all_offsets(self) -> list[tuple[str, TopicPartition, int]]:
        """(group, partition, committed offset) of every live offset: for the lag metric, from any thread (the
        dicts are copied before they are walked)."""
        return [(group, tp, c.offset) for group, held in list(self._groups.items())
                for tp, c in list(held.items()) if c.offset is not None]

    def of_topics(self, topics: Iterable[str]) -> dict[str, list[TopicPartition]]:
        """{group: its live offsets' partitions of `topics`}: what a deletion of those topics removes."""
        topics = set(topics)
        found = {}
        for group in self._groups:
            tps = sorted(tp for tp in self.offsets(group) if tp[0] in topics)
            if tps:
                found[group] = tps
        return found

    def groups(self) -> list[str]:
        """Groups with live offsets."""
        return sorted(g for g, held in self._groups.items() if any(c.offset is not None for c in held.values()))

    def expired(self, has_members: Callable[[str], bool], now_ms: int, retention_ms: int
                ) -> dict[str, list[TopicPartition]]:
        """Rule 3: {group: the partitions whose offsets expire now}; notes when groups were first seen empty."""
        found = {}
        for group in self.groups():
            if has_members(group):
                self._empty_since.pop(group, None)
                continue
            empty_since = self._empty_since.setdefault(group, now_ms)
            live = self.offsets(group)
            last_commit = max(c.commit_timestamp for c in live.values())
            if now_ms - max(last_commit, empty_since) >= retention_ms:
                found[group] = sorted(live)
        return found

    def statistics(self) -> tuple[int, int]:
        """(groups with live offsets, live offsets)."""
        return len(self.groups()), sum(len(self.offsets(g)) for g in self._groups)
