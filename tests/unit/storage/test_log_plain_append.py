"""PartitionLog.append_as_leader's plain path (_append_plain, for the sets append_check.check_leader_set
takes) leaves the log a set-by-set general append leaves: the same outcomes (offsets, or the error and its
message), the same files byte for byte (segments, both indexes, snapshots, epochs) across rolls and index
entries, and the same LEO and high watermark."""

from __future__ import annotations

import os
import shutil
import tempfile
from unittest import mock

from hypothesis import HealthCheck, given, settings, strategies as st

from support.storage_batches import BASE_TS
from sparklog.records.batch import ATTRIBUTES_OFFSET, build_batch, compute_crc
from sparklog.storage import PartitionLog
from sparklog.storage import log as log_module

SETTINGS = {"flush.ms": 10**12, "segment.bytes": 900, "index.interval.bytes": 150, "max.message.bytes": 400}


@st.composite
def batches(draw):
    """A client's batch: mostly a plain one, sometimes one the plain path leaves to the general append."""
    count = draw(st.integers(1, 3))
    records = [(draw(st.none() | st.binary(max_size=4)), draw(st.binary(max_size=90)), None,
                BASE_TS + draw(st.integers(-5, 5))) for _ in range(count)]
    kind = draw(st.sampled_from(["plain"] * 6 + ["idempotent", "gzip", "transactional", "crc", "records"]))
    data = bytearray(build_batch(records, compression="gzip" if kind == "gzip" else "none",
                                 producer_id=7 if kind == "idempotent" else -1,
                                 producer_epoch=0 if kind == "idempotent" else -1,
                                 base_sequence=draw(st.integers(0, 3)) if kind == "idempotent" else -1,
                                 is_transactional=kind == "transactional"))
    if kind == "crc":
        data[-1] ^= 1
    elif kind == "records":  # the CRC right, the records not parsing
        data[61] = 0x7F
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
        outcomes.append((log.log_end_offset, log.high_watermark))
    finally:
        log.close()
    files = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    return outcomes, files


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
    with mock.patch.object(log_module.PartitionLog, "_append_many", side_effect=AssertionError("general path")):
        assert log.append_as_leader(sets, 4) == 0
        assert log.append_as_leader(memoryview(sets), 4) == 3
    assert log.log_end_offset == 6
    assert ATTRIBUTES_OFFSET == 21
