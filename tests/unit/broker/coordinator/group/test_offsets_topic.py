"""The shape of `__consumer_offsets` at creation: Kafka's defaults, the replication factor reduced to the live
brokers with a warning, and min.insync.replicas by replication factor."""

from __future__ import annotations

import logging

from sparklog.broker.coordinator.group import offsets_topic
from sparklog.broker.coordinator.group.config import GroupConfig


def test_kafka_defaults_and_a_compacted_topic():
    config = GroupConfig.from_properties({})
    assert (config.offsets_topic_num_partitions, config.offsets_topic_replication_factor) == (50, 3)
    assert config.offsets_retention_minutes == 10080 and config.offsets_retention_check_interval_ms == 600000
    assert offsets_topic.topic_config(config, 3) == {"cleanup.policy": "compact", "segment.bytes": "104857600",
                                                     "min.insync.replicas": "2"}
    assert offsets_topic.is_internal("__consumer_offsets") and not offsets_topic.is_internal("consumer_offsets")


def test_the_replication_factor_is_reduced_to_the_live_brokers_with_a_warning(caplog):
    config = GroupConfig.from_properties({"offsets.topic.replication.factor": "3"})
    with caplog.at_level(logging.WARNING):
        assert offsets_topic.replication_factor(config, 5) == 3
        assert not caplog.records
        assert offsets_topic.replication_factor(config, 2) == 2
    assert "only 2 broker(s) are live" in caplog.text


def test_min_insync_replicas_lets_one_replica_fail():
    assert [offsets_topic.min_insync_replicas(rf) for rf in (1, 2, 3, 5)] == [1, 1, 2, 2]
