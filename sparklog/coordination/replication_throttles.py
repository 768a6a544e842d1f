"""Replication throttle configs in ZooKeeper, in Kafka's layout, and what kafka-reassign-partitions --throttle
writes for a plan.

    /config/brokers/<id>                {"version":1,"config":{"leader.replication.throttled.rate":"1048576",
                                                               "follower.replication.throttled.rate":"1048576"}}
    /config/brokers/<default>           the same, for every broker without a value of its own
    /config/changes/config_change_<n>   {"version":2,"entity_path":"brokers/<id>"}  (for Kafka's own tools)
    /config/topics/<t>                  {"version":1,"config":{"leader.replication.throttled.replicas":"0:1,0:2",
                                                               "follower.replication.throttled.replicas":"0:3"}}

Rule: reassignment-throttles (kafka-reassign-partitions' calculateLeaderThrottles and
calculateFollowerThrottles). For each partition a plan moves (its target differs from its replicas), the
leader list names every current replica (any of them may lead while it moves) and the follower list every
target replica not among them; both rates are set on every broker either list names. A topic's lists are
replaced, not merged, as the tool does. `clear_throttles` removes both rates from the brokers given and both
lists from the topics given (`--verify`, once the plan is done).
The rates reach a running broker through the dynamic broker configs' watch
(broker_configs.BrokerConfigWatch): `alter_broker_config` posts the same change notification.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from kazoo.client import KazooClient

from sparklog.coordination import broker_configs
from sparklog.coordination import topics as topic_registry
from sparklog.coordination.client_quotas import alter_config_node, notify
from sparklog.coordination.connection import retrying
from sparklog.storage.throttled_replicas import format_pairs

CONFIG_BROKERS = broker_configs.CONFIG_BROKERS
DEFAULT_BROKER = broker_configs.DEFAULT
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

PartitionKey = tuple[str, int]
Pairs = dict[str, set[tuple[int, int]]]  # topic -> {(partition, broker)}


def broker_path(broker: int | str) -> str:
    name = str(broker)
    if name != DEFAULT_BROKER and not (name.isdigit()):
        raise ValueError(f"a broker config is for a broker id or {DEFAULT_BROKER}, not {broker!r}")
    return f"{CONFIG_BROKERS}/{name}"


def broker_config(zk: KazooClient, broker: int | str) -> dict[str, str]:
    return broker_configs.read(zk, broker_path(broker)[len(CONFIG_BROKERS) + 1:])


def alter_broker_config(zk: KazooClient, broker: int | str, set_: Mapping[str, str], remove: Iterable[str] = ()) -> None:
    """Set and remove keys of `/config/brokers/<broker>`, then post Kafka's change notification."""
    path = broker_path(broker)
    retrying(zk, alter_config_node, zk, path, dict(set_), tuple(remove))
    notify(zk, path[len("/config/"):])


def throttled_pairs(plan: Mapping[PartitionKey, Sequence[int]],
                    assignments: Mapping[str, Mapping[int, Sequence[int]]]) -> tuple[Pairs, Pairs]:
    """(leader pairs, follower pairs) per topic of the partitions `plan` moves (Rule: reassignment-throttles)."""
    leader: Pairs = {}
    follower: Pairs = {}
    for (topic, p), target in sorted(plan.items()):
        current = tuple(assignments[topic][p])
        if tuple(target) == current:
            continue
        leader.setdefault(topic, set()).update((p, b) for b in current)
        follower.setdefault(topic, set()).update((p, b) for b in target if b not in current)
    return leader, follower


def set_throttles(zk: KazooClient, plan: Mapping[PartitionKey, Sequence[int]],
                  assignments: Mapping[str, Mapping[int, Sequence[int]]], rate: int) -> set[int]:
    """Write the throttles for `plan` at `rate` bytes/s (Rule: reassignment-throttles); the brokers throttled."""
    leader, follower = throttled_pairs(plan, assignments)
    for topic in sorted(set(leader) | set(follower)):
        config = topic_registry.topic_config(zk, topic)
        config[LEADER_REPLICAS] = format_pairs(leader.get(topic, ()))
        config[FOLLOWER_REPLICAS] = format_pairs(follower.get(topic, ()))
        topic_registry.set_topic_config(zk, topic, config)
    brokers = {b for pairs in (*leader.values(), *follower.values()) for _, b in pairs}
    for broker in sorted(brokers):
        alter_broker_config(zk, broker, {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
    return brokers


def clear_throttles(zk: KazooClient, topics: Iterable[str], brokers: Iterable[int]) -> None:
    """Remove both rates from `brokers` and both lists from `topics` (Rule: reassignment-throttles)."""
    for topic in sorted(set(topics)):
        config = topic_registry.topic_config(zk, topic)
        if LEADER_REPLICAS in config or FOLLOWER_REPLICAS in config:
            config.pop(LEADER_REPLICAS, None)
            config.pop(FOLLOWER_REPLICAS, None)
            topic_registry.set_topic_config(zk, topic, config)
    for broker in sorted(set(brokers)):
        if set(broker_config(zk, broker)) & {LEADER_RATE, FOLLOWER_RATE}:
            alter_broker_config(zk, broker, {}, (LEADER_RATE, FOLLOWER_RATE))
