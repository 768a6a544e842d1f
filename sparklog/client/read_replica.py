"""Which broker the consumer fetches a partition from (KIP-392): its leader, or the leader's preferred read replica.

Rule 1 (the rack): with `client.rack` set, every Fetch names it (rack_id). A Fetch answer that names a
preferred_read_replica for a partition sends that partition's next fetches to that broker (`prefer`), for
metadata.max.age.ms at most; then it is fetched from its leader again, which may name a replica again (Kafka's
consumer's expiry).
Rule 2 (back to the leader, `node_for`, `fetch_failed`, `partition_failed`): a partition's replica is dropped
and the partition fetched from its leader at once when a Fetch sent to that replica fails (the broker is down or
cut off), when the replica answers the partition with an error other than OFFSET_NOT_AVAILABLE (which says the
replica has not replicated that far yet: retried there after the backoff), or when the metadata does not list
the replica's broker. OFFSET_OUT_OF_RANGE from a replica is such an error, never a reset: the leader decides
(Kafka's consumer's rule).
"""

from __future__ import annotations

from typing import Mapping

OFFSET_NOT_AVAILABLE = 78  # Kafka's Errors.OFFSET_NOT_AVAILABLE
NO_REPLICA = -1

TopicPartition = tuple[str, int]


class ReadReplicas:
    """The preferred read replica of each partition that has one, with its expiry (monotonic seconds)."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._chosen: dict[TopicPartition, tuple[int, float]] = {}

    def node_for(self, tp: TopicPartition, leader: int, brokers: Mapping[int, object], now: float) -> int:
        """The broker to fetch `tp` from now (Rules 1 and 2)."""
        chosen = self._chosen.get(tp)
        if chosen is None:
            return leader
        replica, until = chosen
        if now >= until or replica not in brokers:
            del self._chosen[tp]
            return leader
        return replica

    def prefer(self, tp: TopicPartition, replica: int, now: float) -> None:
        """Rule 1: a Fetch answer named `replica` for `tp`."""
        if replica == NO_REPLICA:
            return
        self._chosen[tp] = (replica, now + self.ttl_s)

    def replica_of(self, tp: TopicPartition) -> int:
        chosen = self._chosen.get(tp)
        return NO_REPLICA if chosen is None else chosen[0]

    def fetch_failed(self, tps, node_id: int) -> None:
        """Rule 2: a Fetch sent to `node_id` for `tps` failed as a whole."""
        for tp in tps:
            if self.replica_of(tp) == node_id:
                del self._chosen[tp]

    def partition_failed(self, tp: TopicPartition, node_id: int, code: int) -> bool:
        """Rule 2: whether `node_id`'s error `code` for `tp` sent it back to its leader (the error is then not
        the leader's to handle: no reset, no backoff)."""
        if code == OFFSET_NOT_AVAILABLE or self.replica_of(tp) != node_id:
            return False
        del self._chosen[tp]
        return True
