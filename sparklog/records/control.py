"""Control batches: the transaction markers a partition leader writes (Kafka's EndTransactionMarker, KIP-98).

A control batch is a v2 batch with the control bit (attributes bit 5) and the transactional bit (bit 4)
set, the marker's producer id and epoch, baseSequence -1, and exactly one record:

    key     version         int16   CONTROL_KEY_VERSION (0)
            type            int16   ABORT (0) or COMMIT (1)
    value   version         int16   MARKER_VALUE_VERSION (0)
            coordinatorEpoch int32  the epoch of the transaction coordinator that decided

Rule 1 (recognising): a batch is a marker when its control bit is set; its first record's key says which.
A control record whose key is shorter than four bytes, or whose type is neither 0 nor 1, is not a marker
(`parse_marker` raises InvalidControlRecord): Kafka's ControlRecordType.parse answers UNKNOWN for a type it
does not know, and a log must never guess whether such a batch committed or aborted.
Rule 2 (who writes them): only the leader, for the coordinator (clients' control batches are refused); a
follower copies them as any batch, and every replica's producer state applies them (storage/transactions).
Consumers never see control records as records (batch.iter_records skips control batches).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from sparklog.records.batch import CONTROL_MASK, NO_SEQUENCE, build_batch, iter_batches

CONTROL_KEY_VERSION = 0  # Kafka's ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION
MARKER_VALUE_VERSION = 0  # Kafka's EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION
ABORT = 0  # ControlRecordType.ABORT
COMMIT = 1  # ControlRecordType.COMMIT

_KEY = struct.Struct(
    ">"
    "h"  # version
    "h"  # type: ABORT or COMMIT
)
_VALUE = struct.Struct(
    ">"
    "h"  # version
    "i"  # coordinatorEpoch
)


class InvalidControlRecord(ValueError):
    """A control batch whose record is not an end-transaction marker this broker can read (Rule 1)."""


class Marker(NamedTuple):
    """One end-transaction marker: which producer's transaction, committed or aborted, by which coordinator."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       timestamp_ms: int | None = None, base_offset: int = 0,
                       partition_leader_epoch: int = -1) -> bytes:
    """The control batch of one marker (module docstring); `timestamp_ms` None means now."""
    record = (marker_key(commit), marker_value(coordinator_epoch), None, timestamp_ms)
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=NO_SEQUENCE, partition_leader_epoch=partition_leader_epoch,
                       is_transactional=True, is_control=True)


def parse_marker_record(producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None) -> Marker:
    """The marker of a control record's key and value (Rule 1); InvalidControlRecord if it is not one."""
    if key is None or len(key) < _KEY.size:
        raise InvalidControlRecord(f"control record key of {0 if key is None else len(key)} bytes, expected 4")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise InvalidControlRecord(f"control record type {kind} is neither abort (0) nor commit (1)")
    if value is None or len(value) < _VALUE.size:
        raise InvalidControlRecord(f"end-transaction marker value of {0 if value is None else len(value)} bytes, "
                                   "expected 6")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return Marker(producer_id, producer_epoch, kind == COMMIT, coordinator_epoch)


def parse_marker(batch) -> Marker:
    """The marker a whole control batch (bytes, checked by CRC) holds; InvalidControlRecord if none."""
    for parsed in iter_batches(batch):
        if not parsed.attributes & CONTROL_MASK:
            raise InvalidControlRecord(f"the batch at offset {parsed.base_offset} is not a control batch")
        for record in parsed.records():
            return parse_marker_record(parsed.producer_id, parsed.producer_epoch, record.key, record.value)
        raise InvalidControlRecord(f"the control batch at offset {parsed.base_offset} has no record")
    raise InvalidControlRecord("no whole batch")
