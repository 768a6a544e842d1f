"""AlterPartitionReassignments (KIP-455), wired to the controller's reassignment (coordination/reassignment.py).

Rule 1: served by any broker, through the controller's ZooKeeper request `/admin/reassign_partitions`, as
`sparklog topics reassign` writes it: the request's targets are laid over the plan pending, if any
(reassignment.py Rule 3), and the answer comes once that write is done (the move itself goes on; Kafka's
answers once the controller has started it). Topics, partitions, live brokers and the moves in flight are
read from ZooKeeper, not from this broker's metadata, which may lag.
Rule 2: each partition is checked first, as Kafka's controller checks it, and only those that pass are
written: UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster lacks; INVALID_REPLICA_ASSIGNMENT for an
empty target, one naming a broker twice or a broker not alive; INVALID_REPLICATION_FACTOR for a target of
another size when v1's allow_replication_factor_change is false; NO_REASSIGNMENT_IN_PROGRESS for a
cancellation (replicas null) of a partition that is neither being moved nor waiting to be.
Rule 3: the write is version-checked and retried a few times against a controller finishing a plan
meanwhile; ZooKeeper away, or still conflicting, is REQUEST_TIMED_OUT for the whole request, nothing half
written.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import BadVersionError, NodeExistsError

from sparklog.broker.handlers.error_codes import (INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICATION_FACTOR, NONE,
                                                  REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION)
from sparklog.coordination import brokers as broker_registry
from sparklog.coordination import paths
from sparklog.coordination import reassignment
from sparklog.coordination import topics as topic_registry
from sparklog.protocol import errors
from sparklog.protocol.alter_partition_reassignments import (AlterPartitionReassignmentsResponse,
                                                             ReassignablePartitionResponse,
                                                             ReassignableTopicResponse)
from sparklog.protocol.api_keys import ApiKey
from sparklog.storage.errors import InvalidTopicName

log = logging.getLogger(__name__)

NO_REASSIGNMENT_IN_PROGRESS = errors.NoReassignmentInProgressError.errno
WRITE_ATTEMPTS = 5  # Rule 3

Outcome = dict[tuple[str, int], tuple[int, str | None]]


def handle_alter_partition_reassignments(request, state):
    return _alter(request.body, state)


async def _alter(body, state) -> AlterPartitionReassignmentsResponse:
    asked = {(t.name, p.partition_index): (None if p.replicas is None else tuple(p.replicas))
             for t in body.topics for p in t.partitions}
    try:
        outcome = await state.blocking(apply_changes, state.zk, asked, body.allow_replication_factor_change)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away or still conflicting: nothing was written (Rule 3)
        log.warning("altering the partition reassignments failed: %s", exc)
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, allow_replication_factor_change=body.allow_replication_factor_change,
            error_code=REQUEST_TIMED_OUT, error_message=f"not written: {exc}", responses=[])
    by_topic: dict[str, list] = {}
    for (topic, partition), (code, message) in outcome.items():
        by_topic.setdefault(topic, []).append(ReassignablePartitionResponse(
            partition_index=partition, error_code=code, error_message=message))
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, allow_replication_factor_change=body.allow_replication_factor_change, error_code=NONE,
        error_message=None, responses=[
        ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()])


def apply_changes(zk, asked: dict, allow_rf_change: bool) -> Outcome:
    """Check each partition (Rule 2), write those that pass (Rule 3); each partition's (code, message)."""
    for _ in range(WRITE_ATTEMPTS):
        assignments = _assignments(zk, sorted({t for t, _ in asked}))
        live = set(broker_registry.live_brokers(zk))
        ongoing = reassignment.ongoing_reassignments(zk, sorted(assignments))
        pending, version = reassignment.pending_with_version(zk)
        outcome = {key: check(assignments, live, ongoing, pending, key, target, allow_rf_change)
                   for key, target in asked.items()}
        changes = {key: asked[key] for key, (code, _) in outcome.items() if code == NONE}
        if not changes:
            return outcome
        try:
            reassignment.write_plan(zk, reassignment.altered_plan(pending, ongoing, changes), version)
        except (BadVersionError, NodeExistsError):
            continue  # the controller finished or another request changed it meanwhile: decide again
        return outcome
    raise TimeoutError(f"the reassignment request kept changing ({WRITE_ATTEMPTS} attempts)")


def _assignments(zk, names: list[str]) -> dict[str, dict[int, tuple[int, ...]]]:
    valid = []
    for name in names:
        try:
            valid.append(paths.topic_name(name))
        except InvalidTopicName:
            continue  # UNKNOWN_TOPIC_OR_PARTITION, as for a topic that does not exist
    return {name: dict(found.partitions) for name, found in topic_registry.get_topics(zk, valid).items()}


def check(assignments, live, ongoing, pending, key, target, allow_rf_change: bool) -> tuple[int, str | None]:
    """Rule 2 for one partition: (NONE, None) or its (error code, message)."""
    topic, partition = key
    current = assignments.get(topic, {}).get(partition)
    if current is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}"
    if target is None:
        if key in ongoing or key in pending:
            return NONE, None
        return NO_REASSIGNMENT_IN_PROGRESS, f"{topic}-{partition} is not being reassigned"
    if not target or len(set(target)) != len(target):
        return INVALID_REPLICA_ASSIGNMENT, f"replicas {list(target)} must be non-empty and distinct"
    dead = sorted(set(target) - live)
    if dead:
        return INVALID_REPLICA_ASSIGNMENT, f"broker(s) {dead} are not alive (live: {sorted(live)})"
    original = _original(current, ongoing.get(key))
    if not allow_rf_change and len(target) != len(original):
        return INVALID_REPLICATION_FACTOR, (f"the replication factor would change from {len(original)} to "
                                            f"{len(target)}")
    return NONE, None


def _original(current, moving) -> tuple[int, ...]:
    if moving is None:
        return tuple(current)
    replicas, adding, _removing = moving
    return tuple(b for b in replicas if b not in adding)


REASSIGNMENT_HANDLERS = {ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments}
