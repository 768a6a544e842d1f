"""PartitionLog.append_control_batch as the transaction coordinator's branch needs it (written against its
stand-in; since the merge, the storage half's real one): a marker lands as Kafka's control batch, and a
producer's sequence goes on across it."""

from __future__ import annotations

import struct

from sparklog.records.batch import build_batch, iter_batches
from sparklog.storage.log import PartitionLog


def test_a_marker_is_a_control_batch_and_the_sequence_goes_on(tmp_path, flusher):
    plog = PartitionLog.open(str(tmp_path / "t-0"), {"flush.ms": 10**12}, flusher=flusher)
    try:
        plog.append_as_leader(build_batch([(b"k", b"v", None, 1)], producer_id=7, producer_epoch=2,
                                          base_sequence=0), 4)
        assert plog.append_control_batch(7, 2, True, 9, 4) == 1
        assert plog.append_as_leader(build_batch([(b"k", b"w", None, 1)], producer_id=7, producer_epoch=2,
                                                 base_sequence=1), 4) == 2
        batches = list(iter_batches(plog.read_replica(0, 1 << 20).read_bytes()))
        marker = batches[1]
        assert (marker.base_offset, marker.producer_id, marker.producer_epoch) == (1, 7, 2)
        assert marker.is_control and marker.is_transactional and marker.partition_leader_epoch == 4
        record = next(marker.records())
        assert (record.key, record.value) == (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 9))
        assert plog.log_end_offset == 3
    finally:
        plog.close()
