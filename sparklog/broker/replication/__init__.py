"""Replication: leader and follower state, the replica fetcher, the purgatory, partitions and the controller."""
