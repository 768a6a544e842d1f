"""A short fault run in the suite (the long one is `scripts/fault_run.py`): brokers killed, paused and stopped
under a confluent-kafka producer, then the history checker finds no lost, divergent or duplicated write.

Replication factor 1 until the replication data path lands: failover is then "the partition is offline
while its broker is down, and comes back with it", which the controller must get right too."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from support.cluster import REPO

pytestmark = pytest.mark.slow


def load_script():
    spec = importlib.util.spec_from_file_location("fault_run", REPO / "scripts" / "fault_run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_short_fault_run_keeps_every_acknowledged_write(tmp_path):
    fault_run = load_script()
    args = fault_run.parse_args(["--minutes", "0.4", "--replication-factor", "1", "--min-insync", "1",
                                 "--partitions", "4", "--seed", "7", "--rate", "100"])
    result = fault_run.run(args, tmp_path)
    assert result.faults, "the nemesis acted"
    assert result.report.acknowledged > 100
    assert result.report.ok, str(result.report)
