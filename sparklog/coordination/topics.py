"""The topic registry: replica assignments, partition states and per-topic config (Kafka's ZK-mode layout).

    /brokers/topics/<t>                      {"version":3,"partitions":{"0":[1,2],"1":[2,1]},
                                              "adding_replicas":{},"removing_replicas":{},
                                              "topic_id":"<22 characters>"}
    /brokers/topics/<t>/partitions/<p>/state {"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,
                                              "isr":[1,2]}
    /config/topics/<t>                       {"version":1,"config":{"retention.ms":"1000"}}

Topic ids (KIP-516, topic_ids.py): `create_topic` draws a random id and writes it with the assignment (a retried
create compares the same bytes: the id is drawn once, before the retries); every rewrite of the JSON
(`add_partitions`, reassignment) keeps it. A topic whose JSON has none (created before topic ids) reads as the id
derived from its znode's czxid, and `assign_missing_topic_ids` (the controller, on election, as Kafka's controller
does on failover) writes that id into the JSON, version-checked, once.

Partition states are *persistent*, unlike the design notes' (old) ephemeral ones: leadership must outlive a
broker restart so that a broker killed with -9 finds its partitions' leader and ISR when it comes back; the
replication layer moves them on with `set_partition_state(..., expected_version=...)`.

Transitions of a topic: ABSENT --create_topic (one multi: assignment + every state + config)--> PRESENT
--add_partitions (one multi: assignment set with a version check + the new states)--> PRESENT
--delete_topic (one multi deleting every node, deepest first)--> ABSENT. Because each is one ZooKeeper
transaction, a watcher never sees a topic without its states or config. Retries are idempotent: a create
that finds exactly the assignment it meant to write (after a lost connection) is success.

Replica placement is Kafka's rack-unaware `assignReplicasToBrokers`: over the sorted broker ids, partition
p's first replica is broker `(p + start) % n`, i.e. round-robin; the followers are shifted by an amount that
grows every n partitions. Kafka picks `start` and the shift at random; we derive both from a CRC-32 of the
topic name, so placement is reproducible (in tests and on retries) yet differs from topic to topic, and
`add_partitions` continues the same sequence (Kafka re-randomizes the shift when partitions are added).

Rack-aware placement (Kafka's `assignReplicasToBrokersRackAware`) is used when every broker has a rack
(`broker.rack`, registered in `/brokers/ids/<id>`): the brokers are interleaved rack by rack, the leaders go
round-robin over that list, and each follower is the next broker in the shifted sequence whose rack holds no
replica of the partition yet (once every rack holds one, any broker without one). With some brokers
rack-less it falls back to rack-unaware placement (Kafka refuses instead; a rolling upgrade that sets racks
one broker at a time should not stop topic creation).

Explicit assignments (CreateTopics' and CreatePartitions' `assignments`, `--replica-assignment`) pass
`validate_assignment`: partitions numbered 0..n-1 (added ones from the topic's count on), every partition with
the same number of distinct replicas (added ones with the topic's), every broker known.

Names (Kafka's `Topic.hasCollision`): a new topic whose name equals an existing one's once '.' and '_' are
taken as the same character (`a.b`, `a_b`; Kafka's metric names replace one by the other) is refused
(InvalidTopicName, `colliding_topic`); an existing name itself is TopicExists, not a collision.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths, topic_ids
from sparklog.coordination.brokers import live_brokers
from sparklog.coordination.connection import commit, decode, encode, retrying
from sparklog.coordination.paths import InvalidTopicName
from sparklog.coordination.watch import Watch

__all__ = [
    "InvalidTopicName",
    "TopicExists",
    "UnknownTopic",
    "InvalidPartitions",
    "InvalidReplicationFactor",
    "InvalidReplicaAssignment",
    "PartitionStateConflict",
    "PartitionState",
    "TopicAssignment",
    "assign_replicas",
    "assign_replicas_rack_aware",
    "validate_added_assignment",
    "validate_assignment",
    "create_topic",
    "add_partitions",
    "delete_topic",
    "list_topics",
    "get_topic",
    "get_topics",
    "topic_id",
    "topic_id_of",
    "assign_missing_topic_ids",
    "partition_state",
    "set_partition_state",
    "set_topic_config",
    "watch_topics",
]

TOPIC_JSON_VERSION = 3  # Kafka's TopicZNode with adding/removing replicas and the topic id
STATE_JSON_VERSION = 1
CONFIG_JSON_VERSION = 1
INITIAL_CONTROLLER_EPOCH = 1
INITIAL_LEADER_EPOCH = 0
NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
# A topic is created in one multi, and ZooKeeper's jute.maxbuffer (1 MiB) bounds a multi: at ~150 bytes of
# znodes per partition, this keeps well inside it (Kafka has no limit of its own and fails in ZooKeeper).
MAX_PARTITIONS = 5000

Assignment = dict[int, tuple[int, ...]]


class TopicExists(Exception):
    """Kafka error TOPIC_ALREADY_EXISTS."""


class UnknownTopic(Exception):
    """Kafka error UNKNOWN_TOPIC_OR_PARTITION."""


class InvalidPartitions(ValueError):
    """Kafka error INVALID_PARTITIONS: a count below one, or add_partitions not growing the topic."""


class InvalidReplicationFactor(ValueError):
    """Kafka error INVALID_REPLICATION_FACTOR: below one, or more replicas than live brokers."""


class InvalidReplicaAssignment(ValueError):
    """Kafka error INVALID_REPLICA_ASSIGNMENT: an explicit assignment that cannot be placed."""


class PartitionStateConflict(Exception):
    """The partition state changed since it was read (the znode version differs)."""


@dataclass(frozen=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]
    leader_epoch: int = INITIAL_LEADER_EPOCH
    controller_epoch: int = INITIAL_CONTROLLER_EPOCH
    zk_version: int = -1  # the znode's version when read; pass it back as expected_version

    def to_json(self) -> dict:
        return {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": STATE_JSON_VERSION,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }

    @classmethod
    def from_json(cls, value: dict, zk_version: int = -1) -> "PartitionState":
        return cls(
            leader=value["leader"],
            isr=tuple(value["isr"]),
            leader_epoch=value["leader_epoch"],
            controller_epoch=value["controller_epoch"],
            zk_version=zk_version,
        )


@dataclass(frozen=True)
class TopicAssignment:
    name: str
    partitions: Assignment  # partition -> replicas, the first one the preferred leader
    states: dict[int, PartitionState] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    topic_id: str | None = None  # topic_ids.py string form; None only where the caller had no znode to read

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0]) if self.partitions else 0


# -- placement (pure) ----------------------------------------------------------------------------------------


def assign_replicas(
    broker_ids: list[int], num_partitions: int, replication_factor: int, seed: int = 0, first_partition: int = 0
) -> Assignment:
    """Kafka's rack-unaware placement of partitions `first_partition ..` over `sorted(broker_ids)`."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    _check_partition_count(num_partitions, first_partition)
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the number of live brokers ({n})"
        )
    assignment = {}
    for p, first, shift in _leader_positions(n, num_partitions, seed, first_partition):
        followers = [brokers[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        assignment[p] = (brokers[first], *followers)
    return assignment


def _leader_positions(n: int, num_partitions: int, seed: int, first_partition: int):
    """(partition, index of its first replica, follower shift) for each partition placed, as Kafka steps."""
    start = seed % n
    # The shift grows by one every n partitions; starting later, count the steps already taken, so that
    # growing a topic places the new partitions exactly as creating it that big would have.
    shift = (seed // n) % n + max(0, (first_partition - 1) // n)
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        yield p, (p + start) % n, shift


def assign_replicas_rack_aware(racks: Mapping[int, str], num_partitions: int, replication_factor: int,
                               seed: int = 0, first_partition: int = 0) -> Assignment:
    """Kafka's rack-aware placement over `racks` ({broker id: rack}); see the module docstring."""
    brokers = _rack_alternated(racks)
    n, num_racks = len(brokers), len(set(racks.values()))
    assign_replicas(brokers, 1, replication_factor)  # the same checks on the replication factor
    _check_partition_count(num_partitions, first_partition)
    assignment = {}
    for p, first, shift in _leader_positions(n, num_partitions, seed, first_partition):
        replicas = [brokers[first]]
        used_racks = {racks[brokers[first]]}
        k = 0
        while len(replicas) < replication_factor:
            broker = brokers[_follower_index(first, shift * num_racks, k, n)]
            k += 1
            rack_ok = racks[broker] not in used_racks or len(used_racks) == num_racks
            if broker not in replicas and rack_ok:
                replicas.append(broker)
                used_racks.add(racks[broker])
        assignment[p] = tuple(replicas)
    return assignment


def _check_partition_count(num_partitions: int, first_partition: int = 0) -> None:
    if num_partitions < 1:
        raise InvalidPartitions(f"number of partitions must be at least 1, not {num_partitions}")
    if first_partition + num_partitions > MAX_PARTITIONS:
        raise InvalidPartitions(f"{first_partition + num_partitions} partitions is more than a topic may have "
                                f"({MAX_PARTITIONS})")


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack: the first of each rack, then the second of each ... (Kafka's order)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns), default=0)) for column in columns if i < len(column)]


def place(broker_racks: Mapping[int, str | None], num_partitions: int, replication_factor: int, seed: int = 0,
          first_partition: int = 0) -> Assignment:
    """Rack-aware placement when every broker has a rack, else rack-unaware."""
    if broker_racks and all(rack for rack in broker_racks.values()):
        return assign_replicas_rack_aware(dict(broker_racks), num_partitions, replication_factor, seed,
                                          first_partition)
    return assign_replicas(list(broker_racks), num_partitions, replication_factor, seed, first_partition)


def validate_assignment(assignment: Mapping[int, tuple[int, ...]], known_brokers, first_partition: int = 0,
                        replication_factor: int | None = None) -> Assignment:
    """An explicit assignment as placed; raises InvalidReplicaAssignment saying what is wrong. Partitions added to
    a topic start at its partition count (`first_partition`) and keep its `replication_factor`."""
    if not assignment:
        raise InvalidReplicaAssignment("the replica assignment is empty")
    if first_partition + len(assignment) > MAX_PARTITIONS:
        raise InvalidReplicaAssignment(
            f"{first_partition + len(assignment)} partitions is more than a topic may have ({MAX_PARTITIONS})")
    last = first_partition + len(assignment) - 1
    if sorted(assignment) != list(range(first_partition, last + 1)):
        raise InvalidReplicaAssignment(f"partitions must be numbered {first_partition}..{last}, not {sorted(assignment)}")
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignment("every partition must have the same, non-zero number of replicas")
    if replication_factor is not None and sizes != {replication_factor}:
        raise InvalidReplicaAssignment(f"inconsistent replication factor: the topic's partitions have "
                                       f"{replication_factor} replicas, the new ones {sizes.pop()}")
    known = set(known_brokers)
    for p, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignment(f"partition {p} lists a broker twice: {list(replicas)}")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignment(f"partition {p}: unknown broker(s) {unknown} (live: {sorted(known)})")
    return {p: tuple(replicas) for p, replicas in sorted(assignment.items())}


def validate_added_assignment(assignment: Mapping[int, tuple[int, ...]], added: int, known_brokers,
                              first_partition: int, replication_factor: int) -> Assignment:
    """CreatePartitions' assignments of the `added` partitions from `first_partition` on, checked as Kafka does:
    one per new partition, then `validate_assignment` with the topic's replication factor."""
    if len(assignment) != added:
        raise InvalidReplicaAssignment(f"increasing the number of partitions by {added} but {len(assignment)} "
                                       f"assignments provided")
    return validate_assignment(assignment, known_brokers, first_partition, replication_factor)


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _seed(topic: str) -> int:
    return zlib.crc32(topic.encode("utf-8"))


# -- JSON ----------------------------------------------------------------------------------------------------


def _assignment_json(assignment: Assignment, topic_id: str) -> bytes:
    partitions = {str(p): list(replicas) for p, replicas in sorted(assignment.items())}
    return encode({"version": TOPIC_JSON_VERSION, "partitions": partitions, "adding_replicas": {},
                   "removing_replicas": {}, "topic_id": topic_id})


def topic_id_of(data: bytes, stat) -> str:
    """The topic id in a `/brokers/topics/<t>` znode (`data`, `stat`): its `"topic_id"`, or for a topic created
    before topic ids the one derived from the znode's czxid (topic_ids.py)."""
    return decode(data).get("topic_id") or topic_ids.from_czxid(stat.czxid)


def topic_id(zk: KazooClient, name: str) -> str | None:
    """The id of the topic's current life; None when it does not exist."""
    try:
        data, stat = retrying(zk, zk.get, paths.topic(name))
    except NoNodeError:
        return None
    return topic_id_of(data, stat)


def _parse_assignment(data: bytes) -> Assignment:
    return {int(p): tuple(replicas) for p, replicas in sorted(decode(data)["partitions"].items(), key=_int_key)}


def _int_key(item: tuple[str, object]) -> int:
    return int(item[0])


def _initial_state(replicas: tuple[int, ...]) -> bytes:
    return encode(PartitionState(leader=replicas[0], isr=replicas).to_json())


def _config_json(config: Mapping[str, object]) -> bytes:
    return encode({"version": CONFIG_JSON_VERSION, "config": {str(k): str(v) for k, v in config.items()}})


# -- create / grow / delete ----------------------------------------------------------------------------------


def create_topic(
    zk: KazooClient,
    name: str,
    num_partitions: int,
    replication_factor: int,
    config: Mapping[str, object] | None = None,
    live_broker_ids: list[int] | Mapping[int, str | None] | None = None,
    assignment: Mapping[int, tuple[int, ...]] | None = None,
) -> TopicAssignment:
    """Create a topic over the live brokers (or `live_broker_ids`, a list or {id: rack}); return what was
    written. With `assignment` ({partition: replicas}) the counts are taken from it, after validation.

    Raises InvalidTopicName, InvalidPartitions, InvalidReplicationFactor, InvalidReplicaAssignment,
    TopicExists.
    """
    paths.topic(name)  # validates the name first
    existing = list_topics(zk)
    other = colliding_topic(name, existing)
    if other is not None and name not in existing:
        raise InvalidTopicName(f"topic {name!r} collides with existing topic {other!r} ('.' and '_' are the "
                               "same character in metric names)")
    racks = _broker_racks(zk, live_broker_ids)
    if assignment is not None:
        assignment = validate_assignment(assignment, racks)
    else:
        assignment = place(racks, num_partitions, replication_factor, seed=_seed(name))
    config = {str(k): str(v) for k, v in (config or {}).items()}
    attempts = itertools.count()
    new_id = topic_ids.new_topic_id()  # drawn once: a retry writes (and compares) the same bytes
    retrying(zk, _inner_create, zk, name, assignment, config, attempts, new_id)
    states = {p: PartitionState(leader=r[0], isr=r, zk_version=0) for p, r in assignment.items()}
    return TopicAssignment(name, assignment, states, config, new_id)


def colliding_topic(name: str, existing) -> str | None:
    """Another topic of `existing` whose name is `name` with '.' and '_' swapped anywhere, or None."""
    if "." not in name and "_" not in name:
        return None
    folded = name.replace(".", "_")
    return next((other for other in existing if other != name and other.replace(".", "_") == folded), None)


def _broker_racks(zk: KazooClient, given) -> dict[int, str | None]:
    if given is None:
        return {b.id: b.rack for b in live_brokers(zk).values()}
    if isinstance(given, Mapping):
        return dict(given)
    return dict.fromkeys(given)


def _inner_create(zk: KazooClient, name: str, assignment: Assignment, config: dict, attempts,
                  new_id: str) -> None:
    retry = next(attempts) > 0
    zk.ensure_path(paths.BROKER_TOPICS)
    zk.ensure_path(paths.CONFIG_TOPICS)
    data = _assignment_json(assignment, new_id)
    txn = zk.transaction()
    txn.create(paths.topic(name), data)
    txn.create(paths.topic_partitions(name))
    for p, replicas in assignment.items():
        txn.create(paths.topic_partition(name, p))
        txn.create(paths.partition_state(name, p), _initial_state(replicas))
    stale_config = zk.exists(paths.topic_config(name))  # left behind by a tool or an old cluster
    if stale_config is None:
        txn.create(paths.topic_config(name), _config_json(config))
    else:
        txn.set_data(paths.topic_config(name), _config_json(config), version=stale_config.version)
    try:
        commit(txn)
    except NodeExistsError:
        if retry and _read_assignment_data(zk, name) == data:
            return  # our own commit landed before the connection dropped
        raise TopicExists(f"topic {name!r} already exists") from None
    except BadVersionError:
        raise ForceRetryError() from None


def _read_assignment_data(zk: KazooClient, name: str) -> bytes | None:
    try:
        return zk.get(paths.topic(name))[0]
    except NoNodeError:
        return None


def add_partitions(
    zk: KazooClient, name: str, new_total: int, live_broker_ids: list[int] | None = None,
    assignment: Mapping[int, tuple[int, ...]] | None = None,
) -> TopicAssignment:
    """Grow a topic to `new_total` partitions with the same replication factor; return the new assignment.
    With `assignment` ({partition: replicas} of the new partitions, CreatePartitions' `assignments`) they are
    placed as given once `validate_assignment` passes them, else as Kafka's placement continues."""
    paths.topic(name)
    broker_ids = _broker_racks(zk, live_broker_ids)
    attempts = itertools.count()
    retrying(zk, _inner_add_partitions, zk, name, new_total, broker_ids, attempts, assignment)
    return get_topic(zk, name)


def _inner_add_partitions(zk: KazooClient, name: str, new_total: int, broker_ids: dict[int, str | None],
                          attempts, assignment: Mapping[int, tuple[int, ...]] | None = None) -> None:
    retry = next(attempts) > 0
    try:
        data, stat = zk.get(paths.topic(name))
    except NoNodeError:
        raise UnknownTopic(f"unknown topic {name!r}") from None
    current = _parse_assignment(data)
    if retry and len(current) == new_total:
        return  # our own commit landed before the connection dropped
    if new_total <= len(current):
        raise InvalidPartitions(f"topic {name!r} has {len(current)} partitions; cannot change to {new_total}")
    rf = len(current[0])
    if assignment is None:
        added = place(broker_ids, new_total - len(current), rf, seed=_seed(name), first_partition=len(current))
    else:
        added = validate_added_assignment(assignment, new_total - len(current), broker_ids, len(current), rf)
    txn = zk.transaction()
    grown = _assignment_json({**current, **added}, topic_id_of(data, stat))
    txn.set_data(paths.topic(name), grown, version=stat.version)
    for p, replicas in added.items():
        txn.create(paths.topic_partition(name, p))
        txn.create(paths.partition_state(name, p), _initial_state(replicas))
    try:
        commit(txn)
    except (BadVersionError, NodeExistsError):
        raise ForceRetryError() from None  # someone else changed the topic: read it again


def delete_topic(zk: KazooClient, name: str) -> None:
    """Delete the topic's assignment, states and config in one transaction; raise UnknownTopic."""
    paths.topic(name)
    attempts = itertools.count()
    retrying(zk, _inner_delete, zk, name, attempts)


def _inner_delete(zk: KazooClient, name: str, attempts) -> None:
    retry = next(attempts) > 0
    try:
        nodes = _subtree(zk, paths.topic(name))
    except NoNodeError:
        if retry:
            return  # our own delete landed before the connection dropped
        raise UnknownTopic(f"unknown topic {name!r}") from None
    txn = zk.transaction()
    for node in reversed(nodes):  # deepest first
        txn.delete(node)
    if zk.exists(paths.topic_config(name)) is not None:
        txn.delete(paths.topic_config(name))
    try:
        commit(txn)
    except (NoNodeError, NotEmptyError):
        raise ForceRetryError() from None  # the tree changed while we listed it


def assign_missing_topic_ids(zk: KazooClient) -> list[str]:
    """Write the id into the JSON of every topic created before topic ids (the one `topic_id_of` already
    reads for it), version-checked so that a concurrent rewrite wins and is looked at again; returns the
    topics migrated. Kafka's controller does the same on failover for topics created before 2.8."""
    return [name for name in list_topics(zk) if retrying(zk, _inner_assign_id, zk, name)]


def _inner_assign_id(zk: KazooClient, name: str) -> bool:
    try:
        data, stat = zk.get(paths.topic(name))
    except NoNodeError:
        return False  # deleted meanwhile
    value = decode(data)
    if value.get("topic_id"):
        return False
    value.update(version=TOPIC_JSON_VERSION, topic_id=topic_id_of(data, stat))
    try:
        zk.set(paths.topic(name), encode(value), version=stat.version)
    except BadVersionError:
        raise ForceRetryError() from None  # rewritten meanwhile: read it again
    except NoNodeError:
        return False
    return True


def _subtree(zk: KazooClient, path: str) -> list[str]:
    """`path` and every node below it, parents before children."""
    nodes = [path]
    for child in sorted(zk.get_children(path)):
        nodes.extend(_subtree(zk, f"{path}/{child}"))
    return nodes


# -- read ----------------------------------------------------------------------------------------------------


def list_topics(zk: KazooClient) -> list[str]:
    try:
        return sorted(retrying(zk, zk.get_children, paths.BROKER_TOPICS))
    except NoNodeError:
        return []


def get_topic(zk: KazooClient, name: str) -> TopicAssignment:
    """The topic's assignment, partition states and config overrides; raise UnknownTopic."""
    try:
        data, stat = retrying(zk, zk.get, paths.topic(name))
    except NoNodeError:
        raise UnknownTopic(f"unknown topic {name!r}") from None
    assignment = _parse_assignment(data)
    states = {}
    for p in assignment:
        try:
            states[p] = partition_state(zk, name, p)
        except UnknownTopic:
            continue  # deleted while we read
    return TopicAssignment(name, assignment, states, topic_config(zk, name), topic_id_of(data, stat))


def get_topics(zk: KazooClient, names: list[str] | None = None) -> dict[str, TopicAssignment]:
    """`get_topic` for many topics (default: all) with pipelined reads: one round trip for the assignments
    and configs, one for every partition state, instead of one per znode (the controller reads everything
    on each event). Topics deleted while we read are left out."""
    return retrying(zk, _inner_get_topics, zk, names)


def _inner_get_topics(zk: KazooClient, names: list[str] | None) -> dict[str, TopicAssignment]:
    if names is None:
        try:
            names = sorted(zk.get_children(paths.BROKER_TOPICS))
        except NoNodeError:
            return {}
    assignments = {n: zk.get_async(paths.topic(n)) for n in names}
    configs = {n: zk.get_async(paths.topic_config(n)) for n in names}
    found_assignments = _results(assignments)
    parsed = {n: _parse_assignment(data) for n, (data, _) in found_assignments.items()}
    states = {(n, p): zk.get_async(paths.partition_state(n, p)) for n, a in parsed.items() for p in a}
    found_states = _results(states)
    found_configs = _results(configs)
    topics = {}
    for name, assignment in parsed.items():
        partition_states = {p: PartitionState.from_json(decode(data), zk_version=stat.version)
                            for (n, p), (data, stat) in found_states.items() if n == name}
        config = dict(decode(found_configs[name][0]).get("config", {})) if name in found_configs else {}
        topics[name] = TopicAssignment(name, assignment, partition_states, config,
                                       topic_id_of(*found_assignments[name]))
    return topics


def _results(futures: dict) -> dict:
    """The values of kazoo async results, leaving out the nodes that do not exist."""
    found = {}
    for key, future in futures.items():
        try:
            found[key] = future.get()
        except NoNodeError:
            continue
    return found


def topic_config(zk: KazooClient, name: str) -> dict[str, str]:
    """The topic's config overrides ({} when there are none)."""
    try:
        data, _ = retrying(zk, zk.get, paths.topic_config(name))
    except NoNodeError:
        return {}
    return dict(decode(data).get("config", {}))


def existing_topic_config(zk: KazooClient, name: str) -> dict[str, str] | None:
    """The config overrides of a topic as the registry stands now ({} when there are none), or None when the
    topic does not exist: what DescribeConfigs answers from, so that a broker whose metadata has not yet caught
    up with a creation (or a deletion) elsewhere answers as the registry does. Creation and deletion write the
    topic and its config in one transaction; reading the config, then the topic, then (only if the config was
    missing) the config again gives a consistent answer whichever of them lands between the reads."""
    paths.topic(name)
    return retrying(zk, _inner_existing_config, zk, name)


def _inner_existing_config(zk: KazooClient, name: str) -> dict[str, str] | None:
    config = None
    for _ in range(2):
        try:
            data, _ = zk.get(paths.topic_config(name))
            config = dict(decode(data).get("config", {}))
        except NoNodeError:
            config = None
        if zk.exists(paths.topic(name)) is None:
            return None
        if config is not None:
            return config
    return {}  # a topic created without a config node (an old tool): no overrides


def set_topic_config(zk: KazooClient, name: str, config: Mapping[str, object]) -> None:
    """Replace the topic's config overrides with `config` (AlterConfigs; the brokers' watches apply them);
    raise UnknownTopic. Idempotent: writing the same overrides again changes nothing a reader sees."""
    paths.topic(name)
    retrying(zk, _inner_set_config, zk, name, _config_json(config))


def _inner_set_config(zk: KazooClient, name: str, data: bytes) -> None:
    if zk.exists(paths.topic(name)) is None:
        raise UnknownTopic(f"unknown topic {name!r}")
    try:
        zk.set(paths.topic_config(name), data)
    except NoNodeError:  # a topic created by a tool that wrote no config node
        try:
            zk.create(paths.topic_config(name), data, makepath=True)
        except NodeExistsError:
            raise ForceRetryError() from None  # created meanwhile: set it on the retry


def partition_state(zk: KazooClient, name: str, partition: int) -> PartitionState:
    try:
        data, stat = retrying(zk, zk.get, paths.partition_state(name, partition))
    except NoNodeError:
        raise UnknownTopic(f"unknown topic partition {name}-{partition}") from None
    return PartitionState.from_json(decode(data), zk_version=stat.version)


def partition_states(zk: KazooClient, name: str, partitions: list[int]) -> dict[int, PartitionState]:
    """`partition_state` of several partitions of one topic with pipelined reads (one round trip); raise
    UnknownTopic if one of them does not exist."""
    return retrying(zk, _inner_partition_states, zk, name, partitions)


def _inner_partition_states(zk: KazooClient, name: str, partitions: list[int]) -> dict[int, PartitionState]:
    futures = {p: zk.get_async(paths.partition_state(name, p)) for p in partitions}
    found = _results(futures)
    missing = [p for p in partitions if p not in found]
    if missing:
        raise UnknownTopic(f"unknown topic partition {name}-{missing[0]}")
    return {p: PartitionState.from_json(decode(data), zk_version=stat.version) for p, (data, stat) in found.items()}


def set_partition_state(
    zk: KazooClient, name: str, partition: int, state: PartitionState, expected_version: int | None = None
) -> PartitionState:
    """Write a partition's state; with `expected_version`, only if nobody wrote it since that version.

    Returns the state with its new `zk_version`. Raises PartitionStateConflict or UnknownTopic. (A retry
    after a lost connection whose write landed reports PartitionStateConflict: re-read and compare.)
    """
    try:
        stat = retrying(
            zk, zk.set, paths.partition_state(name, partition), encode(state.to_json()),
            -1 if expected_version is None else expected_version,
        )
    except BadVersionError:
        raise PartitionStateConflict(
            f"state of {name}-{partition} changed since version {expected_version}"
        ) from None
    except NoNodeError:
        raise UnknownTopic(f"unknown topic partition {name}-{partition}") from None
    return PartitionState(state.leader, state.isr, state.leader_epoch, state.controller_epoch, stat.version)


# -- watch ---------------------------------------------------------------------------------------------------


def watch_topics(zk: KazooClient, callback: Callable[[dict[str, Assignment]], None]) -> Watch:
    """Call `callback({topic: {partition: replicas}})` now and whenever a topic is created, deleted or grown.

    The callback runs on kazoo's event thread (the first call on the caller's thread): it must return quickly
    and must not wait for other ZooKeeper events. Identical consecutive snapshots are reported once.
    """
    retrying(zk, zk.ensure_path, paths.BROKER_TOPICS)
    return _TopicsWatcher(zk, callback).start()


class _TopicsWatcher:
    """One ChildrenWatch on /brokers/topics plus one DataWatch per topic name ever seen (a DataWatch keeps
    watching a deleted node, so a re-created topic is seen by the watch made for its first life)."""

    def __init__(self, zk: KazooClient, callback: Callable[[dict[str, Assignment]], None]) -> None:
        self.zk = zk
        self.callback = callback
        self.handle = Watch()
        self._lock = threading.RLock()
        self._names: set[str] = set()
        self._data: dict[str, Assignment] = {}
        self._watched: set[str] = set()
        self._ready = False
        self._last: dict[str, Assignment] | None = None

    def start(self) -> Watch:
        ChildrenWatch(self.zk, paths.BROKER_TOPICS, self._on_children)
        with self._lock:
            self._ready = True
            self._emit()
        return self.handle

    def _on_children(self, children: list[str]) -> bool | None:
        if self.handle.stopped:
            return False
        with self._lock:
            self._names = set(children)
            for name in children:
                if name not in self._watched:
                    self._watched.add(name)
                    DataWatch(self.zk, paths.topic(name), self._data_watcher(name))
            self._emit()
        return None

    def _data_watcher(self, name: str) -> Callable[[bytes | None, object], bool | None]:
        # Exactly two parameters: kazoo's DataWatch passes the event too to a function taking three.
        return lambda data, stat: self._on_data(name, data)

    def _on_data(self, name: str, data: bytes | None) -> bool | None:
        if self.handle.stopped:
            return False
        with self._lock:
            if data is None:
                self._data.pop(name, None)
            else:
                self._data[name] = _parse_assignment(data)
            self._emit()
        return None

    def _emit(self) -> None:
        if not self._ready or self.handle.stopped:
            return
        snapshot = {name: self._data[name] for name in sorted(self._names) if name in self._data}
        if snapshot != self._last:
            self._last = snapshot
            self.callback(snapshot)
