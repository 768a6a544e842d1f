"""The broker process's own setup (issue 14): descriptors enough for its connection and partition limits."""

from __future__ import annotations

import resource
import subprocess
import sys

LOW_SOFT_LIMIT = 256

RAISE = f"""
import resource
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_SOFT_LIMIT}, hard))
from sparklog.broker.app import raise_open_file_limit
print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_the_broker_raises_its_soft_open_file_limit_to_the_hard_one():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected = LOW_SOFT_LIMIT if hard == resource.RLIM_INFINITY else hard  # "unlimited" is left as it is
    out = subprocess.run([sys.executable, "-c", RAISE], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == [str(expected), str(expected)]
