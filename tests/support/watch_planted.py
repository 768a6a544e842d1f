"""The faults tests/unit/support/test_worker_watch.py plants in a pytest run of its own (not collected by the
suite: the name does not start with test_). SPARKLOG_WATCH_PLANT says which: "abort" (a C library's abort()),
"kill" (SIGKILL, no stack), "term" (a SIGTERM
from another process, whose default ends the worker), or "hang" (the main thread blocked where pytest-timeout's SIGALRM cannot reach)."""

import os
import signal
import time


def test_planted_fault():
    plant = os.environ["SPARKLOG_WATCH_PLANT"]
    if plant == "abort":
        os.abort()
    elif plant == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif plant == "term":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # the signal ends the process before this does
    elif plant == "hang":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    raise AssertionError(f"unknown plant {plant!r}")
