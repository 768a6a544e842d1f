import threading

from support.storage_batches import make_batch
from sparklog.storage import OffsetOutOfRange, PartitionLog
from sparklog.records.batch import iter_batches


def test_reader_thread_sees_only_valid_batches_while_the_log_rolls_and_deletes(tmp_path, flusher):
    log = PartitionLog.open(str(tmp_path / "t-0"), {"segment.bytes": 1500, "flush.ms": 1, "retention.bytes": 4000,
                                                    "retention.ms": -1, "file.delete.delay.ms": 50},
                            flusher=flusher)
    stop = threading.Event()
    problems, reads, out_of_range = [], [0], [0]

    def reader():
        offset = 0
        while not stop.is_set():
            try:
                piece = log.read(offset, 700)
                for batch in iter_batches(piece.read_bytes()):  # checks every CRC
                    if not batch.base_offset <= offset < batch.next_offset and batch.base_offset != offset:
                        problems.append(("order", offset, batch.base_offset))
                    offset = batch.next_offset
                reads[0] += 1
            except OffsetOutOfRange:
                if offset >= log.log_start_offset:
                    problems.append(("spurious out of range", offset, log.log_start_offset))
                out_of_range[0] += 1
                offset = log.log_start_offset
            except Exception as exc:  # anything else is a bug
                problems.append(repr(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(600):
        log.append(make_batch(3, 40, tag=i))
        if i % 20 == 0:
            log.enforce_retention()
    log.flush()
    stop.set()
    thread.join()
    assert problems == []
    assert reads[0] > 10 and log.statistics().deleted_segments > 10
    assert log.log_start_offset > 0
