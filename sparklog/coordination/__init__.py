"""ZooKeeper registries (brokers, topics, consumers, ownership, offsets) and the consumer rebalance."""
