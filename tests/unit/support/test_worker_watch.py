"""support/worker_watch.py, in a pytest run of its own with one xdist worker, as scripts/test.sh runs the suite
(--max-worker-restart=0): a worker killed in native code, or hung where pytest-timeout's SIGALRM cannot reach,
ends the run at once, and the run's output names the test and, where there is one, every thread's stack."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLANTED = "tests/support/watch_planted.py::test_planted_fault"


def run_planted(plant: str, timeout_s: int = 1) -> tuple[str, float]:
    """The inner run's stdout (where the controller reports) and how long it took."""
    env = dict(os.environ, SPARKLOG_WATCH_PLANT=plant, SPARKLOG_TEST_WATCH_GRACE_S="2")
    env.pop("SPARKLOG_TEST_WATCH_DIR", None)  # the inner run's controller makes its own
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile",
                             "--max-worker-restart=0", "-o", f"timeout={timeout_s}", "-q", "-rfE", PLANTED],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stdout
    return result.stdout, time.monotonic() - started  # the run's own output: a worker's stderr may go nowhere


@pytest.mark.parametrize("plant, signal_name", [("abort", "SIGABRT"), ("kill", "SIGKILL"), ("term", "SIGTERM")])
def test_a_worker_that_dies_in_native_code_is_named_with_its_test(plant, signal_name):
    output, _ = run_planted(plant)
    assert "gw0 went down" in output and f"start {PLANTED}" in output, output
    assert f"killed by {signal_name}" in output, output  # Rule 3: how the process ended
    assert "replacing crashed worker" not in output, output  # --max-worker-restart=0: xdist's loadfile
    # scheduler can wait forever after replacing a worker (pytest-xdist issues 1323, 1378)
    if plant == "abort":
        assert "Fatal Python error: Aborted" in output and "watch_planted.py" in output, output
    if plant == "term":  # Rule 1: a terminating signal a test process should never get writes every stack first
        assert "in test_planted_fault" in output and "watch_planted.py" in output, output
    assert re.search(r"worker gw0 pid \d+ pgid \d+", output) and " MiB" in output, output  # Rule 1's lines


def test_a_hang_out_of_reach_of_pytest_timeout_ends_the_worker_with_every_threads_stack():
    output, took = run_planted("hang")
    assert "gw0 went down" in output and "Timeout (0:00:03)!" in output, output
    assert "in test_planted_fault" in output and "watch_planted.py" in output, output
    assert took < 120, took  # the planted sleep is 600 s: the watchdog, not the sleep, ended it
