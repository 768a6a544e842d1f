"""Partition reassignment: the plan (kafka-reassign-partitions' JSON), its request znode, and each step as a
pure function the controller applies.

    plan, and /admin/reassign_partitions:  {"version":1,"partitions":[{"topic":"t","partition":0,
                                                                       "replicas":[4,2,3]}, ...]}

A partition moves from its original replicas OR to the target RS in two steps (Kafka's ZK-mode
`onPartitionReassignment`, with KIP-455's adding/removing replicas in the topic znode):

    STARTED     assignment := RS + (OR - RS), adding_replicas := RS - OR, removing_replicas := OR - RS:
                the new replicas start following and catching up
    CAUGHT_UP   every member of RS is in the ISR: if the leader is not in RS (or is dead) a new leader is
                elected from RS ∩ ISR (leader epoch bumped); ISR := ISR ∩ RS; assignment := RS; adding and
                removing cleared — the old replicas are dropped
    DONE        assignment == RS and nothing adding or removing

Rule 1: `next_step` is pure: given the topic's assignment, its in-flight adding/removing sets, the partition
state and the live brokers, it returns what to write next (or that the partition is waiting or done).
Rule 2: the request is deleted by the controller once every partition in it is DONE; `--verify` compares
the assignments with the plan.
Rule 3: AlterPartitionReassignments (KIP-455) changes the request rather than refusing while one is pending:
`altered_plan` lays each partition's new target over the pending plan; a cancellation (target None) of a
partition already STARTED makes its target its original replicas (the topic znode's replicas less those being
added), which the same two steps restore, and of one not started yet drops it from the plan. The request
znode is rewritten with its version checked (`write_plan`), so a controller finishing the old plan meanwhile
makes the write retry against what it left; an empty plan deletes the request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import AbstractSet, Mapping, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying
from sparklog.coordination.topics import PartitionState

REASSIGNMENT_JSON_VERSION = 1  # Kafka's ReassignPartitionsZNode / the tool's plan

PartitionKey = tuple[str, int]


class InvalidPlan(ValueError):
    """A reassignment plan that cannot be carried out; the message says which entry and why."""


class ReassignmentPending(RuntimeError):
    """An earlier reassignment has not finished yet."""


@dataclass(frozen=True)
class Step:
    """What the controller writes for one partition: the topic's replicas and in-flight sets, and maybe a
    new partition state (None: keep the state)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    state: PartitionState | None = None
    done: bool = False


def parse_plan(text: str | bytes) -> dict[PartitionKey, tuple[int, ...]]:
    """{(topic, partition): target replicas} from plan JSON; raises InvalidPlan."""
    try:
        value = json.loads(text)
        entries = value["partitions"]
        plan = {}
        for entry in entries:
            key = (str(entry["topic"]), int(entry["partition"]))
            replicas = tuple(int(b) for b in entry["replicas"])
            if key in plan:
                raise InvalidPlan(f"{key[0]}-{key[1]} appears twice in the plan")
            plan[key] = replicas
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, InvalidPlan):
            raise
        raise InvalidPlan(f"not a reassignment plan ({{\"version\":1,\"partitions\":[{{\"topic\":..,"
                          f"\"partition\":..,\"replicas\":[..]}}]}}): {exc}") from None
    if not plan:
        raise InvalidPlan("the plan names no partitions")
    return plan


def validate_plan(plan: Mapping[PartitionKey, Sequence[int]], assignments: Mapping[str, Mapping[int, Sequence[int]]],
                  known_brokers: AbstractSet[int]) -> None:
    """Every partition exists, every target is non-empty, distinct, and made of known brokers."""
    for (topic, p), replicas in sorted(plan.items()):
        if topic not in assignments or p not in assignments[topic]:
            raise InvalidPlan(f"unknown partition {topic}-{p}")
        if not replicas or len(set(replicas)) != len(replicas):
            raise InvalidPlan(f"{topic}-{p}: replicas {list(replicas)} must be non-empty and distinct")
        unknown = sorted(set(replicas) - set(known_brokers))
        if unknown:
            raise InvalidPlan(f"{topic}-{p}: unknown broker(s) {unknown} (live: {sorted(known_brokers)})")


def plan_json(plan: Mapping[PartitionKey, Sequence[int]]) -> bytes:
    return encode({"version": REASSIGNMENT_JSON_VERSION, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())]})


def request_reassignment(zk: KazooClient, plan: Mapping[PartitionKey, Sequence[int]]) -> None:
    retrying(zk, zk.ensure_path, paths.REASSIGN_PARTITIONS.rsplit("/", 1)[0])
    try:
        retrying(zk, zk.create, paths.REASSIGN_PARTITIONS, plan_json(plan))
    except NodeExistsError:
        raise ReassignmentPending("a partition reassignment is in progress; check it with --verify") from None


def pending_reassignment(zk: KazooClient) -> dict[PartitionKey, tuple[int, ...]] | None:
    try:
        data, _ = retrying(zk, zk.get, paths.REASSIGN_PARTITIONS)
    except NoNodeError:
        return None
    return parse_plan(data)


