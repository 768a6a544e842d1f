"""scripts/fault_run.py's exit status: 0 only for a clean history with writes acknowledged and no error reported
to the producer (the README: a fault run exits non-zero on a violation)."""

import time
from collections import Counter
from contextlib import contextmanager

import pytest

from support.fault_run import RunResult
from support.scripts import load_script
from support.history import Report

CLEAN = Report(acknowledged=10, read=10, found=10)


def script():
    return load_script("fault_run")


@pytest.mark.parametrize("result, status", [
    (RunResult(report=CLEAN), 0),
    (RunResult(report=Report(acknowledged=0, read=0)), 1),  # nothing acknowledged: the run proved nothing
    (RunResult(report=CLEAN, produce_errors=Counter({"_MSG_TIMED_OUT": 1})), 1),  # an error the retries did not hide
    (RunResult(report=None), 1),
], ids=["clean", "nothing-acknowledged", "a-producer-error", "no-report"])
def test_the_fault_run_script_exits_non_zero_unless_the_run_is_clean(monkeypatch, tmp_path, result, status):
    module = script()

    @contextmanager
    def no_cluster(*args, **kwargs):  # the scenario itself is the suite's test_fault_run; here only the verdict
        yield type("Started", (), {"zookeeper": "unused"})()

    monkeypatch.setattr("sparklog.broker.launcher.LocalCluster", no_cluster)
    monkeypatch.setattr(module, "run", lambda cluster, zk_connect, settings: result)
    assert module.main(["--minutes", "0", "--base-dir", str(tmp_path)]) == status


class _Message:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self):
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b"v-%d-%d" % (self._partition, self._offset)


class _StalledConsumer:
    """Serves partition 0's first two records, then nothing more (a leader that never answers again)."""

    def __init__(self) -> None:
        self.batches = [[_Message(0, 0), _Message(0, 1), _Message(1, 0)]]

    def consume(self, num_messages: int, timeout: float) -> list:
        return self.batches.pop(0) if self.batches else []


def test_a_final_read_that_cannot_reach_a_partitions_end_raises_naming_where_it_stopped():
    from support.fault_run import read_to_ends

    consumer = _StalledConsumer()
    with pytest.raises(AssertionError, match=r"stopped short .*\{0: '2 of 5'\}"):
        read_to_ends(consumer, {0: 5, 1: 1}, deadline=time.monotonic() + 2)
    assert consumer.batches == []  # it read what there was before it gave up


def test_a_final_read_returns_each_partitions_records_once_at_its_end():
    from support.fault_run import read_to_ends

    logs = read_to_ends(_StalledConsumer(), {0: 2, 1: 1}, deadline=float("inf"))
    assert logs == {0: [(0, b"v-0-0"), (1, b"v-0-1")], 1: [(0, b"v-1-0")]}
