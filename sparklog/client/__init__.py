"""Clients: a batching producer, a pull consumer and ZooKeeper consumer groups."""
