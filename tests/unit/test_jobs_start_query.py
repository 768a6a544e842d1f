"""jobs.common.start_query: which ends of a query it starts again. Spark's own connect-back timeout is a fixed
10 s that no test can shorten, so its query is played here by `Query` (the real failure was reproduced by hand
with a source process delayed 12 s before it connects: see tests/support/spark.py's users)."""

from __future__ import annotations

import pytest

from jobs import common
from jobs.common import QUERY_STARTS, WORKER_NOT_CONNECTED, start_query

NOT_CONNECTED = Exception(f"[STREAM_FAILED] Query terminated with exception: {WORKER_NOT_CONNECTED}. SQLSTATE: XXKST")


class Query:
    """A StreamingQuery's surface that start_query reads: active or ended with `failure`, and its progress."""

    def __init__(self, failure: Exception | None, progress: list, initializing_polls: int = 0) -> None:
        self._failure, self.recentProgress, self._polls = failure, progress, initializing_polls
        self.stopped = False

    @property
    def isActive(self) -> bool:
        return self._failure is None

    @property
    def status(self) -> dict:
        self._polls -= 1
        return {"message": common.INITIALIZING if self._polls >= 0 else "Waiting for data to arrive"}

    def exception(self):
        return self._failure

    def stop(self) -> None:
        self.stopped = True


class Writer:
    def __init__(self, *queries: Query) -> None:
        self.queries, self.paths = list(queries), []

    def start(self, *path):
        self.paths.append(path)
        return self.queries.pop(0)


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(common, "INITIALIZED_POLL_S", 0)


def test_a_query_that_spark_could_not_connect_to_before_any_batch_is_started_again_on_the_same_path():
    writer = Writer(Query(NOT_CONNECTED, []), Query(None, [], initializing_polls=3))
    assert start_query(writer, "/out") is not None and writer.paths == [("/out",), ("/out",)]
    assert not writer.queries


def test_it_is_started_at_most_query_starts_times_and_the_last_failure_is_the_callers():
    writer = Writer(*(Query(NOT_CONNECTED, []) for _ in range(QUERY_STARTS + 1)))
    assert start_query(writer).exception() is NOT_CONNECTED
    assert len(writer.paths) == QUERY_STARTS


@pytest.mark.parametrize("query", [
    Query(Exception("Topic absent does not exist"), []),  # the source's own failure
    Query(NOT_CONNECTED, [{"numInputRows": 5}]),  # after a micro-batch: not a start
    Query(None, [], initializing_polls=2),  # running
])
def test_any_other_end_or_a_running_query_is_returned_as_it_is(query):
    writer = Writer(query)
    assert start_query(writer) is query and len(writer.paths) == 1


def test_a_query_that_never_initializes_its_sources_is_stopped_and_a_timeout(monkeypatch):
    monkeypatch.setattr(common, "INITIALIZED_TIMEOUT_S", 0)
    stuck = Query(None, [], initializing_polls=10**6)
    with pytest.raises(TimeoutError, match="did not initialize its sources"):
        start_query(Writer(stuck))
    assert stuck.stopped
