"""Who serves a partition: the leader only, in its current leader epoch (handlers Rule 3 and Rule 4)."""

from __future__ import annotations

import asyncio

from sparklog.storage.errors import StorageError
from sparklog.storage.topic_names import validate_topic
from sparklog.broker.handlers.error_codes import (INVALID_TOPIC_EXCEPTION, NONE, NOT_LEADER_OR_FOLLOWER,
                                                  UNKNOWN_TOPIC_OR_PARTITION)


def leader_in_epoch(replicas, snapshot, topic: str, partition: int, current_leader_epoch: int):
    """Rule 3, in this one place: the partition led here in the asker's leader epoch, or, as an int, why it is
    not served (not led here, led in a state that moved on, a stale or unknown epoch)."""
    led = replicas.leader_of(snapshot, (topic, partition))
    if led is None:
        return not_led_error(snapshot, topic, partition)
    if led.fenced:
        return NOT_LEADER_OR_FOLLOWER  # its state moved on: it waits for the new one (replica_manager)
    code = replicas.epoch_error(led, current_leader_epoch)
    return led if code == NONE else code


def led_or_error(state, snapshot, topic: str, partition: int, current_leader_epoch: int):
    """(the led partition, NONE), or (None, why it is not served): `leader_in_epoch` as a pair."""
    led = leader_in_epoch(state.replicas, snapshot, topic, partition, current_leader_epoch)
    return (None, led) if led.__class__ is int else (led, NONE)


def not_led_error(snapshot, topic: str, partition: int) -> int:
    """Why this broker does not serve (topic, partition): unknown, illegal name, or led elsewhere."""
    meta = snapshot.topics.get(topic)
    if meta is None:
        try:
            validate_topic(topic)
        except ValueError:
            return INVALID_TOPIC_EXCEPTION
        return UNKNOWN_TOPIC_OR_PARTITION
    if partition not in meta.partitions:
        return UNKNOWN_TOPIC_OR_PARTITION
    return NOT_LEADER_OR_FOLLOWER


def fenced_here_whole_elsewhere(led, offset: int) -> bool:
    """Rule 4: would serving `offset` step over a fence that another in-sync replica can serve whole?"""
    return len(led.state.isr) > 1 and any(start <= offset < end for start, end in led.plog.fenced_ranges())


async def verified_first(state, verifications: list, then):
    """Replay segments on the executor, so the event loop answers everyone else meanwhile (a loaded
    segment of a GiB takes a while), then answer with `then()` as usual."""
    loop = asyncio.get_running_loop()
    for verify in verifications:
        try:
            await loop.run_in_executor(state.executor, verify)
        except StorageError:
            pass  # closed or moved meanwhile: the answer itself carries the partition's error
    response = then()
    return await response if asyncio.iscoroutine(response) else response
