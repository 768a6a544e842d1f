"""The exactly-once sink (datasource/exactly_once.py) on `local-cluster[2,1,1024]`, whose executors are JVMs of
their own: the executor running a micro-batch's task is SIGKILLed mid-batch (the task's rows all written, its
transaction prepared, Spark not yet told: support/eos_query.py's stop "written"); Spark retries the task on
another executor, whose InitProducerId fences the killed attempt's transaction, and a read_committed reader
finds every input row exactly once. The same kill with the default at-least-once sink leaves the killed
task's rows twice, which proves the check can see duplicates. One broker; the driver kill tests are
test_datasource_exactly_once.py."""

from __future__ import annotations

import uuid

import pytest

from support.cluster import started_cluster
from support.eos_kill import duplicates_and_losses, produce_input, run_with_executor_kills

pytestmark = pytest.mark.slow

ROWS = 100  # one micro-batch of two tasks (eos_query.py's 100 per trigger, two input partitions)
ONE_BROKER = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1",
              "offsets.topic.replication.factor": "1",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = started_cluster(request, f"{zookeeper.connect_string}/eos-lc-{uuid.uuid4().hex}",
                              tmp_path_factory.mktemp("eos-lc"), 1, 6000, **ONE_BROKER)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in ("in1", "out1", "in2", "out2")]).values():
        future.result(60)
    return cluster


def test_exactly_once_survives_an_executor_sigkill_mid_batch_and_at_least_once_does_not(cluster, tmp_path):
    eos_rows = produce_input(cluster.bootstrap, "in1", ROWS)
    alo_rows = produce_input(cluster.bootstrap, "in2", ROWS)
    killed = run_with_executor_kills(cluster.bootstrap, tmp_path, [
        ("in1", "out1", "exactly-once", f"eos-lc-{uuid.uuid4().hex[:8]}"),
        ("in2", "out2", "at-least-once", "unused")])
    assert len(set(killed)) == 2  # one per query (the first is dead before the second)
    assert duplicates_and_losses(cluster, "out1", eos_rows) == ({}, set())
    duplicated, lost = duplicates_and_losses(cluster, "out2", alo_rows)
    assert lost == set() and len(duplicated) == ROWS // 2  # the killed task's partition written twice
