"""PartitionLog.append_as_leader's plain path (_append_plain, for the sets append_check.check_leader_set
takes: uncompressed or compressed, idempotent or not) leaves the log a set-by-set general append leaves: the same outcomes (offsets, a duplicate's original
offset, or the error and its message: OutOfOrderSequence, InvalidProducerEpoch, DuplicateSequence among
several batches, an idempotent batch's negative sequence), the same files byte for byte (segments, both
indexes, producer snapshots, epochs) across rolls and index entries, and the same LEO, high watermark and
producer state."""

from __future__ import annotations

import os
import shutil
import tempfile
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from support.storage_batches import BASE_TS
from sparklog.records.batch import ATTRIBUTES_OFFSET, build_batch, compute_crc, iter_batches
from sparklog.storage import PartitionLog
from sparklog.storage import append as log_module
from sparklog.storage.errors import DuplicateSequence, InvalidProducerEpoch, OutOfOrderSequence

SETTINGS = {"flush.ms": 10**12, "segment.bytes": 900, "index.interval.bytes": 150, "max.message.bytes": 400}


@st.composite
def batches(draw):
    """A client's batch: mostly a plain one, sometimes one the plain path leaves to the general append."""
    count = draw(st.integers(1, 3))
    records = [(draw(st.none() | st.binary(max_size=4)), draw(st.binary(max_size=90)), None,
                BASE_TS + draw(st.integers(-5, 5))) for _ in range(count)]
    kind = draw(st.sampled_from(["plain"] * 5 + ["idempotent"] * 5 + ["gzip", "transactional", "crc", "records",
                                                                      "lz4-idempotent", "lz4-records"]))
    idempotent = kind.endswith("idempotent")
    codec = {"gzip": "gzip", "lz4-idempotent": "lz4", "lz4-records": "lz4"}.get(kind, "none")
    data = bytearray(build_batch(records, compression=codec,
                                 producer_id=draw(st.sampled_from([7, 8])) if idempotent else -1,
                                 producer_epoch=draw(st.sampled_from([0, 0, 0, 1])) if idempotent else -1,
                                 base_sequence=draw(st.sampled_from([-1] + list(range(8)))) if idempotent else -1,
                                 is_transactional=kind == "transactional"))
    if kind == "crc":
        data[-1] ^= 1
    elif kind == "records":  # the CRC right, the records not parsing
        data[61] = 0x7F
        data[17:21] = compute_crc(data).to_bytes(4, "big")
    elif kind == "lz4-records":  # the CRC right, one record fewer than recordCount says
        data[57:61] = (count + 1).to_bytes(4, "big")
        data[23:27] = count.to_bytes(4, "big")
        data[17:21] = compute_crc(data).to_bytes(4, "big")
    return bytes(data)


record_sets = st.lists(batches(), min_size=1, max_size=4).map(b"".join)


def _append_all(directory: str, sets: list, flusher) -> tuple[list, dict]:
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    log = PartitionLog.open(directory, dict(SETTINGS), flusher=flusher)
    outcomes = []
    try:
        for epoch, records, kind in sets:
            buffer = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](records)
            try:
                outcomes.append(log.append_as_leader(buffer, epoch))
            except Exception as exc:  # noqa: BLE001 - compared, type and message
                outcomes.append((type(exc), str(exc)))
        outcomes.append((log.log_end_offset, log.high_watermark, dict(log.producer_state.producers)))
    finally:
        log.close()
    files = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    return outcomes, files


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(st.tuples(st.integers(0, 2), record_sets, st.sampled_from(["bytes", "bytearray", "memoryview"])),
                     min_size=1, max_size=12))
def test_the_plain_path_leaves_what_the_general_append_leaves(sets, flusher):
    work = tempfile.mkdtemp()
    try:
        plain = _append_all(os.path.join(work, "plain", "topic-0"), sets, flusher)
        with mock.patch.object(log_module, "check_leader_set", lambda records, limit: None):
            general = _append_all(os.path.join(work, "general", "topic-0"), sets, flusher)
        assert plain == general
    finally:
        shutil.rmtree(work)


