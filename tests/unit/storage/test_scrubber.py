"""The scrubber: throttled background passes that find bit rot in flushed segments (scrubber.py)."""

import threading
import time

import pytest

from support.storage_batches import make_batch
from sparklog.records.batch import iter_batches
from sparklog.storage import InvalidConfigError, LogManager, Scrubber, ScrubberConfig

SETTINGS = {"segment.bytes": 4000, "index.interval.bytes": 200, "flush.ms": 10**9}
CLOSE_BOUND_S = 30.0  # close() of a throttled pass returns within this (the pass itself would take minutes)


def fill(log, batches=100, value_size=200):
    for i in range(batches):
        log.append(make_batch(2, value_size, tag=i))
    log.flush()


def rot(segment):
    """Flip a byte inside the records of the segment's second batch (only its CRC can tell)."""
    data = open(segment.path, "rb").read()
    first = next(iter_batches(data))
    at = first.size + 70
    with open(segment.path, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0x01]))
    return first.next_offset


def test_a_background_pass_fences_rot_before_any_reader_meets_it(tmp_path):
    config = ScrubberConfig(bytes_per_second=10**9, interval_ms=20)
    with LogManager(str(tmp_path), SETTINGS, scrubber=config) as manager:
        log = manager.get_or_create("t", 0)
        fill(log)
        damaged = rot(log.segments[1])
        deadline = time.monotonic() + 10
        while not log.fenced_ranges() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.fenced_ranges() == ((damaged, damaged + 2),)
        stats = manager.statistics()
        assert stats.fenced_ranges == 1 and stats.scrubber.passes >= 1 and stats.scrubber.errors == 0


def test_a_pass_reads_no_faster_than_its_rate(tmp_path):
    with LogManager(str(tmp_path), SETTINGS, scrubber=ScrubberConfig(enable=False)) as manager:
        log = manager.get_or_create("t", 0)
        fill(log)
        size = sum(s.size for s in log.segments[:-1])
        scrubber = Scrubber(manager.logs, ScrubberConfig(bytes_per_second=size * 4))
        started = time.monotonic()
        assert scrubber.run_pass() == size
        assert time.monotonic() - started >= 0.2  # a quarter of a second's budget, less the first read
        assert log.statistics().unverified_segments == 0


def test_close_stops_a_throttled_pass_at_once(tmp_path):
    with LogManager(str(tmp_path), SETTINGS, scrubber=ScrubberConfig(enable=False)) as manager:
        log = manager.get_or_create("t", 0)
        fill(log)
        size = sum(s.size for s in log.segments[:-1])
        assert size / 100 > 4 * CLOSE_BOUND_S  # the throttled pass would take minutes
        scrubber = Scrubber(manager.logs, ScrubberConfig(bytes_per_second=100)).start()
        time.sleep(0.1)
        started = time.monotonic()
        scrubber.close()
        assert time.monotonic() - started < CLOSE_BOUND_S  # stopped, not waited out: generous on a loaded machine
        assert scrubber.statistics().passes == 0  # the pass was stopped, not finished
        assert not [t for t in threading.enumerate() if t.name == "sparklog-scrubber"]


@pytest.mark.parametrize("props", [{"log.scrubber.enable": "maybe"}, {"log.scrubber.bytes.per.second": "0"},
                                   {"log.scrubber.interval.ms": "soon"}])
def test_bad_settings_are_refused_with_their_name(props):
    with pytest.raises(InvalidConfigError, match="log.scrubber"):
        ScrubberConfig.from_properties(props)


def test_settings_parse_from_broker_properties():
    assert ScrubberConfig.from_properties({"log.scrubber.enable": "false", "log.scrubber.bytes.per.second": "1024",
                                           "log.scrubber.interval.ms": "5000"}) == ScrubberConfig(False, 1024, 5000)


def test_segments_of_a_log_opened_after_a_pass_are_verified_without_waiting_for_the_next(tmp_path):
    settings = dict(SETTINGS, **{"index.interval.bytes": 50})
    with LogManager(str(tmp_path), settings, scrubber=ScrubberConfig(enable=False)) as manager:
        fill(manager.get_or_create("t", 0))
    config = ScrubberConfig(bytes_per_second=10**9, interval_ms=10**9)  # one full pass, at start
    with LogManager(str(tmp_path), settings, scrubber=config) as manager:
        time.sleep(0.2)  # the full pass found no logs
        log = manager.load_existing()[0]
        assert log.statistics().unverified_segments > 0
        deadline = time.monotonic() + 5  # the short pass is nudged by the open; its timer alone waits 10 s
        while log.statistics().unverified_segments and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.statistics().unverified_segments == 0
