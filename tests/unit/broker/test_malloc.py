"""keep_freed_memory(): a process that allocates and frees request-sized buffers over and over takes fresh pages
(a page fault each) without it, and almost none with it. Each case runs in its own interpreter: the setting is
process-wide."""

import subprocess
import sys

CHURN = """
import resource, sys
from sparklog.broker.malloc import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def churn():
    buffers = [bytearray(1 << 20) for _ in range(16)]  # a burst of 1 MiB requests in flight, then answered
    del buffers
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout)


def test_freed_request_buffers_are_reused_without_page_faults():
    churned, kept = faults("default"), faults("keep")
    assert churned > 40 * 16 * 256 // 2  # at least half of the 1 MiB buffers' 4 KiB pages faulted in afresh
    assert kept < churned // 20
