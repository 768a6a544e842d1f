"""The short transaction history run (the long one is `scripts/transactions_run.py --minutes 5`): three real
brokers, RF 3, min ISR 2, three consume-transform-produce workers (confluent-kafka, read_committed in, a
transactional producer out, offsets in the transaction) while transaction coordinators, the group's coordinator,
partition leaders and workers are SIGKILLed. Every input value must be read_committed exactly once in the output, no aborted attempt
read, no committed one lost, no transaction half visible or hanging, the group's offsets at the input's end
(support/transaction_history.py)."""

from __future__ import annotations

import pytest

from support.cluster import started_cluster
from support.transaction_run import TransactionRunSettings, run

pytestmark = pytest.mark.slow

# Every broker, whatever it coordinates or leads, may be killed, the group's coordinator too (a transaction's
# offsets are in `__consumer_offsets`, pending until their marker: offset_store.py, "Transactional offsets"). The
# workers are paced (10 records a transaction, 0.3 s between transactions) so that the input lasts past the
# faults: a fault with nothing in flight tests nothing. Then they drain the rest unpaced (transaction_run.py Rule 4).
# The faults come every 2-4 s for 20 s (at least one of each kind), so the whole test stays near a minute.
SETTINGS = TransactionRunSettings(seconds=20, inputs=3000, partitions=3, workers=3, seed=7, min_faults=4,
                                  fault_interval_s=(2.0, 4.0),
                                  fault_kinds=("coordinator", "group-coordinator", "worker", "leader"),
                                  worker_args=("--batch", "10", "--pause", "0.3"))


def test_consume_transform_produce_under_kills_is_exactly_once(request, zk_connect, tmp_path):
    cluster = started_cluster(request, zk_connect, tmp_path / "brokers", 3, SETTINGS.session_timeout_ms,
                              **SETTINGS.broker_overrides())
    (tmp_path / "journals").mkdir()
    result = run(cluster, zk_connect, SETTINGS, tmp_path / "journals")
    print(result.summary())  # pytest -rP shows it: the faults, the drain, each phase's seconds
    assert {fault.split()[0] for fault in result.faults} >= {"coordinator", "leader", "worker"}, result.faults
    assert "group-coordinator" in {fault.split()[0] for fault in result.faults}, result.faults
    assert result.left_after_faults > 0, result.summary()  # the workers were busy during every fault
    assert result.report.ok, result.summary()
    assert result.drain.finished and result.ok, result.summary()
    assert result.report.committed_attempts > 10, result.summary()
