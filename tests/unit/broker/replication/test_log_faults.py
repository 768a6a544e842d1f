"""LogFaultReporter: the broker's fenced ranges reach ZooKeeper, latest map last."""

import concurrent.futures
import time

from sparklog.broker.replication.log_faults import LogFaultReporter
from sparklog.coordination import log_faults


def wait_for(zk, expected, timeout=10):
    deadline = time.monotonic() + timeout
    while log_faults.read_all(zk).by_partition != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return log_faults.read_all(zk).by_partition


def test_changes_before_and_after_start_are_published(zk):
    reporter = LogFaultReporter(zk, 4)
    reporter.on_fence("t", 0, ((5, 8),))  # a log opened with fences, before the executor exists
    with concurrent.futures.ThreadPoolExecutor(2) as executor:
        reporter.start(executor)
        assert wait_for(zk, {("t", 0): {4: ((5, 8),)}}) == {("t", 0): {4: ((5, 8),)}}
        for end in range(9, 30):
            reporter.on_fence("t", 1, ((7, end),))
        reporter.on_fence("t", 0, ())  # retention dropped it
    assert log_faults.read_all(zk).by_partition == {("t", 1): {4: ((7, 29),)}}