Ongoing = Mapping[PartitionKey, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


def pending_with_version(zk: KazooClient) -> tuple[dict[PartitionKey, tuple[int, ...]], int | None]:
    """The pending plan ({} when there is none) and its znode's version (None: no request)."""
    try:
        data, stat = retrying(zk, zk.get, paths.REASSIGN_PARTITIONS)
    except NoNodeError:
        return {}, None
    return parse_plan(data), stat.version


def altered_plan(pending: Mapping[PartitionKey, Sequence[int]], ongoing: Ongoing,
                 changes: Mapping[PartitionKey, Sequence[int] | None]) -> dict[PartitionKey, tuple[int, ...]]:
    """The plan after `changes` (Rule 3): pure."""
    plan = {key: tuple(target) for key, target in pending.items()}
    for key, target in changes.items():
        if target is not None:
            plan[key] = tuple(target)
        elif key in ongoing:
            replicas, adding, _removing = ongoing[key]
            plan[key] = tuple(b for b in replicas if b not in adding)
        else:
            plan.pop(key, None)
    return plan


def write_plan(zk: KazooClient, plan: Mapping[PartitionKey, Sequence[int]], version: int | None) -> None:
    """Replace the request with `plan` if it is still at `version` (None: absent); raise BadVersionError or
    NodeExistsError when it changed meanwhile (Rule 3)."""
    if version is None:
        if plan:
            retrying(zk, zk.ensure_path, paths.REASSIGN_PARTITIONS.rsplit("/", 1)[0])
            retrying(zk, zk.create, paths.REASSIGN_PARTITIONS, plan_json(plan))
        return
    try:
        if plan:
            retrying(zk, zk.set, paths.REASSIGN_PARTITIONS, plan_json(plan), version=version)
        else:
            retrying(zk, zk.delete, paths.REASSIGN_PARTITIONS, version=version)
    except NoNodeError:
        raise BadVersionError() from None


def finish_reassignment(zk: KazooClient, plan: Mapping[PartitionKey, Sequence[int]] | None = None) -> None:
    """Delete the request; given the `plan` carried out, only if the request still is that plan (an
    AlterPartitionReassignments may have changed it meanwhile: Rule 3)."""
    try:
        if plan is None:
            retrying(zk, zk.delete, paths.REASSIGN_PARTITIONS)
            return
        stored, version = pending_with_version(zk)
        if version is not None and stored == {key: tuple(target) for key, target in plan.items()}:
            retrying(zk, zk.delete, paths.REASSIGN_PARTITIONS, version=version)
    except (NoNodeError, BadVersionError):
        pass


def next_step(target: Sequence[int], replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
              state: PartitionState, live: AbstractSet[int], controller_epoch: int) -> Step | None:
    """The next write for a partition being moved to `target` (module docstring), or None while it waits
    for the new replicas to join the ISR."""
    target, replicas = tuple(target), tuple(replicas)
    if replicas == target and not adding and not removing:
        return Step(target, (), (), None, done=True)
    union = target + tuple(b for b in replicas if b not in target)
    if replicas != union:  # STARTED: the target replicas join the assignment, the old ones stay for now
        return Step(union, tuple(b for b in target if b not in replicas),
                    tuple(b for b in replicas if b not in target))
    if not set(target) <= set(state.isr):
        return None  # the new replicas are still catching up
    isr = tuple(b for b in state.isr if b in target)
    new_state = replace(state, isr=isr, controller_epoch=controller_epoch)
    if state.leader not in target or state.leader not in live:
        leader = next((b for b in target if b in isr and b in live), None)
        if leader is None:
            return None  # nobody in the target can lead yet
        new_state = replace(new_state, leader=leader, isr=(leader, *(b for b in isr if b != leader)),
                            leader_epoch=state.leader_epoch + 1)
    return Step(target, (), (), new_state, done=True)


def ongoing_reassignments(zk: KazooClient, topics: Sequence[str] | None = None
                          ) -> dict[PartitionKey, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """{(topic, partition): (replicas, adding, removing)} of the partitions (of `topics`, default all) whose
    topic znode names replicas being added or removed: those a reassignment is moving now (STARTED)."""
    return retrying(zk, _inner_ongoing, zk, topics)


def _inner_ongoing(zk: KazooClient, topics: Sequence[str] | None) -> dict:
    if topics is None:
        try:
            topics = zk.get_children(paths.BROKER_TOPICS)
        except NoNodeError:
            return {}
    found = {}
    for topic in sorted(topics):
        try:
            data, _ = zk.get(paths.topic(topic))
        except NoNodeError:
            continue
        value = decode(data)
        adding, removing = value.get("adding_replicas") or {}, value.get("removing_replicas") or {}
        for key in sorted(set(adding) | set(removing), key=int):
            found[(topic, int(key))] = (tuple(value["partitions"].get(key, ())), tuple(adding.get(key, ())),
                                        tuple(removing.get(key, ())))
    return found


def read_topic_znode(zk: KazooClient, topic: str) -> tuple[dict, int]:
    """The topic znode's JSON and version (for a conditional write of the assignment)."""
    data, stat = retrying(zk, zk.get, paths.topic(topic))
    return decode(data), stat.version


def with_step(value: dict, partition: int, step: Step) -> dict:
    """The topic znode's JSON with one partition's replicas and in-flight sets replaced by `step`'s."""
    value = dict(value)
    key = str(partition)
    value["partitions"] = {**value["partitions"], key: list(step.replicas)}
    for name, members in (("adding_replicas", step.adding), ("removing_replicas", step.removing)):
        current = dict(value.get(name) or {})
        if members:
            current[key] = list(members)
        else:
            current.pop(key, None)
        value[name] = current
    return value
