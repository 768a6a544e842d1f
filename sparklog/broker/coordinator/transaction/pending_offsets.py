"""The offsets a transaction commits for consumer groups (TxnOffsetCommit), held by the groups' coordinator
until the transaction's marker on their `__consumer_offsets` partition decides them (Kafka's pending
transactional offsets in `GroupMetadata`).

Rule 1: pending offsets are keyed by (offsets partition, producer id), then group and partition; a later
TxnOffsetCommit of the same transaction replaces the offset of the same (group, partition).
Rule 2: a COMMIT marker commits them through the offset store (acks=all, as any commit) before the marker
itself is appended, so a marker that is retried commits them again (the same offsets: idempotent); an ABORT
marker drops them. They are visible to OffsetFetch only once committed.
Rule 3 (not covered, unlike Kafka, which writes them to `__consumer_offsets` as transactional records): they
live in this broker's memory, so a groups' coordinator that fails between TxnOffsetCommit and the COMMIT marker
loses them, and the transaction commits its records without its offsets (the consumer re-reads from the
offsets committed before: at-least-once for that transaction).
"""

from __future__ import annotations

from sparklog.coordination.offsets import OffsetAndMetadata

TopicPartition = tuple[str, int]


class PendingTxnOffsets:
    def __init__(self) -> None:
        self._pending: dict[tuple[int, int], dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    def add(self, partition: int, producer_id: int, group: str, offsets: dict[TopicPartition, OffsetAndMetadata]):
        self._pending.setdefault((partition, producer_id), {}).setdefault(group, {}).update(offsets)

    def take(self, partition: int, producer_id: int) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """Rule 2: the transaction's offsets on `partition`, removed (put them back with `restore`)."""
        return self._pending.pop((partition, producer_id), {})

    def restore(self, partition: int, producer_id: int, taken) -> None:
        for group, offsets in taken.items():
            self.add(partition, producer_id, group, offsets)

    def count(self) -> int:
        return sum(len(o) for groups in self._pending.values() for o in groups.values())
