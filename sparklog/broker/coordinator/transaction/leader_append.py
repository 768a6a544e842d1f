"""An append on a partition this broker leads, acknowledged once every in-sync replica has it (acks=all):
how the transaction coordinator writes `__transaction_state` and how a leader writes the markers it is sent.

Rule: the append runs on the event loop (as a Produce's does); the answer is NONE once the high watermark
passes the appended batch, NOT_LEADER_OR_FOLLOWER when the partition is not (or no longer) led here or its log
is closed, INVALID_PRODUCER_EPOCH when the log refuses a marker older than the producer's epoch there,
NOT_ENOUGH_REPLICAS when the in-sync replicas are fewer than min.insync.replicas (before anything is
written) or fell below it meanwhile, REQUEST_TIMED_OUT after `timeout_s`, KAFKA_STORAGE_ERROR when the disk
refused it. The caller maps these to its api's errors.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from sparklog.protocol import errors
from sparklog.storage.errors import InvalidProducerEpoch, LogClosedError, StorageError

log = logging.getLogger(__name__)

NONE = 0
NOT_LEADER_OR_FOLLOWER = errors.NotLeaderOrFollowerError.errno
NOT_ENOUGH_REPLICAS = errors.NotEnoughReplicasError.errno
NOT_ENOUGH_REPLICAS_AFTER_APPEND = errors.NotEnoughReplicasAfterAppendError.errno
REQUEST_TIMED_OUT = errors.RequestTimedOutError.errno
KAFKA_STORAGE_ERROR = errors.KafkaStorageError.errno
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno


async def append_replicated(replicas, snapshot, key: tuple[str, int], append: Callable, timeout_s: float) -> int:
    """`append(led)` writes to `led.plog` and returns the offset after its batch; then wait (module Rule)."""
    led = replicas.leader_of(snapshot, key)
    if led is None or led.fenced:
        return NOT_LEADER_OR_FOLLOWER
    if len(led.state.isr) < led.min_insync:
        return NOT_ENOUGH_REPLICAS
    try:
        end = append(led)
    except LogClosedError:
        return NOT_LEADER_OR_FOLLOWER
    except InvalidProducerEpoch:  # a marker of an epoch older than the producer's last in the log
        return INVALID_PRODUCER_EPOCH
    except (OSError, StorageError) as exc:
        log.error("appending to %s-%d failed: %s", key[0], key[1], exc)
        return KAFKA_STORAGE_ERROR
    replicas.after_leader_append(led)
    return await _replicated(replicas, led, end, timeout_s)


async def _replicated(replicas, led, required_offset: int, timeout_s: float) -> int:
    outcome: list = []

    def settled() -> bool:
        outcome[:] = [replicas.produce_outcome(led, required_offset)]
        return outcome[0] is not None

    replicas.hasten_visibility(led)
    deadline = asyncio.get_running_loop().time() + timeout_s
    await replicas.purgatory.wait_until([led.plog], settled, deadline)
    if not outcome or outcome[0] is None:
        return REQUEST_TIMED_OUT
    return NOT_ENOUGH_REPLICAS if outcome[0] == NOT_ENOUGH_REPLICAS_AFTER_APPEND else outcome[0]
