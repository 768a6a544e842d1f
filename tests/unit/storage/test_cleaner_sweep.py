"""A clean with the compiled sweep (records/sweep.py) writes the same bytes as the pure-Python path
(records/sweep.py Rule 2): the same segments, byte for byte, and the same counts, over logs mixing codecs,
tombstones, idempotent producers (whose emptied batches coalesce only when their sequences follow on), offset
maps that fill, and time past delete.retention.ms."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records.batch import build_batch
from sparklog.storage import Flusher, PartitionLog
from sparklog.storage.cleaner import Cleaner, DedupeBufferTooSmall
from sparklog.storage.files import OS_FILES
from sparklog.storage.offset_map import OffsetMap
from support.codecs import NAMES, switched

T0 = 1_700_000_000_000
SETTINGS = {"cleanup.policy": "compact", "segment.bytes": 700, "index.interval.bytes": 100, "flush.ms": 10**12,
            "file.delete.delay.ms": 0, "delete.retention.ms": 1000, "min.cleanable.dirty.ratio": 0.0}
PRODUCER = 7

batch = st.tuples(
    st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.none() | st.binary(max_size=40)),
             min_size=1, max_size=6),
    st.sampled_from(["none", "none", "none", "gzip", "lz4"]),
    st.booleans(),  # from the idempotent producer
    st.integers(0, 800),  # ms before the next batch
)


def build(directory: str, batches, flusher) -> int:
    """The log; returns the clock after its last batch."""
    now = T0
    log = PartitionLog.open(directory, SETTINGS, clock=lambda: now, flusher=flusher)
    sequence = 0
    for pairs, compression, idempotent, pause in batches:
        records = [(k, v, None, now) for k, v in pairs]
        if idempotent:
            log.append(build_batch(records, compression, producer_id=PRODUCER, producer_epoch=0,
                                   base_sequence=sequence))
            sequence += len(records)
        else:
            log.append(build_batch(records, compression))
        now += pause
    log.roll()
    log.flush()
    log.close()
    return now


def clean_with(codec: str, directory: str, now: int, map_bytes: int, flusher):
    """(the result's counts or the error's type, every file's bytes) after one clean with `codec`."""
    with switched(codec):
        log = PartitionLog.open(directory, SETTINGS, clock=lambda: now, flusher=flusher)
        try:
            result = Cleaner(OffsetMap(map_bytes), OS_FILES, clock=lambda: now).clean(log)
            outcome = None if result is None else (result.end, result.bytes_read, result.bytes_written,
                                                   result.records_read, result.records_removed,
                                                   result.tombstones_removed, result.segments_swapped)
        except DedupeBufferTooSmall:
            outcome = DedupeBufferTooSmall
        finally:
            log.close()
    files = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            with open(os.path.join(directory, name), "rb") as f:
                files[name] = f.read()
    return outcome, files


@pytest.fixture(scope="module")
def flusher():
    flusher = Flusher("test-flusher")
    yield flusher
    flusher.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, min_size=1, max_size=25), map_bytes=st.sampled_from([48, 160, 64 * 1024]),
       later_ms=st.integers(0, 2000))
def test_the_compiled_sweep_and_the_pure_path_clean_alike_byte_for_byte(flusher, batches, map_bytes, later_ms):
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "source", "t-0")
        now = build(source, batches, flusher) + later_ms
        outcomes = []
        for codec in NAMES:
            directory = os.path.join(tmp, codec, "t-0")
            shutil.copytree(source, directory)
            outcomes.append(clean_with(codec, directory, now, map_bytes, flusher))
        assert outcomes[0] == outcomes[1]
