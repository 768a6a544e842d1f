"""Fixtures shared by the whole suite: one real ZooKeeper server per test session.

- `zookeeper`: the session's EmbeddedZooKeeper (started on first use, stopped at the end of the session).
- `zk_connect`: a connect string `127.0.0.1:<port>/t-<uuid>` with a fresh chroot, for brokers and clients in
  this or other processes; tests never see each other's znodes.
- `zk`: a connected KazooClient on that chroot, closed after the test.

A test process that dies in native code or hangs where pytest-timeout cannot reach says what it was doing in
the run's output (support/worker_watch.py: a record per process, a watchdog per test, the controller's report).

At the end of the run, `pytest_terminal_summary` prints the broker interop tests' API x version x client table;
under pytest-xdist (scripts/test.sh) each worker sends its part to the controller, which prints the merge.

Hypothesis runs without its per-example deadline: on a shared 2-core machine an example's wall time says
nothing about the code (speed is measured in benchmarks/, never in tests).

Every JVM the suite starts (ZooKeeper, Spark drivers and executors, the demo's and the notebook's) compiles
with C1 only (`TEST_JVM_OPTIONS` in JAVA_TOOL_OPTIONS, inherited by every child process): the suite's JVMs
live for seconds to minutes on small inputs, where C2's compiler threads cost more CPU than their code wins
back (a Spark session start plus first queries took 0.7x the time on 2 cores). A JAVA_TOOL_OPTIONS already
set is kept (set it empty to run the JVMs' defaults). Behaviour is the same: only the JIT tier differs.
"""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings

from support import worker_watch

settings.register_profile("sparklog", deadline=None)
settings.load_profile("sparklog")

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS)


@pytest.fixture(scope="session", autouse=True)
def implementation_the_environment_asks_for():
    """Under SPARKLOG_NO_EXTENSIONS (scripts/test.sh's pure-Python lane) nothing compiled runs: the lane fails
    if the selector (records/implementation.py) lets a kernel through. The variable is read here on its own,
    not through the selector, so a selector that ignores it cannot pass."""
    if os.environ.get("SPARKLOG_NO_EXTENSIONS", "") in ("", "0"):
        return
    import sparklog.client.sendpath
    import sparklog.protocol.produce_run
    import sparklog.records
    from sparklog.records import implementation

    assert sparklog.records.IMPLEMENTATION == "python"
    assert sparklog.protocol.produce_run.IMPLEMENTATION == "python" == sparklog.client.sendpath.IMPLEMENTATION
    assert [kernel.module for kernel in implementation.report() if kernel.compiled] == []


@pytest.fixture(scope="session")
def zookeeper(request):
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    server = EmbeddedZooKeeper()
    request.addfinalizer(server.stop)  # registered before start() so a failed start is cleaned up too
    server.start()
    return server


@pytest.fixture
def zk_connect(zookeeper) -> str:
    return f"{zookeeper.connect_string}/t-{uuid.uuid4().hex}"


@pytest.fixture
def zk(request, zk_connect):
    from sparklog.coordination.connection import close, connect

    client = connect(zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which points it at stderr
def pytest_configure(config):
    worker_watch.configure(_worker_id(config))


def pytest_unconfigure(config):
    worker_watch.cleanup(_worker_id(config))


def _worker_id(config) -> str | None:
    """This xdist worker's name (gw0, ...); None in the controller or a run without workers."""
    return getattr(config, "workerinput", {}).get("workerid")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marker = item.get_closest_marker("timeout")
    timeout = marker.args[0] if marker and marker.args else float(item.config.getini("timeout") or 0)
    worker_watch.test_started(item.nodeid, float(timeout))
    yield
    worker_watch.test_finished()


def pytest_sessionfinish(session):
    """An xdist worker: hand this process's interop matrix to the controller (`pytest_testnodedown`)."""
    worker_watch.session_finished()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from support import broker_matrix

        workeroutput["broker_matrix"] = broker_matrix.export()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when the run has no workers
def pytest_testnodedown(node, error):
    """A worker's end: its interop matrix joins the run's; a worker that went down says what it was doing."""
    from support import broker_matrix

    if error:
        reporter = node.config.pluginmanager.get_plugin("terminalreporter")
        status = worker_watch.exit_status(node.gateway)
        reporter.write_sep("-", f"{node.gateway.id} went down ({error}): {status}")
        for record in worker_watch.records_of(node.gateway.id)[-1:]:
            reporter.write_sep("-", f"{node.gateway.id}: the end of its record {record}")
            for line in worker_watch.tail(record):
                reporter.write_line(line)

    matrix = getattr(node, "workeroutput", {}).get("broker_matrix")
    if matrix:
        broker_matrix.record(matrix)


def pytest_terminal_summary(terminalreporter):
    """Issue 3's API x version x client matrix, when broker interop tests recorded one (support/broker_matrix)."""
    from support import broker_matrix

    lines = broker_matrix.format_table()
    if lines:
        terminalreporter.section("broker: API x version x client (versions served)")
        for line in lines:
            terminalreporter.write_line(line)
