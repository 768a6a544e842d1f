"""A task's read of one partition: one consumer, and one connection to the partition's leader that carries
every fetch (besides the one to a bootstrap broker for metadata), whatever the range's length."""

from __future__ import annotations


import pytest

from sparklog.datasource.fetcher import read_partition
from sparklog.datasource.offsets import SparklogInputPartition
from sparklog.datasource.options import parse_read_options
from support.spark import produce

pytestmark = pytest.mark.slow


def test_reading_a_partition_opens_one_consumer_and_fetches_over_one_connection(sparklog_cluster, make_topic,
                                                                                client_opens):
    topic = make_topic(partitions=1)
    # ten flushed rounds of 1,000: batches well under 64 KiB, so the range takes several fetches (one producer
    # run may put all 10,000 in one batch, which a fetch returns whole, KIP-74: then one fetch is right)
    for round_ in range(10):
        produce(sparklog_cluster.bootstrap, [topic], 1_000, tag=f"r{round_}")
    connects, consumers = client_opens()
    options = parse_read_options({"bootstrap.servers": sparklog_cluster.bootstrap, "subscribe": topic,
                                  "kafka.fetch.max.bytes": "65536", "kafka.max.partition.fetch.bytes": "65536"}, False)
    rows = sum(b.num_rows for b in read_partition(options, SparklogInputPartition(topic, 0, 0, 10_000)))
    assert rows == 10_000
    assert len(consumers) == 1
    fetches = consumers[0]._fetcher.fetches
    assert fetches > 1  # small fetches: the range takes several, all over the one leader connection
    assert len(connects) <= 2, connects  # a bootstrap broker (metadata), then the leader
