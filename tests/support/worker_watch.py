"""What a test process that dies or hangs was doing, told in the run's own output (tests/conftest.py's hooks).

A pytest-xdist worker that dies in native code (a signal, an abort() in a C library, a SIGKILL) leaves only
"[gw1] node down: Not properly terminated" in the controller's output: its stderr and the captured output of
the test it ran are gone with it. And a worker whose main thread blocks in C code never runs pytest-timeout's
SIGALRM handler, so the run waits until CI's own limit. This module makes both say what they were.

Rule 1 (a record per worker): each xdist worker appends to its own file under the run's directory
        (`WATCH_DIR`, made by the controller and inherited by its workers): a first line with its pid, process
        group and parent; a line "start <nodeid>" as each test starts, with the worker's resident memory and
        the machine's available memory then; and what faulthandler writes on a fatal signal (SIGSEGV, SIGBUS,
        SIGABRT, SIGFPE, SIGILL) or on a signal whose default ends the process and that a test process has no
        business getting (TERMINATING: SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ; the stacks, then
        the signal's default action): every thread's Python stack. A SIGKILL leaves no stack, but the last
        "start" line names the test.
Rule 2 (a watchdog for hangs pytest-timeout cannot end): each test runs under faulthandler's watchdog thread,
        which needs no Python signal handler: past the test's timeout plus GRACE_S it writes every thread's
        stack to the record (in a run without workers: to stderr) and ends the process (exit status 1). pytest-timeout, at the timeout itself, gets
        the first chance to fail the test the ordinary way. After the last test, the same watchdog bounds
        the process's shutdown (session teardown, atexit) by SHUTDOWN_S.
Rule 3 (told by the controller): when a worker goes down with an error, the controller writes how the
        process ended (`exit_status`: the signal that killed it, or its exit code) and the tail of its record
        into the run's output at once, under the worker's name; the run's summary then names the test (xdist's
        "worker 'gwN' crashed while running ...").
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

WATCH_DIR = "SPARKLOG_TEST_WATCH_DIR"  # the environment variable naming the run's directory (Rule 1)
# past pytest-timeout's limit, before the watchdog ends the process (Rule 2); the variable is for this module's test
GRACE_S = float(os.environ.get("SPARKLOG_TEST_WATCH_GRACE_S", 120))
SHUTDOWN_S = 600  # the longest a test process may take from its last test to its exit (Rule 2)
TAIL_BYTES = 20_000  # of a record, written into the run's output (Rule 3)
TERMINATING = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU", "SIGXFSZ")  # Rule 1's catchable deaths

_record = None  # a worker's record file (Rule 1); None in the controller or a run without workers
_out = None  # where faulthandler writes: the record, or (no controller to tell it) the process's stderr


def configure(worker_id: str | None) -> None:
    """An xdist worker opens its record (Rule 1) and points faulthandler at it; the controller (or a run without
    workers, whose stderr is the terminal) makes the run's directory and keeps faulthandler on stderr."""
    global _record, _out
    directory = os.environ.get(WATCH_DIR)
    if worker_id is None or directory is None or not Path(directory).is_dir():
        os.environ[WATCH_DIR] = tempfile.mkdtemp(prefix="sparklog-test-watch-")
        _out = sys.__stderr__
        return
    _record = _out = open(Path(directory) / f"{worker_id}.{os.getpid()}.log", "a", buffering=1)
    _record.write(f"worker {worker_id} pid {os.getpid()} pgid {os.getpgrp()} sid {os.getsid(0)} "
                  f"ppid {os.getppid()}\n")
    faulthandler.enable(file=_record, all_threads=True)
    for name in TERMINATING:
        faulthandler.register(getattr(signal, name), file=_record, all_threads=True, chain=True)


def test_started(nodeid: str, timeout_s: float) -> None:
    """Rules 1 and 2 at a test's start: name it, and arm the watchdog."""
    if _record is not None:
        _record.write(f"start {nodeid} {time.strftime('%H:%M:%S')} {_memory()}\n")
    if _out is not None:
        faulthandler.dump_traceback_later(timeout_s + GRACE_S, exit=True, file=_out)


def _memory() -> str:
    """This process's resident memory and the machine's available memory (Rule 1), in MiB."""
    try:
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) >> 10 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return ""
    return f"rss {rss} MiB, available {available} MiB"


def exit_status(gateway) -> str:
    """How an xdist worker's process ended (Rule 3), from the execnet gateway the controller holds: "killed by
    SIGKILL", "exit code 1", or what could not be learnt. Waits up to 5 s for the process to be reaped."""
    popen = getattr(getattr(gateway, "_io", None), "popen", None)
    if popen is None:
        return "exit status unknown (no process handle)"
    deadline = time.monotonic() + 5
    while (code := popen.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if code is None:
        return f"pid {popen.pid} still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"pid {popen.pid} killed by {name}"
    return f"pid {popen.pid} exit code {code}"


def test_finished() -> None:
    if _out is not None:
        faulthandler.cancel_dump_traceback_later()


def session_finished() -> None:
    """Rule 2 for the process's shutdown: armed, never cancelled (the process's exit ends the watchdog)."""
    if _record is not None:
        _record.write("session finished\n")
    if _out is not None:
        faulthandler.dump_traceback_later(SHUTDOWN_S, exit=True, file=_out)


def cleanup(worker_id: str | None) -> None:
    """The controller (or a run without workers), at the end: the run's records go once nothing needs them."""
    directory = os.environ.get(WATCH_DIR)
    if worker_id is None and directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def records_of(worker_id: str) -> list[Path]:
    """The records of every process that ran as `worker_id` in this run (a replaced worker has several)."""
    directory = os.environ.get(WATCH_DIR)
    if directory is None:
        return []
    return sorted(Path(directory).glob(f"{worker_id}.*.log"), key=lambda path: path.stat().st_mtime)


def tail(path: Path) -> list[str]:
    """The last TAIL_BYTES of a record, as lines, after its first line (the worker's pid and group) (Rule 3)."""
    with open(path, "rb") as record:
        first = record.readline().decode("utf-8", "replace").rstrip("\n")
        after_first = record.tell()
        start = max(after_first, record.seek(0, os.SEEK_END) - TAIL_BYTES)
        record.seek(start)
        rest = record.read().decode("utf-8", "replace").splitlines()
    return [first, *(["..."] if start > after_first else []), *rest]