def test_plain_sets_of_several_batches_take_the_plain_path(tmp_path, flusher):
    """The sparklog producer's batch-1 requests (a set of one-record batches) are the case it is for."""
    log = PartitionLog.open(str(tmp_path / "t-0"), dict(SETTINGS), flusher=flusher)
    sets = b"".join(build_batch([(None, b"v%d" % i, None, BASE_TS)]) for i in range(3))
    with mock.patch.object(log_module.AppendPipeline, "_append_set", side_effect=AssertionError("general path")):
        assert log.append_as_leader(sets, 4) == 0
        assert log.append_as_leader(memoryview(sets), 4) == 3
    assert log.log_end_offset == 6
    assert ATTRIBUTES_OFFSET == 21


def test_an_idempotent_producers_sets_take_the_plain_path_with_its_checks(tmp_path, flusher):
    """Kafka's clients' sets (one idempotent batch): appended, a retried one answered with its offset, a gap
    and a stale epoch refused, all without the general append; the state survives a reopen."""
    def idempotent(sequence, epoch=1, count=2):
        return build_batch([(None, b"v", None, BASE_TS)] * count, producer_id=5, producer_epoch=epoch,
                           base_sequence=sequence)

    log = PartitionLog.open(str(tmp_path / "t-0"), dict(SETTINGS), flusher=flusher)
    with mock.patch.object(log_module.AppendPipeline, "append", side_effect=AssertionError("general path")), \
            mock.patch.object(log_module.AppendPipeline, "_append_set", side_effect=AssertionError("general path")):
        assert log.append_as_leader(idempotent(0), 0) == 0
        assert log.append_as_leader(idempotent(2), 0) == 2
        assert log.append_as_leader(idempotent(0), 0) == 0  # a retry of a batch that landed: its offset
        with pytest.raises(OutOfOrderSequence):
            log.append_as_leader(idempotent(9), 0)
        with pytest.raises(InvalidProducerEpoch):
            log.append_as_leader(idempotent(4, epoch=0), 0)
        with pytest.raises(DuplicateSequence):  # a set of several batches, one a duplicate
            log.append_as_leader(idempotent(2) + idempotent(4), 0)
    assert log.log_end_offset == 4
    log.close()
    log = PartitionLog.open(str(tmp_path / "t-0"), dict(SETTINGS), flusher=flusher)
    try:
        assert log.append_as_leader(idempotent(4), 0) == 4
        assert log.append_as_leader(idempotent(2), 0) == 2
    finally:
        log.close()


def test_a_compressed_idempotent_set_takes_the_plain_path_stored_as_it_came(tmp_path, flusher):
    """librdkafka's lz4 batch of an idempotent producer: checked (decompressed), appended without the general
    append, its offsets assigned in the header and its compressed section written as it came."""
    rows = [(None, b"value %d" % i, None, BASE_TS) for i in range(50)]
    sent = build_batch(rows, compression="lz4", producer_id=3, producer_epoch=0, base_sequence=0)
    log = PartitionLog.open(str(tmp_path / "t-0"), dict(SETTINGS, **{"max.message.bytes": 10_000}), flusher=flusher)
    try:
        log.append_as_leader(build_batch([(None, b"first", None, BASE_TS)]), 0)
        with mock.patch.object(log_module.AppendPipeline, "append", side_effect=AssertionError("general path")):
            assert log.append_as_leader(sent, 2) == 1
            assert log.append_as_leader(sent, 2) == 1  # its retry
        log.flush()
        stored = log.read(1, 1 << 20).read_bytes()
    finally:
        log.close()
    assert stored[:8] == (1).to_bytes(8, "big") and stored[12:16] == (2).to_bytes(4, "big")
    assert stored[16:] == sent[16:]  # CRC, header fields and the compressed records untouched
    [batch] = iter_batches(stored)
    assert [r.value for r in batch.records()] == [r[1] for r in rows] and batch.base_offset == 1
