"""The shape of `__consumer_offsets` when a broker creates it on demand, and what makes it internal.

Rule 1 (Kafka's `AutoTopicCreationManager` for the offsets topic): `offsets.topic.num.partitions` partitions,
`offsets.topic.replication.factor` replicas reduced to the live brokers with a warning (Kafka refuses instead;
a one- or two-broker test cluster would then have no coordinator at all), `cleanup.policy=compact`,
`offsets.topic.segment.bytes`, and `min.insync.replicas` of `min(2, replicas - 1)` (at least 1): a commit
survives the loss of any one in-sync replica, and one broker down of three does not stop commits.
Rule 2: an internal topic is listed with `is_internal` in Metadata; clients cannot produce to it
(INVALID_TOPIC_EXCEPTION, Kafka's "cannot append to internal topic"), delete records of it
(INVALID_TOPIC_EXCEPTION, as Kafka's `ReplicaManager.deleteRecordsOnLocalLog`: "cannot delete records of
internal topic"), add partitions to it (INVALID_REQUEST with protocol/consumer_offsets.FIXED_PARTITIONS: Kafka's `TopicCommand`
refuses so; its broker does not check, but a group's partition is its hash modulo
offsets.topic.num.partitions, so partitions added later would only ever be empty) nor delete it
(INVALID_REQUEST, as Kafka's tools refuse to); only the group coordinator writes it.
"""

from __future__ import annotations

import logging

from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
SAFE_MIN_INSYNC_REPLICAS = 2  # what Kafka's operators set for RF 3, the offsets topic's default


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def replication_factor(config: GroupConfig, live_brokers: int) -> int:
    """Rule 1: the configured factor, or the live brokers when fewer (warned)."""
    wanted = config.offsets_topic_replication_factor
    if 0 < live_brokers < wanted:
        log.warning("%s: offsets.topic.replication.factor is %d but only %d broker(s) are live; creating it "
                    "with replication factor %d", OFFSETS_TOPIC, wanted, live_brokers, live_brokers)
        return live_brokers
    return wanted


def min_insync_replicas(replication: int) -> int:
    return max(1, min(SAFE_MIN_INSYNC_REPLICAS, replication - 1))


def topic_config(config: GroupConfig, replication: int) -> dict[str, str]:
    """The topic overrides written at creation (Rule 1)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
            "min.insync.replicas": str(min_insync_replicas(replication))}
