"""ZooKeeper registries (brokers, topics, consumers, ownership, offsets) and the consumer rebalance.

Modules (imported directly; this package imports nothing, so that the test suite's ZooKeeper fixture does not
depend on the other layers):

- `zookeeper_server`: `EmbeddedZooKeeper`, a real ZooKeeper in a child JVM from the pyspark jars (SASL, TLS).
- `connection`: `connect(zookeeper)` with chroot support; `retrying`; the JSON encoding of znodes.
- `zookeeper_security`: the ZooKeeper login (SASL DIGEST-MD5, TLS) and the ACL each znode gets (`zookeeper.set.acl`).
- `paths`: every znode path, built from validated names.
- `cluster`, `brokers`, `topics`, `offsets`, `producer_ids`: the registries.
- `rebalance`: the paper's Algorithm 1 as a pure function.
"""
